"""The stage types sparsecse ships, each a :class:`~sparsecse.recipes.stage_types.Stage`: ``distill`` and
``train`` (:func:`~sparsecse.training.api.train`), ``prune`` (``compress`` to a budget) and ``export``
(:func:`~sparsecse.exporting.export.export`); ``budget`` (the budget a target needs) is
:mod:`sparsecse.recipes.budget_stage`'s. Each checks
its settings, describes itself in one line, runs the existing command with its settings (each writing its own
directory, atomically, and manifest, and resuming what an interrupted run of it left: ``train`` from its last
checkpoint) and says what it puts on the model card."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from sparsecse.cards.citations import OBJECTIVE_METHODS
from sparsecse.artifacts.export_formats import format_names, get_format
from sparsecse.errors import SparseCSEError
from sparsecse.exporting.config import CALIBRATION_SIZE, ExportConfig
from sparsecse.exporting.export import export
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.objectives.registry import available_objectives
from sparsecse.pruning.prune import LAYOUTS, PruningConfig
from sparsecse.pruning.uniform import DEFAULT_LAYOUT
from sparsecse.recipes.stage_types import (CORPUS, TAIL_EVALUATIONS, CardSection, PruneSettings, Stage, StageContext,
                                           check_choice, check_fraction, check_positive_float, check_positive_int,
                                           check_text, sampled_corpus, training_amount)
from sparsecse.scoring.criteria import criterion_names
from sparsecse.scoring.score import ScoringConfig
from sparsecse.shrinking.iterative import AUTO_STEPS, DEFAULT_STEPS, STEP_KEEPS, prune_and_shrink, resolve_steps
from sparsecse.shrinking.reconstruction import ReconstructionPlan
from sparsecse.shrinking.shrink import ShrinkConfig
from sparsecse.shrinking.layers import without_layers
from sparsecse.targets.search import active_sharing
from sparsecse.training.api import train
from sparsecse.training.config import TrainingConfig
from sparsecse.training.rundir import RunDir


def _check_training(stage, where: str) -> None:
    """The settings every training stage has: eval_steps, patience, min_delta, bucket_by_length, drop_nested_spans,
    mixed_precision."""
    if isinstance(stage.eval_steps, bool) or not isinstance(stage.eval_steps, int) or stage.eval_steps < 0:
        raise SparseCSEError(f"{where}: eval_steps must be a whole number >= 0, not {stage.eval_steps!r}.")
    for name in ("bucket_by_length", "drop_nested_spans"):
        if not isinstance(getattr(stage, name), bool):
            raise SparseCSEError(f"{where}: {name} must be true or false, not {getattr(stage, name)!r}.")
    check_choice("mixed_precision", stage.mixed_precision, where, ("auto", "no", "bf16"))
    if isinstance(stage.patience, bool) or not isinstance(stage.patience, int) or stage.patience < 0:
        raise SparseCSEError(f"{where}: patience must be a whole number >= 0, not {stage.patience!r}.")
    if stage.patience and not stage.eval_steps:
        raise SparseCSEError(f"{where}: patience stops training when the dev score stops rising, which needs "
                             "eval_steps N (it is 0).")
    if isinstance(stage.min_delta, bool) or not isinstance(stage.min_delta, (int, float)) or not stage.min_delta >= 0:
        raise SparseCSEError(f"{where}: min_delta must be a number >= 0, not {stage.min_delta!r}.")


def _train(stage, objective: str, args: dict[str, Any], index: int, model: str, out: Path,
           ctx: StageContext) -> dict[str, Any]:
    """``sparsecse train`` with the stage's settings on its sample of the corpus (one path for every training stage)."""
    corpus = sampled_corpus(ctx, index, stage.sentences, stage.drop_nested_spans)
    result = train(model=model, corpus=str(corpus), out=str(out), objective=objective, objective_args=args,
                   seed=ctx.seed, config=TrainingConfig(lr=stage.lr, batch_size=stage.batch_size, epochs=stage.epochs,
                       max_steps=stage.max_steps, eval_steps=stage.eval_steps, max_length=stage.max_length,
                       data_dir=ctx.data_dir, resume=RunDir(out).path.exists(),
                       bucket_by_length=stage.bucket_by_length, mixed_precision=stage.mixed_precision,
                       patience=stage.patience, min_delta=float(stage.min_delta),
                       show_progress=ctx.show_progress, dev=ctx.dev, deadline=ctx.deadline,
                       tail_evaluations=TAIL_EVALUATIONS))
    return {"stsb_dev" if ctx.dev is None else "dev_score": result.best_score, "best_step": result.best_step, "steps": result.steps,
            "corpus": str(corpus), "steps_per_second": result.steps_per_second,
            **({"time_limited": result.hyperparameters.get("time_limited", False),
                "steps_run_to": result.hyperparameters.get("steps_run_to"),
                "fitted_steps": result.hyperparameters.get("fitted_steps")} if ctx.deadline is not None else {})}


