"""``evaluate``: a model (optionally gated by a mask) on the STS and transfer suites in one call."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

import numpy as np

from sparsecse.data.paths import resolve_data_dir
from sparsecse.deploy.loading import load_encoder
from sparsecse.deploy.runtime import is_encoder
from sparsecse.modeling.encoder import POOLINGS, SentenceEncoder, resolve_precision
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.align_uniform import alignment_uniformity
from sparsecse.evaluation.embedding import EmbeddingTable
from sparsecse.evaluation.result import EvaluationResult
from sparsecse.evaluation.bootstrap import TaskPairs, score_intervals
from sparsecse.evaluation.sts import (AGGREGATIONS, SPLITS, data_digest, evaluate_sts, load_sts_task,
                                      sentences_of)
from sparsecse.evaluation.tasks import STS_TASKS, TRANSFER_TASKS, resolve_tasks
from sparsecse.evaluation.transfer import PROTOCOLS, evaluate_transfer, load_transfer_task, transfer_sentences
from sparsecse.artifacts.remote_code import with_trust_option
from sparsecse.compress.masks import Mask
from sparsecse.compress.masks import model_for_mask


@with_trust_option
def evaluate(
    model=None,
    mask=None,
    tasks: str | list[str] = "sts",
    data_dir: str | os.PathLike | None = None,
    pooling: str | None = None,
    batch_size: int | None = None,
    device: str | None = None,
    sts_aggregation: str = "all",
    fasttest: bool = False,
    precision: str = "fp32",
    show_progress: bool = False,
    seed: int = 0,
    sts_split: str = "test",
    align_uniform: bool | None = None,
    transfer_protocol: str = "senteval",
    bootstrap: int = 0,
    bootstrap_seed: int = 0,
    keep_pairs: bool = False,
) -> EvaluationResult:
    """Evaluate ``model`` (None = the embedded default, a name/directory, or a SentenceEncoder).

    ``mask`` (None, a mask file or a :class:`~sparsecse.compress.masks.Mask`) is attached as 0/1 gates for
    the evaluation and detached afterwards. Returns an :class:`~sparsecse.evaluation.result.EvaluationResult`
    (``scores``: {task: Spearman or accuracy x 100}, ``avg_sts``, ``avg_transfer``, ``alignment``,
    ``uniformity``, ``details``, ``settings``, ``timing``, ...; it also reads like that dictionary);
    the averages cover the tasks that ran. Alignment/uniformity (STS-B ``sts_split``) are computed
    when asked, or by default whenever STS-B ran (its embeddings are then already at hand).
    ``transfer_protocol``: ``senteval`` (SentEval's PyTorch classifier, as the papers report) or ``fast``.

    With STS tasks, ``"data"`` fingerprints the pairs scored (:func:`~sparsecse.evaluation.runner.sts_fingerprint`). ``bootstrap``
    replicates (> 0) add ``"bootstrap"``: a percentile interval per STS task and for their average, by
    resampling pairs with ``bootstrap_seed`` (:mod:`sparsecse.evaluation.bootstrap`). ``keep_pairs``
    keeps ``"pairs"``: per STS task the per-pair similarities, gold scores and subset sizes.
    """
    start = time.perf_counter()
    names = resolve_tasks(tasks)
    if sts_aggregation not in AGGREGATIONS:
        raise SparseCSEError(f"Unknown STS aggregation {sts_aggregation!r}; choose one of {', '.join(AGGREGATIONS)}.")
    if sts_split not in SPLITS:
        raise SparseCSEError(f"Unknown STS split {sts_split!r}; choose one of {', '.join(SPLITS)}.")
    precision = resolve_precision(precision, device)  # "auto" is recorded as what it chose
    if transfer_protocol not in PROTOCOLS:
        raise SparseCSEError(f"Unknown transfer protocol {transfer_protocol!r}; choose one of {', '.join(PROTOCOLS)}.")
    if bootstrap < 0:
        raise SparseCSEError(f"The number of bootstrap replicates must be positive, not {bootstrap}.")
    root = resolve_data_dir(data_dir)
    sts_names = [t for t in names if t in STS_TASKS]
    transfer_names = [t for t in names if t in TRANSFER_TASKS]
    if bootstrap and not sts_names:
        raise SparseCSEError("Bootstrap intervals need at least one STS task; transfer accuracies are not resampled.")
    # Read every file before loading the model so bad data fails fast.
    sts_data = {t: load_sts_task(root, t, sts_split) for t in sts_names}
    transfer_data = {t: load_transfer_task(root, t) for t in transfer_names}
    if align_uniform is None:
        align_uniform = "STSBenchmark" in sts_names
    if align_uniform and "STSBenchmark" not in sts_data:
        sts_pairs_for_au = load_sts_task(root, "STSBenchmark", sts_split)[sts_split]
    else:
        sts_pairs_for_au = sts_data.get("STSBenchmark", {}).get(sts_split)

    if mask is not None and model is None:

        model = model_for_mask(mask)  # the mask's own model, never the default by accident
    encoder = model if is_encoder(model) else load_encoder(model, pooling=pooling, device=device)
    exported = not isinstance(encoder, SentenceEncoder)
    if exported and (mask is not None or (pooling or encoder.pooling) != encoder.pooling):
        raise SparseCSEError(f"{encoder.source} is an exported model, which only encodes with the pooling it was "
                             "exported with; masks and other poolings need the torch model directory.")
    results: dict[str, Any] = {
        "model": encoder.source if encoder.source else str(model),
        "mask": None,
        "pooling": pooling or encoder.pooling,
        "tasks": names,
        "scores": {},
    }
    with _gated(encoder, mask) as mask_info, _pooling(encoder, pooling):
        results["mask"] = mask_info
        table = EmbeddingTable(encoder, batch_size=batch_size, precision=precision, show_progress=show_progress)
        sts_sentences = [s for subsets in sts_data.values() for s in sentences_of(subsets)]
        table.add(sts_sentences, desc="STS sentences")
        if sts_data:
            scores, details = evaluate_sts(sts_data, table, sts_aggregation)
            pairs = {task: d.pop("pairs") for task, d in details.items()}
            results["scores"].update(scores)
            results["avg_sts"] = float(np.mean(list(scores.values())))
            results.setdefault("details", {}).update(details)
            results["data"] = sts_fingerprint(sts_data, sts_split, sts_aggregation)
            if bootstrap:
                results["bootstrap"] = score_intervals(
                    {t: p["similarity"] for t, p in pairs.items()}, task_pairs(pairs), bootstrap, bootstrap_seed,
                    sts_aggregation)
            if keep_pairs:
                results["pairs"] = pairs
        if align_uniform:
            au = alignment_uniformity(sts_pairs_for_au, table)
            results.update(alignment=au["alignment"], uniformity=au["uniformity"])
            results.setdefault("details", {})["align_uniform"] = {**au, "split": f"STSBenchmark {sts_split}"}
        if transfer_data:
            table.add([s for d in transfer_data.values() for s in transfer_sentences(d)], desc="transfer sentences")
            scores, details = evaluate_transfer(transfer_data, table, fasttest=fasttest, seed=seed,
                                                show_progress=show_progress, protocol=transfer_protocol)
            results["scores"].update(scores)
            results["avg_transfer"] = float(np.mean(list(scores.values())))
            results.setdefault("details", {}).update(details)
    results["scores"] = {t: results["scores"][t] for t in names}
    results["settings"] = {
        "sts_aggregation": sts_aggregation, "sts_split": sts_split, "fasttest": fasttest, "precision": precision,
        "transfer_protocol": transfer_protocol,
        "batch_size": batch_size, "seed": seed, "max_length": encoder.max_length, "data_dir": str(root),
        "device": str(encoder.device),
    }
    results["timing"] = {"encode_s": round(table.seconds, 3), "total_s": round(time.perf_counter() - start, 3),
                         "sentences_encoded": len(table)}
    return EvaluationResult(**results)


def sts_fingerprint(sts_data: dict, split: str, aggregation: str) -> dict[str, Any]:
    """What two evaluations must share for their per-pair similarities to be compared."""
    return {"tasks": list(sts_data), "pairs": {t: sum(map(len, s.values())) for t, s in sts_data.items()},
            "sha256": {t: data_digest(s) for t, s in sts_data.items()}, "split": split, "aggregation": aggregation}


def task_pairs(pairs: dict[str, dict]) -> dict[str, TaskPairs]:
    """{task: TaskPairs} from ``evaluate``'s (or a result file's) ``"pairs"``."""
    return {t: TaskPairs.of(p["gold"], list(p["subsets"].values())) for t, p in pairs.items()}


@contextlib.contextmanager
def _gated(encoder, mask):
    """Attach ``mask`` (a path or a Mask) as gates for the duration; yield a short description of it."""
    if mask is None:
        yield None
        return

    path = None
    if not isinstance(mask, Mask):
        path, mask = str(mask), Mask.load(mask)
    gates = mask.apply(encoder.model)
    try:
        yield {"path": path, "heads_pruned": mask.heads_pruned, "neurons_pruned": mask.neurons_pruned}
    finally:
        gates.detach()


@contextlib.contextmanager
def _pooling(encoder, pooling: str | None):
    """Use ``pooling`` on a caller's encoder for the evaluation only."""
    if pooling is None or pooling == encoder.pooling:
        yield
        return
    if pooling not in POOLINGS:
        raise SparseCSEError(f"Unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}.")
    previous, encoder.pooling = encoder.pooling, pooling
    try:
        yield
    finally:
        encoder.pooling = previous
