"""The speed search with depth: one speed model across every depth places each depth's budget.

A candidate removes k = 0..depth whole layers (the first k of the layer criterion's removal order) and keeps a
budget of the remaining layers' FLOPs (:mod:`sparsecse.targets.depth`). Searching each depth on its own took five
or six timed probes a depth, most of them far from the aim (on all-MiniLM-L6-v2 at batch 1, 20 probes of about
35 s for four depths on 2 cores). Time is nearly linear in the kept layers and the kept FLOPs together
(:class:`~sparsecse.targets.statistics.DepthSpeedModel`: a fixed part, a part per kept layer, a part per kept
FLOP), so every probe of every depth informs every other depth:

1. the first probes go where FLOPs alone put the aim, deepest depth first, until the model can be fitted;
2. then the deepest and the shallowest depth, while either has no probe that the model puts within ``NEAR`` of
   the aim, are probed at their fitted budgets, and the model refitted (``probes + depth`` probes at most); the
   depths between are placed by the model from them (its time is linear in the share of layers kept);
3. each depth's finalist is the candidate at its fitted budget: a probe within ``RESOLUTION`` of it stands for it,
   else it is built and scored on dev, untimed (stage ``planned``, its ``predicted`` speed-up the model's). A
   probe whose whole interval fell short of the aim caps its depth's budget ``BELOW`` under its own (the safe side).
   A depth whose fitted budget is below the floor, where a probe at the floor fell short, is out of reach.

The finalists are ranked (dev score right after the cut, or after a short recovery: :func:`rank_after_recovery`),
and only the winner is timed: an untimed winner is probed at its budget, and that first timing, which the choice did
not see, confirms it (:func:`~sparsecse.targets.choice.confirm`); a winner timed before it was chosen is confirmed
by a fresh, independent timing, as every chosen candidate is.
"""

from __future__ import annotations

import math
from typing import Callable

from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.pruning.prune import PruningConfig
from sparsecse.scoring.scores import GateScores
from sparsecse.targets.candidates import TABLE, Candidate
from sparsecse.targets.choice import LARGEST_BUDGET, RESOLUTION, TargetOutOfReach
from sparsecse.targets.depth import depth_width_probe, layers_removed
from sparsecse.targets.statistics import DepthSpeedModel
from sparsecse.targets.timing import Timing

NEAR = 0.02  # a probe the model puts within this fraction of a depth's aim in speed places that depth
BELOW = 0.05  # a plan at or above a probe that fell short goes this fraction of its budget under it


def depth_model(candidates: list[Candidate], layers: int) -> DepthSpeedModel | None:
    """The speed model through every timed speed probe of ``candidates`` (a confirmed one counts its confirmation
    too, as one more point: :meth:`~sparsecse.targets.candidates.Candidate.figures`)."""
    points = [(c.layers_removed, c.keep_flops, s, h) for c in candidates if c.stage == "speed" for s, h in c.figures()]
    return DepthSpeedModel.fit(points, layers)


def planned_budget(model: DepthSpeedModel | None, candidates: list[Candidate], k: int, aim: float, floor: float,
                   layers: int) -> float | None:
    """Depth ``k``'s budget for ``aim``: the model's (FLOPs alone before there is one), within ``[floor,
    LARGEST_BUDGET]`` and ``BELOW`` under a probe of that depth whose whole interval fell short of the aim
    where it is not already below it; None where the model puts it below ``floor`` and a probe that stands for the
    floor (:func:`near_in_speed`) fell short (out of reach at that depth)."""
    rest = (layers - k) / layers
    budget = model.budget(k, aim) if model is not None else 1.0 / rest / aim
    mine = [c for c in candidates if c.stage == "speed" and c.layers_removed == k]
    short = [c.keep_flops * (1 - BELOW) for c in mine  # a plan at or above a probe that fell short goes below it
             if c.fell_short(aim) and budget >= c.keep_flops]
    budget = min([LARGEST_BUDGET, *short, budget])
    if budget < floor and any(c.speedup < aim and near_in_speed(model, k, c.keep_flops, floor) for c in mine):
        return None
    return round(max(floor, budget), 4)


def near_in_speed(model: DepthSpeedModel | None, k: int, probed: float, budget: float) -> bool:
    """Whether a probe of depth ``k`` at budget ``probed`` stands for ``budget``: within ``RESOLUTION``, or within
    ``NEAR`` of its speed by the model."""
    return abs(probed - budget) <= RESOLUTION or model is not None and abs(
        model.speedup(k, probed) / model.speedup(k, budget) - 1) <= NEAR


