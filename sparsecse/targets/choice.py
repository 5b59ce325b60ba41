"""How a speed search chooses among its probes, and how it makes sure of the choice before any training starts.

- **By the fitted speed model, not the luckiest probe.** :func:`fitted_choice` fits time against kept FLOPs through
  every probe of one depth (:class:`~sparsecse.targets.statistics.SpeedModel`, each probe weighted by its precision)
  and takes the fitted line's budget at the aim (no larger than a probe that fell short of the aim, nor far below
  the smallest that reached it); a probe within ``RESOLUTION`` of it stands for it, else that budget is probed. A probe that ran lucky (its own figure above the line) therefore does not pull the budget up.
- **Confirmed by a fresh, independent timing.** :func:`confirm` times the chosen candidate again (a new process, new
  rounds); a winner chosen untimed (a depth finalist, on its dev score) is confirmed by its first timing, which the
  choice did not see. A confirmation whose median falls short of the midway point between the target and the aim
  (``target x (1 + margin / 2)``) while its interval still covers that point is a miss the noise may explain: the
  candidate is timed once more and the two timings' rounds pooled. A figure at or above the midway point passes,
  however narrow its interval (a precise 2.05x for a 2x target is over it by more than its noise). Where the
  confirmation misses (its median, pooled or not, short of the midway point), the confirmation joins the fit, the
  budget steps down to the refitted line's (at least ``STEP`` down), and the new candidate is confirmed in its turn
  (``CONFIRMATIONS`` steps at most).
- **Stepped up when the confirmation is over the aim by more than its noise** (:func:`stepped_up`): the noise
  takes width away as readily as it gives it, so a first confirmation whose whole interval clears the aim joins
  the fit, and the budget steps up to the refitted line's (``STEP_UP`` at least, ``3 x STEP`` at most, and
  ``STEP`` under a probe of that depth whose whole interval fell short of the aim). The wider candidate's first
  timing (its budget chosen by the line, not by that timing) confirms it as any confirmation does; where it misses
  the bar, the candidate already confirmed is kept, so a step up costs one probe and never the target.
- **Order contradictions** (:func:`contradictions`): a smaller candidate measured slower than a larger one beyond
  both spreads is timed again before anything is chosen.
- **A quality target** (:func:`quality_search`): bisection over the budget for the smallest one within the dev bound.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Callable

from sparsecse.errors import SparseCSEError
from sparsecse.targets.candidates import TABLE, Candidate
from sparsecse.targets.depth import overall_keep_flops
from sparsecse.targets.spec import Target
from sparsecse.targets.statistics import SpeedModel
from sparsecse.targets.timing import Timing

ORDER_TOLERANCE = 0.02  # a smaller budget may run this much slower than a larger one (beyond spreads) as noise
RESOLUTION = 0.005  # a probe this close to the fitted budget stands for it
LARGEST_BUDGET = 0.98  # no search plans a budget above it
STEP = 0.04  # a confirmation that misses steps the budget down by at least this fraction
CONFIRMATIONS = 2  # steps down after a missed confirmation, at most
STEP_UP = 0.02  # a confirmation over the aim steps the budget up only where the line gives at least this fraction more
BISECTION_RESOLUTION = 0.02  # the quality search stops when the passing and failing budgets are this close


class TargetOutOfReach(SparseCSEError):
    """No candidate meets the target; the candidates table stays for inspection."""


def contradictions(candidates: list[Candidate], layers: int) -> list[tuple[Candidate, Candidate]]:
    """Pairs (smaller, larger) where the smaller one measured slower than the larger one by more than
    ``ORDER_TOLERANCE`` plus both spreads: an order that contradicts their size. Sizes are the kept fractions of
    all the input model's ``layers`` layers' FLOPs (:func:`~sparsecse.targets.depth.overall_keep_flops`); one is
    smaller than another only where it also removes at least as many whole layers (a removed layer takes its
    fixed cost with it, so fewer layers at more FLOPs may rightly run faster)."""
    size = {id(c): overall_keep_flops(c.keep_flops, c.layers_removed, layers) for c in candidates}
    ordered = sorted(candidates, key=lambda c: size[id(c)])
    return [(a, b) for i, a in enumerate(ordered) for b in ordered[i + 1:]
            if size[id(b)] > size[id(a)] and a.layers_removed >= b.layers_removed
            and a.speedup < b.speedup * (1 - ORDER_TOLERANCE - a.spread - b.spread)]


def speed_model(candidates: list[Candidate], anchored: bool) -> SpeedModel | None:
    """The speed model through ``candidates`` (one depth's probes; a confirmed one counts its confirmation too,
    as one more point at its budget: :meth:`~sparsecse.targets.candidates.Candidate.figures`). ``anchored``: the
    dense model (1, 1) helps while fewer than two probes are known."""
    return SpeedModel.fit([(c.keep_flops, s, h) for c in candidates for s, h in c.figures()], anchor=anchored)


def fitted_choice(candidates: list[Candidate], aim: float, floor: float, anchored: bool,
                  probe: Callable[[float], Candidate]) -> Candidate | None:
    """The candidate at the fitted line's budget for ``aim`` (see the module docstring): a probe within
    ``RESOLUTION`` of it, else a new probe there (``probe(budget)``); every candidate's ``predicted`` speed-up is
    set. None where no line rises with the budget (the caller falls back on the probes' own figures).

    Args:
        candidates: one depth's speed probes.
        aim: the speed-up aimed at.
        floor: the smallest budget.
        anchored: whether the dense model (1, 1) is a point (not for the width of a model with layers removed).
        probe: makes and times a new candidate at a budget.

    Returns:
        The chosen candidate, or None.
    """
    model = speed_model(candidates, anchored)
    reaching = [c.keep_flops for c in candidates if c.reaches(aim)]
    if model is None or not reaching:
        return None
    # a line is trusted where the probes are: no larger than a probe that fell short of the aim (a slow probe
    # bounds the budget from above: the safe side), no far smaller than the smallest that reached it
    lower = max(floor, min(reaching) * (1 - 3 * STEP))
    upper = min([c.keep_flops for c in candidates if c.speedup < aim and c.keep_flops > lower],
                default=LARGEST_BUDGET)
    budget = min(upper, max(lower, model.budget(aim)))
    near = [c for c in candidates if abs(c.keep_flops - budget) <= RESOLUTION]
    chosen = min(near, key=lambda c: abs(c.keep_flops - budget)) if near else probe(budget)
    for c in [*candidates, chosen]:
        c.predicted = round(model.speedup(c.keep_flops), 4)
    return chosen


def midway(target: Target) -> float:
    """The speed-up a confirmation must reach: halfway from the target to the aim, ``speedup x (1 + margin / 2)``.

        >>> round(midway(Target(speedup=2.0, margin=0.05)), 3)
        2.05
    """
    return float(target.speedup) * (1 + float(target.margin) / 2)


def confirm(candidate: Candidate, prober, probe: Callable[[float], Candidate], floor: float,
            anchored: bool, first: Timing | None = None) -> Candidate:
    """``candidate`` (or a smaller one) confirmed by a fresh, independent timing (see the module docstring).

    Args:
        candidate: the search's choice.
        prober: the search's prober: its ``target`` (speed-up and aim), its ``candidates`` (the speed probes of
            ``candidate``'s depth are the fit's points) and ``retime(candidate)``, a new, independent timing
            (a new process, new rounds) -> :class:`~sparsecse.targets.timing.Timing`.
        probe: makes and times a new candidate at a budget.
        floor: the smallest budget.
        anchored: as :func:`fitted_choice`.
        first: a timing of ``candidate`` already independent of the choice (a winner chosen untimed, on its dev
            score and the speed model's prediction, whose first timing this is): it stands for the first
            confirmation (None: ``candidate`` is timed afresh).

    Returns:
        The last candidate confirmed, its ``confirmed`` figure set; where every step missed, the last one tried
        (the final timing judges it).
    """
    target: Target = prober.target
    aim = float(target.aim)
    for attempt in range(CONFIRMATIONS + 1):
        given = first if attempt == 0 else None
        # a near miss the median's noise may explain is timed once more, the rounds pooled
        timing = _confirmation(candidate, given if given is not None else prober.retime(candidate), prober,
                               given is not None)
        # the fresh figure is unbiased where the probe that won was not: it must clear half the margin too, or the
        # final model (pruned in steps, distilled) lands about as often under the target as over it; a figure
        # between that bar and the aim passes however precise it is (it is over the target by more than its noise)
        if timing.speedup >= midway(target):
            return stepped_up(candidate, timing, prober, probe, anchored) if attempt == 0 else candidate
        if attempt == CONFIRMATIONS or candidate.keep_flops <= floor:
            return candidate
        model = speed_model([c for c in prober.candidates if c.stage == "speed"
                             and c.layers_removed == candidate.layers_removed], anchored)
        stepped = candidate.keep_flops * (1 - STEP)  # down by at least STEP, by the line at most 3 x STEP
        budget = stepped if model is None else min(stepped, max(candidate.keep_flops * (1 - 3 * STEP),
                                                                model.budget(aim)))
        candidate = probe(round(max(floor, budget), 4))
    return candidate


def _confirmation(candidate: Candidate, timing: Timing, prober, given: bool) -> Timing:
    """``timing`` of ``candidate``, pooled with one fresh timing where it misses the bar by less than its noise, and
    recorded as the candidate's confirmation."""
    if timing.speedup < midway(prober.target) <= timing.interval.high:
        timing = timing.pooled(prober.retime(candidate))
    candidate.confirmed, candidate.confirmed_half_width = round(timing.speedup, 4), timing.interval.half_width
    candidate.confirmed_with_probe = given
    return timing


def stepped_up(candidate: Candidate, timing: Timing, prober, probe: Callable[[float], Candidate],
               anchored: bool) -> Candidate:
    """A wider candidate than ``candidate`` where its confirmation ``timing`` is over the aim by more than its noise
    (see the module docstring), else ``candidate``.

    Args:
        candidate: the confirmed choice (its ``confirmed`` figure set).
        timing: its confirmation.
        prober: as :func:`confirm` (its ``timing_of(candidate)`` gives a probe's own timing).
        probe: makes and times a new candidate at a budget.
        anchored: as :func:`fitted_choice`.

    Returns:
        The wider candidate, confirmed by its own first timing, where that clears the bar; else ``candidate``.
    """
    aim = float(prober.target.aim)
    if timing.interval.low <= aim or candidate.keep_flops >= LARGEST_BUDGET:
        return candidate
    mine = [c for c in prober.candidates if c.stage == "speed" and c.layers_removed == candidate.layers_removed]
    model = speed_model(mine, anchored)
    if model is None:
        return candidate
    # a probe of that depth whose whole interval fell short of the aim bounds the step from above (the safe side)
    short = [c.keep_flops * (1 - STEP) for c in mine if c.keep_flops > candidate.keep_flops and c.fell_short(aim)]
    budget = min([LARGEST_BUDGET, candidate.keep_flops * (1 + 3 * STEP), *short, model.budget(aim)])
    if budget < candidate.keep_flops * (1 + STEP_UP):
        return candidate
    if getattr(prober, "show_progress", False):
        print(f"  confirmed {timing.describe()}, over the {aim:.2f}x aim by more than its noise: stepping up to "
              f"{budget:.4f} of the layer FLOPs", file=sys.stderr, flush=True)
    wider = probe(round(budget, 4))
    wider.stepped_up_from = candidate.keep_flops
    first = _confirmation(wider, prober.timing_of(wider), prober, given=True)
    return wider if first.speedup >= midway(prober.target) else candidate


def quality_search(prober, prune_fn: Callable[[float], tuple[Any, int, int]]) -> Candidate:
    """The smallest tried budget whose probe, pruned as the prune stage prunes, stays within the dev bound
    (bisection; ``prober``: the search's, ``prune_fn``: budget -> (encoder, heads kept, neurons kept))."""
    target = prober.target
    bound = float(target.max_drop)
    passing, failing = 1.0, 0.0
    budget = 0.5
    for _ in range(target.probes):
        encoder, heads, neurons = prune_fn(budget)
        candidate = prober.add(budget, encoder, heads, neurons, "quality")
        candidate.meets = candidate.drop <= bound
        if candidate.meets:
            passing = min(passing, budget)
        else:
            failing = max(failing, budget)
        if passing - failing < BISECTION_RESOLUTION:
            break
        budget = round((passing + failing) / 2, 4)
    prober.settle("quality")
    ok = [c for c in prober.candidates if c.stage == "quality" and c.meets]
    if not ok:
        best = max(prober.candidates, key=lambda c: c.dev_score if math.isfinite(c.dev_score) else -math.inf)
        raise TargetOutOfReach(
            f"No candidate stays within a dev drop of {bound:g} of {prober.model}'s {prober.reference_dev:.2f}: the "
            f"closest keeps {best.keep_flops:g} of its layer FLOPs and drops {best.drop:.2f} at {best.speedup:.2f}x "
            f"±{best.spread:.0%} ({prober.shape.describe()}); the candidates are in {prober.work / TABLE}.")
    return min(ok, key=lambda c: c.keep_flops)