def _dev_note(record: dict[str, Any]) -> str:
    return f"STS-B dev {record['stsb_dev']:.2f}" if record.get("stsb_dev") is not None else ""


@dataclass(frozen=True)
class DistillStage(Stage):
    """Train the current model to match ``teacher``'s embeddings (``sparsecse train --objective distill``).

    ``sentences``: train on a seeded sample of that many corpus sentences (None: all of them); ``epochs``
    or ``max_steps`` bound the run; ``eval_steps`` scores STS-B dev to keep the best checkpoint; ``patience``
    > 0 stops it once that many evaluations in a row have not beaten the best by ``min_delta`` (the dev score
    stopped rising);
    ``bucket_by_length`` batches sentences of similar length together (less padding, same data per
    epoch); ``drop_nested_spans`` leaves out, before sampling, the corpus lines that a longer line holds word for
    word (a treebank's phrases: :mod:`sparsecse.data.nested`); ``teacher_precision`` and ``mixed_precision``:
    ``auto`` uses bf16 where the hardware runs it natively, fp32 elsewhere."""

    name: str
    teacher: str
    loss: str = "mse"
    lr: float = 1e-4
    batch_size: int = 64
    epochs: int = 1
    max_steps: int | None = None
    sentences: int | None = None
    eval_steps: int = TrainingConfig.eval_steps
    patience: int = TrainingConfig.patience
    min_delta: float = TrainingConfig.min_delta
    max_length: int | None = None
    bucket_by_length: bool = True
    drop_nested_spans: bool = False
    teacher_precision: str = "auto"
    mixed_precision: str = "auto"
    type: str = "distill"
    takes: ClassVar[str] = "its teacher"

    def check(self, where: str) -> "DistillStage":
        """The stage with every setting checked, as :meth:`~sparsecse.recipes.stage_types.Stage.check` says."""
        check_text("teacher", self.teacher, where)
        check_choice("loss", self.loss, where, ("mse", "cosine", "similarity"))
        check_positive_float("lr", self.lr, where)
        check_positive_int("batch_size", self.batch_size, where)
        check_positive_int("epochs", self.epochs, where)
        for name in ("max_steps", "sentences", "max_length"):
            if getattr(self, name) is not None:
                check_positive_int(name, getattr(self, name), where)
        _check_training(self, where)
        check_choice("teacher_precision", self.teacher_precision, where, ("auto", "fp32", "bf16", "int8"))
        return self

    @property
    def model_refs(self) -> list[str]:
        """Its teacher, where it is an earlier stage's model (``@NAME``)."""
        return [self.teacher[1:]] if self.teacher.startswith("@") else []

    @property
    def named_models(self) -> list[str]:
        """Its teacher."""
        return [self.teacher]

    def describe(self) -> str:
        """One line saying what the stage does."""
        return f"distil from {self.teacher} ({self.loss}, lr {self.lr:g}, {training_amount(self)})"

    def run(self, index: int, model: str, out: Path, ctx: StageContext) -> dict[str, Any]:
        """Distil (:meth:`~sparsecse.recipes.stage_types.Stage.run`); ``@NAME`` is that stage's model."""
        teacher = ctx.models[self.teacher[1:]] if self.teacher.startswith("@") else self.teacher
        args = {"teacher": teacher, "loss": self.loss, "teacher_precision": self.teacher_precision}
        return _train(self, "distill", args, index, model, out, ctx)

    def card_section(self, record: dict[str, Any], figures: dict[str, Any]) -> CardSection:
        """Its line (with its STS-B dev score), its loss, and distillation among the methods."""
        return CardSection(self.card_line(_dev_note(record)),
                           (f"{self.name}: distillation ({self.loss}) from {self.teacher}",), ("distillation",))


