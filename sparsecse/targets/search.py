"""Find the kept-FLOPs budget that meets a target, by measuring candidates rather than trusting FLOPs.

Kept FLOPs alone do not decide a speed-up: embeddings, LayerNorms, softmax at short lengths and tokenization
cost the same however many units go, so 0.45 of all-MiniLM-L6-v2's layer FLOPs ran 2.04x and 0.5 of
paraphrase-MiniLM-L3-v2's 1.68x. The search therefore times candidates (HALP, Shen et al. 2022, spends a
measured latency instead of FLOPs; here each probe is the real shrunk model on the real engine):

- **speed** (``Target.speedup``): a probe prunes the dense model one-shot to a budget (the dense model's scores,
  no refit: the shapes, hence the speed, are those the prune stage will make), shrinks it, and times it against
  the input model on the engine, interleaved, on the dev sentences. The next budget comes from the line through
  the two nearest probes in (budget, 1/speed-up) (the first guess from FLOPs alone), so three or four probes
  usually land within a few percent of the aim ``speedup x (1 + margin)``; probing stops once the next budget could
  not beat one that reaches the aim. The budget is then the line fitted through every probe at the aim, not the
  luckiest probe (:mod:`sparsecse.targets.choice`), confirmed by a fresh timing before any training starts. A
  target no probe reaches, down to the smallest budget that keeps a unit, is out of reach. Timings' rounds are sized
  from an A/A timing (:func:`~sparsecse.targets.timing.sized_rounds`).
- **quality** (``Target.max_drop`` alone): a probe is pruned from the dense model's scores with reconstruction
  (``prune_fn``: the recipe's budget stage prunes in one step, a cheaper and slightly pessimistic stand-in for the
  prune stage's steps), scored on the dev set and timed; bisection over the budget finds the smallest (fastest) one
  whose dev score is within ``max_drop`` of the input model's, measured the same way.

- **depth** (:meth:`~sparsecse.targets.spec.Target.resolved_depth` > 0, with a speed-up): candidates remove k = 0..depth
  whole layers (the first k of the layer criterion's removal order) and keep a budget of the rest; one speed model
  across every depth places each depth's budget from every probe (:mod:`sparsecse.targets.depth_search`), each
  depth's finalist is built at its budget, and the finalist with the best dev score right after the cut wins, or,
  with ``recover``, the best after a short recovery (:func:`~sparsecse.targets.depth_search.rank_after_recovery`).
  The winner, and only it, is timed and confirmed (an untimed winner by that first timing, which the choice did not
  see). Candidates are checked for an order that contradicts their size by their overall kept FLOPs
  (:func:`~sparsecse.targets.depth.overall_keep_flops`).

Every probe is a row of the candidates table (:mod:`sparsecse.targets.candidates`).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

from sparsecse.artifacts.model_names import model_label
from sparsecse.modeling.adapters import layer_modules
from sparsecse.modeling.encoder import SentenceEncoder, encoding_device
from sparsecse.pruning.prune import PruningConfig
from sparsecse.pruning.prune import prune as prune_scores
from sparsecse.pruning.uniform import smallest_budget
from sparsecse.scoring.layer_criteria import removal_order
from sparsecse.scoring.scores import GateScores
from sparsecse.shrinking.shrink import ShrinkConfig, remove_units, shrink_lineage
from sparsecse.targets.candidates import PLOT, TABLE, Candidate, next_budget_line, write_plot, write_table
from sparsecse.targets.choice import (LARGEST_BUDGET, TargetOutOfReach, confirm, contradictions, fitted_choice,
                                      quality_search)
from sparsecse.targets.depth import depth_width_probe, layers_removed, overall_keep_flops
from sparsecse.targets.depth_search import joint_depth_search, rank_after_recovery, timed_winner
from sparsecse.targets.engines import to_time
from sparsecse.targets.spec import Target
from sparsecse.targets.timing import (BUSY_WAIT_SECONDS, BUSY_WAITS, ROUNDS, MachineTooBusy, Timing, engine_threads,
                                     measure, settled, sized_rounds, target_sentences)

SMALLEST_BUDGET = 0.02  # the speed search's floor (a smaller budget keeps almost nothing of any encoder)
CLOSE_ENOUGH = 0.04  # a speed probe within this fraction above the aim ends the search


class Calibration(NamedTuple):
    """The corpus int8 engines calibrate on, and the seed of the sample they take of it."""

    corpus: str | os.PathLike | None
    seed: int = 0


@dataclass
class SearchResult:
    """The budget the search chose, every candidate it tried, the input model's dev score and where the table
    and plot are."""

    keep_flops: float
    candidates: list[Candidate]
    reference_dev: float
    table: Path
    plot: Path
    target: dict[str, Any] = field(default_factory=dict)
    layers_removed: list[int] = field(default_factory=list)  # removed whole first; keep_flops is then of the rest
    finalists: list[Candidate] = field(default_factory=list)  # each depth's best (one: the chosen)
    title: str = ""  # the plot's

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the stage summary and the card read it)."""
        chosen = next(c for c in self.candidates if c.chosen)
        return {"keep_flops": self.keep_flops, "layers_removed": self.layers_removed,
                "reference_dev": round(self.reference_dev, 4),
                "chosen": {"keep_flops": chosen.keep_flops, "speedup": round(chosen.speedup, 4),
                           "spread": round(chosen.spread, 4), "dev_score": round(chosen.dev_score, 4),
                           "stage": chosen.stage, "layers_removed": chosen.layers_removed,
                           "dev_recovered": chosen.dev_recovered, "predicted": chosen.predicted,
                           "confirmed": chosen.confirmed,
                           "stepped_up_from": None if math.isnan(chosen.stepped_up_from) else chosen.stepped_up_from},
                "candidates": len(self.candidates), "table": str(self.table), "plot": str(self.plot),
                "target": self.target}


