"""What every recipe stage type is: the base class :class:`~sparsecse.recipes.stage_types.Stage` (its settings
check, its one-line description, whether it makes a model, how it runs and what it puts on the model card), the
registry of stage types (``STAGE_TYPES``, filled by defining a subclass), the
:class:`~sparsecse.recipes.stage_types.StageContext` a run hands every stage, and
the checks stage settings share. The stage types sparsecse ships are in :mod:`sparsecse.recipes.stages`.

A setting's default is the default of the config it lands in (:class:`~sparsecse.shrinking.shrink.ShrinkConfig`,
:class:`~sparsecse.training.config.TrainingConfig`), so a recipe and the command it wraps never disagree.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import numpy as np

from sparsecse.artifacts.files import atomic_file
from sparsecse.data.corpus import read_corpus
from sparsecse.data.nested import without_nested_spans
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.eval_sets import load_eval_set
from sparsecse.targets.spec import Target

INPUT_REF = "@input"  # the recipe's input model, as a teacher
CORPUS = "corpus"  # the recipe's corpus, as a reconstruction corpus
STAGE_TYPES: dict[str, type] = {}  # a recipe's ``type:`` -> its stage class (every Stage subclass with a ``type``)


def check_positive_int(name: str, value: Any, where: str) -> int:
    """``value`` once it is a whole number of at least 1.

    Args:
        name: the setting.
        value: its value.
        where: the recipe and stage, to start the refusal.

    Returns:
        The value.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SparseCSEError(f"{where}: {name} must be a whole number of at least 1, not {value!r}.")
    return value


def check_positive_float(name: str, value: Any, where: str) -> float:
    """``value`` as a float once it is finite and positive.

    Args:
        name: the setting.
        value: its value.
        where: the recipe and stage, to start the refusal.

    Returns:
        The number.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise SparseCSEError(f"{where}: {name} must be a finite positive number, not {value!r}.")
    return float(value)


def check_fraction(name: str, value: Any, where: str, low_open: bool = True) -> float:
    """``value`` as a float once it lies in (0, 1].

    Args:
        name: the setting.
        value: its value.
        where: the recipe and stage, to start the refusal.
        low_open: unused (the interval is always (0, 1]).

    Returns:
        The number.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value <= 1):
        raise SparseCSEError(f"{where}: {name} must be in (0, 1], not {value!r}.")
    return float(value)


def check_text(name: str, value: Any, where: str) -> str:
    """``value`` stripped, once it is a non-empty text.

    Args:
        name: the setting.
        value: its value.
        where: the recipe and stage, to start the refusal.

    Returns:
        The text.
    """
    if not isinstance(value, str) or not value.strip():
        raise SparseCSEError(f"{where}: {name} must be a non-empty text, not {value!r}.")
    return value.strip()


def check_choice(name: str, value: Any, where: str, choices: tuple[str, ...]) -> str:
    """``value`` once it is one of ``choices``.

    Args:
        name: the setting.
        value: its value.
        where: the recipe and stage, to start the refusal.
        choices: the allowed values.

    Returns:
        The value.
    """
    if value not in choices:
        raise SparseCSEError(f"{where}: {name} must be one of {', '.join(choices)}, not {value!r}.")
    return value


def training_amount(stage) -> str:
    """How long a training stage trains, as its one-line description says it: ``2 epochs of 32000 sentences``.

    Args:
        stage: a :class:`~sparsecse.recipes.stages.DistillStage` or :class:`~sparsecse.recipes.stages.TrainStage`.

    Returns:
        ``N steps`` or ``N epoch(s)``, then ``of N sentences`` when it trains on a sample, and ``, or until the dev
        score stops rising`` with a patience.
    """
    amount = f"{stage.max_steps} steps" if stage.max_steps else f"{stage.epochs} epoch{'s' * (stage.epochs > 1)}"
    amount += f" of {stage.sentences} sentences" if stage.sentences else ""
    amount += " (nested phrases left out)" if getattr(stage, "drop_nested_spans", False) else ""
    return amount + (", or until the dev score stops rising" if getattr(stage, "patience", 0) else "")


