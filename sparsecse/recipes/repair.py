"""A run's near miss repaired (:mod:`sparsecse.targets.repair`): the model pruned one more small step with the
recipe's own prune settings and timed again. A run times its target on the pruned model before the training that
follows it (the speed depends on the shapes only: :func:`~sparsecse.targets.report.measure_speed`), so the repaired
model is the one that training then recovers, in full; a run with no training after its prune stage keeps the step
as reconstruction left it. Pruning needs layers of one shape: a model of the stock layout is pruned as it is, one of
the custom layout (its layers of different widths) is first laid out at its source's shape with the mask of its
units (:func:`~sparsecse.shrinking.expand.pruning_path`), and pruning goes on within that mask."""

from __future__ import annotations

import shutil
from typing import Any, Callable

from sparsecse.modeling.adapters import is_uniform
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.recipes.stage_types import StageContext
from sparsecse.shrinking.expand import pruning_path
from sparsecse.shrinking.iterative import prune_and_shrink
from sparsecse.targets.repair import near_miss, repair


def near_miss_repair(recipe, ctx: StageContext, current: str, figures: dict[str, Any],
                     measure: Callable[[str], dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The model and target figures a run goes on with, a near miss repaired (see the module docstring).

    Args:
        recipe: the run's recipe (its first prune stage's settings prune the repair's step; none: no repair).
        ctx: the run's context.
        current: the model's directory.
        figures: its target figures (:func:`~sparsecse.targets.report.measure_speed`).
        measure: the same measurement of another model directory.

    Returns:
        (the model directory, its target figures), as :func:`sparsecse.targets.repair.repair` gives them.
    """
    prune = next((s for s in recipe.stages if s.type == "prune"), None)
    if prune is None or not near_miss(figures):
        return current, figures
    shrinking, pruning, scoring = prune.prune_settings(ctx)
    work = ctx.work / "repair"

    def step(model_dir: str, keep: float) -> str:
        encoder = SentenceEncoder.load(model_dir, pooling=shrinking.pooling, device=shrinking.device)
        uniform = is_uniform(encoder.model)
        start = encoder if uniform else pruning_path(encoder, pruning.seq_len)
        budget = keep if uniform else keep * start.kept  # a fraction of its own layer FLOPs either way
        shutil.rmtree(work / "model", ignore_errors=True)
        prune_and_shrink(start, str(work / "model"), keep_flops=budget, steps=1, prune=pruning, score=scoring,
                         shrink=shrinking, overwrite=True)
        return str(work / "model")

    return repair(figures, current, step, measure)