@dataclass
class SharedSearch:
    """What the targets of one run (``compress --speedup 1.5,2,3``) share, in memory, while :func:`sharing` is
    active: the input model's gate scores (by model; the budget stage reads them) and one list of one-shot speed
    probes, each with what it was timed as, which every target's search starts from, probing more only where none
    of them lands near its aim. Valid for one input model, pruning rule and serving shape (one curve). The probes
    are timed from copies on disk (:class:`~sparsecse.targets.fresh.OnDisk`): in ``directory``, which outlives the
    targets (the run removes it at its end), else in each target's own work directory. ``paths``: where each
    prune stage's steps ended (a :class:`~sparsecse.shrinking.iterative.PrunePath`, by model and settings), for a
    smaller budget to continue from."""

    scores: dict[str, GateScores] = field(default_factory=dict)
    rows: list[tuple[Candidate, Any]] = field(default_factory=list)
    directory: Path | None = None
    paths: dict[Any, Any] = field(default_factory=dict)


_SHARING: contextvars.ContextVar[SharedSearch | None] = contextvars.ContextVar("sparsecse_shared_search",
                                                                              default=None)


@contextlib.contextmanager
def sharing(shared: SharedSearch):
    """Inside the block, budget searches (and the budget stage's scoring) share ``shared``."""
    token = _SHARING.set(shared)
    try:
        yield shared
    finally:
        _SHARING.reset(token)


def active_sharing() -> SharedSearch | None:
    """The :class:`SharedSearch` of the enclosing :func:`sharing` block, else None."""
    return _SHARING.get()


