"""Bootstrap intervals and paired comparisons of STS scores (pure numpy; no model, no files).

A task's score is a Spearman correlation x 100 between per-pair similarities and gold scores. One
bootstrap replicate draws the task's pairs with replacement (within each stratum: the whole
concatenated year for STS12-16 'all', each subset for 'mean'/'wmean') and rescores every model on
the *same* drawn pairs, so differences between models are paired. Each task draws from its own
generator, seeded by (seed, task name): the same seed gives the same resamples whatever other tasks
are evaluated. The average over tasks is taken replicate by replicate.

The p-value of a difference d = B - A is the two-sided paired bootstrap test (Koehn 2004; Berg-
Kirkpatrick et al. 2012): the replicates d*, shifted to mean zero around d, are as extreme as d in
``p = (1 + #{|d* - d| >= |d|}) / (1 + R)`` of R replicates.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.sts import AGGREGATIONS

LEVEL = 0.95
MAX_REPLICATES = 100_000  # 1000 is usual, 10000 generous; more only takes longer (hours for the 7 STS tasks)
P_VALUE_TEST = "two-sided paired bootstrap (shift method), p = (1 + #{|d* - d| >= |d|}) / (1 + replicates)"
_CHUNK = 128  # replicates drawn at a time (bounds memory at ~CHUNK x pairs)


@dataclass(frozen=True)
class TaskPairs:
    """One task's gold scores and how its pairs split into subsets (sizes, in order)."""

    gold: np.ndarray
    subsets: tuple[int, ...]

    @classmethod
    def of(cls, gold: Sequence[float], subsets: Sequence[int] | None = None) -> TaskPairs:
        """The pairs of one task from its gold scores and its subsets' sizes (one subset by default).

        Args:
            gold: the gold scores, subset after subset.
            subsets: the sizes of the subsets (each at least 2).

        Returns:
            The task's pairs.
        """
        gold = np.asarray(gold, dtype=np.float64)
        sizes = tuple(int(n) for n in (subsets or (len(gold),)))
        if sum(sizes) != len(gold):
            raise SparseCSEError(f"The subset sizes add up to {sum(sizes)} but there are {len(gold)} gold scores.")
        if min(sizes) < 2:
            raise SparseCSEError("Every STS subset needs at least two pairs for a correlation.")
        return cls(gold, sizes)


