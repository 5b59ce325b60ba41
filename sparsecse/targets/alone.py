"""Speed served alone: each model timed in its own fresh process, as a server runs one model.

Timed request by request in one process, models evict each other's weights from the caches between requests and a
small model is understated most (one pruned all-MiniLM-L6-v2 ran 1.63x its input that way and 1.92x with each
model served alone). A target's final figure is therefore timed here: the reference and each candidate in
processes of their own (:func:`sparsecse.targets.fresh.run`, one model loaded in each), the processes alternating
over the rounds, the order rotating, so a drift of the machine falls on both alike; round r's ratio pairs the
reference's r-th pass with the candidate's, which ran next to it in time.
"""

from __future__ import annotations

import math

import numpy as np

from sparsecse.evaluation import speed
from sparsecse.targets import fresh
from sparsecse.targets.spec import Shape, Target
from sparsecse.targets.statistics import MAX_ROUNDS, TooNoisy
from sparsecse.targets.timing import REFERENCE, Timing, requests, round_figures, sized_rounds, timings

ALONE = "served alone, each model in its own fresh process (the processes alternating over the rounds)"
PROCESSES = 3  # processes per model; each times its share of the rounds after one warm-up request


def passes(encoders: dict, timed: list[list[str]], batch_size: int, count: int, threads: int | None) -> np.ndarray:
    """The seconds of every request over ``count`` passes (count x requests) of the one encoder in ``encoders``
    on ``threads`` torch threads, after one warm-up request (where :func:`~sparsecse.targets.fresh.run` runs it:
    a fresh process of its own)."""
    (encoder,) = encoders.values()
    with speed.torch_threads(threads):
        speed.clock(encoder, timed[0], batch_size)
        return np.array([[speed.clock(encoder, request, batch_size) for request in timed] for _ in range(count)])


def measure_alone(reference, candidates: dict, sentences: list[str], shape: Shape, rounds: int,
                  processes: int = PROCESSES) -> dict[str, Timing]:
    """{name: :class:`~sparsecse.targets.timing.Timing`} of each of ``candidates`` against ``reference``, each model
    served alone (see the module docstring).

    Args:
        reference: the input model on the engine (an :class:`~sparsecse.targets.fresh.OnDisk` or an encoder).
        candidates: name to model on the same engine.
        sentences: the timed sentences, longest first.
        shape: the serving shape.
        rounds: the rounds (each model's passes over the shape's requests).
        processes: processes per model the rounds are shared over.

    Returns:
        The timing of every candidate (the median over rounds of the per-round ratio of the shape's figure).
    """
    models = {REFERENCE: reference, **candidates}
    timed = requests(sentences, shape)
    processes = max(1, min(processes, rounds))
    share = math.ceil(rounds / processes)
    order = list(models)
    seconds: dict[str, list[np.ndarray]] = {key: [] for key in order}
    for p in range(processes):
        shift = p % len(order)
        count = min(share, rounds - p * share)
        if count <= 0:
            break
        for key in order[shift:] + order[:shift]:
            seconds[key].append(fresh.run(passes, {key: models[key]}, timed, shape.batch_size, count, shape.threads))
    return timings({key: round_figures(np.concatenate(parts), shape) for key, parts in seconds.items()},
                   candidates, timed, shape)


def rounds_at(reference, sentences: list[str], shape: Shape, target: Target) -> tuple[Timing | None, int, str | None]:
    """(the A/A timing, the rounds, None) that :func:`~sparsecse.targets.timing.sized_rounds` gives; on a machine
    too noisy for the target's margin, (None, ``MAX_ROUNDS``, the sentence saying so): a model already made is
    timed all the same, as precisely as the machine allows."""
    try:
        aa, rounds = sized_rounds(reference, sentences, shape, target)
        return aa, rounds, None
    except TooNoisy as exc:
        return None, MAX_ROUNDS, str(exc)


def served_alone(reference, candidates: dict, sentences: list[str], shape: Shape, target: Target) -> dict[str, Timing]:
    """:func:`measure_alone` over the rounds the machine's noise at ``shape`` needs (:func:`rounds_at`)."""
    _, rounds, _ = rounds_at(reference, sentences, shape, target)
    return measure_alone(reference, candidates, sentences, shape, rounds)
