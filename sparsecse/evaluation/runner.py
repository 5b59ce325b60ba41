"""``evaluate``: a model (optionally gated by a mask) on the STS and transfer suites in one call."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import numpy as np

from sparsecse.data.paths import resolve_data_dir
from sparsecse.serving.loading import load_encoder
from sparsecse.serving.runtime import is_encoder
from sparsecse.modeling.encoder import POOLINGS, SentenceEncoder, resolve_precision
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.align_uniform import alignment_uniformity
from sparsecse.evaluation.embedding import EmbeddingTable
from sparsecse.evaluation.eval_sets import load_eval_sets
from sparsecse.evaluation.result import EvaluationResult
from sparsecse.evaluation.config import EvaluationConfig
from sparsecse.stage_config import stage_config
from sparsecse.evaluation.bootstrap import LEVEL, TaskPairs, score_intervals
from sparsecse.evaluation.transfer_intervals import TEST_SET_TASKS
from sparsecse.evaluation.sts import data_digest, evaluate_sts, load_sts_task, sentences_of
from sparsecse.evaluation.tasks import STS_TASKS, TRANSFER_TASKS, resolve_tasks
from sparsecse.evaluation.transfer import evaluate_transfer, load_transfer_task, transfer_sentences
from sparsecse.artifacts.remote_code import with_trust_option
from sparsecse.pruning.masks import Mask
from sparsecse.pruning.masks import model_for_mask


@with_trust_option
def evaluate(model=None, mask=None, config: EvaluationConfig | None = None) -> EvaluationResult:
    """Evaluate ``model`` (None = the embedded default, a name/directory, or a SentenceEncoder).

    ``config`` (an :class:`~sparsecse.evaluation.config.EvaluationConfig`; None: its defaults) says which
    tasks and how (``evaluate(model, config=EvaluationConfig(tasks="sts", bootstrap=1000))``). ``mask``
    (None, a mask file or a :class:`~sparsecse.pruning.masks.Mask`) is attached as 0/1 gates for the evaluation
    and detached afterwards. Returns an
    :class:`~sparsecse.evaluation.result.EvaluationResult` (``scores``: {task: Spearman or accuracy x 100},
    ``avg_sts``, ``avg_transfer``, ``alignment``, ``uniformity``, ``details``, ``settings``, ``timing``, ...;
    it also reads like that dictionary); the averages cover the tasks that ran. Alignment/uniformity
    (STS-B ``sts_split``) are computed when asked, or by default whenever STS-B ran (its embeddings are
    then already at hand).

    With STS tasks, ``"data"`` fingerprints the pairs scored (:func:`~sparsecse.evaluation.runner.sts_fingerprint`).
    ``bootstrap`` replicates (> 0) add ``"bootstrap"``: a percentile interval per STS task and for their
    average, by resampling pairs with ``bootstrap_seed`` (:mod:`sparsecse.evaluation.bootstrap`).
    ``keep_pairs`` keeps ``"pairs"``: per STS task the per-pair similarities, gold scores and subset sizes.
    ``dev``/``test`` (a pairs file or a task name) add ``"eval_sets"``: {"dev"/"test":
    :meth:`~sparsecse.evaluation.eval_sets.EvalSet.evaluate`'s figures}, their per-item values kept with
    ``keep_pairs``.

    Example::

        evaluate("all-MiniLM-L6-v2", config=EvaluationConfig(tasks="STSBenchmark", sts_split="dev"))["avg_sts"]
    """
    start = time.perf_counter()
    c = stage_config(EvaluationConfig, config, "evaluate()'s config").check()
    names = resolve_tasks(c.tasks)
    precision = resolve_precision(c.precision, c.device)  # "auto" is recorded as what it chose
    root = resolve_data_dir(c.data_dir)
    sts_names = [t for t in names if t in STS_TASKS]
    transfer_names = [t for t in names if t in TRANSFER_TASKS]
    if c.bootstrap and not sts_names and not set(transfer_names) & set(TEST_SET_TASKS):
        raise SparseCSEError(f"--bootstrap sets the intervals of the STS tasks and of {', '.join(TEST_SET_TASKS)} "
                             f"(test items resampled); {', '.join(transfer_names)} report the spread of their "
                             "folds instead, so there is nothing to resample.")
    # Read every file before loading the model so bad data fails fast.
    sts_data = {t: load_sts_task(root, t, c.sts_split) for t in sts_names}
    transfer_data = {t: load_transfer_task(root, t) for t in transfer_names}
    eval_sets = load_eval_sets(c.dev, c.test, root)
    align_uniform = "STSBenchmark" in sts_names if c.align_uniform is None else c.align_uniform
    if align_uniform and "STSBenchmark" not in sts_data:
        sts_pairs_for_au = load_sts_task(root, "STSBenchmark", c.sts_split)[c.sts_split]
    else:
        sts_pairs_for_au = sts_data.get("STSBenchmark", {}).get(c.sts_split)

    if mask is not None and model is None:
        model = model_for_mask(mask)  # the mask's own model, never the default by accident
    encoder = model if is_encoder(model) else load_encoder(model, pooling=c.pooling, device=c.device)
    exported = not isinstance(encoder, SentenceEncoder)
    if exported and (mask is not None or (c.pooling or encoder.pooling) != encoder.pooling):
        raise SparseCSEError(f"{encoder.source} is an exported model, which only encodes with the pooling it was "
                             "exported with; masks and other poolings need the torch model directory.")
    if mask is not None and not is_encoder(model):
        model_for_mask(mask, model)  # a mask that records no model: says on stderr it is taken to fit ``model``
    results: dict[str, Any] = {
        "model": encoder.source if encoder.source else str(model),
        "mask": None,
        "pooling": c.pooling or encoder.pooling,
        "tasks": names,
        "scores": {},
    }
    with _gated(encoder, mask) as mask_info, _pooling(encoder, c.pooling):
        results["mask"] = mask_info
        table = EmbeddingTable(encoder, batch_size=c.batch_size, precision=precision, show_progress=c.show_progress)
        sts_sentences = [s for subsets in sts_data.values() for s in sentences_of(subsets)]
        table.add(sts_sentences, desc="STS sentences")
        if sts_data:
            scores, details = evaluate_sts(sts_data, table, c.sts_aggregation)
            pairs = {task: d.pop("pairs") for task, d in details.items()}
            results["scores"].update(scores)
            results["avg_sts"] = float(np.mean(list(scores.values())))
            results.setdefault("details", {}).update(details)
            results["data"] = sts_fingerprint(sts_data, c.sts_split, c.sts_aggregation)
            if c.bootstrap:
                results["bootstrap"] = score_intervals(
                    {t: p["similarity"] for t, p in pairs.items()}, task_pairs(pairs), c.bootstrap, c.bootstrap_seed,
                    c.sts_aggregation)
            if c.keep_pairs:
                results["pairs"] = pairs
        if align_uniform:
            au = alignment_uniformity(sts_pairs_for_au, table)
            results.update(alignment=au["alignment"], uniformity=au["uniformity"])
            results.setdefault("details", {})["align_uniform"] = {**au, "split": f"STSBenchmark {c.sts_split}"}
        if transfer_data:
            table.add([s for d in transfer_data.values() for s in transfer_sentences(d)], desc="transfer sentences")
            scores, details = evaluate_transfer(transfer_data, table, fasttest=c.fasttest, seed=c.seed,
                                                show_progress=c.show_progress, protocol=c.transfer_protocol,
                                                replicates=c.bootstrap or 1000,
                                                bootstrap_seed=c.bootstrap_seed if c.bootstrap else None)
            if c.bootstrap:  # --bootstrap sets every interval: the test-set tasks' are listed with the STS ones
                boot = results.setdefault("bootstrap", {"replicates": c.bootstrap, "seed": c.bootstrap_seed,
                                                        "level": LEVEL, "tasks": {}})
                boot["tasks"].update({t: d["ci"] for t, d in details.items() if "ci" in d})
                boot["transfer_method"] = "percentile, test items resampled (SST2, TREC, MRPC)"
            results["scores"].update(scores)
            results["avg_transfer"] = float(np.mean(list(scores.values())))
            results.setdefault("details", {}).update(details)
        if eval_sets:  # the user's dev/test sets: intervals as the test-set tasks' (1000 replicates by default)
            table.add([s for es in eval_sets.values() for s in es.sentences], desc="dev/test sentences")
            results["eval_sets"] = {role: es.evaluate_embed(table, c.bootstrap or 1000, c.bootstrap_seed)
                                    for role, es in eval_sets.items()}
            if not c.keep_pairs:
                for figures in results["eval_sets"].values():
                    figures.pop("items")
    results["scores"] = {t: results["scores"][t] for t in names}
    results["settings"] = {
        "sts_aggregation": c.sts_aggregation, "sts_split": c.sts_split, "fasttest": c.fasttest, "precision": precision,
        "transfer_protocol": c.transfer_protocol,
        "batch_size": c.batch_size, "seed": c.seed, "max_length": encoder.max_length, "data_dir": str(root),
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