@dataclass(frozen=True)
class TrainStage(Stage):
    """Train the current model with any registered objective (``sparsecse train --objective``).

    Args:
        objective: a registered objective's name (``sparsecse objectives`` lists them: simcse, diffcse, infocse,
            distill, plugins...).
        objective_args: its parameters, as ``--objective-args`` takes them; a value ``@NAME`` is the model an
            earlier stage made (or ``@input``), e.g. ``{teacher: "@teacher"}``.
        lr, batch_size, max_length: None keeps the objective's backbone recipe (SimCSE's for simcse).
        epochs, max_steps, sentences, eval_steps, patience, min_delta, bucket_by_length, mixed_precision: as
            :class:`DistillStage`.
        drop_nested_spans: as :class:`DistillStage`.
    """

    name: str
    objective: str
    objective_args: dict = field(default_factory=dict)
    lr: float | None = None
    batch_size: int | None = None
    epochs: int = 1
    max_steps: int | None = None
    sentences: int | None = None
    eval_steps: int = TrainingConfig.eval_steps
    patience: int = TrainingConfig.patience
    min_delta: float = TrainingConfig.min_delta
    max_length: int | None = None
    bucket_by_length: bool = TrainingConfig.bucket_by_length
    drop_nested_spans: bool = False
    mixed_precision: str = "auto"
    type: str = "train"

    def check(self, where: str) -> "TrainStage":
        """The stage with every setting checked, as :meth:`~sparsecse.recipes.stage_types.Stage.check` says."""
        check_choice("objective", self.objective, where, tuple(available_objectives()))
        if not isinstance(self.objective_args, dict):
            raise SparseCSEError(f"{where}: objective_args must be a mapping of settings, not {self.objective_args!r}.")
        if self.lr is not None:
            check_positive_float("lr", self.lr, where)
        for name in ("batch_size", "max_steps", "sentences", "max_length"):
            if getattr(self, name) is not None:
                check_positive_int(name, getattr(self, name), where)
        check_positive_int("epochs", self.epochs, where)
        _check_training(self, where)
        return self

    @property
    def model_refs(self) -> list[str]:
        """The earlier models its arguments name (``@NAME`` values)."""
        return [v[1:] for v in self.objective_args.values() if isinstance(v, str) and v.startswith("@")]

    @property
    def named_models(self) -> list[str]:
        """Its objective's teacher, where it names one."""
        teacher = self.objective_args.get("teacher")
        return [teacher] if isinstance(teacher, str) else []

    def describe(self) -> str:
        """One line saying what the stage does."""
        args = ", ".join(f"{k}={v}" for k, v in self.objective_args.items())
        return f"train with {self.objective}{f' ({args})' if args else ''}, {training_amount(self)}"

    def run(self, index: int, model: str, out: Path, ctx: StageContext) -> dict[str, Any]:
        """Train (:meth:`~sparsecse.recipes.stage_types.Stage.run`); ``@NAME`` arguments become models."""
        args = {k: ctx.models[v[1:]] if isinstance(v, str) and v.startswith("@") else v
                for k, v in self.objective_args.items()}
        return _train(self, self.objective, args, index, model, out, ctx)

    def card_section(self, record: dict[str, Any], figures: dict[str, Any]) -> CardSection:
        """Its line (with its STS-B dev score), its objective, and the objective's method."""
        method = OBJECTIVE_METHODS.get(self.objective)
        return CardSection(self.card_line(_dev_note(record)), (f"{self.name}: {self.objective}",),
                           (method,) if method else ())


