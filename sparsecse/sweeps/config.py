"""A sweep's settings: one frozen config per stage, gathered in a :class:`~sparsecse.sweeps.config.SweepSpec`.

``sweep(model, "0.1,0.2", "0.25,0.5", "runs/sweep", score=ScoringConfig(split="dev"),
evaluate=EvaluationConfig(tasks="sts"), rewind=RewindConfig(corpus="wiki.txt"))`` is the whole call; the
flat keywords of earlier versions (``tasks=``, ``rewind=True, corpus=...``, ``rewind_sparsities=``, ...)
still work and land in the same configs (``FLAT_OPTIONS`` says where). The directory's fingerprint
comes from the scoring and pruning configs (:func:`sparsecse.sweeps.directory.fingerprint`); the manifest
records every config (:meth:`SweepSpec.record`).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from sparsecse.shrinking.reconstruction import ReconstructionPlan
from sparsecse.scoring.score import ScoringConfig
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.config import EvaluationConfig
from sparsecse.stage_config import configure, field_names, record

DEFAULT_SPARSITIES = "0.01:0.10:0.01,0.2:0.5:0.1"
DEFAULT_LAMBDAS = "0.25,0.5,0.75"


@dataclass(frozen=True)
class PruningConfig:
    """How a sweep's masks are cut: ``criterion`` and ``keep_one_head`` apply to every point when given
    (default: abs_grad and one head kept per layer for sparsity points, fisher and no such rule for budget
    points; :func:`~sparsecse.sweeps.directory.pruning_settings`); ``scope`` ranks sparsity points across
    layers (global) or within each; ``keep_flops`` adds kept-FLOPs budget points at every λ."""

    scope: str = "global"
    criterion: str | None = None
    keep_one_head: bool | None = None
    keep_flops: str | Iterable[float] | None = None


@dataclass(frozen=True)
class RewindConfig:
    """Which points are rewound and how: at ``sparsities`` (default: the whole grid) and ``lambdas``
    ("best": per sparsity, the λ with the best STS average without rewinding), retrained from ``init``
    (default: the scored model's initial checkpoint) on ``corpus`` with ``objective``; ``args`` go to
    :func:`sparsecse.training.rewind` (max_steps, batch_size, lr, objective_args, ...); ``dense`` also
    retrains the unpruned model as a control; ``seeds`` (default: the scoring seed) rewinds each point once
    per seed."""

    corpus: str | os.PathLike | None = None
    objective: str = "simcse"
    sparsities: str | Iterable[float] | None = None
    lambdas: str | float | Iterable[float] = "best"
    init: str | os.PathLike | None = None
    args: dict[str, Any] = field(default_factory=dict)
    dense: bool = True
    seeds: str | Iterable[int] | None = None


@dataclass(frozen=True)
class SweepOptions:
    """How a sweep runs, not what it computes: ``eval_mode`` "shrunk" evaluates a physically pruned copy
    (same numbers as "masked"); ``dense`` evaluates the unpruned model too; ``overwrite`` replaces a sweep
    directory of other settings instead of refusing it; ``make_report`` rebuilds the tables and figures."""

    eval_mode: str = "masked"
    dense: bool = True
    overwrite: bool = False
    make_report: bool = True
    show_progress: bool = True
    log: Callable[[str], None] | None = None


@dataclass(frozen=True)
class SweepSpec:
    """Everything a sweep needs: the model, the grid, the directory and one config per stage."""

    model: Any = None
    sparsities: str | Iterable[float] | None = DEFAULT_SPARSITIES
    lambdas: str | Iterable[float] = DEFAULT_LAMBDAS
    out: str | os.PathLike = "sweep"
    score: ScoringConfig = ScoringConfig()
    prune: PruningConfig = PruningConfig()
    evaluate: EvaluationConfig = EvaluationConfig()
    rewind: RewindConfig | None = None
    reconstruct: str | os.PathLike | ReconstructionPlan | None = None
    run: SweepOptions = SweepOptions()

    def record(self) -> dict[str, Any]:
        """The stage configs as the manifest keeps them."""
        configs = {"score": self.score, "prune": self.prune, "evaluate": self.evaluate, "rewind": self.rewind,
                   "run": dataclasses.replace(self.run, log=None)}
        out = {name: record(c) if c is not None else None for name, c in configs.items()}
        plan = self.reconstruct
        out["reconstruct"] = (record(dataclasses.replace(plan, calibration=None)) | {
            "calibration": plan.calibration.describe()} if isinstance(plan, ReconstructionPlan)
            else None if plan is None else os.fspath(plan))
        return out


# The keywords of the flat ``sweep()`` signature, and the config fields they set.
FLAT_OPTIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "tasks": (("evaluate", "tasks"),),
    "data_dir": (("score", "data_dir"), ("evaluate", "data_dir")),
    "seed": (("score", "seed"), ("evaluate", "seed")),
    "split": (("score", "split"),),
    "batch_size": (("score", "batch_size"),),
    "max_batches": (("score", "max_batches"),),
    "pooling": (("evaluate", "pooling"),),
    "device": (("evaluate", "device"),),
    "precision": (("evaluate", "precision"),),
    "fasttest": (("evaluate", "fasttest"),),
    "scope": (("prune", "scope"),),
    "criterion": (("prune", "criterion"),),
    "keep_one_head": (("prune", "keep_one_head"),),
    "keep_flops": (("prune", "keep_flops"),),
    "objective": (("rewind", "objective"),),
    "corpus": (("rewind", "corpus"),),
    "rewind_sparsities": (("rewind", "sparsities"),),
    "rewind_lambda": (("rewind", "lambdas"),),
    "rewind_init": (("rewind", "init"),),
    "rewind_args": (("rewind", "args"),),
    "rewind_dense": (("rewind", "dense"),),
    "seeds": (("rewind", "seeds"),),
    **{name: (("run", name),) for name in ("eval_mode", "dense", "overwrite", "make_report", "show_progress", "log")},
}
# What a sweep takes from the evaluation and scoring configs (every point is evaluated and scored alike,
# progress follows SweepOptions.show_progress); a field outside these must keep its default.
APPLIED = {"evaluate": ("tasks", "data_dir", "pooling", "device", "precision", "fasttest", "seed"),
           "score": ("data_dir", "split", "batch_size", "seed", "max_batches", "positive_threshold")}
_CLASSES = {"score": ScoringConfig, "prune": PruningConfig, "evaluate": EvaluationConfig, "rewind": RewindConfig,
            "run": SweepOptions}


def sweep_spec(model=None, sparsities=DEFAULT_SPARSITIES, lambdas=DEFAULT_LAMBDAS, out="sweep", score=None,
               prune=None, evaluate=None, rewind=None, reconstruct=None, run=None, **options) -> SweepSpec:
    """A :class:`SweepSpec` from :func:`~sparsecse.sweeps.run.sweep`'s arguments: the stage configs given
    (default: each config's defaults), then the flat ``options`` (``FLAT_OPTIONS``) on top of them.
    ``rewind``: a :class:`RewindConfig`, or True/False as the flat signature had it."""
    unknown = sorted(set(options) - set(FLAT_OPTIONS))
    if unknown:
        raise TypeError(f"sweep() got an unexpected keyword argument {unknown[0]!r}")
    given = {"score": score, "prune": prune, "evaluate": evaluate, "run": run,
             "rewind": rewind if isinstance(rewind, RewindConfig) else None}
    changes: dict[str, dict[str, Any]] = {name: {} for name in _CLASSES}
    for option, value in options.items():
        for stage, name in FLAT_OPTIONS[option]:
            changes[stage][name] = value
    configs = {stage: configure(cls, given[stage], changes[stage], "sweep") for stage, cls in _CLASSES.items()}
    for stage, applied in APPLIED.items():
        _refuse_unapplied(configs[stage], applied)
    if not isinstance(rewind, RewindConfig) and not rewind:
        if configs["rewind"].seeds is not None:
            raise SparseCSEError("--seeds sets the rewinding seeds; add --rewind (scoring and evaluation use --seed).")
        configs["rewind"] = None
    return SweepSpec(model, sparsities, lambdas, out, reconstruct=reconstruct, **configs)


def _refuse_unapplied(config, applied: tuple[str, ...]) -> None:
    """One sentence for a setting the sweep would otherwise ignore without a word."""
    default = type(config)()
    for name in field_names(type(config)):
        if name not in applied and getattr(config, name) != getattr(default, name):
            raise SparseCSEError(f"A sweep does not apply {type(config).__name__}.{name}; it takes "
                                 f"{', '.join(applied)} from that config (progress: SweepOptions.show_progress).")
