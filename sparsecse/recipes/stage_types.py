"""The stage types a recipe chains, each a small frozen dataclass that checks its own settings and describes
itself in one line: ``distill`` and ``train`` (:func:`~sparsecse.training.api.train`), ``prune`` (``compress`` to a budget),
``budget`` (the budget a target needs, :mod:`sparsecse.targets`) and ``export`` (:func:`~sparsecse.exporting.export.export`). A
setting's default is the default of the config it lands in (:class:`~sparsecse.shrinking.shrink.ShrinkConfig`,
:class:`~sparsecse.training.config.TrainingConfig`), so a recipe and the command it wraps never disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from sparsecse.artifacts.export_formats import format_names, get_format
from sparsecse.errors import SparseCSEError
from sparsecse.exporting.config import CALIBRATION_SIZE
from sparsecse.objectives.registry import available_objectives
from sparsecse.scoring.criteria import CRITERIA
from sparsecse.shrinking.shrink import ShrinkConfig
from sparsecse.training.config import TrainingConfig

INPUT_REF = "@input"  # the recipe's input model, as a teacher
CORPUS = "corpus"  # the recipe's corpus, as a reconstruction corpus


def check_positive_int(name: str, value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SparseCSEError(f"{where}: {name} must be a whole number of at least 1, not {value!r}.")
    return value


def check_positive_float(name: str, value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise SparseCSEError(f"{where}: {name} must be a finite positive number, not {value!r}.")
    return float(value)


def check_fraction(name: str, value: Any, where: str, low_open: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value <= 1):
        raise SparseCSEError(f"{where}: {name} must be in (0, 1], not {value!r}.")
    return float(value)


def check_text(name: str, value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SparseCSEError(f"{where}: {name} must be a non-empty text, not {value!r}.")
    return value.strip()


def check_choice(name: str, value: Any, where: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise SparseCSEError(f"{where}: {name} must be one of {', '.join(choices)}, not {value!r}.")
    return value


def training_amount(stage) -> str:
    """How long a training stage trains, as its one-line description says it: ``2 epochs of 32000 sentences``.

    Args:
        stage: a :class:`DistillStage` or :class:`TrainStage`.

    Returns:
        ``N steps`` or ``N epoch(s)``, then ``of N sentences`` when it trains on a sample.
    """
    amount = f"{stage.max_steps} steps" if stage.max_steps else f"{stage.epochs} epoch{'s' * (stage.epochs > 1)}"
    return amount + (f" of {stage.sentences} sentences" if stage.sentences else "")


@dataclass(frozen=True)
class DistillStage:
    """Train the current model to match ``teacher``'s embeddings (``sparsecse train --objective distill``).

    ``sentences``: train on a seeded sample of that many corpus sentences (None: all of them); ``epochs``
    or ``max_steps`` bound the run; ``eval_steps`` scores STS-B dev to keep the best checkpoint;
    ``bucket_by_length`` batches sentences of similar length together (less padding, same data per
    epoch); ``teacher_precision`` and ``mixed_precision``: ``auto`` uses bf16 where the hardware runs it
    natively, fp32 elsewhere."""

    name: str
    teacher: str
    loss: str = "mse"
    lr: float = 1e-4
    batch_size: int = 64
    epochs: int = 1
    max_steps: int | None = None
    sentences: int | None = None
    eval_steps: int = TrainingConfig.eval_steps
    max_length: int | None = None
    bucket_by_length: bool = True
    teacher_precision: str = "auto"
    mixed_precision: str = "auto"
    type: str = "distill"

    def check(self, where: str) -> "DistillStage":
        """The stage with every setting checked.

        Args:
            where: the recipe and stage, to start the error's sentence.

        Returns:
            The stage itself.

        Raises:
            SparseCSEError: a setting of the wrong type or out of range.
        """
        check_text("teacher", self.teacher, where)
        check_choice("loss", self.loss, where, ("mse", "cosine", "similarity"))
        check_positive_float("lr", self.lr, where)
        check_positive_int("batch_size", self.batch_size, where)
        check_positive_int("epochs", self.epochs, where)
        for name in ("max_steps", "sentences", "max_length"):
            if getattr(self, name) is not None:
                check_positive_int(name, getattr(self, name), where)
        if isinstance(self.eval_steps, bool) or not isinstance(self.eval_steps, int) or self.eval_steps < 0:
            raise SparseCSEError(f"{where}: eval_steps must be a whole number >= 0, not {self.eval_steps!r}.")
        if not isinstance(self.bucket_by_length, bool):
            raise SparseCSEError(f"{where}: bucket_by_length must be true or false, not {self.bucket_by_length!r}.")
        check_choice("teacher_precision", self.teacher_precision, where, ("auto", "fp32", "bf16", "int8"))
        check_choice("mixed_precision", self.mixed_precision, where, ("auto", "no", "bf16"))
        return self

    @property
    def makes_model(self) -> bool:
        """Whether the next stage takes this stage's model; this stage makes one.

        Returns:
            True
        """
        return True

    def describe(self) -> str:
        """One line saying what the stage does.

        Returns:
            The line ``--list-recipes`` prints and the model card states.
        """
        return f"distil from {self.teacher} ({self.loss}, lr {self.lr:g}, {training_amount(self)})"


@dataclass(frozen=True)
class TrainStage:
    """Train the current model with any registered objective (``sparsecse train --objective``).

    Args:
        objective: a registered objective's name (``sparsecse objectives`` lists them: simcse, diffcse, infocse,
            distill, plugins...).
        objective_args: its parameters, as ``--objective-args`` takes them; a value ``@NAME`` is the model an
            earlier stage made (or ``@input``), e.g. ``{teacher: "@teacher"}``.
        lr, batch_size, max_length: None keeps the objective's backbone recipe (SimCSE's for simcse).
        epochs, max_steps, sentences, eval_steps, bucket_by_length, mixed_precision: as :class:`DistillStage`.
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
    max_length: int | None = None
    bucket_by_length: bool = TrainingConfig.bucket_by_length
    mixed_precision: str = "auto"
    type: str = "train"

    def check(self, where: str) -> "TrainStage":
        """The stage with every setting checked.

        Args:
            where: the recipe and stage, to start the error's sentence.

        Returns:
            The stage itself.

        Raises:
            SparseCSEError: a setting of the wrong type or out of range.
        """
        check_choice("objective", self.objective, where, tuple(available_objectives()))
        if not isinstance(self.objective_args, dict):
            raise SparseCSEError(f"{where}: objective_args must be a mapping of settings, not {self.objective_args!r}.")
        if self.lr is not None:
            check_positive_float("lr", self.lr, where)
        for name in ("batch_size", "max_steps", "sentences", "max_length"):
            if getattr(self, name) is not None:
                check_positive_int(name, getattr(self, name), where)
        check_positive_int("epochs", self.epochs, where)
        if isinstance(self.eval_steps, bool) or not isinstance(self.eval_steps, int) or self.eval_steps < 0:
            raise SparseCSEError(f"{where}: eval_steps must be a whole number >= 0, not {self.eval_steps!r}.")
        if not isinstance(self.bucket_by_length, bool):
            raise SparseCSEError(f"{where}: bucket_by_length must be true or false, not {self.bucket_by_length!r}.")
        check_choice("mixed_precision", self.mixed_precision, where, ("auto", "no", "bf16"))
        return self

    @property
    def model_refs(self) -> list[str]:
        """The earlier models its arguments name (``@NAME`` values)."""
        return [v[1:] for v in self.objective_args.values() if isinstance(v, str) and v.startswith("@")]

    @property
    def makes_model(self) -> bool:
        """Whether the next stage takes this stage's model; this stage makes one.

        Returns:
            True
        """
        return True

    def describe(self) -> str:
        """One line saying what the stage does.

        Returns:
            The line ``--list-recipes`` prints and the model card states.
        """
        args = ", ".join(f"{k}={v}" for k, v in self.objective_args.items())
        return f"train with {self.objective}{f' ({args})' if args else ''}, {training_amount(self)}"


