"""How :func:`sparsecse.evaluation.runner.evaluate` evaluates: its one config, checked before any work."""

from __future__ import annotations

import os
from dataclasses import dataclass

from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.bootstrap import check_replicates
from sparsecse.evaluation.sts import AGGREGATIONS, SPLITS
from sparsecse.evaluation.tasks import resolve_tasks
from sparsecse.evaluation.transfer_classifiers import PROTOCOLS


@dataclass(frozen=True)
class EvaluationConfig:
    """The tasks and the protocol of an evaluation.

    ``tasks``: a group (sts, transfer, all) or names; ``sts_aggregation``: all, mean or wmean over the
    STS12-16 subsets; ``sts_split``: test or dev (STS-B, SICK-R); ``align_uniform``: None = whenever
    STS-B runs; ``transfer_protocol``: senteval (the papers' classifier) or fast; ``bootstrap``: replicates
    of the per-task intervals (0: none); ``keep_pairs``: keep the per-pair similarities (paired tests).
    ``dev``/``test``: the user's sets scored beside the tasks (a pairs file or a task name,
    :func:`~sparsecse.evaluation.eval_sets.load_eval_set`).
    ``pooling`` overrides the model's own for the evaluation; ``precision``: fp32, bf16, fp16 or auto.

    >>> EvaluationConfig(tasks="STSBenchmark", sts_split="dev").check().tasks
    'STSBenchmark'
    """

    tasks: str | list[str] = "sts"
    data_dir: str | os.PathLike | None = None
    pooling: str | None = None
    batch_size: int | None = None
    device: str | None = None
    sts_aggregation: str = "all"
    fasttest: bool = False
    precision: str = "fp32"
    show_progress: bool = False
    seed: int = 0
    sts_split: str = "test"
    align_uniform: bool | None = None
    transfer_protocol: str = "senteval"
    bootstrap: int = 0
    bootstrap_seed: int = 0
    keep_pairs: bool = False
    dev: str | os.PathLike | None = None
    test: str | os.PathLike | None = None

    def check(self) -> "EvaluationConfig":
        """The config itself, once every setting is known to be valid (one sentence otherwise)."""
        resolve_tasks(self.tasks)
        if self.sts_aggregation not in AGGREGATIONS:
            raise SparseCSEError(f"Unknown STS aggregation {self.sts_aggregation!r}; choose one of "
                                 f"{', '.join(AGGREGATIONS)}.")
        if self.sts_split not in SPLITS:
            raise SparseCSEError(f"Unknown STS split {self.sts_split!r}; choose one of {', '.join(SPLITS)}.")
        if self.transfer_protocol not in PROTOCOLS:
            raise SparseCSEError(f"Unknown transfer protocol {self.transfer_protocol!r}; choose one of "
                                 f"{', '.join(PROTOCOLS)}.")
        check_replicates(self.bootstrap, minimum=0)
        return self
