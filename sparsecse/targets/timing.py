"""Speed as a target measures it: candidates against the input model on the same engine, serving shape
(:class:`~sparsecse.targets.spec.Shape`: metric, batch, threads) and sentences, in interleaved rounds
(:func:`sparsecse.evaluation.speed.interleaved_rounds`). Each figure is the median over rounds of that round's ratio
(the input model's time over the candidate's: summed over the requests for a throughput, their percentile for a
latency) and carries its spread, the interquartile range of those ratios over their median. A spread wider than the
target allows is timed again, and one that stays wider stops the run (:class:`MachineTooBusy`) or waits for a
quieter machine. Also the single-sentence latency and the throughput a model card states."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from sparsecse.data.corpus import read_corpus
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation import speed
from sparsecse.evaluation.speed import unique_by_length
from sparsecse.targets import fresh
from sparsecse.targets.spec import Shape, Target
from sparsecse.targets.statistics import (AA_ROUNDS, MAX_ROUNDS, USABLE, Interval, TooNoisy, median_interval,
                                         noise, usable_rounds)

TIMING_SENTENCES = 2048  # distinct sentences timed per throughput (longest-first order, evenly thinned)
LATENCY_REQUESTS = 100  # requests timed per round for a latency metric (every length represented)
ROUNDS = 5  # interleaved rounds per timing: its figure is their median ratio, its spread their IQR
BUSY_WAIT_SECONDS = 30.0  # with when_busy "wait": the pause before timing again
BUSY_WAITS = 20  # ... and how many pauses before giving up
REFERENCE = "the input model"
AGAIN = "the input model again"  # the A/A timing's second copy of the input
INTERLEAVED = ("interleaved in one fresh process (the models taking turns every few requests, the order rotating)")


class MachineTooBusy(SparseCSEError):
    """A timing's spread stayed wider than the target allows: the figures would be noise, so nothing is chosen."""


@dataclass(frozen=True)
class Timing:
    """One model's speed-up over the reference at a shape: the median of the per-round ratios, their spread
    (interquartile range over the median), the rounds, and the model's and the reference's own figure (ms per
    request for a latency, sentences per second for a throughput; medians over rounds)."""

    speedup: float
    spread: float
    rounds: int
    figure: float = math.nan
    reference_figure: float = math.nan
    ratios: tuple[float, ...] = ()

    @classmethod
    def of(cls, ratios, figure: float = math.nan, reference_figure: float = math.nan) -> "Timing":
        """The timing whose per-round ratios are ``ratios``; ``figure``/``reference_figure`` as the class says."""
        ratios = np.asarray(ratios, dtype=float)
        median = float(np.median(ratios))
        q25, q75 = np.percentile(ratios, [25, 75])
        return cls(median, float((q75 - q25) / median), len(ratios), figure, reference_figure,
                   tuple(float(r) for r in ratios))

    def pooled(self, other: "Timing") -> "Timing":
        """One timing from the rounds of two runs of the same models (figures weighted by rounds)."""
        n, m = self.rounds, other.rounds
        return Timing.of(self.ratios + other.ratios, (self.figure * n + other.figure * m) / (n + m),
                         (self.reference_figure * n + other.reference_figure * m) / (n + m))

    @property
    def interval(self) -> Interval:
        """The median's interval over the rounds (:func:`~sparsecse.targets.statistics.median_interval`)."""
        return median_interval(self.ratios) if self.ratios else Interval(self.speedup, self.speedup, self.speedup)

    def describe(self) -> str:
        """e.g. ``2.06x ±3%``."""
        return f"{self.speedup:.2f}x ±{100 * self.spread:.0f}%"

    def facts(self) -> dict:
        """JSON-ready: the figure, its interval's ends and confidence, the spread and the rounds."""
        iv = self.interval
        return {"speedup": round(self.speedup, 4), "low": round(iv.low, 4), "high": round(iv.high, 4),
                "confidence": iv.confidence, "spread": round(self.spread, 4), "rounds": self.rounds}


def engine_threads() -> int:
    """The intra-op threads the engines use on this machine when the user names none (torch's default, which the
    exported runtimes take too)."""
    import torch

    return int(torch.get_num_threads())


def timing_sentences(sentences: list[str], tokenizer, max_length: int, limit: int = TIMING_SENTENCES) -> list[str]:
    """The distinct ``sentences`` longest first (the order encode() batches them in), thinned evenly to at most
    ``limit`` so every length stays represented."""
    distinct = list(dict.fromkeys(sentences))
    ids = tokenizer(distinct, truncation=True, max_length=max_length)["input_ids"]
    ordered = unique_by_length(distinct, {s: len(i) for s, i in zip(distinct, ids)})
    return thin(ordered, limit)


