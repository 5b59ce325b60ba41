"""What each stage type of a recipe does: the existing commands (``train``, ``compress``, ``export``)
called with the stage's settings, each writing its own directory (atomically) and manifest, and each
resuming what an interrupted run of it left (``train`` from its last checkpoint)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sparsecse.artifacts.files import atomic_dir, atomic_file
from sparsecse.data.corpus import read_corpus
from sparsecse.exporting.export import export
from sparsecse.errors import SparseCSEError
from sparsecse.pruning.prune import PruningConfig
from sparsecse.recipes.stage_types import CORPUS, BudgetStage, DistillStage, ExportStage, PruneStage, TrainStage
from sparsecse.evaluation.eval_sets import load_eval_set
from sparsecse.scoring.score import ScoringConfig
from sparsecse.scoring.score import score as score_model
from sparsecse.shrinking.iterative import DEFAULT_STEPS, prune_and_shrink
from sparsecse.shrinking.reconstruction import ReconstructionPlan
from sparsecse.shrinking.shrink import ShrinkConfig
from sparsecse.targets.search import active_sharing, search_budget
from sparsecse.targets.spec import Target
from sparsecse.training.api import train
from sparsecse.training.rundir import RunDir
from sparsecse.exporting.config import ExportConfig
from sparsecse.training.config import TrainingConfig


@dataclass
class StageContext:
    """What every stage of one run shares: the corpus, the evaluation data, the seed, where the models of
    earlier stages are (``models``: stage name, or ``input``, to directory), the recipe's ``target`` and the
    budgets its budget stages found (``budgets``: stage name to kept-FLOPs fraction)."""

    corpus: Path
    work: Path
    data_dir: str | os.PathLike | None
    seed: int
    models: dict[str, str]
    show_progress: bool = True
    target: Target | None = None
    budgets: dict[str, float] = field(default_factory=dict)
    stages: tuple = ()
    dev: str | None = None  # the user's dev set (a pairs file or a task name; None: STS-B dev)
    test: str | None = None  # the user's test set, scored in the final evaluation

    def dev_set(self):
        """The dev set candidates and checkpoints are chosen on (the user's, else STS-B dev)."""
        return load_eval_set(self.dev or "STSBenchmark", "dev", self.data_dir)


def sampled_corpus(ctx: StageContext, stage_index: int, sentences: int | None) -> Path:
    """The corpus, or a seeded sample of ``sentences`` of its lines written once under the run's work
    directory (a file, so the teacher's embeddings of it are cached and reused on resume)."""
    if sentences is None:
        return ctx.corpus
    path = ctx.work / "corpus" / f"stage{stage_index}-{sentences}.txt"
    if path.is_file():
        return path
    lines = read_corpus(ctx.corpus)
    if sentences >= len(lines):
        return ctx.corpus
    pick = np.sort(np.random.default_rng(ctx.seed * 1_000_003 + stage_index).permutation(len(lines))[:sentences])
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path, overwrite=True) as tmp:
        tmp.write_text("".join(lines[i] + "\n" for i in pick), encoding="utf-8")
    return path


def teacher_spec(stage: DistillStage, ctx: StageContext) -> str:
    """The teacher as ``train`` takes it: ``@NAME`` replaced by that stage's model directory."""
    if stage.teacher.startswith("@"):
        return ctx.models[stage.teacher[1:]]
    return stage.teacher


def run_distill(stage: DistillStage, index: int, model: str, out: Path, ctx: StageContext) -> dict[str, Any]:
    args = {"teacher": teacher_spec(stage, ctx), "loss": stage.loss, "teacher_precision": stage.teacher_precision}
    return _train(stage, "distill", args, index, model, out, ctx)


def run_train(stage: TrainStage, index: int, model: str, out: Path, ctx: StageContext) -> dict[str, Any]:
    args = {k: ctx.models[v[1:]] if isinstance(v, str) and v.startswith("@") else v
            for k, v in stage.objective_args.items()}
    return _train(stage, stage.objective, args, index, model, out, ctx)


def _train(stage: DistillStage | TrainStage, objective: str, args: dict[str, Any], index: int, model: str, out: Path,
           ctx: StageContext) -> dict[str, Any]:
    """``sparsecse train`` with the stage's settings on its sample of the corpus (one path for every training stage)."""
    corpus = sampled_corpus(ctx, index, stage.sentences)
    result = train(model=model, corpus=str(corpus), out=str(out), objective=objective, objective_args=args,
                   seed=ctx.seed, config=TrainingConfig(lr=stage.lr, batch_size=stage.batch_size, epochs=stage.epochs,
                       max_steps=stage.max_steps, eval_steps=stage.eval_steps, max_length=stage.max_length,
                       data_dir=ctx.data_dir, resume=RunDir(out).path.exists(),
                       bucket_by_length=stage.bucket_by_length, mixed_precision=stage.mixed_precision,
                       show_progress=ctx.show_progress, dev=ctx.dev))
    return {"stsb_dev" if ctx.dev is None else "dev_score": result.best_score, "best_step": result.best_step, "steps": result.steps,
            "corpus": str(corpus), "steps_per_second": result.steps_per_second}


