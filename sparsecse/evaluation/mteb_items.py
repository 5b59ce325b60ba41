"""Per-item values behind an mteb task's main score, their bootstrap intervals and paired comparisons.

mteb writes a model's predictions per task (``prediction_folder``): for retrieval and reranking the
scored documents of each query, for STS the similarity of each pair, for classification each
experiment's predicted labels. From them and the task's own data :func:`task_items` recovers the
per-item values whose aggregate is the main score:

- retrieval / reranking: the main metric per query (nDCG@k, MAP@k, recall@k, precision@k, hit rate,
  MRR@k), by pytrec_eval as mteb computes it; the task score is their mean;
- STS: each pair's similarity and its gold score; the task score is their Spearman correlation;
- classification (train/test protocol): each test item's share of experiments that labelled it right;
  the task score (mean accuracy over experiments) is their mean.

A task is made of parts (one per split and subset), scored separately and averaged, as mteb averages
them. Every figure is x 100, like sparsecse's STS and transfer scores. Clustering's V-measure is not a
mean over items, so clustering tasks carry no items (their score only). A part's items are kept only if
they give back mteb's own figure (to mteb's rounding): that checks the recovery against mteb itself.

The paired bootstrap draws a part's items with replacement and scores both models on the same draw
(as :mod:`sparsecse.evaluation.bootstrap` does for STS pairs), seeded by (seed, task name).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, Sequence

import numpy as np

from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.bootstrap import (LEVEL, TaskPairs, check_replicates, difference, interval,
                                            replicate_scores, resample_means)
from sparsecse.evaluation.sts import spearman100

MEAN, SPEARMAN = "mean", "spearman"
# mteb's retrieval metric names -> pytrec_eval's measure family (mrr is mteb's own: reciprocal rank in the top k)
TREC_MEASURES = {"ndcg_at": "ndcg_cut", "map_at": "map_cut", "recall_at": "recall", "precision_at": "P",
                 "hit_rate_at": "success", "mrr_at": "recip_rank"}
MTEB_ROUNDING = 1e-5  # mteb rounds retrieval means to 5 decimals


def _retrieval_metric(main_score: str) -> tuple[str, int] | None:
    if main_score == "accuracy":  # multiple-choice retrieval: recall@1
        return "recall", 1
    for prefix, measure in TREC_MEASURES.items():
        if main_score.startswith(prefix + "_") and main_score[len(prefix) + 1:].isdigit():
            return measure, int(main_score[len(prefix) + 1:])
    return None


def per_query(run: Mapping[str, Mapping[str, float]], qrels: Mapping[str, Mapping[str, int]], main_score: str,
              ignore_identical_ids: bool = False, skip_first_result: bool = False) -> tuple[list[str], np.ndarray] | None:
    """Each query's value of a retrieval metric (as a fraction), in sorted query-id order.

    Args:
        run: {query id: {document id: score}} (mteb's retrieval predictions).
        qrels: {query id: {document id: relevance}}.
        main_score: mteb's metric name (``ndcg_at_10``, ``map_at_1000``, ``mrr_at_10``, ...).
        ignore_identical_ids: drop a document whose id is the query's (mteb's task setting).
        skip_first_result: drop each query's top document (mteb's task setting).

    Returns:
        (query ids, values), or None for a metric that is not a mean over queries.
    """
    import pytrec_eval

    metric = _retrieval_metric(main_score)
    if metric is None:
        return None
    measure, k = metric
    ranked = {}
    for query, docs in run.items():
        order = sorted(((d, s) for d, s in docs.items() if not (ignore_identical_ids and d == query)),
                       key=lambda item: (item[1], item[0]), reverse=True)  # pytrec_eval's tie-break
        order = order[1:] if skip_first_result else order
        ranked[query] = dict(order[:k] if measure == "recip_rank" else order)
    queries = sorted(q for q in ranked if q in qrels)
    name = measure if measure == "recip_rank" else f"{measure}.{k}"
    scores = pytrec_eval.RelevanceEvaluator({q: dict(qrels[q]) for q in queries}, {name}).evaluate(
        {q: ranked[q] for q in queries})
    key = measure if measure == "recip_rank" else f"{measure}_{k}"
    return queries, np.asarray([scores[q][key] for q in queries], dtype=np.float64)


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _split_data(task, split: str, subset: str):
    dataset = task.dataset
    return dataset[subset][split] if subset in dataset else dataset[split]


def part_items(task, predictions: Any, split: str, subset: str, recorded: float) -> dict[str, Any] | None:
    """The per-item values of one (split, subset) of ``task`` from mteb's ``predictions`` for it.

    Args:
        task: the mteb task, its data loaded.
        predictions: what mteb saved for that split and subset.
        split: the split name.
        subset: the hf subset (``"default"`` for a one-language task).
        recorded: mteb's main score for the part (a fraction), which the items must give back.

    Returns:
        ``{"split", "subset", "kind", "ids", "values" | ("similarity", "gold"), "score", "data"}`` or None
        where the main score is not a per-item aggregate (clustering, cross-validated classification, ...).
    """
    from mteb.abstasks import AbsTaskClassification, AbsTaskRetrieval, AbsTaskSTS

    main = task.metadata.main_score
    data = _split_data(task, split, subset)
    part: dict[str, Any] = {"split": split, "subset": subset}
    source = (task.metadata.name, task.metadata.dataset.get("path"), task.metadata.dataset.get("revision"))
    if isinstance(task, AbsTaskRetrieval):
        qrels = {q: d for q, d in data["relevant_docs"].items() if d}
        found = per_query(predictions, qrels, main, task.ignore_identical_ids, task.skip_first_result)
        if found is None:
            return None
        ids, values = found
        part.update(kind=MEAN, ids=ids, values=100 * values, data=_digest(source, ids, qrels))
        tolerance = 100 * MTEB_ROUNDING
    elif isinstance(task, AbsTaskSTS) and main in ("cosine_spearman", "spearman"):
        key = "similarity_scores" if main == "spearman" and predictions.get("similarity_scores") else "cosine_scores"
        gold = (np.asarray(data["score"], dtype=np.float64) - task.min_score) / (task.max_score - task.min_score)
        ids = list(range(len(gold)))
        texts = [list(data[c]) if isinstance(c, str) else None for c in task.column_names]
        part.update(kind=SPEARMAN, ids=ids, similarity=np.asarray(predictions[key], dtype=np.float64), gold=gold,
                    data=_digest(source, gold.tolist(), texts))
        tolerance = 1e-9
    elif isinstance(task, AbsTaskClassification) and main == "accuracy" and not task.is_cross_validation:
        truth = np.asarray(data[task.label_column_name])
        predicted = np.asarray(predictions)  # [experiments, items]
        if predicted.ndim != 2 or predicted.shape[1] != len(truth):
            return None
        ids = list(range(len(truth)))
        part.update(kind=MEAN, ids=ids, values=100 * (predicted == truth[None, :]).mean(axis=0),
                    data=_digest(source, truth.tolist(), list(data[task.input_column_name])))
        tolerance = 1e-9
    else:
        return None
    part["score"] = item_score(part)
    if not abs(part["score"] - 100 * recorded) <= tolerance:
        return None  # the recovery does not give mteb's figure back: no intervals rather than wrong ones
    return part


def item_score(part: Mapping[str, Any]) -> float:
    """A part's score x 100 from its items: their mean, or the Spearman of similarities and gold scores."""
    if part["kind"] == MEAN:
        return float(np.mean(part["values"]))
    return spearman100(np.asarray(part["similarity"]), np.asarray(part["gold"]))