@dataclass(frozen=True)
class CardSection:
    """What one stage puts on the recipe's model card.

    Args:
        line: its line in the card's list of stages.
        losses: the training losses it used, each ``"NAME: what"``.
        methods: citation keys of the methods it used (``sparsecse.cards.citations.CITATIONS``).
    """

    line: str
    losses: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()


class Stage:
    """A recipe stage type: a frozen dataclass subclass whose fields are its settings (``name`` first, then each
    setting with its default, ``type`` last with the type's name as its default). Defining the subclass
    registers it in ``STAGE_TYPES``, so a recipe can name it; the recipe parser
    (:mod:`sparsecse.recipes.spec`), the runner (:mod:`sparsecse.recipes.runner`) and the model card
    (:mod:`sparsecse.recipes.card`) only call its members and never ask which type a stage is.

    A subclass gives :meth:`describe` and :meth:`run`, and overrides the rest where it differs:
    :meth:`check`, ``makes_model`` (whether the next stage takes its model), :meth:`card_section`, and what it
    takes from or leaves to other stages (:attr:`model_refs`, :attr:`named_models`, :attr:`text_inputs`,
    :attr:`budget_ref`, :meth:`hand_on`, :meth:`prune_settings`; ``comes_last``: it ends the recipe; ``needs_target``: the recipe must
    have a target; ``makes_budget``: a later stage may spend what it finds; ``takes``: what a refusal calls the
    models it takes).
    """

    name: str
    type: str
    makes_model: ClassVar[bool] = True  # the next stage takes the model this stage makes
    comes_last: ClassVar[bool] = False  # stages of this type end the recipe (exports)
    needs_target: ClassVar[bool] = False  # the recipe must have a target (a budget search)
    makes_budget: ClassVar[bool] = False  # a later prune stage may spend what it finds (``keep_flops: "@NAME"``)
    takes: ClassVar[str] = "a model"  # what a refusal calls the earlier models it takes

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("type")
        if isinstance(kind, str):
            STAGE_TYPES[kind] = cls

    def check(self, where: str) -> "Stage":
        """The stage with every setting checked.

        Args:
            where: the recipe and stage, to start the error's sentence.

        Returns:
            The stage itself.

        Raises:
            SparseCSEError: a setting of the wrong type or out of range.
        """
        return self

    def describe(self) -> str:
        """One line saying what the stage does: what ``--list-recipes`` prints and the model card states."""
        raise NotImplementedError

    def run(self, index: int, model: str, out: Path, ctx: "StageContext") -> dict[str, Any]:
        """Run the stage on ``model`` into the directory ``out`` (written atomically, resumable where it trains).

        Args:
            index: its place in the recipe (1-based).
            model: the model the previous stage made (or the input).
            out: its directory.
            ctx: what every stage of the run shares.

        Returns:
            A summary of what it did (JSON-ready), kept beside ``out`` and in the run's records.
        """
        raise NotImplementedError

    @property
    def model_refs(self) -> list[str]:
        """The earlier stages (or ``input``) whose models it takes (``@NAME`` settings)."""
        return []

    @property
    def named_models(self) -> list[str]:
        """The models its settings name (a teacher), which must load before anything is written."""
        return []

    @property
    def text_inputs(self) -> list[str]:
        """The sentence files beside the recipe's corpus it reads, checked before anything is written."""
        return []

    @property
    def budget_ref(self) -> str | None:
        """The stage whose budget this stage spends (``keep_flops: "@NAME"``), or None."""
        return None

    def hand_on(self, summary: dict[str, Any]) -> Any:
        """What this stage hands later stages (None, nothing, by default), read from its ``summary`` (what
        :meth:`run` returned, or a finished run left); the runner keeps it in ``StageContext.handed`` under the
        stage's name, the one way stages pass results on.

        Args:
            summary: the stage's summary.
        """
        return None

    def prune_settings(self, ctx: "StageContext") -> "PruneSettings | None":
        """The configs it prunes with in the run ``ctx`` (None, by default: it prunes nothing). The run resolves
        those of the stage spending each budget once, before any stage runs, into ``StageContext.spending``,
        where the budget stage reads them: its candidates are pruned as the budget will be spent.

        Args:
            ctx: the run's context (its corpus, data, seed).
        """
        return None

    def card_line(self, note: str = "") -> str:
        """Its line in the card's list of stages: its name and description, then ``note`` in parentheses."""
        return f"`{self.name}`: {self.describe()}" + (f" ({note})" if note else "")

    def card_section(self, record: dict[str, Any], figures: dict[str, Any]) -> CardSection:
        """What the stage puts on the model card.

        Args:
            record: what its run recorded (its summary; empty where it has none).
            figures: the final model's figures (a target's measurement included).

        Returns:
            Its :class:`CardSection`.
        """
        return CardSection(self.card_line())


