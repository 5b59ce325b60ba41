"""What a dev or test set is, for every command that chooses or reports on one.

:func:`load_eval_set` turns a spec (a user's pairs file or a task name sparsecse knows) into an
:class:`EvalSet`: its sentences (to encode and time), its positive pairs (scoring's alignment term),
:meth:`EvalSet.score` (the primary metric x 100: checkpoint choice) and :meth:`EvalSet.evaluate` (the
metric with a bootstrap interval and the per-item values that :func:`paired_difference` pairs).

- **Scored pairs**: Spearman x 100 of the cosine similarity of the two sentences against the scores,
  with the STS tasks' bootstrap (:mod:`sparsecse.evaluation.bootstrap`, pairs resampled).
- **Positive pairs**: each query ranks every candidate of the file (every positive and every extra
  candidate, the query's own text left out); its rank is 1 + the number of other candidates at least as
  similar as its positive (ties count against it). recall@1 and MRR@10 (reciprocal rank, 0 beyond rank
  10) x 100, bootstrap over queries; MRR@10 is the primary metric.

Sentences are whitespace-normalised as SentEval does for the STS tasks, so a task and the same pairs
written to a file score the same.

Example::

    dev = load_eval_set("my_dev.tsv")  # doctest: +SKIP
    dev.score(SentenceEncoder.load("all-MiniLM-L6-v2"))  # doctest: +SKIP
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from sparsecse.data.eval_data import EvalData, load_eval_data
from sparsecse.data.pairs_files import POSITIVES, SCORED
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.bootstrap import LEVEL, TaskPairs, difference, interval, replicate_scores, resample_means
from sparsecse.evaluation.embedding import normalize_text
from sparsecse.evaluation.sts import cosine_rows, pearson100, spearman100

METRICS = {SCORED: "spearman", POSITIVES: "mrr@10"}
MRR_CUTOFF = 10
ROLES = ("dev", "test")

Embed = Callable[[Sequence[str]], np.ndarray]


def embedder(encoder, batch_size: int | None = None) -> Embed:
    """A function sentences -> embeddings that encodes each distinct (whitespace-normalised) sentence once.

    Args:
        encoder: anything with ``encode(sentences, batch_size=...) -> array [N, dim]``.
        batch_size: passed on to ``encode`` (None: the encoder's default).
    """
    table: dict[str, np.ndarray] = {}

    def embed(sentences: Sequence[str]) -> np.ndarray:
        keys = [normalize_text(s) for s in sentences]
        new = [k for k in dict.fromkeys(keys) if k not in table]
        if new:
            rows = np.asarray(encoder.encode(new, batch_size=batch_size), dtype=np.float32)
            if rows.shape[0] != len(new):
                raise SparseCSEError(f"The encoder returned {rows.shape[0]} embeddings for {len(new)} sentences.")
            table.update(zip(new, rows))
        return np.stack([table[k] for k in keys])

    return embed


def ranks_of(queries: np.ndarray, candidates: np.ndarray, positive: Sequence[int],
             excluded: Sequence[int | None]) -> np.ndarray:
    """The rank (1 = first) of each query's positive among the candidates by cosine similarity.

    Args:
        queries: [Q, dim] query embeddings; candidates: [C, dim] candidate embeddings.
        positive: per query, the row of its positive in ``candidates``.
        excluded: per query, a candidate row left out of its ranking (its own text), or None.

    Returns:
        The rank of each query's positive, 1 + the other candidates at least as similar (ties count against it).
    """
    q = np.asarray(queries, dtype=np.float64)
    c = np.asarray(candidates, dtype=np.float64)
    q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
    c = c / np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-12)
    sims = q @ c.T
    rows = np.arange(len(q))
    target = sims[rows, positive]
    beats = sims >= target[:, None]
    beats[rows, positive] = False
    for i, col in enumerate(excluded):
        if col is not None:
            beats[i, col] = False
    return 1 + beats.sum(axis=1)


def reciprocal_ranks(ranks: np.ndarray, cutoff: int = MRR_CUTOFF) -> np.ndarray:
    """1/rank where rank <= ``cutoff``, else 0 (MRR@cutoff per query)."""
    ranks = np.asarray(ranks, dtype=np.float64)
    return np.where(ranks <= cutoff, 1.0 / ranks, 0.0)


class EvalSet:
    """A dev or test set: scored pairs (Spearman) or positive pairs (MRR@10, recall@1).

    Attributes: ``name``, ``kind`` ("scored" or "positives"), ``metric`` ("spearman" or "mrr@10"),
    ``sentences`` (distinct), ``positive_pairs`` ((a, b): scored pairs above 0.8 of the score range, or
    (query, positive)), ``data`` (the :class:`~sparsecse.data.eval_data.EvalData`).
    """

    def __init__(self, data: EvalData):
        self.data = data
        self.name, self.kind, self.metric = data.name, data.kind, METRICS[data.kind]
        self.sentences = data.sentences
        self.positive_pairs = data.positive_pairs

    def __repr__(self) -> str:
        return f"EvalSet({self.name!r}, kind={self.kind!r}, n={self.data.size})"

    def describe(self) -> dict[str, Any]:
        """What a manifest records of the set (source, sha256 and size or task and split, kind, rows)."""
        return {**self.data.describe(), "metric": self.metric}

    # ------------------------------------------------------------------------------ per-item values
    def items(self, embed: Embed) -> dict[str, np.ndarray]:
        """Per-item values: scored pairs {"similarity", "gold"}; positive pairs {"rank"} per query."""
        d = self.data
        if self.kind == SCORED:
            return {"similarity": cosine_rows(embed([p.s1 for p in d.pairs]), embed([p.s2 for p in d.pairs])),
                    "gold": np.array([p.score for p in d.pairs], dtype=np.float64)}
        candidates = [normalize_text(s) for s in d.candidates]
        column = {s: i for i, s in enumerate(candidates)}
        queries = [normalize_text(q) for q, _ in d.queries]
        ranks = ranks_of(embed(queries), embed(candidates), [column[normalize_text(p)] for _, p in d.queries],
                         [column.get(q) for q in queries])
        return {"rank": ranks}

    def score_items(self, items: Mapping[str, np.ndarray]) -> float:
        """The primary metric x 100 from per-item values."""
        if self.kind == SCORED:
            return spearman100(items["similarity"], items["gold"])
        return float(100 * reciprocal_ranks(items["rank"]).mean())

    def score(self, encoder, batch_size: int | None = None) -> float:
        """The primary metric x 100 (Spearman, or MRR@10) of ``encoder``, no interval: checkpoint choice.

        Args:
            encoder: anything with ``encode(sentences, batch_size=...)``.
            batch_size: sentences per encoding batch (None: the encoder's default).
        """
        return self.score_items(self.items(embedder(encoder, batch_size)))

    def evaluate(self, encoder, replicates: int = 1000, seed: int = 0, batch_size: int | None = None,
                 level: float = LEVEL) -> dict[str, Any]:
        """The metric with its bootstrap interval and the per-item values.

        Args:
            encoder: anything with ``encode(sentences, batch_size=...)``.
            replicates, seed, level: the percentile bootstrap (pairs or queries resampled).
            batch_size: sentences per encoding batch.

        Returns:
            A dict with ``name``, ``kind``, ``metric``, ``score``, ``ci`` (``[lo, hi]``; None, with ``ci_note``
            "too few pairs for an interval", where a resample cannot be scored), ``n``, ``replicates``,
            ``seed``, ``level``, ``set`` (what :meth:`describe` gives) and ``items`` (the per-item values); scored
            pairs add ``spearman``, ``pearson`` and ``skipped``, positive pairs ``recall@1`` and ``mrr@10`` (x 100)
            with their intervals ``recall@1_ci`` and ``mrr@10_ci``, and ``candidates``.
        """
        return self.evaluate_embed(embedder(encoder, batch_size), replicates, seed, level)

    def evaluate_embed(self, embed: Embed, replicates: int = 1000, seed: int = 0, level: float = LEVEL) -> dict:
        """:meth:`evaluate` with a function sentences -> embeddings (e.g. an evaluation's embedding table)."""
        items = self.items(embed)
        result: dict[str, Any] = {"name": self.name, "kind": self.kind, "metric": self.metric,
                                  "score": self.score_items(items), "n": self.data.size, "replicates": replicates,
                                  "seed": seed, "level": level, "set": self.describe()}
        if self.kind == SCORED:
            reps = replicate_scores([items["similarity"]], TaskPairs.of(items["gold"]), replicates, seed,
                                    self.name)[0]
            result.update(ci=defined_interval(reps, level), spearman=result["score"],
                          pearson=pearson100(items["similarity"], items["gold"]), skipped=self.data.skipped)
        else:
            rr, hit = reciprocal_ranks(items["rank"]), (items["rank"] == 1).astype(np.float64)
            reps = 100 * resample_means([rr, hit], replicates, seed, self.name)
            result["ci"] = defined_interval(reps[0], level)
            result.update({"mrr@10": result["score"], "mrr@10_ci": result["ci"], "recall@1": float(100 * hit.mean()),
                           "recall@1_ci": defined_interval(reps[1], level)})
            result["candidates"] = len(self.data.candidates)
        if result["ci"] is None:
            result["ci_note"] = TOO_FEW
        result["items"] = {k: v.tolist() for k, v in items.items()}
        return result


TOO_FEW = "too few pairs for an interval"  # what stands for an interval some resamples cannot score


def defined_interval(replicates: np.ndarray, level: float = LEVEL) -> list[float] | None:
    """The percentile interval of ``replicates``, or None when a resample has no score (a Spearman of tied
    values: a set of a few pairs, or of few distinct scores), i.e. the set is too small for an interval."""
    values = np.asarray(replicates, dtype=np.float64)
    return interval(values, level) if np.isfinite(values).all() else None


def load_eval_set(spec: str | os.PathLike | EvalSet, split: str = "dev", data_dir: str | os.PathLike | None = None,
                  role: str = "dev") -> EvalSet:
    """A dev or test set from a pairs file or a task name.

    Args:
        spec: a ``.tsv``/``.csv``/``.jsonl`` pairs file (:mod:`sparsecse.data.pairs_files`), a task name
            sparsecse knows (STSBenchmark, SICKRelatedness, STS12..STS16; case ignored), or an EvalSet
            (returned as it is).
        split: the split of STSBenchmark and SICKRelatedness (train, dev, test).
        data_dir: the SentEval-layout data directory of the tasks.
        role: "dev" or "test": names the set in error messages.

    Returns:
        An :class:`EvalSet`; anything unusable is refused in one sentence before any model loads.
    """
    if isinstance(spec, EvalSet):
        return spec
    return EvalSet(load_eval_data(spec, split, data_dir, role))


def load_eval_sets(dev=None, test=None, data_dir=None, dev_split: str = "dev",
                   test_split: str = "test") -> dict[str, EvalSet]:
    """{"dev": EvalSet, "test": EvalSet} for the specs given (None: left out); task names take ``dev_split``
    and ``test_split``."""
    specs = {"dev": (dev, dev_split), "test": (test, test_split)}
    return {role: load_eval_set(spec, split, data_dir, role) for role, (spec, split) in specs.items()
            if spec is not None}


def same_set(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Two :meth:`EvalSet.evaluate` results were computed on the same data (same file bytes, or task and split)."""
    keys = ("kind", "sha256", "task", "split", "n")
    return all(a["set"].get(k) == b["set"].get(k) for k in keys)


def paired_difference(a: Mapping[str, Any], b: Mapping[str, Any], replicates: int = 1000, seed: int = 0,
                      level: float = LEVEL) -> dict[str, Any]:
    """B - A on one set from two :meth:`EvalSet.evaluate` results: both resampled on the same pairs or queries.

    Returns:
        ``{"name", "metric", "a", "b", "diff", "ci", "p"}``, and for positive pairs ``"recall@1"`` with its
        own ``{"a", "b", "diff", "ci", "p"}``.
    """
    if not same_set(a, b):
        raise SparseCSEError(f"The two results on {a['name']} and {b['name']} were computed on different data, so "
                             "they cannot be paired.")
    ia, ib = a["items"], b["items"]
    out: dict[str, Any] = {"name": a["name"], "metric": a["metric"], "a": a["score"], "b": b["score"]}
    if a["kind"] == SCORED:
        reps = replicate_scores([ia["similarity"], ib["similarity"]], TaskPairs.of(ia["gold"]), replicates, seed,
                                a["name"])
        return {**out, **difference(reps[0], reps[1], b["score"] - a["score"], level)}
    rr = [reciprocal_ranks(ia["rank"]), reciprocal_ranks(ib["rank"])]
    hit = [(np.asarray(ia["rank"]) == 1).astype(float), (np.asarray(ib["rank"]) == 1).astype(float)]
    reps = 100 * resample_means([*rr, *hit], replicates, seed, a["name"])
    recall = (a["recall@1"], b["recall@1"])
    return {**out, **difference(reps[0], reps[1], b["score"] - a["score"], level),
            "recall@1": {"a": recall[0], "b": recall[1],
                         **difference(reps[2], reps[3], recall[1] - recall[0], level)}}