def _ranks(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Average ranks (1-based, ties share their mean rank) of ``values[idx]`` row by row, without sorting
    each row: a resample only repeats the original values, so counting them per distinct value suffices."""
    distinct, group = np.unique(values, return_inverse=True)
    rows, width = idx.shape
    g = group[idx]  # [rows, n] distinct-value id of every drawn pair
    counts = np.bincount((g + np.arange(rows)[:, None] * len(distinct)).ravel(),
                         minlength=rows * len(distinct)).reshape(rows, len(distinct))
    average = np.cumsum(counts, axis=1) - (counts - 1) / 2.0
    return np.take_along_axis(average, g, axis=1)


def _spearman_rows(rx: np.ndarray, ry: np.ndarray) -> np.ndarray:
    """Pearson correlation x 100 of each row of two rank matrices (= Spearman of the drawn pairs)."""
    mean = (rx.shape[1] + 1) / 2.0  # average ranks always sum to n(n+1)/2
    x, y = rx - mean, ry - mean
    with np.errstate(invalid="ignore", divide="ignore"):
        return 100 * (x * y).sum(1) / np.sqrt((x * x).sum(1) * (y * y).sum(1))


def _generator(seed: int, key: str) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32(key.encode())])


def _draws(sizes: tuple[int, ...], replicates: int, rng: np.random.Generator):
    """Chunks of resampled pair indices, one index array per stratum: [(offset, [rows, size]), ...]."""
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    done = 0
    while done < replicates:
        rows = min(_CHUNK, replicates - done)
        yield [(int(o), rng.integers(0, n, size=(rows, n))) for o, n in zip(offsets, sizes)]
        done += rows


def check_replicates(replicates: int, minimum: int = 1) -> int:
    """``replicates`` once it is a whole number from ``minimum`` to ``MAX_REPLICATES``."""
    if isinstance(replicates, bool) or not isinstance(replicates, int) or not minimum <= replicates <= MAX_REPLICATES:
        least = "a positive whole number (at least 1)" if minimum == 1 else f"a whole number of at least {minimum}"
        raise SparseCSEError(f"The number of bootstrap replicates must be {least} and at most {MAX_REPLICATES:,}, "
                             f"not {replicates}.")
    return replicates


def replicate_scores(similarities: Sequence[Sequence[float]], pairs: TaskPairs, replicates: int, seed: int,
                     key: str, aggregation: str = "all") -> np.ndarray:
    """[models, replicates] Spearman x 100 of every model's similarities on the same resampled pairs.

    ``aggregation`` 'all' draws from all pairs together (one Spearman); 'mean'/'wmean' draw within
    each subset and average the per-subset Spearmans (plainly or weighted by subset size).
    """
    if aggregation not in AGGREGATIONS:
        raise SparseCSEError(f"Unknown STS aggregation {aggregation!r}; choose one of {', '.join(AGGREGATIONS)}.")
    check_replicates(replicates)
    sims = [np.asarray(s, dtype=np.float64) for s in similarities]
    if any(len(s) != len(pairs.gold) for s in sims):
        raise SparseCSEError(f"{key}: the similarities do not match the {len(pairs.gold)} gold scores in length.")
    sizes = (len(pairs.gold),) if aggregation == "all" else pairs.subsets
    weights = np.asarray(sizes, dtype=np.float64) if aggregation == "wmean" else np.ones(len(sizes))
    out = []
    for chunk in _draws(sizes, replicates, _generator(seed, key)):
        per_stratum = []
        for offset, idx in chunk:
            sl = slice(offset, offset + idx.shape[1])
            gold = _ranks(pairs.gold[sl], idx)
            per_stratum.append([_spearman_rows(_ranks(s[sl], idx), gold) for s in sims])
        scores = np.asarray(per_stratum)  # [strata, models, rows]
        out.append(np.tensordot(weights / weights.sum(), scores, axes=1))
    return np.concatenate(out, axis=1)


def resample_means(values: Sequence[Sequence[float]], replicates: int, seed: int, key: str) -> np.ndarray:
    """[rows, replicates] means of each row of ``values`` (per-item values of one item set, e.g. a model's
    reciprocal ranks per query) over the same resampled items, drawn as :func:`replicate_scores` draws
    pairs (one generator per ``key``), so rows are paired."""
    check_replicates(replicates)
    rows = np.asarray(values, dtype=np.float64)
    if rows.ndim != 2 or rows.shape[1] < 1:
        raise SparseCSEError(f"{key}: resampling needs at least one item per row.")
    out = [rows[:, chunk[0][1]].mean(axis=2) for chunk in _draws((rows.shape[1],), replicates, _generator(seed, key))]
    return np.concatenate(out, axis=1)


def interval(replicates: np.ndarray, level: float = LEVEL) -> list[float]:
    """The percentile interval [lo, hi] covering ``level`` of the replicates."""
    if not 0 < level < 1:
        raise SparseCSEError(f"The interval level must be in (0, 1), not {level}.")
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(np.asarray(replicates, dtype=np.float64), [tail, 100 - tail])
    return [float(lo), float(hi)]


def p_value(differences: np.ndarray, observed: float) -> float:
    """Two-sided paired bootstrap p-value of ``observed`` (see the module docstring)."""
    d = np.asarray(differences, dtype=np.float64)
    return float((1 + np.count_nonzero(np.abs(d - observed) >= abs(observed))) / (1 + len(d)))


def difference(a: np.ndarray, b: np.ndarray, observed: float, level: float = LEVEL) -> dict:
    """B - A from paired replicates: the observed difference, its interval and p-value."""
    d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    return {"diff": float(observed), "ci": interval(d, level), "p": p_value(d, observed)}


def score_intervals(similarities: Mapping[str, Sequence[float]], pairs: Mapping[str, TaskPairs],
                    replicates: int = 1000, seed: int = 0, aggregation: str = "all", level: float = LEVEL) -> dict:
    """One model: ``{"tasks": {task: [lo, hi]}, "avg": [lo, hi], ...}`` by resampling each task's pairs."""
    reps = {t: replicate_scores([similarities[t]], pairs[t], replicates, seed, t, aggregation)[0] for t in similarities}
    return {"replicates": replicates, "seed": seed, "level": level, "method": "percentile, pairs resampled",
            "tasks": {t: interval(r, level) for t, r in reps.items()},
            "avg": interval(np.mean(list(reps.values()), axis=0), level)}


def paired_comparison(a: Mapping[str, Sequence[float]], b: Mapping[str, Sequence[float]],
                      pairs: Mapping[str, TaskPairs], observed_a: Mapping[str, float],
                      observed_b: Mapping[str, float], replicates: int = 1000, seed: int = 0,
                      aggregation: str = "all", level: float = LEVEL, unpaired: bool = True) -> dict:
    """Per task and for the average: B - A, its paired-bootstrap interval and p-value (both models scored on
    the same resampled pairs); with ``unpaired``, also the interval when A and B are resampled independently."""
    tasks = list(pairs)
    reps = {t: replicate_scores([a[t], b[t]], pairs[t], replicates, seed, t, aggregation) for t in tasks}
    result: dict = {"tasks": {}}
    for t in tasks:
        result["tasks"][t] = {"a": float(observed_a[t]), "b": float(observed_b[t]),
                              **difference(reps[t][0], reps[t][1], observed_b[t] - observed_a[t], level)}
    mean_a, mean_b = (float(np.mean([obs[t] for t in tasks])) for obs in (observed_a, observed_b))
    result["avg"] = {"a": mean_a, "b": mean_b,
                     **difference(np.mean([reps[t][0] for t in tasks], axis=0),
                                  np.mean([reps[t][1] for t in tasks], axis=0), mean_b - mean_a, level)}
    if unpaired:
        # B drawn from a second, independent generator per task (key suffixed), A from the paired draws
        other = {t: replicate_scores([b[t]], pairs[t], replicates, seed, t + "/unpaired", aggregation)[0]
                 for t in tasks}
        for t in tasks:
            result["tasks"][t]["ci_unpaired"] = interval(other[t] - reps[t][0], level)
        result["avg"]["ci_unpaired"] = interval(
            np.mean([other[t] for t in tasks], axis=0) - np.mean([reps[t][0] for t in tasks], axis=0), level)
    return result
