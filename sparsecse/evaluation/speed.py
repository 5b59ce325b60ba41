"""Encode speed measured side by side: models take turns on the same batches in one process.

Speed figures from different runs or machines are not comparable, so sparsecse only reports ratios
measured in one run. Every model encodes every batch-sized chunk of the sentences ``repeats`` times, the models
taking turns pass by pass in rotating order, and a model's time is the sum over chunks of its best time per chunk:
background load hits every model alike, and the per-chunk minimum discards the chunks it disturbed.
:func:`interleaved_rounds` keeps every round's times instead, so a target's timing
(:mod:`sparsecse.targets.timing`) can give each figure its spread over the rounds; it reads the clock through
:func:`clock`.

    >>> times = interleaved_best_times({"dense": dense, "small": small}, sentences, 128, 3)  # doctest: +SKIP
    >>> sum(times[0]["dense"]) / sum(times[0]["small"])  # the small model's speed-up  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import sys
import time

import numpy as np

from sparsecse.data.sts import read_sts_benchmark


def time_encode(encoder, sentences, batch_size: int) -> tuple[float, float, np.ndarray]:
    """(wall seconds, process CPU seconds, embeddings); CPU time is less disturbed by other jobs."""
    wall, cpu = time.perf_counter(), time.process_time()
    emb = encoder.encode(sentences, batch_size=batch_size)
    return time.perf_counter() - wall, time.process_time() - cpu, emb


def unique_by_length(sentences, lengths_by_sentence: dict) -> list[str]:
    """Distinct sentences, longest first: the order encode() batches them in."""
    return sorted(dict.fromkeys(sentences), key=lambda x: -lengths_by_sentence[x])


def stsb_test_sentences(data_dir, encoder) -> tuple[list[str], dict[str, int]]:
    """The distinct STS-B test sentences longest first, and their token counts under ``encoder``."""
    pairs = read_sts_benchmark(data_dir, "test")
    distinct = list(dict.fromkeys([p.s1 for p in pairs] + [p.s2 for p in pairs]))
    ids = encoder.tokenizer(distinct, truncation=True, max_length=encoder.max_length)["input_ids"]
    lengths = {s: len(i) for s, i in zip(distinct, ids)}
    return unique_by_length(distinct, lengths), lengths


def interleaved_best_times(models: dict, unique: list[str], batch_size: int, repeats: int,
                           show_progress: bool = True):
    """Per model, per batch-sized chunk of ``unique``: the best wall and process-CPU seconds of ``repeats``
    (two dicts of lists; see the module's docstring)."""
    from tqdm.auto import tqdm

    chunks = [unique[i:i + batch_size] for i in range(0, len(unique), batch_size)]
    order = list(models)
    for key in order:  # warm-up (allocator, thread pool)
        models[key].encode(chunks[0], batch_size=batch_size)
    best_wall = {key: [float("inf")] * len(chunks) for key in order}
    best_cpu = {key: [float("inf")] * len(chunks) for key in order}
    bar = tqdm(total=repeats * len(chunks) * len(order), desc="timing", unit="batch", file=sys.stderr,
               disable=not show_progress)
    for r in range(repeats):  # each model encodes every chunk in its turn
        shift = r % len(order)
        for key in order[shift:] + order[:shift]:
            for c, chunk in enumerate(chunks):
                wall, cpu, _ = time_encode(models[key], chunk, batch_size)
                best_wall[key][c] = min(best_wall[key][c], wall)
                best_cpu[key][c] = min(best_cpu[key][c], cpu)
                bar.update()
    bar.close()
    return best_wall, best_cpu


def speedups(models: dict, reference: str, data_dir=None, batch_size: int = 128, repeats: int = 3,
             show_progress: bool = True) -> dict[str, dict[str, float]]:
    """{label: {"seconds", "speedup"}}: each model's best-of-``repeats`` time to encode the distinct STS-B
    test sentences, and ``reference``'s time divided by it (measured side by side, interleaved)."""
    unique, _ = stsb_test_sentences(data_dir, models[reference])
    wall, _ = interleaved_best_times(models, unique, batch_size, repeats, show_progress)
    total = {key: float(sum(times)) for key, times in wall.items()}
    return {key: {"seconds": round(t, 4), "speedup": round(total[reference] / t, 4)} for key, t in total.items()}


def clock(encoder, sentences: list[str], batch_size: int) -> float:
    """Wall seconds ``encoder`` takes to embed ``sentences`` at ``batch_size`` (the encoder waits for its device:
    its embeddings come back to the host). Timings call it through this module, so a test can replace it."""
    start = time.perf_counter()
    encoder.encode(sentences, batch_size=batch_size)
    return time.perf_counter() - start


@contextlib.contextmanager
def torch_threads(threads: int | None):
    """torch's intra-op threads set to ``threads`` inside the block (None: left as they are), restored after."""
    import torch

    before = torch.get_num_threads()
    if threads is not None and threads != before:
        torch.set_num_threads(int(threads))
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


TURN_SENTENCES = 5  # sentences a model encodes in its turn before the next model takes over (one batch at least)


def turn_requests(batch_size: int) -> int:
    """The requests of ``batch_size`` sentences one turn of :func:`interleaved_rounds` holds: ``TURN_SENTENCES``
    sentences' worth, at least one request."""
    return max(1, TURN_SENTENCES // max(1, int(batch_size)))


def turns(count: int, turn: int, models: list, round_index: int):
    """The turns of round ``round_index`` over ``count`` requests: (model, request indices) in the order they run,
    ``turn`` requests a turn, the models' order rotating from turn to turn and from round to round (for two models
    A B, B A, A B, ...: a steady drift of the machine falls on both alike)."""
    for j, start in enumerate(range(0, count, turn)):
        shift = (round_index + j) % len(models)
        for key in models[shift:] + models[:shift]:
            yield key, range(start, min(count, start + turn))


def interleaved_rounds(models: dict, requests: list[list[str]], batch_size: int, rounds: int,
                       show_progress: bool = False, turn: int | None = None) -> dict[str, np.ndarray]:
    """{model: seconds, an array rounds x requests}: in every round each model embeds every request, the models
    taking turns every ``turn`` requests (None: :func:`turn_requests`), in an order that rotates (:func:`turns`),
    one warm-up request each first. Short turns keep both models' figures of a round from the same few hundred
    milliseconds: a shared 2-core machine's speed drifted by up to ±15% over tens of seconds at batch 1, while the
    ratio of two models timed in turns of 5 requests stayed within about ±2% from round to round, and at the same
    ratio as in turns of 20.

    Args:
        models: name to encoder.
        requests: the sentence lists timed, each one call of ``encode``.
        batch_size: the encode batch size.
        rounds: how many times every request is timed per model.
        show_progress: a progress bar on stderr.
        turn: requests per turn.

    Returns:
        The seconds of every (round, request) per model.
    """
    from tqdm.auto import tqdm

    order = list(models)
    for key in order:
        clock(models[key], requests[0], batch_size)
    seconds = {key: np.zeros((rounds, len(requests))) for key in order}
    turn = turn or turn_requests(batch_size)
    with tqdm(total=rounds * len(requests) * len(order), desc="timing", unit="request", file=sys.stderr,
              disable=not show_progress) as bar:
        for r in range(rounds):
            for key, indices in turns(len(requests), turn, order, r):
                for c in indices:
                    seconds[key][r, c] = clock(models[key], requests[c], batch_size)
                    bar.update()
    return seconds