class _Prober:
    """Builds, scores and times candidates at the target's serving shape; keeps them (and what was timed, to time
    again) in order."""

    def __init__(self, model: str, dev, target: Target, work: Path, calibration: Calibration, show_progress: bool):
        self.model, self.dev, self.target, self.work = model, dev, target, work
        self.calibration = calibration
        self.show_progress = show_progress
        self.dense = SentenceEncoder.load(model, device="cpu")
        with encoding_device(self.dense):  # scored on the GPU when there is one; timed on the target's engine
            self.reference_dev = float(dev.score(self.dense))
        self.layers = len(layer_modules(self.dense.model))
        self.shape = target.shape(engine_threads())
        self.reference = to_time(model, target.engine, work / "engine" / "input", *calibration,
                                 self.shape.threads, self.shape.loader)
        self.sentences = target_sentences(target, dev.sentences, self.dense.tokenizer, self.dense.max_length)
        self.candidates: list[Candidate] = []
        self.timed: list = []  # what each candidate was timed as (its copy on disk, on the engine)
        self.timings: dict[int, Timing] = {}  # each candidate this search timed (by id): its probe's timing
        self.reused = 0  # how many of the candidates are an earlier target's (SharedSearch), not this search's
        self.aa, self.rounds = sized_rounds(self.reference, self.sentences, self.shape, target) \
            if target.speedup is not None else (None, ROUNDS)  # the machine's noise sizes every timing's rounds

    def _on_engine(self, encoder: SentenceEncoder, tag: str):
        root = getattr(active_sharing(), "directory", None) or self.work / "engine"
        root.mkdir(parents=True, exist_ok=True)
        place = Path(tempfile.mkdtemp(prefix=f"{tag}-", dir=root))
        encoder.save(place / "model")
        return to_time(place / "model", self.target.engine, place / "engine", *self.calibration,
                       self.shape.threads, self.shape.loader)

    def _speed(self, encoder: SentenceEncoder, tag: str, name: str) -> tuple[object, Timing]:
        timed = self._on_engine(encoder, tag)
        timing = settled(self.reference, {name: timed}, self.sentences, self.shape, self.target,
                         rounds=self.rounds)[name]
        return timed, timing

    def retime(self, candidate: Candidate) -> Timing:
        """A fresh, independent timing of ``candidate`` (a new process, new rounds)."""
        name = self.name(candidate.keep_flops, candidate.layers_removed)
        timed = next(t for c, t in zip(self.candidates, self.timed) if c is candidate)
        return measure(self.reference, {name: timed}, self.sentences, self.shape, self.rounds)[name]

    def name(self, keep_flops: float, removed: int = 0) -> str:
        """A candidate as messages name it, by the kept fraction of all the input model's layer FLOPs."""
        overall = overall_keep_flops(keep_flops, removed, self.layers)
        return f"the candidate keeping {overall:.3f} of the layer FLOPs" + (f" ({removed} layers removed)"
                                                                            if removed else "")

    def add(self, budget: float, encoder: SentenceEncoder, heads: int, neurons: int, stage: str,
            layers_removed: int = 0) -> Candidate:
        with encoding_device(encoder):
            dev = float(self.dev.score(encoder))
        timed, timing = self._speed(encoder, f"probe{len(self.candidates) + 1}", self.name(budget, layers_removed))
        candidate = Candidate(round(budget, 4), heads, neurons, timing.speedup, dev, self.reference_dev - dev, stage,
                              spread=timing.spread, layers_removed=layers_removed,
                              half_width=timing.interval.half_width)
        self.candidates.append(candidate)
        self.timed.append(timed)
        self.timings[id(candidate)] = timing
        if self.show_progress:
            print(f"  candidate {len(self.candidates)}: {candidate.describe()}", file=sys.stderr, flush=True)
        return candidate

    def timing_of(self, candidate: Candidate) -> Timing:
        """The timing ``candidate``'s probe was given (its rounds, for pooling)."""
        return self.timings[id(candidate)]

    def reuse(self, shared: SharedSearch) -> None:
        """Start from the speed probes earlier targets of the run measured (copies: their marks are this
        search's)."""
        for candidate, timed in shared.rows:
            self.candidates.append(dataclasses.replace(candidate, meets=False, chosen=False, confirmed=math.nan,
                                                       confirmed_half_width=math.nan, confirmed_with_probe=False,
                                                       stepped_up_from=math.nan))
            self.timed.append(timed)
        self.reused = len(shared.rows)

    def share(self, shared: SharedSearch | None) -> None:
        """Hand every speed probe this search made (its depth searches', the fitted budget's and the confirmation's
        step-downs, as last timed) on to the next target of the run."""
        if shared is not None:
            shared.rows.extend((dataclasses.replace(c), self.timed[i]) for i, c in enumerate(self.candidates)
                               if i >= self.reused and c.stage == "speed")

    def one_shot(self, scores: GateScores, pruning: PruningConfig, budget: float, removed=()) -> Candidate:
        if removed:  # whole layers first, then the budget of the rest
            encoder, mask = depth_width_probe(self.dense, scores, pruning, removed, budget)
        else:
            mask = prune_scores(scores, keep_flops=budget, config=pruning)
            encoder = copy.deepcopy(self.dense)
            remove_units(encoder, mask, ShrinkConfig(layout=pruning.layout), shrink_lineage(self.dense.source, mask))
        return self.add(budget, encoder, int(mask.head_mask.sum()), int(mask.neuron_mask.sum()), "speed",
                        layers_removed=len(removed))

    def planned(self, scores: GateScores, pruning: PruningConfig, budget: float, removed) -> Candidate:
        """A depth finalist at a fitted budget, built and scored on dev but not timed (stage ``planned``)."""
        encoder, mask = depth_width_probe(self.dense, scores, pruning, removed, budget)
        with encoding_device(encoder):
            dev = float(self.dev.score(encoder))
        candidate = Candidate(round(budget, 4), int(mask.head_mask.sum()), int(mask.neuron_mask.sum()), math.nan, dev,
                              self.reference_dev - dev, "planned", layers_removed=len(removed))
        self.candidates.append(candidate)
        self.timed.append(None)
        if self.show_progress:
            print(f"  candidate {len(self.candidates)}, a finalist: {candidate.describe()}", file=sys.stderr, flush=True)
        return candidate

    def settle(self, stage: str) -> None:
        """Time again, side by side, the ``stage`` candidates whose order contradicts their size (a smaller budget
        slower than a larger one beyond their spreads, sizes compared by overall kept FLOPs); one whose order still contradicts stops the run
        (:class:`~sparsecse.targets.timing.MachineTooBusy`) before anything is chosen."""
        rows = [i for i, c in enumerate(self.candidates) if c.stage == stage]
        suspects = contradictions([self.candidates[i] for i in rows], self.layers)
        if not suspects:
            return
        waits = BUSY_WAITS if self.target.when_busy == "wait" else 0
        for attempt in range(waits + 1):
            if attempt:
                print(f"  the candidates' order contradicts their size; waiting {BUSY_WAIT_SECONDS:.0f} s to time "
                      "them again", file=sys.stderr, flush=True)
                time.sleep(BUSY_WAIT_SECONDS)
            involved = {id(c) for pair in suspects for c in pair}
            picked = [i for i in rows if id(self.candidates[i]) in involved]
            names = {i: self.name(self.candidates[i].keep_flops, self.candidates[i].layers_removed) for i in picked}
            again = settled(self.reference, {names[i]: self.timed[i] for i in picked}, self.sentences, self.shape,
                            self.target, rounds=self.rounds)
            for i in picked:
                self.candidates[i].speedup, self.candidates[i].spread = again[names[i]].speedup, again[names[i]].spread
                self.candidates[i].half_width = again[names[i]].interval.half_width
                self.candidates[i].retimed = True
            suspects = contradictions([self.candidates[i] for i in rows], self.layers)
            if not suspects:
                return
        small, large = suspects[0]
        hint = "" if waits else ", or pass --when-busy wait"
        raise MachineTooBusy(
            f"The machine is too busy to time: timed again at {self.shape.describe()}, "
            f"{self.name(small.keep_flops, small.layers_removed)} ran {small.speedup:.2f}x (±{small.spread:.0%}) and "
            f"the larger {self.name(large.keep_flops, large.layers_removed)[4:]} ran {large.speedup:.2f}x "
            f"(±{large.spread:.0%}), an order that contradicts their size; run it on a quieter machine{hint}.")


