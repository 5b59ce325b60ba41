"""Readers for the STS tasks in SentEval's layout (gold scores with sentence pairs)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sparsecse.data.paths import task_path
from sparsecse.errors import SparseCSEError

STSB_SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class Pair:
    s1: str
    s2: str
    score: float


def read_sts_benchmark(data_dir: str | os.PathLike | None, split: str = "train") -> list[Pair]:
    """STS-B: tab-separated genre, file, year, id, score, s1, s2 [, extra columns]."""
    if split not in STSB_SPLITS:
        raise SparseCSEError(f"Unknown STS-B split {split!r}; choose one of {', '.join(STSB_SPLITS)}.")
    path = task_path(data_dir, "STS", "STSBenchmark", f"sts-{split}.csv", task="STSBenchmark")
    pairs = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            cols = line.split("\t")
            if len(cols) < 7:
                raise SparseCSEError(f"{path}:{lineno}: expected at least 7 tab-separated columns, found {len(cols)}.")
            pairs.append(Pair(cols[5], cols[6], _score(cols[4], path, lineno)))
    if not pairs:
        raise SparseCSEError(f"{path} holds no sentence pairs.")
    return pairs


def _score(text: str, path: Path, lineno: int) -> float:
    try:
        return float(text)
    except ValueError:
        raise SparseCSEError(f"{path}:{lineno}: the gold score {text!r} is not a number.") from None


