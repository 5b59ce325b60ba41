"""The model-selection signal during training: STS-B dev Spearman (as SimCSE), or the user's dev set."""

from __future__ import annotations

from typing import Callable

from sparsecse.data.paths import resolve_data_dir
from sparsecse.evaluation.eval_sets import EvalSet, load_eval_set

DEFAULT_DEV = "STSBenchmark"


def dev_set(dev=None, data_dir=None) -> EvalSet:
    """The dev set checkpoints are chosen on: ``dev`` (a pairs file, a task name or an EvalSet; task names
    use their dev split), else STS-B dev. Read and checked here, so bad data fails before training starts.

    Args:
        dev: None (STS-B dev), a ``.tsv``/``.csv``/``.jsonl`` pairs file, a task name or an EvalSet.
        data_dir: the SentEval-layout data directory (for task names).

    Returns:
        The :class:`~sparsecse.evaluation.eval_sets.EvalSet`.
    """
    if dev is None or isinstance(dev, str) and dev.strip().lower() == DEFAULT_DEV.lower():
        data_dir = resolve_data_dir(data_dir)  # names the missing data directory in its own sentence
    return load_eval_set(DEFAULT_DEV if dev is None else dev, "dev", data_dir)


def dev_evaluator(dev=None, data_dir=None) -> Callable[[object], float]:
    """A function encoder -> the dev set's primary metric x 100 (Spearman, or MRR@10 for positive pairs).

    Args:
        dev: see :func:`dev_set` (None: STS-B dev).
        data_dir: the SentEval-layout data directory (for task names).
    """
    return dev_set(dev, data_dir).score


def stsb_dev_evaluator(data_dir) -> Callable[[object], float]:
    """A function encoder -> STS-B dev Spearman x 100 (sparsecse.evaluation's STS protocol)."""
    return dev_evaluator(None, data_dir)