@dataclass(frozen=True)
class PruneStage:
    """Prune the current model to a budget in steps with reconstruction, then shrink it (``compress``).

    ``keep_flops`` may be ``@NAME``: the budget an earlier ``budget`` stage found for the recipe's target.
    ``reconstruct_sentences`` defaults to :class:`~sparsecse.shrinking.shrink.ShrinkConfig`'s."""

    name: str
    keep_flops: float | str | None = None
    keep_params: float | None = None
    steps: int = 3
    reconstruct: str = CORPUS
    reconstruct_sentences: int = ShrinkConfig.reconstruct_sentences
    criterion: str | None = None
    lam: float = 0.5
    type: str = "prune"

    def check(self, where: str) -> "PruneStage":
        """The stage with every setting checked.

        Args:
            where: the recipe and stage, to start the error's sentence.

        Returns:
            The stage itself.

        Raises:
            SparseCSEError: a setting of the wrong type or out of range.
        """
        if (self.keep_flops is None) == (self.keep_params is None):
            raise SparseCSEError(f"{where}: give exactly one budget, keep_flops or keep_params.")
        budget = "keep_flops" if self.keep_flops is not None else "keep_params"
        if not (isinstance(self.keep_flops, str) and self.keep_flops.startswith("@")):
            check_fraction(budget, getattr(self, budget), where)
        check_positive_int("steps", self.steps, where)
        check_text("reconstruct", self.reconstruct, where)
        check_positive_int("reconstruct_sentences", self.reconstruct_sentences, where)
        if self.criterion is not None:
            check_choice("criterion", self.criterion, where, tuple(CRITERIA))
        if isinstance(self.lam, bool) or not isinstance(self.lam, (int, float)) or not 0 <= self.lam <= 1:
            raise SparseCSEError(f"{where}: lam must be in [0, 1], not {self.lam!r}.")
        return self

    @property
    def makes_model(self) -> bool:
        """Whether the next stage takes this stage's model; this stage makes one.

        Returns:
            True
        """
        return True

    @property
    def budget_ref(self) -> str | None:
        """The budget stage whose budget this stage spends (``keep_flops: "@NAME"``), or None."""
        return self.keep_flops[1:] if isinstance(self.keep_flops, str) else None

    def describe(self) -> str:
        """One line saying what the stage does.

        Returns:
            The line ``--list-recipes`` prints and the model card states.
        """
        budget = (f"the budget the {self.budget_ref} stage finds" if self.budget_ref
                  else f"{self.keep_flops:g} of its layer FLOPs" if self.keep_flops is not None
                  else f"{self.keep_params:g} of its layer parameters")
        return f"prune to {budget} in {self.steps} step{'s' * (self.steps > 1)} with reconstruction"


