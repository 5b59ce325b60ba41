"""A near miss repaired, not reported after a whole run: where the target's figure falls short of the target but its
interval still covers it (the model is about as fast as asked, the figure's noise deciding), the model is pruned one
more small step (``REPAIR_KEEP`` of its layer FLOPs kept), then timed again as the first figure was. A run times
its target before the training that follows its prune stage, so that training recovers the repaired model. A true
miss (the interval short of the target too, or the repair short again) stays a miss: the command ends non-zero
naming the closest model.
"""

from __future__ import annotations

from typing import Any, Callable

from sparsecse.errors import SparseCSEError

REPAIR_KEEP = 0.95  # the repair's prune step keeps this fraction of the final model's layer FLOPs


def near_miss(figures: dict[str, Any]) -> bool:
    """Whether a target's measurement (:func:`~sparsecse.targets.report.measure_speed`'s) is a near miss: short of
    the speed-up, its interval covering it, the quality bound kept."""
    return bool(figures.get("near_miss")) and not figures.get("met") and bool(figures.get("met_quality", True))


def repair(figures: dict[str, Any], model_dir: str, step: Callable[[str, float], str],
           measure: Callable[[str], dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The model and figures a run ends with: ``model_dir`` and ``figures`` as they are unless they are a
    :func:`near_miss`; then ``step(model_dir, REPAIR_KEEP)`` (one more small prune step: the repaired model's
    directory) timed by ``measure`` (as the final figure was), kept where it meets the target.

    Args:
        figures: the final measurement of ``model_dir``.
        model_dir: the run's final model.
        step: prunes a model directory to a kept fraction of its layer FLOPs and returns the new directory.
        measure: the final measurement of a model directory.

    Returns:
        (the model directory, its figures); figures carry ``repair``: what was tried and what it measured.
    """
    if not near_miss(figures):
        return model_dir, figures
    try:
        repaired_dir = str(step(model_dir, REPAIR_KEEP))
    except SparseCSEError as exc:  # e.g. no smaller step keeps a unit in every layer: the miss stands
        return model_dir, {**figures, "repair": {"tried": False, "why": str(exc)}}
    again = measure(repaired_dir)
    facts = {"keep": REPAIR_KEEP, "before": figures.get("speedup"), "before_interval": figures.get("interval"),
             "after": again.get("speedup"), "after_interval": again.get("interval"), "met": bool(again.get("met")),
             "model": repaired_dir}
    if again.get("met"):
        return repaired_dir, {**again, "repair": facts}
    return model_dir, {**figures, "repair": facts}  # a true miss: the run's own model is the closest that kept quality
