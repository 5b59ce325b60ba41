"""Speed served alone: each model timed in a fresh process of its own, as a server runs one model.

Timed request by request in one process, two models share one thread pool and evict each other's weights from the
caches between requests; a server holds one model. A target's final figure is therefore timed here: the reference
and each candidate are each loaded in a process of their own (:func:`sparsecse.targets.fresh.serving`), kept for
the whole timing, and the processes take turns every ``ALONE_TURN`` sentences' worth of requests, the order
rotating (:func:`sparsecse.evaluation.speed.turns`), each turn after one untimed warm-up request. So both models of
a round are timed within the same second or two: a machine whose speed drifts over tens of seconds (a shared
2-core one drifted by up to ±15% at batch 1) moves both alike, where timing one model's process after the
other's left that drift in every ratio.
"""

from __future__ import annotations

import numpy as np

from sparsecse.evaluation import speed
from sparsecse.targets import fresh
from sparsecse.targets.spec import Shape, Target
from sparsecse.targets.statistics import MAX_ROUNDS, TooNoisy
from sparsecse.targets.timing import REFERENCE, Timing, requests, round_figures, sized_rounds, timings

ALONE = ("served alone, each model in its own fresh process (the processes taking turns every few requests, the "
         "order rotating)")
ALONE_TURN = 10  # sentences' worth of requests a process times in its turn (one request at least)


def measure_alone(reference, candidates: dict, sentences: list[str], shape: Shape, rounds: int,
                  turn: int | None = None) -> dict[str, Timing]:
    """{name: :class:`~sparsecse.targets.timing.Timing`} of each of ``candidates`` against ``reference``, each model
    served alone (see the module docstring).

    Args:
        reference: the input model on the engine (an :class:`~sparsecse.targets.fresh.OnDisk` or an encoder).
        candidates: name to model on the same engine.
        sentences: the timed sentences, longest first.
        shape: the serving shape.
        rounds: the rounds (each model's passes over the shape's requests).
        turn: requests per turn (None: ``ALONE_TURN`` sentences' worth).

    Returns:
        The timing of every candidate (the median over rounds of the per-round ratio of the shape's figure).
    """
    models = {REFERENCE: reference, **candidates}
    timed = requests(sentences, shape)
    turn = turn or max(1, ALONE_TURN // shape.batch_size)
    order = list(models)
    seconds = {key: np.zeros((rounds, len(timed))) for key in order}
    with fresh.serving(models, timed, shape.batch_size, shape.threads) as servers:
        for r in range(rounds):
            for key, indices in speed.turns(len(timed), turn, order, r):
                seconds[key][r, list(indices)] = servers.time(key, indices)
    return timings({key: round_figures(s, shape) for key, s in seconds.items()}, candidates, timed, shape)


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