class PruneSettings(NamedTuple):
    """The shrinking, pruning and scoring configs (:class:`~sparsecse.shrinking.shrink.ShrinkConfig`,
    :class:`~sparsecse.pruning.prune.PruningConfig`, :class:`~sparsecse.scoring.score.ScoringConfig`) a stage
    prunes with in one run (:meth:`Stage.prune_settings`)."""

    shrinking: Any
    pruning: Any
    scoring: Any


@dataclass(frozen=True)
class FoundBudget:
    """What a budget stage hands the prune stage that spends it: the kept-FLOPs fraction and the whole layers
    removed before it is spent."""

    keep_flops: float
    removed_layers: tuple[int, ...] = ()


# The work after a time-limited run's last training stage, in that stage's own dev evaluations (STS-B dev, 3,000
# sentences): the 7 STS test tasks encode about 12.6 times as many sentences; the dev scores, peak memory (two models,
# each in a fresh process) and the card about 5 more; the rest is room for a noisy machine.
TAIL_EVALUATIONS = 20.0


@dataclass
class StageContext:
    """What every stage of one run shares: the corpus, the evaluation data, the seed, where the models of
    earlier stages are (``models``: stage name, or ``input``, to directory), the recipe's ``target``, what earlier
    stages handed on (``handed``: stage name to :meth:`Stage.hand_on`'s value, e.g. a budget stage's
    :class:`FoundBudget`), the settings each budget is spent with (``spending``: budget stage name to the
    :class:`PruneSettings` of the stage spending it, resolved by the run before any stage runs) and the gate
    scores computed in this run (``scores``: model to its scores, which a later stage scoring the same model with
    the same settings reuses)."""

    corpus: Path
    work: Path
    data_dir: str | os.PathLike | None
    seed: int
    models: dict[str, str]
    show_progress: bool = True
    target: Target | None = None
    handed: dict[str, Any] = field(default_factory=dict)
    scores: dict[str, Any] = field(default_factory=dict)
    spending: dict[str, PruneSettings] = field(default_factory=dict)
    dev: str | None = None  # the user's dev set (a pairs file or a task name; None: STS-B dev)
    test: str | None = None  # the user's test set, scored in the final evaluation
    deadline: float | None = None  # when the stage running now must end (a time-limited run's last training stage)

    def dev_set(self):
        """The dev set candidates and checkpoints are chosen on (the user's, else STS-B dev)."""
        return load_eval_set(self.dev or "STSBenchmark", "dev", self.data_dir)


def sampled_corpus(ctx: StageContext, stage_index: int, sentences: int | None, drop_nested: bool = False) -> Path:
    """The corpus, or a seeded sample of ``sentences`` of its lines written once under the run's work
    directory (a file, so the teacher's embeddings of it are cached and reused on resume); with ``drop_nested``,
    of its lines that are not a word span of a longer line (:func:`~sparsecse.data.nested.without_nested_spans`)."""
    if sentences is None and not drop_nested:
        return ctx.corpus
    path = ctx.work / "corpus" / f"stage{stage_index}-{sentences or 'all'}{'-unnested' if drop_nested else ''}.txt"
    if path.is_file():
        return path
    lines = read_corpus(ctx.corpus)
    lines = without_nested_spans(lines) if drop_nested else lines
    if sentences is None or sentences >= len(lines):
        if not drop_nested:
            return ctx.corpus
        sentences = len(lines)
    pick = np.sort(np.random.default_rng(ctx.seed * 1_000_003 + stage_index).permutation(len(lines))[:sentences])
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path, overwrite=True) as tmp:
        tmp.write_text("".join(lines[i] + "\n" for i in pick), encoding="utf-8")
    return path


