"""The card's serving table: one speed figure per shape. The final model and its input model are timed side by side
in one interleaved run, in a fresh process (nothing the run loaded or allocated before is in its way), at batch 1,
the target's batch and 128, on 1 thread and on all of the machine's cores (and on the target's threads, where they
are neither). Each row gives the speed-up (the median over rounds of the ratio of the two models' summed request
times, with its spread) and the p50 / p95 latency of one request of that batch for both models. The row the target
was judged by is marked and gets its speed-up from the target's own figure alone (:func:`rejudged`: each model
served alone, :mod:`sparsecse.targets.alone`), so the card holds one figure for that shape, timed once.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import numpy as np

from sparsecse.evaluation import speed
from sparsecse.targets import fresh
from sparsecse.targets.fresh import OnDisk
from sparsecse.targets.spec import DEFAULT_BATCH_SIZE, Shape, Target
from sparsecse.targets.timing import ROUNDS, Timing, round_figures, requests, thin

SERVING_BATCHES = (1, DEFAULT_BATCH_SIZE)  # with the target's batch
SERVING_REQUESTS = 32  # requests per round of a row off the target, picked evenly over the lengths
SERVING_SENTENCES = 512  # ... and at most this many sentences (a 1-thread row of 2,048 took a minute)


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity; else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def serving_grid(shape: Shape, cores: int) -> list[tuple[int, int]]:
    """(threads, batch) of every row: threads 1, ``cores`` and the shape's; batches 1, the shape's and 128."""
    threads = sorted({1, cores, shape.threads})
    batches = sorted({*SERVING_BATCHES, shape.batch_size})
    return [(t, b) for t in threads for b in batches]


def row_requests(batch: int) -> int:
    """Requests per round of a row off the target: ``SERVING_REQUESTS``, at most ``SERVING_SENTENCES`` sentences
    (at least one request)."""
    return max(1, min(SERVING_REQUESTS, SERVING_SENTENCES // batch))


def measure_grid(model, reference, sentences: list[str], grid: list[tuple[int, int]], judged: Shape,
                 rounds: int = ROUNDS) -> list[dict[str, Any]]:
    """The rows of the table for two encoders already on their engine (see the module docstring).

    Args:
        model: the final model.
        reference: the input model.
        sentences: the timed sentences, longest first.
        grid: (threads, batch) per row.
        judged: the serving shape the target was judged at: its row is marked and timed like the others for its
            latency and throughput, and gets no speed-up here (``None``): the target's own figure, timed with each
            model served alone, fills it (:func:`rejudged`), so that shape is timed for a speed-up once.
        rounds: interleaved rounds per row.

    Returns:
        The rows, each a dict of ``threads``, ``batch``, ``speedup``, ``spread``, ``p50_ms``, ``p95_ms``,
        ``input_p50_ms``, ``input_p95_ms``, ``throughput`` and ``input_throughput`` (sentences per second, the median
        round), ``requests``, ``judged``.
    """
    rows, at = [], (judged.threads, judged.batch_size)
    for threads, batch in grid:
        is_judged = (threads, batch) == at
        timed = thin(requests(sentences, Shape("latency-p50", batch, threads)), row_requests(batch))
        with speed.torch_threads(threads):
            seconds = speed.interleaved_rounds({"input": reference, "model": model}, timed, batch, rounds)
        figure = Shape("throughput", batch, threads)  # a summed-time ratio
        ratios = round_figures(seconds["input"], figure) / round_figures(seconds["model"], figure)
        median = float(np.median(ratios))
        q25, q75 = np.percentile(ratios, [25, 75])

        def ms(key: str, q: float) -> float:
            return round(float(np.median(np.percentile(seconds[key], q, axis=1))) * 1000, 3)

        count = sum(len(r) for r in timed)

        def per_second(key: str) -> float:
            return round(count / float(np.median(seconds[key].sum(axis=1))), 1)

        rows.append({"threads": threads, "batch": batch,
                     "speedup": None if is_judged else round(median, 4),
                     "spread": None if is_judged else round(float((q75 - q25) / median), 4),
                     "p50_ms": ms("model", 50), "p95_ms": ms("model", 95), "input_p50_ms": ms("input", 50),
                     "input_p95_ms": ms("input", 95), "throughput": per_second("model"),
                     "input_throughput": per_second("input"), "requests": len(timed), "judged": is_judged})
    return rows


def profile_grid(shape: Shape) -> list[tuple[int, int]]:
    """The rows :func:`profiles` reads, on the shape's threads only: batch 1 and the shape's batch (a card without
    the whole table)."""
    return [(shape.threads, b) for b in sorted({1, shape.batch_size})]


def serving_table(target: Target, shape: Shape, reference, model, sentences: list[str],
                  grid: list[tuple[int, int]] | None = None) -> dict[str, Any]:
    """The serving table of ``model`` against ``reference``, each thread count's rows timed in a new fresh process
    (:func:`sparsecse.targets.fresh.run`; an exported copy is loaded there with that many runtime threads).

    Args:
        target: the target the run aimed at (its engine).
        shape: the serving shape it was judged at (marked).
        reference: the input model as timings take it (:func:`~sparsecse.targets.engines.to_time`).
        model: the final model, likewise.
        sentences: the timed sentences (longest first).
        grid: (threads, batch) of the rows (None: :func:`serving_grid`'s; :func:`profile_grid` for the card's
            latency and throughput alone).

    Returns:
        ``rows`` (:func:`measure_grid`), ``engine``, ``metric`` (the one the target was judged by), ``cores``,
        ``rounds`` and ``method`` (in words).
    """
    cores = machine_cores()
    grid = grid or serving_grid(shape, cores)
    rows: list[dict[str, Any]] = []
    for threads in dict.fromkeys(t for t, _ in grid):
        placed = {k: replace(m, threads=threads) if isinstance(m, OnDisk) else m
                  for k, m in (("model", model), ("input", reference))}
        rows += fresh.run(_grid, placed, sentences, [(t, b) for t, b in grid if t == threads], shape)
    served = "" if shape.loader == "sparsecse" else f" via {shape.loader}"
    return {"rows": rows, "engine": target.engine, "metric": shape.metric, "cores": cores, "rounds": ROUNDS,
            "method": (f"The model and its input timed side by side in one interleaved run ({ROUNDS} rounds, the "
                       f"models taking turns every few requests) in a fresh process on {len(sentences):,} "
                       f"sentences, {target.engine}{served}; speed-up: the median over rounds of the ratio of "
                       "their summed request times, ± the spread of the rounds, except in the judged row, which is "
                       f"the target's own figure ({shape.metric}, every request of the target, each model served "
                       "alone in its own fresh processes, as a server runs one model); each row times at most "
                       f"{SERVING_REQUESTS} requests and {SERVING_SENTENCES} sentences picked evenly over the "
                       "lengths; latency: one request of the batch")}


def _grid(encoders: dict, sentences: list[str], grid: list[tuple[int, int]], judged: Shape) -> list[dict]:
    return measure_grid(encoders["model"], encoders["input"], sentences, grid, judged)


def rejudged(table: dict[str, Any], timing: Timing, method: str = "") -> None:
    """Replace the judged row's speed-up and spread by ``timing`` (the target's own figure, in place; ``method``:
    how it was timed, in words): the table and the target keep one figure for that shape."""
    row = next(r for r in table["rows"] if r["judged"])
    row.update(speedup=round(timing.speedup, 4), spread=round(timing.spread, 4), ratios=list(timing.ratios),
               timed_again=True, interval=timing.facts(), **({"method": method} if method else {}))


def profiles(table: dict[str, Any], shape: Shape) -> tuple[dict[str, float], dict[str, float]]:
    """The model's and the input's single-sentence latency (p50 / p95, ms) and throughput at the shape's batch
    (sentences/s, the median round), read from the serving table's rows on the shape's threads (every speed figure
    of a card is timed by :func:`measure_grid`'s interleaved rounds)."""
    rows = {(r["threads"], r["batch"]): r for r in table["rows"]}
    one, batch = rows[(shape.threads, 1)], rows[(shape.threads, shape.batch_size)]
    return tuple({"latency_ms_p50": one[f"{who}p50_ms"], "latency_ms_p95": one[f"{who}p95_ms"],
                  "throughput": batch[f"{who}throughput"], "latency_sentences": one["requests"]}
                 for who in ("", "input_"))
