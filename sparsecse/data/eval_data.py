"""The data of a dev or test set: a user's pairs file or a task sparsecse knows, as one thing.

What the metrics need lives in :mod:`sparsecse.evaluation.eval_sets`; this module holds what the lower
layers need as well (scoring's positive pairs and sentences), read once and checked before any work.
A spec is a path ending in ``.tsv``/``.csv``/``.jsonl`` (:mod:`sparsecse.data.pairs_files`; relative to
the working directory) or one of ``KNOWN_TASKS`` (any case).

Example::

    >>> data = load_eval_data("STSBenchmark", "dev")  # doctest: +SKIP
    >>> data.kind, len(data.pairs), data.positive_threshold  # doctest: +SKIP
    ('scored', 1500, 4.0)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparsecse.data.pairs_files import FORMATS, POSITIVES, SCORED, read_pairs_file
from sparsecse.data.sts import (SICK_RANGE, SICK_SPLITS, STS_RANGE, STS_YEARS, STSB_SPLITS, Pair, read_sick,
                                read_sts_benchmark, read_sts_year)
from sparsecse.data.text import normalize_text
from sparsecse.errors import SparseCSEError

KNOWN_TASKS = (*STS_YEARS, "STSBenchmark", "SICKRelatedness")
POSITIVE_FRACTION = 0.8  # a scored pair is a positive above 0.8 of the scale (STS-B: gold > 4 of 0-5)


@dataclass(frozen=True)
class EvalData:
    """A dev or test set's data.

    ``kind`` "scored": ``pairs`` with their ``score_range`` (the task's annotation scale, or the file's
    lowest and highest score); "positives": ``queries`` (query, positive) and ``extra_candidates``.
    ``source`` says where it came from (task and split, or path, sha256, size, format, rows, skipped).
    """

    name: str
    kind: str
    source: dict[str, Any]
    pairs: tuple[Pair, ...] = ()
    score_range: tuple[float, float] | None = None
    queries: tuple[tuple[str, str], ...] = ()
    extra_candidates: tuple[str, ...] = ()
    skipped: int = 0

    @property
    def positive_threshold(self) -> float | None:
        """Scored pairs above this score are positives (0.8 of the way up the score range)."""
        if self.score_range is None:
            return None
        low, high = self.score_range
        return low + POSITIVE_FRACTION * (high - low)

    @property
    def positive_pairs(self) -> list[tuple[str, str]]:
        """The pairs (a, b) that mean the same, scored pairs above :attr:`positive_threshold` or (query, positive)."""
        if self.kind == POSITIVES:
            return list(self.queries)
        return [(p.s1, p.s2) for p in self.pairs if p.score > self.positive_threshold]

    @property
    def candidates(self) -> list[str]:
        """Every sentence a query of positive pairs is ranked against (the distinct positives, then the extras)."""
        return _distinct([p for _, p in self.queries] + list(self.extra_candidates))

    @property
    def sentences(self) -> list[str]:
        """The distinct sentences of the set, in file order (what is encoded and timed)."""
        if self.kind == SCORED:
            return list(dict.fromkeys(s for p in self.pairs for s in (p.s1, p.s2)))
        return _distinct([q for q, _ in self.queries] + self.candidates)

    @property
    def size(self) -> int:
        """The number of scored pairs or of queries."""
        return len(self.pairs) if self.kind == SCORED else len(self.queries)

    def describe(self) -> dict[str, Any]:
        """What a manifest records of the set: its source, kind and size."""
        return {"name": self.name, "kind": self.kind, **self.source, "n": self.size,
                **({"extra_candidates": len(self.extra_candidates)} if self.kind == POSITIVES else {})}


def _distinct(sentences: list[str]) -> list[str]:
    """The first of each group of sentences equal up to spaces (what the evaluation encodes as one)."""
    first: dict[str, str] = {}
    for sentence in sentences:
        first.setdefault(normalize_text(sentence), sentence)
    return list(first.values())


def known_task(spec: str) -> str | None:
    """The canonical task name ``spec`` spells (case ignored), else None.

    >>> known_task("sickrelatedness")
    'SICKRelatedness'
    """
    return {t.lower(): t for t in KNOWN_TASKS}.get(str(spec).strip().lower())


def is_pairs_file(spec: str | os.PathLike) -> bool:
    """A spec names a pairs file when it ends in a pairs-file suffix or is an existing file."""
    return Path(spec).suffix.lower() in FORMATS or Path(spec).is_file()


def load_eval_data(spec: str | os.PathLike, split: str = "dev", data_dir: str | os.PathLike | None = None,
                   role: str = "dev") -> EvalData:
    """The data of a dev or test set.

    Args:
        spec: a pairs file (``.tsv``/``.csv``/``.jsonl``) or a task name of ``KNOWN_TASKS``.
        split: the split of STSBenchmark or SICKRelatedness (train, dev or test; SICK's dev is its trial
            set); STS12-16 have only their test set, whatever ``split`` says.
        data_dir: the SentEval-layout data directory of the tasks (default: sparsecse's).
        role: "dev" or "test", for the error message only.

    Returns:
        An :class:`EvalData`; a file or name that cannot serve is refused in one sentence.
    """
    task = known_task(spec) if isinstance(spec, str) else None
    if task is None and not is_pairs_file(spec):
        raise SparseCSEError(f"The {role} set {str(spec)!r} is neither a pairs file (.tsv, .csv or .jsonl) nor a "
                             f"task sparsecse knows ({', '.join(KNOWN_TASKS)}).")
    if task is None:
        f = read_pairs_file(spec)
        source = {"path": str(Path(spec).resolve()), "sha256": f.sha256, "size": f.size, "format": f.format,
                  "rows": f.rows, "skipped": f.skipped}
        if f.kind == POSITIVES:
            return EvalData(Path(spec).name, POSITIVES, source, queries=f.positives, extra_candidates=f.candidates)
        scores = [p.score for p in f.scored]
        return EvalData(Path(spec).name, SCORED, source, pairs=f.scored, score_range=(min(scores), max(scores)),
                        skipped=f.skipped)
    if task in STS_YEARS:
        pairs, scale, split = [p for subset in read_sts_year(data_dir, task).values() for p in subset], STS_RANGE, "test"
    elif task == "STSBenchmark":
        if split not in STSB_SPLITS:
            raise SparseCSEError(f"Unknown STS-B split {split!r}; choose one of {', '.join(STSB_SPLITS)}.")
        pairs, scale = read_sts_benchmark(data_dir, split), STS_RANGE
    else:
        if split not in SICK_SPLITS:
            raise SparseCSEError(f"Unknown SICK split {split!r}; choose one of {', '.join(SICK_SPLITS)}.")
        pairs, scale = read_sick(data_dir, split), SICK_RANGE
    return EvalData(task, SCORED, {"task": task, "split": split}, pairs=tuple(pairs), score_range=scale)