def task_items(task, predictions: Mapping[str, Any], scores: Mapping[str, list[dict]]) -> list[dict] | None:
    """Every part's items of ``task`` (None unless all parts have them).

    Args:
        task: the mteb task, its data loaded.
        predictions: mteb's prediction file of the task ({subset: {split: predictions}}).
        scores: the TaskResult's ``scores`` ({split: [{"hf_subset", "main_score", ...}]}).

    Returns:
        A list of parts (see :func:`part_items`), or None.
    """
    parts = []
    for split, entries in scores.items():
        for entry in entries:
            subset = entry["hf_subset"]
            found = predictions.get(subset, {}).get(split)
            part = None if found is None else part_items(task, found, split, subset, entry["main_score"])
            if part is None:
                return None
            parts.append(part)
    return parts or None


def _replicates(parts_by_model: Sequence[Sequence[dict]], replicates: int, seed: int, key: str) -> np.ndarray:
    """[models, replicates] task scores of every model on the same resampled items of each part."""
    out = []
    for i, part in enumerate(parts_by_model[0]):
        part_key = f"{key}/{part['split']}/{part['subset']}"
        if part["kind"] == SPEARMAN:
            pairs = TaskPairs.of(part["gold"])
            out.append(replicate_scores([p[i]["similarity"] for p in parts_by_model], pairs, replicates, seed,
                                        part_key))
            continue
        out.append(resample_means([p[i]["values"] for p in parts_by_model], replicates, seed, part_key))
    return np.mean(out, axis=0)