def joint_depth_search(prober, scores: GateScores, pruning: PruningConfig, floor: float, order: list[int],
                       depth: int, shared=None) -> list[Candidate]:
    """Each depth's finalist (0..``depth`` layers of ``order`` removed, those out of reach left out), best dev score
    first (see the module docstring), starting from ``shared``'s probes (a
    :class:`~sparsecse.targets.search.SharedSearch`).

    Args:
        prober: the search's prober (``one_shot`` times a probe, ``planned`` builds an untimed one, ``candidates``,
            ``layers``, ``target``, ``settle``).
        scores: the input model's gate scores.
        pruning: the pruning rule.
        floor: the smallest budget.
        order: the layers in the order they are removed.
        depth: the most layers removed.
        shared: probes earlier targets of the run made (None: none).

    Returns:
        The finalists, best dev score first; :class:`~sparsecse.targets.choice.TargetOutOfReach` where no depth
        reaches the aim.
    """
    if shared is not None:
        prober.reuse(shared)
    aim, layers = float(prober.target.aim), prober.layers

    def plan(model: DepthSpeedModel | None, k: int) -> float | None:
        return planned_budget(model, prober.candidates, k, aim, floor, layers)

    def placed(model: DepthSpeedModel | None, k: int, budget: float) -> bool:
        return any(c.stage == "speed" and c.layers_removed == k and near_in_speed(model, k, c.keep_flops, budget)
                   for c in prober.candidates)

    for _ in range(prober.target.probes + depth):
        model = depth_model(prober.candidates, layers)  # once a pass: every probe so far
        pending = [(k, b) for k in sorted({depth, 0}, reverse=True)
                   if (b := plan(model, k)) is not None and not placed(model, k, b)]
        if not pending:
            break
        k, budget = pending[0]
        prober.one_shot(scores, pruning, budget, layers_removed(order, k))
    prober.settle("speed")
    for c in prober.candidates:
        if c.stage == "speed":
            c.meets = c.speedup >= float(prober.target.speedup)
    finalists, model = [], depth_model(prober.candidates, layers)
    for k in range(depth + 1):
        budget = plan(model, k)
        if budget is None:
            continue
        near = [c for c in prober.candidates if c.stage == "speed" and c.layers_removed == k
                and abs(c.keep_flops - budget) <= RESOLUTION]
        finalists.append(min(near, key=lambda c: abs(c.keep_flops - budget)) if near
                         else prober.planned(scores, pruning, budget, layers_removed(order, k)))
    if model is not None:
        for c in prober.candidates:
            c.predicted = round(model.speedup(c.layers_removed, c.keep_flops), 4)
    if not finalists:
        fastest = max((c for c in prober.candidates if c.stage == "speed"), key=lambda c: c.speedup)
        raise TargetOutOfReach(
            f"A {float(prober.target.speedup):g}x speed-up on {prober.target.engine} is out of reach for "
            f"{prober.model} at {prober.shape.describe()}: the fastest candidate tried ({fastest.describe()}) is too "
            f"slow, even with up to {depth} layers removed; the candidates are in {prober.work / TABLE}.")
    return sorted(finalists, key=lambda c: -c.dev_score if math.isfinite(c.dev_score) else math.inf)


def timed_winner(winner: Candidate, prober, scores: GateScores, pruning: PruningConfig,
                 removed: list[int]) -> tuple[Candidate, Timing | None]:
    """``winner`` as a timed probe, ready for :func:`~sparsecse.targets.choice.confirm`, and the timing that stands
    for its first confirmation: itself and None where it was timed before it was chosen (the choice may have
    favoured a lucky figure, so it is timed afresh); else a new probe at its budget (carrying its dev score after
    recovery) and that probe's timing (``prober.timing_of``), independent of a choice made on dev scores and the
    speed model's prediction."""
    if winner.stage != "planned":
        return winner, None
    timed = prober.one_shot(scores, pruning, winner.keep_flops, removed)
    timed.dev_recovered, timed.predicted = winner.dev_recovered, winner.predicted
    return timed, prober.timing_of(timed)


def undominated(finalists: list[Candidate]) -> list[Candidate]:
    """The finalists a short recovery could still put first: those that no finalist removing more layers matches or
    beats on dev right after the cut. A short recovery repairs a depth cut more than a width cut (the whole layers'
    work is still in the ones that stay, while a narrowed layer loses what it loses), which is why a deeper finalist
    that scores lower right after the cut can win after it; one that already scores at least as well only gains.

    >>> deep = Candidate(0.75, 40, 900, float("nan"), 82.5, 4.2, "planned", layers_removed=3)
    >>> shallow, lucky = (Candidate(b, 40, 900, float("nan"), d, 86.7 - d, "planned", layers_removed=1)
    ...                   for b, d in [(0.3, 81.8), (0.32, 83.0)])
    >>> [c.keep_flops for c in undominated([lucky, deep, shallow])]
    [0.32, 0.75]
    """
    def dominated(c: Candidate) -> bool:
        return any(o.layers_removed > c.layers_removed and math.isfinite(o.dev_score) and
                   (not math.isfinite(c.dev_score) or o.dev_score >= c.dev_score) for o in finalists)

    return [c for c in finalists if not dominated(c)]


def rank_after_recovery(finalists: list[Candidate], prober, order: list[int], scores: GateScores,
                        pruning: PruningConfig, recover: Callable[[SentenceEncoder], SentenceEncoder]) -> None:
    """Order ``finalists`` (each depth's best) by their dev score after a short recovery, best first, in place
    (each recovered one's ``dev_recovered`` set), so the one confirmed and chosen is the best after recovery, not
    right after the cut. Only the finalists a recovery could put first are recovered (:func:`undominated`); the
    others follow them, in their order right after the cut; with one such finalist, nothing is recovered.

    Args:
        finalists: the depth search's finalists.
        prober: the search's prober (its dense model and dev set).
        order: the layers in the order they are removed.
        scores: the input model's gate scores the search pruned from.
        pruning: the pruning rule it used.
        recover: an encoder -> the encoder after the short recovery (e.g. a few hundred distillation steps).
    """
    contenders = {id(c) for c in undominated(finalists)}
    if len(contenders) < 2:
        finalists.sort(key=lambda c: id(c) not in contenders)  # stable: the rest keep their order
        return
    for c in finalists:
        if id(c) in contenders:
            encoder, _ = depth_width_probe(prober.dense, scores, pruning, layers_removed(order, c.layers_removed),
                                           c.keep_flops)
            c.dev_recovered = float(prober.dev.score(recover(encoder)))
    finalists.sort(key=lambda c: (id(c) not in contenders, -c.dev_recovered if id(c) in contenders and
                                  math.isfinite(c.dev_recovered) else math.inf))
