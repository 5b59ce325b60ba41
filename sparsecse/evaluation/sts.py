"""Unsupervised STS as SimCSE reports it: cosine similarity of the two embeddings, Spearman x 100.

STS12-16 have subsets; their score is one Spearman over all subsets concatenated ("all"), or the
plain ("mean") or size-weighted ("wmean") mean of the per-subset Spearmans. STS-B and SICK-R are
scored on one split (test by default; dev for model selection).
"""

from __future__ import annotations

import hashlib
import os
from typing import Callable, Mapping, Sequence

import numpy as np
from scipy.stats import pearsonr, spearmanr

from sparsecse.data.sts import STS_YEARS, Pair, read_sick, read_sts_benchmark, read_sts_year
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.tasks import STS_TASKS

AGGREGATIONS = ("all", "mean", "wmean")
SPLITS = ("test", "dev")

Embed = Callable[[Sequence[str]], np.ndarray]


def load_sts_task(data_dir: str | os.PathLike | None, task: str, split: str = "test") -> dict[str, list[Pair]]:
    """{subset: pairs}: the subsets of STS12-16, or the one chosen split of STS-B / SICK-R."""
    if split not in SPLITS:
        raise SparseCSEError(f"Unknown STS split {split!r}; choose one of {', '.join(SPLITS)}.")
    if task in STS_YEARS:
        return read_sts_year(data_dir, task)
    if task == "STSBenchmark":
        return {split: read_sts_benchmark(data_dir, split)}
    if task == "SICKRelatedness":
        return {split: read_sick(data_dir, split)}
    raise SparseCSEError(f"Unknown STS task {task!r}; choose one of {', '.join(STS_TASKS)}.")


def sentences_of(subsets: Mapping[str, list[Pair]]) -> list[str]:
    """Every sentence of the pairs of ``subsets``, in order (with repeats)."""
    return [s for pairs in subsets.values() for p in pairs for s in (p.s1, p.s2)]


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row of ``a`` with the same row of ``b`` (computed in float64)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return (a * b).sum(1) / np.maximum(norms, 1e-12)


def spearman100(predicted: Sequence[float], gold: Sequence[float]) -> float:
    """Spearman's correlation times 100.

    Args:
        predicted: the predicted similarities.
        gold: the gold scores.

    Returns:
        The correlation in [-100, 100].
    """
    return float(spearmanr(predicted, gold)[0] * 100)


def pearson100(predicted: Sequence[float], gold: Sequence[float]) -> float:
    """Pearson's correlation times 100.

    Args:
        predicted: the predicted similarities.
        gold: the gold scores.

    Returns:
        The correlation in [-100, 100].
    """
    return float(pearsonr(predicted, gold)[0] * 100)


def data_digest(subsets: Mapping[str, list[Pair]]) -> str:
    """sha256 of a task's scored pairs (subset names, both sentences, gold scores), in order."""
    h = hashlib.sha256()
    for name, pairs in subsets.items():
        h.update(f"[{name}]\n".encode())
        for p in pairs:
            h.update(f"{p.s1}\t{p.s2}\t{p.score!r}\n".encode())
    return h.hexdigest()


def score_subsets(subsets: Mapping[str, list[Pair]], embed: Embed) -> dict:
    """Spearman/Pearson x 100 per subset and aggregated ("all", "mean", "wmean") for one task; under
    "pairs", the per-pair cosine similarities and gold scores (subsets concatenated, in order)."""
    predicted, gold, per_subset = [], [], {}
    for name, pairs in subsets.items():
        if len(pairs) < 2:
            raise SparseCSEError(f"The STS subset {name} has {len(pairs)} scored pair; a correlation needs two.")
        sims = cosine_rows(embed([p.s1 for p in pairs]), embed([p.s2 for p in pairs]))
        golds = np.array([p.score for p in pairs])
        per_subset[name] = {"spearman": spearman100(sims, golds), "pearson": pearson100(sims, golds), "n": len(pairs)}
        predicted.append(sims)
        gold.append(golds)
    sizes = np.array([v["n"] for v in per_subset.values()], dtype=float)
    spearmans = np.array([v["spearman"] for v in per_subset.values()])
    pearsons = np.array([v["pearson"] for v in per_subset.values()])
    all_pred, all_gold = np.concatenate(predicted), np.concatenate(gold)
    return {
        "spearman": {"all": spearman100(all_pred, all_gold), "mean": float(spearmans.mean()),
                     "wmean": float((spearmans * sizes).sum() / sizes.sum())},
        "pearson": {"all": pearson100(all_pred, all_gold), "mean": float(pearsons.mean()),
                    "wmean": float((pearsons * sizes).sum() / sizes.sum())},
        "n": int(sizes.sum()),
        "subsets": per_subset,
        "pairs": {"similarity": all_pred, "gold": all_gold, "subsets": {k: v["n"] for k, v in per_subset.items()}},
    }


def evaluate_sts(tasks_data: Mapping[str, Mapping[str, list[Pair]]], embed: Embed,
                 aggregation: str = "all") -> tuple[dict[str, float], dict[str, dict]]:
    """({task: Spearman x 100 under ``aggregation``}, {task: full details}) for loaded tasks."""
    if aggregation not in AGGREGATIONS:
        raise SparseCSEError(f"Unknown STS aggregation {aggregation!r}; choose one of {', '.join(AGGREGATIONS)}.")
    details = {task: score_subsets(subsets, embed) for task, subsets in tasks_data.items()}
    scores = {task: d["spearman"][aggregation] for task, d in details.items()}
    return scores, details
