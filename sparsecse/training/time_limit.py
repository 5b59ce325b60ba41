"""A training run that must end by a wall-clock deadline: how many steps fit, so that the schedule can end there.

A run with a time limit (``compress --minutes``) cannot know how many optimisation steps a machine gives it until it
has run some: a distillation step of all-MiniLM-L6-v2 cut to three layers runs about 2.3 times slower on a 2-core
AVX2-only CPU than on an AVX-512 one. The training loop (:class:`~sparsecse.training.loop.Trainer`) times its first
``FIT_AFTER_STEPS`` steps and a dev evaluation after them, then ends at the most steps whose training,
evaluations and the run's work after the loop (``tail_evaluations`` dev evaluations' worth) end by the deadline,
and decays the learning rate to 0 at that step: a shorter run is a whole schedule, not a long one cut off. It fits
again after every evaluation, with the step and evaluation times measured so far (a busier machine shortens it; it
never grows past the steps asked for).

    >>> steps_that_fit(step=10, max_steps=1000, eval_steps=250, step_seconds=1.0, eval_seconds=10.0, seconds_left=600)
    580
"""

from __future__ import annotations

import time

FIT_AFTER_STEPS = 10  # steps timed (then one evaluation) before the first fit
clock = time.time  # wall-clock seconds (a deadline is a time of day: it holds across processes and resumed runs)


def evaluations_between(start: int, end: int, eval_steps: int) -> int:
    """The dev evaluations a loop runs after step ``start`` up to step ``end``: every ``eval_steps``-th step, and
    ``end`` itself where it is not one of them (0 with ``eval_steps`` 0: no evaluation).

    >>> evaluations_between(10, 500, 250), evaluations_between(10, 580, 250), evaluations_between(500, 500, 250)
    (2, 3, 0)
    """
    if not eval_steps or end <= start:
        return 0
    return end // eval_steps - start // eval_steps + (1 if end % eval_steps else 0)


def steps_that_fit(step: int, max_steps: int, eval_steps: int, step_seconds: float, eval_seconds: float,
                   seconds_left: float) -> int:
    """The last step of a loop at ``step`` that ends within ``seconds_left``: the largest ``n`` in ``[step,
    max_steps]`` whose ``n - step`` steps of ``step_seconds`` and evaluations of ``eval_seconds``
    (:func:`evaluations_between`) take at most ``seconds_left``; ``step`` itself where not one more step fits.

    Args:
        step: the steps run so far.
        max_steps: the most steps the run was asked for.
        eval_steps: steps between evaluations (0: none).
        step_seconds: the time of one optimisation step, measured.
        eval_seconds: the time of one evaluation, measured.
        seconds_left: the time to the deadline, less the work after the loop.

    Returns:
        The step to end at.
    """
    def cost(n: int) -> float:
        return (n - step) * step_seconds + evaluations_between(step, n, eval_steps) * eval_seconds

    low, high = step, max(step, max_steps)
    if cost(high) <= seconds_left:
        return high
    while high - low > 1:  # cost(low) fits (it is 0 at low == step) and cost(high) does not
        middle = (low + high) // 2
        low, high = (middle, high) if cost(middle) <= seconds_left else (low, middle)
    return low