def speed_search(prober: _Prober, scores: GateScores, pruning: PruningConfig, floor: float,
                 removed: list[int] | tuple = ()) -> Candidate:
    """The candidate at the budget the line fitted through the probes gives for the target's aim
    (:func:`~sparsecse.targets.choice.fitted_choice`; see the module docstring), starting from the probes already
    made (an earlier target's included, ``_Prober.reuse``); with ``removed`` layers, the budget of the
    remaining layers of candidates that remove them first."""
    target = prober.target
    aim = target.aim

    def mine(c: Candidate) -> bool:
        return c.stage == "speed" and c.layers_removed == len(removed)

    def speed_points() -> list[tuple[float, float]]:
        return [(c.keep_flops, c.speedup) for c in prober.candidates if mine(c)]

    def marked() -> list[Candidate]:
        """This search's probes, each marked whether it meets the target (as last timed)."""
        speed = [c for c in prober.candidates if mine(c)]
        for c in speed:
            c.meets = c.speedup >= float(target.speedup)
        return speed

    def winner() -> float:
        """The largest budget reaching the aim so far (0: none); a probe at or below it can no longer win."""
        return max((c.keep_flops for c in marked() if c.reaches(aim)), default=0.0)

    def next_budget() -> float:
        points = speed_points()
        if removed and len(points) == 1:  # the line through (1, 1) would not hold: the rest's full model is faster
            return round(min(LARGEST_BUDGET, max(floor, points[0][0] * math.sqrt(points[0][1] / aim))), 4)
        return round(next_budget_line(points, aim, floor, anchored=not removed), 4)

    tried = [b for b, _ in speed_points()]
    # FLOPs alone give the first guess; probes already measured, the line through them
    rest = (prober.layers - len(removed)) / prober.layers if removed else 1.0  # the remaining layers' share
    budget = next_budget() if tried else min(0.95, max(floor, 1.0 / rest / aim))
    for _ in range(target.probes):
        if any(aim <= s <= aim * (1 + CLOSE_ENOUGH) for _, s in speed_points()):
            break
        if any(abs(budget - b) < 0.002 for b in tried) or budget <= winner():
            break
        candidate = prober.one_shot(scores, pruning, budget, removed)
        tried.append(candidate.keep_flops)
        if candidate.speedup < aim and budget <= floor:
            break  # the smallest budget is too slow: out of reach
        budget = next_budget()
    prober.settle("speed")
    speed = marked()  # after settling
    ok = [c for c in speed if c.reaches(aim)] or [c for c in speed if c.meets]
    if not ok:
        fastest = max(speed, key=lambda c: c.speedup)
        raise TargetOutOfReach(
            f"A {float(target.speedup):g}x speed-up on {target.engine} is out of reach for {prober.model} at "
            f"{prober.shape.describe()}: the fastest candidate tried keeps {fastest.keep_flops:g} of its "
            f"{'remaining ' if removed else ''}layer FLOPs and runs {fastest.speedup:.2f}x ±{fastest.spread:.0%} "
            f"({fastest.dev_text}); the candidates are in {prober.work / TABLE}.")
    fitted = fitted_choice(speed, aim, floor, not removed, lambda b: prober.one_shot(scores, pruning, b, removed))
    marked()  # a probe timed at the fitted budget marked too
    return fitted or max(ok, key=lambda c: c.keep_flops)  # every probe decides, through the line, not the luckiest