def _prune_settings(stage: PruneStage, ctx: StageContext) -> tuple[ShrinkConfig, PruningConfig, ScoringConfig]:
    corpus = ctx.corpus if stage.reconstruct == CORPUS else Path(stage.reconstruct)
    shrinking = ShrinkConfig(reconstruct=ReconstructionPlan.prepare(str(corpus), stage.reconstruct_sentences))
    pruning = PruningConfig(lam=stage.lam, criterion=stage.criterion)
    scoring = ScoringConfig(data_dir=ctx.data_dir, seed=ctx.seed, show_progress=ctx.show_progress, dev=ctx.dev)
    return shrinking, pruning, scoring


def run_prune(stage: PruneStage, index: int, model: str, out: Path, ctx: StageContext) -> dict[str, Any]:
    shrinking, pruning, scoring = _prune_settings(stage, ctx)
    keep_flops = ctx.budgets[stage.budget_ref] if stage.budget_ref else stage.keep_flops
    result, shrunk = prune_and_shrink(model, str(out), keep_flops=keep_flops, keep_params=stage.keep_params,
                                      steps=stage.steps, prune=pruning, score=scoring, shrink=shrinking)
    return {"kept_flops_ratio": result.mask.manifest["kept_flops_ratio"],
            "kept_params_ratio": result.mask.manifest["kept_params_ratio"],
            "heads_pruned": result.mask.heads_pruned, "neurons_pruned": result.mask.neurons_pruned,
            "out": str(shrunk.out)}


def run_export(stage: ExportStage, index: int, model: str, out: Path, ctx: StageContext) -> dict[str, Any]:
    result = export(model, str(out), stage.format, config=ExportConfig(quantize=stage.quantize,
        calibration=str(ctx.corpus) if stage.quantize else None, calibration_size=stage.calibration_size,
        calibration_seed=ctx.seed))
    return {"format": stage.format, "quantize": stage.quantize, "files": [str(f) for f in getattr(result, "files", [])]}


def run_budget(stage: BudgetStage, index: int, model: str, out: Path, ctx: StageContext) -> dict[str, Any]:
    """Search the budget that meets ``ctx.target`` (:func:`sparsecse.targets.search.search_budget`); the table and
    plot of the candidates go to ``ctx.work/candidates`` (kept even when the target is out of reach), the chosen
    budget to the stage's summary.

    The dense model is scored once. A quality probe is pruned in one step from those scores with the reconstruction
    of the prune stage that spends the budget: a cheaper and slightly pessimistic stand-in for that stage's steps
    (rescoring between steps only helps), so the budget it passes keeps the bound; the final model is checked
    against the bound again."""
    spender = next((s for s in ctx.stages if isinstance(s, PruneStage) and s.budget_ref == stage.name),
                   PruneStage(name="prune", keep_flops=f"@{stage.name}", steps=DEFAULT_STEPS))
    shrinking, pruning, scoring = _prune_settings(spender, ctx)
    shared = active_sharing()  # a curve's targets score the input model once
    scores = shared.scores.get(model) if shared is not None else None
    if scores is None:
        scores = score_model(model, scoring)
        if shared is not None:
            shared.scores[model] = scores

    def prune_once(budget: float):
        result, shrunk = prune_and_shrink(model, keep_flops=budget, steps=1, scores=scores, prune=pruning,
                                          score=scoring, shrink=shrinking)
        return shrunk.encoder, int(result.mask.head_mask.sum()), int(result.mask.neuron_mask.sum())

    found = search_budget(model, ctx.dev_set(), ctx.target, ctx.work / "candidates", scores=scores, pruning=pruning,
                          prune_fn=prune_once, calibration=ctx.corpus, seed=ctx.seed, show_progress=ctx.show_progress)
    with atomic_dir(out) as tmp:
        for path in (found.table, found.plot):
            shutil.copy2(path, tmp / path.name)
    return found.to_dict()


RUNNERS = {DistillStage: run_distill, TrainStage: run_train, PruneStage: run_prune, ExportStage: run_export,
           BudgetStage: run_budget}


def run_stage(stage, index: int, model: str, out: Path, ctx: StageContext) -> dict[str, Any]:
    """Run ``stage`` (the ``index``-th, 1-based) on ``model`` into ``out``; a summary of what it did."""
    runner = RUNNERS.get(type(stage))
    if runner is None:
        raise SparseCSEError(f"No runner for the stage type {stage.type!r}.")
    return runner(stage, index, model, out, ctx)
