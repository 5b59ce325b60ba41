"""Find the kept-FLOPs budget that meets a target, by measuring candidates rather than trusting FLOPs.

Kept FLOPs alone do not decide a speed-up: embeddings, LayerNorms, softmax at short lengths and tokenization
cost the same however many units go, so 0.45 of all-MiniLM-L6-v2's layer FLOPs ran 2.04x and 0.5 of
paraphrase-MiniLM-L3-v2's 1.68x. The search therefore times candidates (HALP, Shen et al. 2022, spends a
measured latency instead of FLOPs; here each probe is the real shrunk model on the real engine):

- **speed** (``Target.speedup``): a probe prunes the dense model one-shot to a budget (the dense model's scores,
  no refit: the shapes, hence the speed, are those the prune stage will make), shrinks it, and times it against
  the input model on the engine, interleaved, on the dev sentences. The next budget comes from the line through
  the two nearest probes in (budget, 1/speed-up) (the first guess from FLOPs alone), so three or four probes
  usually land within a few percent of the aim ``speedup x (1 + margin)``. The largest budget that reaches the
  aim wins. A target no probe reaches, down to the smallest budget that keeps a unit, is out of reach.
- **quality** (``Target.max_drop`` alone): a probe is pruned from the dense model's scores with reconstruction
  (``prune_fn``: the recipe's budget stage prunes in one step, a cheaper and slightly pessimistic stand-in for the
  prune stage's steps), scored on the dev set and timed; bisection over the budget finds the smallest (fastest) one
  whose dev score is within ``max_drop`` of the input model's, measured the same way.

Every probe is a row of the candidates table (:mod:`sparsecse.targets.candidates`).
"""

from __future__ import annotations

import copy
import math
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from sparsecse.artifacts.model_names import model_label
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.encoder import SentenceEncoder, encoding_device
from sparsecse.pruning.prune import PruningConfig
from sparsecse.pruning.prune import prune as prune_scores
from sparsecse.scoring.scores import GateScores
from sparsecse.shrinking.shrink import ShrinkConfig, remove_units, shrink_lineage
from sparsecse.targets.candidates import PLOT, TABLE, Candidate, write_plot, write_table
from sparsecse.targets.engines import on_engine
from sparsecse.targets.spec import Target, engines
from sparsecse.targets.timing import speedup_over, timing_sentences

SMALLEST_BUDGET = 0.02  # the speed search's floor (a smaller budget keeps almost nothing of any encoder)
CLOSE_ENOUGH = 0.04  # a speed probe within this fraction above the aim ends the search
BISECTION_RESOLUTION = 0.02  # the quality search stops when the passing and failing budgets are this close


class TargetOutOfReach(SparseCSEError):
    """No candidate meets the target; the candidates table stays for inspection."""


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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the stage summary and the card read it)."""
        chosen = next(c for c in self.candidates if c.chosen)
        return {"keep_flops": self.keep_flops, "reference_dev": round(self.reference_dev, 4),
                "chosen": {"keep_flops": chosen.keep_flops, "speedup": round(chosen.speedup, 4),
                           "dev_score": round(chosen.dev_score, 4), "stage": chosen.stage},
                "candidates": len(self.candidates), "table": str(self.table), "plot": str(self.plot),
                "target": self.target}


class _Prober:
    """Builds, scores and times candidates; keeps them in order."""

    def __init__(self, model: str, dev, target: Target, work: Path, calibration, seed: int, show_progress: bool):
        self.model, self.dev, self.target, self.work = model, dev, target, work
        self.calibration, self.seed, self.show_progress = calibration, seed, show_progress
        self.dense = SentenceEncoder.load(model, device="cpu")
        with encoding_device(self.dense):  # scored on the GPU when there is one; timed on the target's engine
            self.reference_dev = float(dev.score(self.dense))
        self.reference = self.dense if engines()[target.engine] is None else on_engine(
            model, target.engine, work / "engine" / "input", calibration, seed)
        self.sentences = timing_sentences(dev.sentences, self.dense.tokenizer, self.dense.max_length)
        self.candidates: list[Candidate] = []

    def _speed(self, encoder: SentenceEncoder, tag: str) -> float:
        if engines()[self.target.engine] is None:
            timed = encoder
        else:
            model_dir = self.work / "engine" / f"{tag}-model"
            if model_dir.exists():
                shutil.rmtree(model_dir)
            encoder.save(model_dir)
            timed = on_engine(model_dir, self.target.engine, self.work / "engine" / tag, self.calibration, self.seed)
        speed = speedup_over(self.reference, {tag: timed}, self.sentences, self.target.batch_size)[tag]
        if engines()[self.target.engine] is not None:
            shutil.rmtree(self.work / "engine" / tag, ignore_errors=True)
            shutil.rmtree(self.work / "engine" / f"{tag}-model", ignore_errors=True)
        return speed

    def add(self, budget: float, encoder: SentenceEncoder, heads: int, neurons: int, stage: str) -> Candidate:
        with encoding_device(encoder):
            dev = float(self.dev.score(encoder))
        speed = self._speed(encoder, f"probe{len(self.candidates) + 1}")
        candidate = Candidate(round(budget, 4), heads, neurons, speed, dev, self.reference_dev - dev, stage)
        self.candidates.append(candidate)
        if self.show_progress:
            print(f"  candidate {len(self.candidates)}: {candidate.describe()}", file=sys.stderr, flush=True)
        return candidate

    def one_shot(self, scores: GateScores, pruning: PruningConfig, budget: float) -> Candidate:
        mask = prune_scores(scores, keep_flops=budget, config=pruning)
        encoder = copy.deepcopy(self.dense)
        remove_units(encoder, mask, ShrinkConfig(), shrink_lineage(self.dense.source, mask))
        return self.add(budget, encoder, int(mask.head_mask.sum()), int(mask.neuron_mask.sum()), "speed")


def _next_budget(points: list[tuple[float, float]], aim: float, floor: float) -> float:
    """The budget where the line through the two probes nearest the aim (in 1/speed-up, with the dense model at
    (1, 1)) reaches 1/aim."""
    goal = 1.0 / aim
    pts = sorted({(1.0, 1.0), *[(b, 1.0 / s) for b, s in points]})
    below = [p for p in pts if p[1] <= goal]  # fast enough
    above = [p for p in pts if p[1] > goal]
    if below and above:
        (b0, t0), (b1, t1) = max(below), min(above)
    else:  # extrapolate from the two nearest the goal
        (b0, t0), (b1, t1) = sorted(pts, key=lambda p: abs(p[1] - goal))[:2]
    if abs(t1 - t0) < 1e-12:
        return max(floor, min(b0, b1) / 2)
    b = b0 + (goal - t0) * (b1 - b0) / (t1 - t0)
    return min(0.98, max(floor, b))


def speed_search(prober: _Prober, scores: GateScores, pruning: PruningConfig, floor: float) -> Candidate:
    """The largest tried budget whose one-shot probe reaches the target's aim (see the module docstring)."""
    target = prober.target
    aim = target.aim
    budget = min(0.95, max(floor, 1.0 / aim))  # FLOPs alone: the first guess
    tried: list[float] = []
    for _ in range(target.probes):
        candidate = prober.one_shot(scores, pruning, budget)
        tried.append(candidate.keep_flops)
        if aim <= candidate.speedup <= aim * (1 + CLOSE_ENOUGH):
            break
        if candidate.speedup < aim and budget <= floor:
            break  # the smallest budget is too slow: out of reach
        points = [(c.keep_flops, c.speedup) for c in prober.candidates if c.stage == "speed"]
        budget = round(_next_budget(points, aim, floor), 4)
        if any(abs(budget - b) < 0.002 for b in tried):
            break
    speed = [c for c in prober.candidates if c.stage == "speed"]
    for c in speed:
        c.meets = c.speedup >= float(target.speedup)
    ok = [c for c in speed if c.speedup >= aim] or [c for c in speed if c.meets]
    if not ok:
        fastest = max(speed, key=lambda c: c.speedup)
        raise TargetOutOfReach(
            f"A {float(target.speedup):g}x speed-up on {target.engine} is out of reach for {prober.model}: the fastest "
            f"candidate tried keeps {fastest.keep_flops:g} of its layer FLOPs and runs {fastest.speedup:.2f}x "
            f"({fastest.dev_text}); the candidates are in {prober.work / TABLE}.")
    return max(ok, key=lambda c: c.keep_flops)