def target_sentences(target: Target, dev_sentences: list[str], tokenizer, max_length: int) -> list[str]:
    """The sentences ``target`` is timed on: its ``timing_sentences`` file (one a line), else the dev sentences
    (see :func:`timing_sentences`)."""
    if target.timing_sentences is None:
        return timing_sentences(dev_sentences, tokenizer, max_length)
    return timing_sentences(read_corpus(target.timing_sentences), tokenizer, max_length)


def thin(items: list, limit: int) -> list:
    """At most ``limit`` of ``items``, picked evenly (first and last kept), in order."""
    if len(items) <= limit:
        return items
    keep = np.linspace(0, len(items) - 1, limit).round().astype(int)
    return [items[i] for i in sorted(set(keep.tolist()))]


def requests(sentences: list[str], shape: Shape) -> list[list[str]]:
    """What one round times: every batch of ``shape.batch_size`` for a throughput; for a latency, at most
    ``LATENCY_REQUESTS`` requests of that size, picked evenly over the lengths."""
    chunks = [sentences[i:i + shape.batch_size] for i in range(0, len(sentences), shape.batch_size)]
    return thin(chunks, LATENCY_REQUESTS) if shape.latency else chunks


def round_figures(seconds: np.ndarray, shape: Shape) -> np.ndarray:
    """Per round: seconds per pass (throughput) or the latency percentile (seconds per request)."""
    return np.percentile(seconds, shape.percentile, axis=1) if shape.latency else seconds.sum(axis=1)


def interleaved(encoders: dict, timed: list[list[str]], batch_size: int, rounds: int, threads: int | None,
                show_progress: bool = False) -> dict[str, np.ndarray]:
    """:func:`~sparsecse.evaluation.speed.interleaved_rounds` on ``threads`` torch threads (where
    :func:`~sparsecse.targets.fresh.run` runs it: a fresh process)."""
    with speed.torch_threads(threads):
        return speed.interleaved_rounds(encoders, timed, batch_size, rounds, show_progress)


def measure(reference, candidates: dict, sentences: list[str], shape: Shape, rounds: int = ROUNDS,
            show_progress: bool = False) -> dict[str, Timing]:
    """{name: :class:`Timing`} for each encoder of ``candidates`` against ``reference``, all timed in one
    interleaved run at ``shape`` (torch's threads set to ``shape.threads`` meanwhile), in a fresh process where
    the models are :class:`~sparsecse.targets.fresh.OnDisk` (:func:`sparsecse.targets.fresh.run`).

    Args:
        reference: the input model on the engine (the 1x): an :class:`~sparsecse.targets.fresh.OnDisk` or an encoder.
        candidates: name to model on the same engine (as ``reference``).
        sentences: the timed sentences, longest first.
        shape: the serving shape.
        rounds: interleaved rounds.
        show_progress: a progress bar.

    Returns:
        The timing of every candidate.
    """
    models = {REFERENCE: reference, **candidates}
    timed = requests(sentences, shape)
    seconds = fresh.run(interleaved, models, timed, shape.batch_size, rounds, shape.threads, show_progress)
    return timings({key: round_figures(s, shape) for key, s in seconds.items()}, candidates, timed, shape)


def timings(per_round: dict[str, np.ndarray], candidates, timed: list[list[str]], shape: Shape) -> dict[str, Timing]:
    """{name: :class:`Timing`} of each of ``candidates`` from every model's per-round figures
    (:func:`round_figures`, the reference's under ``REFERENCE``) over the ``timed`` requests: the per-round ratios,
    and each model's own figure (ms per request for a latency, sentences per second for a throughput)."""
    ref, count = per_round[REFERENCE], sum(len(r) for r in timed)

    def figure(values: np.ndarray) -> float:
        median = float(np.median(values))
        return median * 1000 if shape.latency else count / median

    return {key: Timing.of(ref / per_round[key], figure(per_round[key]), figure(ref)) for key in candidates}


