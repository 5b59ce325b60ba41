"""Encode speed measured side by side: models take turns on the same requests in one process.

Speed figures from different runs or machines are not comparable, so sparsecse only reports ratios measured in
one run. :func:`interleaved_rounds` times every request of every model in rounds, the models taking turns every
few requests in rotating order, and keeps every round's times, so a timing (:mod:`sparsecse.targets.timing`, the
one method behind every speed figure: targets, cards and benchmarks) gives each figure the median of the rounds'
ratios and its interval; it reads the clock through :func:`clock`.

    >>> seconds = interleaved_rounds({"dense": dense, "small": small}, requests, 128, 5)  # doctest: +SKIP
    >>> seconds["dense"].sum(axis=1) / seconds["small"].sum(axis=1)  # each round's speed-up  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import sys
import time

import numpy as np


def unique_by_length(sentences, lengths_by_sentence: dict) -> list[str]:
    """Distinct sentences, longest first: the order encode() batches them in."""
    return sorted(dict.fromkeys(sentences), key=lambda x: -lengths_by_sentence[x])


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