def quality_search(prober: _Prober, prune_fn: Callable[[float], tuple[SentenceEncoder, int, int]]) -> Candidate:
    """The smallest tried budget whose probe, pruned as the prune stage prunes, stays within the dev bound."""
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
    ok = [c for c in prober.candidates if c.stage == "quality" and c.meets]
    if not ok:
        best = max(prober.candidates, key=lambda c: c.dev_score if math.isfinite(c.dev_score) else -math.inf)
        raise TargetOutOfReach(
            f"No candidate stays within a dev drop of {bound:g} of {prober.model}'s {prober.reference_dev:.2f}: the "
            f"closest keeps {best.keep_flops:g} of its layer FLOPs and drops {best.drop:.2f} at {best.speedup:.2f}x; "
            f"the candidates are in {prober.work / TABLE}.")
    return min(ok, key=lambda c: c.keep_flops)


def search_budget(model: str | os.PathLike, dev, target: Target, work: str | os.PathLike, *,
                  scores: GateScores | None = None, pruning: PruningConfig | None = None,
                  prune_fn: Callable[[float], tuple[SentenceEncoder, int, int]] | None = None,
                  calibration: str | os.PathLike | None = None, seed: int = 0,
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
        calibration: the corpus int8 engines calibrate on.
        seed: the calibration sample's seed.
        show_progress: print each candidate as it is measured.

    Returns:
        A :class:`SearchResult`; the table and plot are written even when the target is out of reach
        (:class:`TargetOutOfReach`, raised after writing them).
    """
    target = target.check()
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    prober = _Prober(str(model), dev, target, work, calibration, seed, show_progress)
    pruning = pruning or PruningConfig()
    summary = {"speedup": target.speedup, "max_drop": target.max_drop, "engine": target.engine,
               "batch_size": target.batch_size, "margin": target.margin,
               "dev_floor": None if target.max_drop is None else prober.reference_dev - float(target.max_drop)}
    try:
        if target.speedup is not None:
            if scores is None:
                raise ValueError("A speed-up target needs the dense model's scores.")
            chosen = speed_search(prober, scores, pruning, SMALLEST_BUDGET)
        else:
            if prune_fn is None:
                raise ValueError("A quality-only target needs prune_fn.")
            chosen = quality_search(prober, prune_fn)
        chosen.chosen = True
    finally:
        table = write_table(prober.candidates, work / TABLE) if prober.candidates else work / TABLE
        plot = write_plot(prober.candidates, work / PLOT, summary, f"{model_label(model)}: "
                          f"{target.describe()}") if prober.candidates else work / PLOT
        shutil.rmtree(work / "engine", ignore_errors=True)
    return SearchResult(chosen.keep_flops, prober.candidates, prober.reference_dev, table, plot, summary)
