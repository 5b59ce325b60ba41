"""A run's near miss repaired (:mod:`sparsecse.targets.repair`): the final model pruned one more small step with the
recipe's own prune settings, recovered briefly by distillation from the input model, and timed again. The cut is
kept as reconstruction left it where its dev score is above the recovered one's (:func:`dev_choice`): the short
recovery starts over from the input model's embeddings on a plain sample of the corpus, which can undo what the
student stage's longer distillation reached (STS-B dev 85.62 after a 0.95 cut, 85.53 after the recovery, on a default
latency run). Pruning needs layers of one shape: a final model of the stock layout is pruned as it is, one of the
custom layout (its layers of different widths) is first laid out at its source's shape with the mask of its units
(:func:`~sparsecse.shrinking.expand.pruning_path`), and pruning goes on within that mask."""

from __future__ import annotations

import shutil
from typing import Any, Callable

from sparsecse.modeling.adapters import is_uniform
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.recipes.stage_types import StageContext
from sparsecse.recipes.budget_stage import BudgetStage
from sparsecse.shrinking.expand import pruning_path
from sparsecse.shrinking.iterative import prune_and_shrink
from sparsecse.targets.repair import near_miss, repair

REPAIR_STEPS = 300  # distillation steps of the repair's short recovery (batch BudgetStage's recovery batch)


def dev_choice(cut_dev: float, recovered_dev: float) -> dict[str, Any]:
    """Whether the repair keeps its short recovery: where its dev score is at least the reconstructed cut's (ties
    go to the recovery); the facts the run records under ``repair``.

    >>> dev_choice(85.62, 85.53)
    {'dev_after_cut': 85.62, 'dev_recovered': 85.53, 'recovery_kept': False}
    """
    return {"dev_after_cut": round(float(cut_dev), 4), "dev_recovered": round(float(recovered_dev), 4),
            "recovery_kept": bool(recovered_dev >= cut_dev)}


def near_miss_repair(recipe, ctx: StageContext, input_model: str, current: str, figures: dict[str, Any],
                     measure: Callable[[str], dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The model and target figures a run ends with, a near miss repaired (see the module docstring).

    Args:
        recipe: the run's recipe (its first prune stage's settings prune the repair's step; none: no repair).
        ctx: the run's context.
        input_model: the run's input model (the recovery's teacher).
        current: the final model's directory.
        figures: its target figures (:func:`~sparsecse.targets.report.measure_target`).
        measure: the same measurement of another model directory.

    Returns:
        (the model directory, its target figures), as :func:`sparsecse.targets.repair.repair` gives them.
    """
    prune = next((s for s in recipe.stages if s.type == "prune"), None)
    if prune is None or not near_miss(figures):
        return current, figures
    shrinking, pruning, scoring = prune.prune_settings(ctx)
    work = ctx.work / "repair"
    recover = BudgetStage(name="repair", recovery_steps=REPAIR_STEPS).recovery(len(recipe.stages) + 1, input_model,
                                                                                ctx)
    dev, chosen = ctx.dev_set(), {}

    def step(model_dir: str, keep: float) -> str:
        encoder = SentenceEncoder.load(model_dir, pooling=shrinking.pooling, device=shrinking.device)
        uniform = is_uniform(encoder.model)
        start = encoder if uniform else pruning_path(encoder, pruning.seq_len)
        budget = keep if uniform else keep * start.kept  # a fraction of its own layer FLOPs either way
        _, shrunk = prune_and_shrink(start, str(work / "pruned"), keep_flops=budget, steps=1, prune=pruning,
                                     score=scoring, shrink=shrinking, overwrite=True)
        cut_dev = float(dev.score(shrunk.encoder))  # scored before the recovery trains it
        recovered = recover(shrunk.encoder)
        chosen.update(dev_choice(cut_dev, float(dev.score(recovered))))
        shutil.rmtree(work / "model", ignore_errors=True)
        if chosen["recovery_kept"]:
            recovered.save(work / "model")
        else:  # the cut as prune_and_shrink wrote it
            shutil.copytree(work / "pruned", work / "model")
        return str(work / "model")

    final, final_figures = repair(figures, current, step, measure)
    if chosen:  # the step ran to the end, so repair() recorded what it measured under "repair"
        final_figures["repair"].update(chosen)
    return final, final_figures
