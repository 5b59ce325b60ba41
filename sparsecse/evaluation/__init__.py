"""Evaluation: STS12-16, STS-B, SICK-R (Spearman x 100), the SentEval transfer tasks (accuracy x 100),
and alignment/uniformity on STS-B, for a model optionally gated by a pruning mask."""

from sparsecse.evaluation.runner import evaluate
from sparsecse.evaluation.tasks import ALL_TASKS, STS_TASKS, TRANSFER_TASKS, resolve_tasks

__all__ = ["evaluate", "resolve_tasks", "STS_TASKS", "TRANSFER_TASKS", "ALL_TASKS"]
