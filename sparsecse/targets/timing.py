"""Speed as a target measures it: a candidate against the input model on the same engine, batch size and
sentences, interleaved batch by batch (:func:`sparsecse.evaluation.speed.interleaved_best_times`); and the
single-sentence latency and the throughput a model card states."""

from __future__ import annotations

import time

import numpy as np

from sparsecse.evaluation.speed import interleaved_best_times, unique_by_length

TIMING_SENTENCES = 2048  # distinct dev sentences timed per probe (longest-first order, evenly thinned)
LATENCY_SENTENCES = 200  # single sentences timed for p50 / p95


def timing_sentences(sentences: list[str], tokenizer, max_length: int, limit: int = TIMING_SENTENCES) -> list[str]:
    """The distinct ``sentences`` longest first (the order encode() batches them in), thinned evenly to at most
    ``limit`` so every length stays represented."""
    distinct = list(dict.fromkeys(sentences))
    ids = tokenizer(distinct, truncation=True, max_length=max_length)["input_ids"]
    ordered = unique_by_length(distinct, {s: len(i) for s, i in zip(distinct, ids)})
    if len(ordered) <= limit:
        return ordered
    keep = np.linspace(0, len(ordered) - 1, limit).round().astype(int)
    return [ordered[i] for i in sorted(set(keep.tolist()))]


def speedup_over(reference, candidates: dict, sentences: list[str], batch_size: int, repeats: int = 3,
                 show_progress: bool = False) -> dict[str, float]:
    """{name: speed-up over ``reference``} for each encoder of ``candidates``, all timed in one interleaved run
    (each model's time: the sum over batches of its best of ``repeats``)."""
    models = {"__reference__": reference, **candidates}
    wall, _ = interleaved_best_times(models, sentences, batch_size, repeats, show_progress)
    total = {key: float(sum(times)) for key, times in wall.items()}
    return {key: total["__reference__"] / total[key] for key in candidates}


def latency_profile(encoder, sentences: list[str], batch_size: int, count: int = LATENCY_SENTENCES,
                    repeats: int = 3) -> dict[str, float]:
    """Single-sentence latency (p50 and p95 over ``count`` sentences, each the best of ``repeats``, in ms) and the
    throughput at ``batch_size`` (sentences per second over all ``sentences``, best of ``repeats``)."""
    picked = sentences[:: max(1, len(sentences) // count)][:count]
    encoder.encode(picked[:2], batch_size=1)  # warm-up
    latencies = []
    for sentence in picked:
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            encoder.encode([sentence], batch_size=1)
            best = min(best, time.perf_counter() - start)
        latencies.append(best * 1000)
    best_total = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        encoder.encode(sentences, batch_size=batch_size)
        best_total = min(best_total, time.perf_counter() - start)
    return {"latency_ms_p50": float(np.percentile(latencies, 50)), "latency_ms_p95": float(np.percentile(latencies, 95)),
            "throughput": len(sentences) / best_total, "latency_sentences": len(picked)}