@dataclass(frozen=True)
class ExportStage:
    """Export the final model (``sparsecse export``); the run's model stays the torch one. ``format`` is a
    registered export format (:mod:`sparsecse.artifacts.export_formats`), ``quantize`` one of its
    quantizations (calibrated on the recipe's corpus) or None."""

    name: str
    format: str = "openvino"
    quantize: str | None = "int8"
    calibration_size: int = CALIBRATION_SIZE
    type: str = "export"

    def check(self, where: str) -> "ExportStage":
        """The stage with every setting checked.

        Args:
            where: the recipe and stage, to start the error's sentence.

        Returns:
            The stage itself.

        Raises:
            SparseCSEError: a setting of the wrong type or out of range.
        """
        check_choice("format", self.format, where, format_names())
        offered = tuple(q.name for q in get_format(self.format).quantizations)
        if self.quantize is not None and self.quantize not in offered:
            raise SparseCSEError(f"{where}: quantize must be {' or '.join((*offered, 'null'))} for {self.format} "
                                 f"export, not {self.quantize!r}.")
        check_positive_int("calibration_size", self.calibration_size, where)
        return self

    @property
    def makes_model(self) -> bool:
        """Whether the next stage takes this stage's model; this stage makes none, so the run's model stays the
        previous stage's.

        Returns:
            False
        """
        return False

    def describe(self) -> str:
        """One line saying what the stage does.

        Returns:
            The line ``--list-recipes`` prints and the model card states.
        """
        return f"export to {self.format}{' ' + self.quantize if self.quantize else ''}"


@dataclass(frozen=True)
class BudgetStage:
    """Find the kept-FLOPs budget that meets the recipe's ``target`` (:mod:`sparsecse.targets.search`):
    candidates are shrunk, timed against the input model on the target's engine and scored on the dev set;
    a later prune stage spends the budget with ``keep_flops: "@NAME"``. Makes no model.

    With the target's ``depth`` candidates may also remove whole layers (those of lowest Block Influence), the
    prune stage then removing the chosen ones before it spends the budget on the remaining layers;
    ``recovery_steps`` > 0 judges each depth's finalist by its dev score after that many distillation steps from
    the input model (0: right after the cut)."""

    name: str
    recovery_steps: int = 0
    type: str = "budget"

    def check(self, where: str) -> "BudgetStage":
        """The stage with every setting checked.

        Args:
            where: the recipe and stage, to start the error's sentence.

        Returns:
            The stage itself.

        Raises:
            SparseCSEError: a setting of the wrong type or out of range.
        """
        value = self.recovery_steps
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SparseCSEError(f"{where}: recovery_steps must be a whole number >= 0, not {value!r}.")
        return self

    @property
    def makes_model(self) -> bool:
        """Whether the next stage takes this stage's model; this stage makes none, so the run's model stays the
        previous stage's.

        Returns:
            False
        """
        return False

    def describe(self) -> str:
        """One line saying what the stage does.

        Returns:
            The line ``--list-recipes`` prints and the model card states.
        """
        judged = f"; depth finalists judged after {self.recovery_steps} recovery steps" if self.recovery_steps else ""
        return f"find the budget that meets the target (candidates shrunk, timed and scored on dev{judged})"


STAGE_TYPES = {"distill": DistillStage, "train": TrainStage, "prune": PruneStage, "export": ExportStage,
               "budget": BudgetStage}