@dataclass(frozen=True)
class PruneStage(Stage):
    """Prune the current model to a budget in steps with reconstruction, then shrink it (``compress``).

    ``keep_flops`` may be ``@NAME``: the budget an earlier ``budget`` stage found for the recipe's target.
    ``steps`` is a number, or ``auto``: as many as the cut needs (:func:`~sparsecse.shrinking.iterative.sized_steps`).
    ``reconstruct_sentences`` defaults to :class:`~sparsecse.shrinking.shrink.ShrinkConfig`'s."""

    name: str
    keep_flops: float | str | None = None
    keep_params: float | None = None
    steps: int | str = 3
    reconstruct: str = CORPUS
    reconstruct_sentences: int = ShrinkConfig.reconstruct_sentences
    criterion: str | None = None
    lam: float = 0.5
    layout: str = DEFAULT_LAYOUT  # stock: the input's own architecture class (sparsecse.pruning.uniform)
    layer_criterion: str | None = None  # which whole layers a depth cut removes first (None: embedding_fidelity)
    type: str = "prune"

    def check(self, where: str) -> "PruneStage":
        """The stage with every setting checked, as :meth:`~sparsecse.recipes.stage_types.Stage.check` says."""
        if (self.keep_flops is None) == (self.keep_params is None):
            raise SparseCSEError(f"{where}: give exactly one budget, keep_flops or keep_params.")
        budget = "keep_flops" if self.keep_flops is not None else "keep_params"
        if not (isinstance(self.keep_flops, str) and self.keep_flops.startswith("@")):
            check_fraction(budget, getattr(self, budget), where)
        if isinstance(self.steps, str):
            if self.steps != AUTO_STEPS:
                raise SparseCSEError(f"{where}: steps must be a whole number >= 1 or {AUTO_STEPS}, not {self.steps!r}.")
        else:
            check_positive_int("steps", self.steps, where)
        check_choice("layout", self.layout, where, LAYOUTS)
        check_text("reconstruct", self.reconstruct, where)
        check_positive_int("reconstruct_sentences", self.reconstruct_sentences, where)
        if self.criterion is not None:
            check_choice("criterion", self.criterion, where, criterion_names("gate"))
        if self.layer_criterion is not None:
            check_choice("layer_criterion", self.layer_criterion, where, criterion_names("layer"))
        if isinstance(self.lam, bool) or not isinstance(self.lam, (int, float)) or not 0 <= self.lam <= 1:
            raise SparseCSEError(f"{where}: lam must be in [0, 1], not {self.lam!r}.")
        return self

    @property
    def budget_ref(self) -> str | None:
        """The budget stage whose budget this stage spends (``keep_flops: "@NAME"``), or None."""
        return self.keep_flops[1:] if isinstance(self.keep_flops, str) else None

    @property
    def text_inputs(self) -> list[str]:
        """Its own reconstruction file, where it names one."""
        return [] if self.reconstruct == CORPUS else [self.reconstruct]

    def describe(self) -> str:
        """One line saying what the stage does."""
        budget = (f"the budget the {self.budget_ref} stage finds" if self.budget_ref
                  else f"{self.keep_flops:g} of its layer FLOPs" if self.keep_flops is not None
                  else f"{self.keep_params:g} of its layer parameters")
        steps = (f"in steps sized by the cut (each keeping at least {STEP_KEEPS:g} of what it starts from, at most "
                 f"{DEFAULT_STEPS})" if self.steps == AUTO_STEPS else f"in {self.steps} step{'s' * (self.steps > 1)}")
        return f"prune to {budget} {steps} with reconstruction"

    def prune_settings(self, ctx: StageContext) -> PruneSettings:
        """The shrinking, pruning and scoring configs its settings make in the run ``ctx``."""
        corpus = ctx.corpus if self.reconstruct == CORPUS else Path(self.reconstruct)
        shrinking = ShrinkConfig(reconstruct=ReconstructionPlan.prepare(str(corpus), self.reconstruct_sentences))
        pruning = PruningConfig(lam=self.lam, criterion=self.criterion, layout=self.layout,
                                layer_criterion=self.layer_criterion)
        scoring = ScoringConfig(data_dir=ctx.data_dir, seed=ctx.seed, show_progress=ctx.show_progress, dev=ctx.dev)
        return PruneSettings(replace(shrinking, layout=self.layout), pruning, scoring)

    def run(self, index: int, model: str, out: Path, ctx: StageContext) -> dict[str, Any]:
        """Prune and shrink (:meth:`~sparsecse.recipes.stage_types.Stage.run`)."""
        shrinking, pruning, scoring = self.prune_settings(ctx)
        found = ctx.handed[self.budget_ref] if self.budget_ref else None
        keep_flops = found.keep_flops if found is not None else self.keep_flops
        removed = list(found.removed_layers) if found is not None else []
        # a curve's targets, from the largest budget down: each continues the last one's steps (same model, cut
        # and settings), which reached a larger budget on the way down
        shared = active_sharing() if self.budget_ref else None
        key = (model, tuple(removed), self, str(ctx.corpus), ctx.seed, str(ctx.dev), str(ctx.data_dir))
        start = shared.paths.get(key) if shared is not None else None
        start = start if start is not None and keep_flops < start.kept else None
        # the first step's scores: those the budget stage scored this same model with (same settings), if it did
        scores = None if removed or not self.budget_ref or start else ctx.scores.get(model)
        if removed:  # the budget is that of the remaining layers
            model = without_layers(SentenceEncoder.load(model, device=shrinking.device), removed)
        steps = resolve_steps(self.steps, keep_flops if keep_flops is not None else self.keep_params)
        result, shrunk = prune_and_shrink(start or model, str(out), keep_flops=keep_flops,
                                          keep_params=self.keep_params, steps=steps, scores=scores, prune=pruning,
                                          score=scoring, shrink=shrinking)
        if shared is not None:
            shared.paths[key] = result.path
        return {"layers_removed": removed, "kept_flops_ratio": result.mask.manifest["kept_flops_ratio"],
                "kept_params_ratio": result.mask.manifest["kept_params_ratio"],
                "heads_pruned": result.mask.heads_pruned, "neurons_pruned": result.mask.neurons_pruned,
                "continued_from": round(start.kept, 4) if start else None, "prune_steps": len(result.steps),
                "out": str(shrunk.out)}

    def card_section(self, record: dict[str, Any], figures: dict[str, Any]) -> CardSection:
        """Its line (with the FLOPs it kept) and the pruning methods."""
        kept, start = record.get("kept_flops_ratio"), record.get("continued_from")
        went_on = (f" in {record.get('prune_steps')} step(s) on from where a larger budget's steps ended ({start:.4f}: "
                   "a curve's targets share their steps on the way down, so the curve's command remakes this model, "
                   "a run of this target alone prunes from the input model)" if start else "")
        return CardSection(self.card_line(f"kept {kept:.4f} of layer FLOPs{went_on}" if kept else ""),
                           methods=("sparsecse", "kprune"))  # pruning in steps with reconstruction