def settled(reference, candidates: dict, sentences: list[str], shape: Shape, target: Target,
            show_progress: bool = False, rounds: int = ROUNDS) -> dict[str, Timing]:
    """:func:`measure`, timed again where a spread is wider than ``target.max_spread`` (the rounds of both
    timings pooled). A spread that stays wider is only noise in the rounds where the pooled median's interval is
    within ``USABLE`` margins (the precision sized rounds aim at; the figure is judged by its interval), and more
    rounds are pooled while it is not (up to ``MAX_ROUNDS``); one whose interval is wider even then raises
    :class:`MachineTooBusy` naming what was measured, or, with ``target.when_busy == "wait"``, is timed again after a pause (``BUSY_WAITS`` times at most).

    Args:
        reference: the input model on the engine.
        candidates: name (as messages show it) to encoder.
        sentences: the timed sentences.
        shape: the serving shape.
        target: the target (its ``max_spread`` and ``when_busy``).
        show_progress: a progress bar.
        rounds: interleaved rounds per timing (:func:`sized_rounds`).

    Returns:
        The timing of every candidate, each within the spread allowed.
    """
    found = measure(reference, candidates, sentences, shape, rounds, show_progress=show_progress)
    limit, precision = float(target.max_spread), USABLE * float(target.margin)

    def wide() -> dict[str, Timing]:
        return {k: t for k, t in found.items() if t.spread > limit}

    def unresolved() -> dict[str, Timing]:  # rounds too spread whose median is not pinned down either
        return {k: t for k, t in wide().items() if t.interval.half_width > precision}

    def pool(names) -> None:  # timed again, the rounds of both runs pooled
        again = measure(reference, {k: candidates[k] for k in names}, sentences, shape, rounds,
                        show_progress=show_progress)
        found.update({k: found[k].pooled(t) for k, t in again.items()})

    if wide():
        pool(wide())
    # more rounds narrow an interval (not a spread): pooled up to the most rounds a timing may have
    while unresolved() and max(t.rounds for t in unresolved().values()) + rounds <= MAX_ROUNDS:
        pool(unresolved())
    for _ in range(BUSY_WAITS if target.when_busy == "wait" else 0):
        if not unresolved():
            break
        print(f"  the machine is busy (spread {max(t.spread for t in unresolved().values()):.0%}); waiting "
              f"{BUSY_WAIT_SECONDS:.0f} s to time again", file=sys.stderr, flush=True)
        time.sleep(BUSY_WAIT_SECONDS)
        found.update(measure(reference, {k: candidates[k] for k in unresolved()}, sentences, shape, rounds,
                             show_progress=show_progress))
    if not unresolved():
        return found
    key, worst = max(unresolved().items(), key=lambda kv: kv[1].spread)
    hint = "" if target.when_busy == "wait" else ", or pass --when-busy wait"
    raise MachineTooBusy(
        f"The machine is too busy to time: {key} measured {worst.speedup:.2f}x over {REFERENCE} with a spread of "
        f"{worst.spread:.0%} over {worst.rounds} interleaved rounds ({shape.describe()}), wider than the "
        f"{limit:.0%} allowed even when timed again, and its interval (±{worst.interval.half_width:.0%}) wider than "
        f"{USABLE:g} times the {float(target.margin):.0%} margin; run it on a quieter machine{hint}.")


def aa_timing(reference, sentences: list[str], shape: Shape, rounds: int = AA_ROUNDS) -> Timing:
    """The A/A timing: the input model against a second copy of itself (loaded anew), as :func:`measure` times a
    candidate; any ratio away from 1.00x is the machine's noise at ``shape``."""
    return measure(reference, {AGAIN: reference}, sentences, shape, rounds)[AGAIN]


def sized_rounds(reference, sentences: list[str], shape: Shape, target: Target) -> tuple[Timing, int]:
    """The A/A timing at ``shape`` and the rounds a figure needs there so that its interval is narrower than the
    target's margin (:func:`~sparsecse.targets.statistics.usable_rounds`: a machine somewhat too noisy for that
    gets the most rounds and a printed warning); with ``target.when_busy == "wait"`` a machine far too noisy is
    timed again after a pause (``BUSY_WAITS`` times at most), else
    :class:`~sparsecse.targets.statistics.TooNoisy` says so."""
    waits = BUSY_WAITS if target.when_busy == "wait" else 0
    for attempt in range(waits + 1):
        aa = aa_timing(reference, sentences, shape)
        try:
            rounds, warning = usable_rounds(noise(aa.ratios), float(target.margin), shape.describe())
            if warning:
                print(f"  warning: {warning}", file=sys.stderr, flush=True)
            return aa, rounds
        except TooNoisy:
            if attempt == waits:
                raise
            print(f"  the machine is noisy (the input against itself: {aa.describe()}); waiting "
                  f"{BUSY_WAIT_SECONDS:.0f} s to time again", file=sys.stderr, flush=True)
            time.sleep(BUSY_WAIT_SECONDS)
    raise AssertionError("unreachable")
