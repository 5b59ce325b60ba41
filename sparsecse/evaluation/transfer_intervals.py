"""Intervals for the SentEval transfer tasks, where the protocol allows one.

- Cross-validated tasks (MR, CR, SUBJ, MPQA): the spread of the outer folds' test accuracies
  (standard deviation and range); the folds share training data, so this is a spread, not a
  confidence interval.
- Test-set tasks (SST-2, TREC, MRPC): a percentile bootstrap over the test items (each item right or
  wrong), and for two models scored on the same items a paired bootstrap of B - A (both resampled
  together, as :mod:`sparsecse.evaluation.bootstrap` does for STS pairs).

Example::

    >>> accuracy_interval([1, 1, 0, 1], replicates=200, seed=0)["acc"]
    75.0
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.bootstrap import LEVEL, check_replicates, difference, interval

TEST_SET_TASKS = ("SST2", "TREC", "MRPC")
FOLD_TASKS = ("MR", "CR", "SUBJ", "MPQA")


def fold_spread(fold_acc: Sequence[float]) -> dict:
    """Mean, sample standard deviation and [min, max] of the outer folds' test accuracies."""
    acc = np.asarray(fold_acc, dtype=np.float64)
    if acc.size < 2:
        raise SparseCSEError("A fold spread needs at least two folds.")
    return {"acc": float(acc.mean()), "fold_std": float(acc.std(ddof=1)),
            "fold_range": [float(acc.min()), float(acc.max())]}


def _correct(values: Sequence[int], name: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.size == 0 or not np.isin(arr, (0, 1)).all():
        raise SparseCSEError(f"{name} must be a non-empty list of 0/1 (wrong/right) per test item.")
    return arr.astype(np.float64)


def _item_draws(n: int, replicates: int, seed: int) -> np.ndarray:
    check_replicates(replicates)
    return np.random.default_rng(seed).integers(0, n, size=(replicates, n))


def accuracy_interval(correct: Sequence[int], replicates: int = 1000, seed: int = 0, level: float = LEVEL) -> dict:
    """Accuracy x 100 of one model on a test set and its percentile bootstrap interval over the items."""
    right = _correct(correct, "correct")
    reps = 100 * right[_item_draws(len(right), replicates, seed)].mean(axis=1)
    return {"acc": float(100 * right.mean()), "ci": interval(reps, level), "replicates": replicates, "seed": seed,
            "level": level, "method": "percentile, test items resampled"}


def paired_accuracy_difference(correct_a: Sequence[int], correct_b: Sequence[int], replicates: int = 1000,
                               seed: int = 0, level: float = LEVEL) -> dict:
    """B - A in accuracy x 100 on the same test items: the difference, its paired interval and p-value."""
    a, b = _correct(correct_a, "correct_a"), _correct(correct_b, "correct_b")
    if len(a) != len(b):
        raise SparseCSEError(f"The two models were scored on different test sets ({len(a)} vs {len(b)} items).")
    idx = _item_draws(len(a), replicates, seed)
    return difference(100 * a[idx].mean(axis=1), 100 * b[idx].mean(axis=1), float(100 * (b.mean() - a.mean())),
                      level)


def paired_fold_difference(fold_acc_a: Sequence[float], fold_acc_b: Sequence[float]) -> dict:
    """B - A on the same cross-validation folds (same seed and data): the mean fold difference, the
    standard deviation of the fold differences and how many folds agree with the mean's sign."""
    a, b = np.asarray(fold_acc_a, dtype=np.float64), np.asarray(fold_acc_b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size < 2:
        raise SparseCSEError(f"The two models were scored on different folds ({a.size} vs {b.size}).")
    diffs = b - a
    mean = float(diffs.mean())
    agree = int((np.sign(diffs) == np.sign(mean)).sum()) if mean else 0
    return {"diff": mean, "fold_std": float(diffs.std(ddof=1)), "folds_agree": f"{agree}/{diffs.size}"}


def paired_transfer_difference(details_a: dict, details_b: dict, replicates: int = 1000, seed: int = 0) -> dict:
    """B - A on every transfer task both evaluations ran, paired as the protocol allows: fold by fold for
    the cross-validated tasks (:func:`paired_fold_difference`), over the same test items for the
    test-set tasks (:func:`paired_accuracy_difference`).

    Args:
        details_a: ``evaluate(...)["details"]`` of model A (per task: ``fold_acc`` or ``correct``).
        details_b: the same for model B.
        replicates: bootstrap replicates of the test-set tasks' intervals.
        seed: their seed.

    Returns:
        The differences per task, each with ``diff`` and either ``ci`` and ``p`` (test-set tasks) or
        ``fold_std`` and ``folds_agree`` (cross-validated tasks).
    """
    out = {}
    for task in FOLD_TASKS + TEST_SET_TASKS:
        a, b = details_a.get(task), details_b.get(task)
        if not a or not b:
            continue
        out[task] = paired_fold_difference(a["fold_acc"], b["fold_acc"]) if task in FOLD_TASKS else \
            paired_accuracy_difference(a["correct"], b["correct"], replicates, seed)
    return out