def item_interval(parts: Sequence[dict], replicates: int = 1000, seed: int = 0, key: str = "",
                  level: float = LEVEL) -> list[float]:
    """The percentile interval of one model's task score, its items resampled within each part."""
    check_replicates(replicates)
    return interval(_replicates([parts], replicates, seed, key)[0], level)


def same_items(a: Sequence[dict], b: Sequence[dict]) -> bool:
    """Whether two models' parts are the same items of the same data (so they can be paired)."""
    return len(a) == len(b) and all(
        (x["split"], x["subset"], x["kind"], x["data"], list(x["ids"])) ==
        (y["split"], y["subset"], y["kind"], y["data"], list(y["ids"])) for x, y in zip(a, b))


def paired_difference(task: str, a: Sequence[dict], b: Sequence[dict], replicates: int = 1000, seed: int = 0,
                      level: float = LEVEL) -> dict[str, Any]:
    """B - A on one mteb task: both scores, the difference, its paired-bootstrap interval and p-value.

    Args:
        task: the task name (seeds its resamples).
        a, b: the two models' parts (:func:`task_items`), on the same items.
        replicates: bootstrap replicates.
        seed: the resamples' seed.
        level: the interval's coverage.

    Returns:
        ``{"a", "b", "diff", "ci", "p"}`` (x 100).
    """
    if not same_items(a, b):
        raise SparseCSEError(f"The two sides scored different {task} items (splits, subsets or data differ), so "
                             "they cannot be paired.")
    check_replicates(replicates)
    score_a, score_b = (float(np.mean([item_score(p) for p in parts])) for parts in (a, b))
    reps = _replicates([a, b], replicates, seed, task)
    return {"a": score_a, "b": score_b, **difference(reps[0], reps[1], score_b - score_a, level)}


def plain_parts(parts: Sequence[dict]) -> list[dict]:
    """Parts with lists instead of arrays (for JSON)."""
    return [{k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in p.items()} for p in parts]


def read_parts(parts: Sequence[Mapping[str, Any]], where: str) -> list[dict]:
    """Parts read from a result file, arrays restored and each checked to give its recorded score back."""
    out = []
    try:
        for p in parts:
            part = dict(p)
            for key in ("values", "similarity", "gold"):
                if key in part:
                    part[key] = np.asarray(part[key], dtype=np.float64)
                    if part[key].shape != (len(part["ids"]),) or not np.isfinite(part[key]).all():
                        raise ValueError(f"{key} is not one finite number per item")
            if abs(item_score(part) - float(part["score"])) > 1e-6:
                raise ValueError(f"its items give {item_score(part)}, not the recorded {part['score']}")
            out.append(part)
    except (KeyError, TypeError, ValueError) as exc:
        raise SparseCSEError(f"{where}: the per-item mteb values are damaged ({exc}), so they cannot be "
                             "compared.") from None
    return out


def result_items(results: Mapping[str, Any], where: str) -> dict[str, list[dict]]:
    """{task: parts} of the mteb tasks a result file (``eval --mteb --out``) holds per-item values for."""
    tasks = (results.get("mteb") or {}).get("tasks") or {}
    if not isinstance(tasks, Mapping):
        raise SparseCSEError(f"{where}: its \"mteb\" block is not a table of tasks.")
    return {name: read_parts(entry["parts"], f"{where} ({name})") for name, entry in tasks.items()
            if isinstance(entry, Mapping) and entry.get("parts")}


def compare_items(a: Mapping[str, Any], b: Mapping[str, Any], names: tuple[str, str], replicates: int = 1000,
                  seed: int = 0, level: float = LEVEL) -> dict[str, dict]:
    """B - A on every mteb task both result dictionaries hold per-item values for (see :func:`paired_difference`).

    Args:
        a, b: the two result dictionaries (as ``eval --out`` wrote them).
        names: how the two sides are named in messages.
        replicates, seed, level: the paired bootstrap.

    Returns:
        Per task both share, its row (``a``, ``b``, ``diff``, ``ci``, ``p`` and the ``metric``); empty if none.
    """
    items_a, items_b = result_items(a, names[0]), result_items(b, names[1])
    return {task: {"metric": a["mteb"]["tasks"][task]["main_score"],
                   **paired_difference(task, items_a[task], items_b[task], replicates, seed, level)}
            for task in items_a if task in items_b}


def has_items_only(results: Mapping[str, Any]) -> bool:
    """Whether a result dictionary holds mteb tasks but no STS pairs (``eval --mteb`` without ``--tasks``)."""
    return bool((results.get("mteb") or {}).get("tasks")) and not results.get("pairs")