def search_budget(model: str | os.PathLike, dev, target: Target, work: str | os.PathLike, *,
                  scores: GateScores | None = None, pruning: PruningConfig | None = None,
                  prune_fn: Callable[[float], tuple[SentenceEncoder, int, int]] | None = None,
                  calibration: Calibration | None = None,
                  recover: Callable[[SentenceEncoder], SentenceEncoder] | None = None,
                  show_progress: bool = True) -> SearchResult:
    """The kept-FLOPs budget that meets ``target`` for ``model`` (see the module docstring).

    Args:
        model: the input model (a directory or a name).
        dev: the dev set (:class:`~sparsecse.evaluation.eval_sets.EvalSet`-like: ``sentences`` and
            ``score(encoder)``): candidates' dev scores and the sentences speed is timed on.
        target: the checked :class:`~sparsecse.targets.spec.Target`.
        work: the directory the candidates table and plot (and, for exported engines, temporary copies) go to.
        scores: the dense model's gate scores (speed probes prune one-shot from them); required with a speed-up.
        pruning: the pruning rule (λ, criterion) of the prune stage.
        prune_fn: ``budget -> (encoder, heads kept, neurons kept)``, pruning as the prune stage does; required
            for a quality-only target.
        calibration: the corpus int8 engines calibrate on, and their sample's seed (None: no corpus, seed 0).
        recover: with depth finalists, an encoder -> the encoder after a short recovery: the finalists are judged
            by their dev score after it (:func:`~sparsecse.targets.depth_search.rank_after_recovery`) before the
            best is confirmed.
        show_progress: print each candidate as it is measured.

    Returns:
        A :class:`SearchResult`; the table and plot are written even when the target is out of reach
        (:class:`~sparsecse.targets.choice.TargetOutOfReach`, raised after writing them).
    """
    target = target.check()
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    prober = _Prober(str(model), dev, target, work, calibration or Calibration(None), show_progress)
    pruning = pruning or PruningConfig()
    summary = {"speedup": target.speedup, "max_drop": target.max_drop, "engine": target.engine,
               "batch_size": prober.shape.batch_size, "margin": target.margin, "shape": prober.shape.to_dict(),
               "dev_floor": None if target.max_drop is None else prober.reference_dev - float(target.max_drop)}
    try:
        if target.speedup is not None:
            if scores is None:
                raise ValueError("A speed-up target needs the dense model's scores.")
            depth = target.resolved_depth(prober.layers, pruning.layout)
            order = removal_order(prober.dense, prober.sentences, pruning.layer_criterion, limit=depth) if depth else []
            layers_removed(order, depth)  # a depth the model cannot lose is refused before any probe
            summary.update(depth=depth, depth_default=target.depth is None, removal_order=order)
            floor = max(SMALLEST_BUDGET, smallest_budget(scores.manifest.get("shape") or {}, pruning.layout))
            if depth:
                finalists = joint_depth_search(prober, scores, pruning, floor, order, depth, active_sharing())
            else:
                shared = active_sharing()
                if shared is not None:
                    prober.reuse(shared)
                finalists = [speed_search(prober, scores, pruning, floor)]
            if recover is not None and len(finalists) > 1:
                rank_after_recovery(finalists, prober, order, scores, pruning, recover)
            removed = layers_removed(order, finalists[0].layers_removed)
            winner, first = timed_winner(finalists[0], prober, scores, pruning, removed)
            finalists[0] = chosen = confirm(winner, prober, lambda b: prober.one_shot(scores, pruning, b, removed),
                                            floor, not removed, first)  # before any training starts
            summary.update(aa=prober.aa.facts() if prober.aa else None, rounds=prober.rounds)
        else:
            if prune_fn is None:
                raise ValueError("A quality-only target needs prune_fn.")
            chosen, removed = quality_search(prober, prune_fn), []
            finalists = [chosen]
        chosen.chosen = True
    finally:
        prober.share(active_sharing())
        table = write_table(prober.candidates, work / TABLE, summary["shape"]) if prober.candidates else work / TABLE
        title = f"{model_label(model)}: {target.describe()}"
        plot = write_plot(prober.candidates, work / PLOT, summary, title) if prober.candidates else work / PLOT
        shutil.rmtree(work / "engine", ignore_errors=True)
    return SearchResult(chosen.keep_flops, prober.candidates, prober.reference_dev, table, plot, summary, removed,
                        finalists, title)