def budget_spending(stages, ctx: StageContext) -> dict[str, PruneSettings]:
    """The settings each budget of a recipe is spent with, resolved once by the run before any stage runs (its
    ``StageContext.spending``): for every stage that makes a budget, those of the first stage spending it
    (``keep_flops: "@NAME"``), else a prune stage's defaults (a budget that nothing spends).

    Args:
        stages: the recipe's stages, in order.
        ctx: the run's context.

    Returns:
        Budget stage name to its :class:`~sparsecse.recipes.stage_types.PruneSettings`.
    """
    spenders: dict[str, Stage] = {}
    for stage in stages:
        if stage.budget_ref is not None:
            spenders.setdefault(stage.budget_ref, stage)
    return {stage.name: spenders.get(stage.name, PruneStage(name="prune", keep_flops=f"@{stage.name}",
                                                            steps=DEFAULT_STEPS)).prune_settings(ctx)
            for stage in stages if stage.makes_budget}


@dataclass(frozen=True)
class ExportStage(Stage):
    """Export the final model (``sparsecse export``); the run's model stays the torch one. ``format`` is a
    registered export format (:mod:`sparsecse.artifacts.export_formats`), ``quantize`` one of its
    quantizations (calibrated on the recipe's corpus) or None."""

    name: str
    format: str = "openvino"
    quantize: str | None = "int8"
    calibration_size: int = CALIBRATION_SIZE
    type: str = "export"
    makes_model: ClassVar[bool] = False
    comes_last: ClassVar[bool] = True

    def check(self, where: str) -> "ExportStage":
        """The stage with every setting checked, as :meth:`~sparsecse.recipes.stage_types.Stage.check` says."""
        check_choice("format", self.format, where, format_names())
        offered = tuple(q.name for q in get_format(self.format).quantizations)
        if self.quantize is not None and self.quantize not in offered:
            raise SparseCSEError(f"{where}: quantize must be {' or '.join((*offered, 'null'))} for {self.format} "
                                 f"export, not {self.quantize!r}.")
        check_positive_int("calibration_size", self.calibration_size, where)
        return self

    def describe(self) -> str:
        """One line saying what the stage does."""
        return f"export to {self.format}{' ' + self.quantize if self.quantize else ''}"

    def run(self, index: int, model: str, out: Path, ctx: StageContext) -> dict[str, Any]:
        """Export (:meth:`~sparsecse.recipes.stage_types.Stage.run`), calibrated on the corpus."""
        result = export(model, str(out), self.format, config=ExportConfig(quantize=self.quantize,
            calibration=str(ctx.corpus) if self.quantize else None, calibration_size=self.calibration_size,
            calibration_seed=ctx.seed))
        return {"format": self.format, "quantize": self.quantize,
                "files": [str(f) for f in getattr(result, "files", [])]}

    def card_section(self, record: dict[str, Any], figures: dict[str, Any]) -> CardSection:
        """Its line, and NNCF among the methods where it quantizes."""
        return CardSection(self.card_line(), methods=("nncf",) if self.quantize else ())
