"""A sweep's settings: the grid, one frozen config per stage, and
:class:`~sparsecse.sweeps.config.SweepOptions`, gathered in a :class:`~sparsecse.sweeps.config.SweepSpec`.

``sweep(model, "0.1,0.2", "0.25,0.5", "runs/sweep", score=ScoringConfig(split="dev"),
evaluate=EvaluationConfig(tasks="sts"), rewind=RewindConfig(corpus="wiki.txt"), options=SweepOptions(overwrite=True))``
is the whole call: each stage is configured by its config, how the sweep runs by its ``SweepOptions``. The
directory's fingerprint comes from the scoring and pruning configs (:func:`sparsecse.sweeps.directory.fingerprint`,
the same keys as before the configs, so older directories resume); the manifest records every config
(:meth:`SweepSpec.record`).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.config import EvaluationConfig
from sparsecse.pruning.prune import PruningConfig
from sparsecse.scoring.score import ScoringConfig
from sparsecse.shrinking.reconstruction import ReconstructionPlan
from sparsecse.stage_config import field_names, record, stage_config

DEFAULT_SPARSITIES = "0.01:0.10:0.01,0.2:0.5:0.1"
DEFAULT_LAMBDAS = "0.25,0.5,0.75"


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
    """Everything a sweep needs: the model, the grid (``sparsities`` x ``lambdas``, and kept-FLOPs budget points
    ``keep_flops`` x ``lambdas``), the directory and one config per stage."""

    model: Any = None
    sparsities: str | Iterable[float] | None = DEFAULT_SPARSITIES
    lambdas: str | Iterable[float] = DEFAULT_LAMBDAS
    out: str | os.PathLike = "sweep"
    keep_flops: str | Iterable[float] | None = None
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


# What a sweep takes from the evaluation, scoring and pruning configs (every point is evaluated, scored and
# pruned alike; progress follows SweepOptions.show_progress, λ the grid); a field outside these must keep its
# default.
APPLIED = {"evaluate": ("tasks", "data_dir", "pooling", "device", "precision", "fasttest", "seed"),
           "score": ("data_dir", "split", "batch_size", "seed", "max_batches", "positive_threshold"),
           "prune": ("criterion", "scope", "keep_one_head")}


STAGES = ("score", "prune", "evaluate", "rewind", "reconstruct")  # the stage configs sweep() takes by name


def sweep_spec(model=None, sparsities=DEFAULT_SPARSITIES, lambdas=DEFAULT_LAMBDAS, out="sweep", *,
               keep_flops=None, options: SweepOptions | None = None, **stages) -> SweepSpec:
    """A :class:`SweepSpec` from :func:`~sparsecse.sweeps.run.sweep`'s arguments: the stage configs ``stages``
    (``score``, ``prune``, ``evaluate``, ``rewind``, ``reconstruct``: see :func:`~sparsecse.sweeps.run.sweep`) and
    the :class:`SweepOptions` given (default: each one's defaults). A stage setting the sweep would not apply is
    refused, as is a ``rewind`` that is not a :class:`RewindConfig`."""
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        raise TypeError(f"sweep() got an unexpected keyword argument {unknown[0]!r}")
    score, prune, evaluate, rewind, reconstruct = (stages.get(name) for name in STAGES)
    if rewind is not None and not isinstance(rewind, RewindConfig):
        raise TypeError(f"sweep() takes a RewindConfig as rewind (None: no rewinding), not {rewind!r}")
    configs = {"score": stage_config(ScoringConfig, score, "sweep()'s score"),
               "prune": stage_config(PruningConfig, prune, "sweep()'s prune"),
               "evaluate": stage_config(EvaluationConfig, evaluate, "sweep()'s evaluate")}
    for stage, applied in APPLIED.items():
        _refuse_unapplied(configs[stage], applied)
    return SweepSpec(model, sparsities, lambdas, out, keep_flops, rewind=rewind, reconstruct=reconstruct,
                     run=stage_config(SweepOptions, options, "sweep()'s options"), **configs)


def _refuse_unapplied(config, applied: tuple[str, ...]) -> None:
    """One sentence for a setting the sweep would otherwise ignore without a word."""
    default = type(config)()
    for name in field_names(type(config)):
        if name not in applied and getattr(config, name) != getattr(default, name):
            raise SparseCSEError(f"A sweep does not apply {type(config).__name__}.{name}; it takes "
                                 f"{', '.join(applied)} from that config (progress: SweepOptions.show_progress"
                                 f"{', λ: the grid' if isinstance(config, PruningConfig) else ''}).")
