"""The statistics behind a speed figure: how sure it is, how many rounds make it sure enough, and what every probe
says together.

- **An interval for every figure.** A figure is the median of per-round ratios (the input model's time over the
  candidate's, :mod:`sparsecse.targets.timing`). :func:`median_interval` gives the distribution-free interval of
  that median from the order statistics of the rounds (the binomial count of rounds on either side of the true
  median), so nothing is assumed about the shape of the noise.
- **The machine's noise, measured.** An A/A timing times the input model against a second copy of itself at the
  target's shape: any ratio away from 1.00x is noise. :func:`noise` reads its spread (a robust standard deviation
  of the log ratios) and :func:`rounds_needed` sizes the rounds so that a figure's interval is narrower than the
  target's margin; where even ``MAX_ROUNDS`` cannot get there, :func:`check_precision` says so plainly
  (:class:`TooNoisy`), and :func:`usable_rounds` decides whether the run goes on at ``MAX_ROUNDS`` with a warning
  (the best interval within ``USABLE`` margins: the figures are still judged by their own intervals) or stops.
- **Every probe counts.** The largest budget whose own noisy figure clears the aim picks the luckiest probe (the
  winner's curse: timed again, it runs slower). :class:`SpeedModel` fits time (1/speed-up) against kept FLOPs
  through all the probes of one depth, each weighted by its precision (latency tables do the same in HALP and
  NetAdapt), and the budget is the fitted line's at the aim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from sparsecse.errors import SparseCSEError

CONFIDENCE = 0.99  # every figure's interval (an A/A timing timed ten times should contain 1.00x every time)
MIN_ROUNDS = 5  # no timing has fewer rounds
MAX_ROUNDS = 25  # the rounds a timing may be sized up to
AA_ROUNDS = 9  # the A/A timing's own rounds (its spread sizes the others)
ANCHOR_HALF_WIDTH = 0.02  # the input model in a depth speed model: exact by definition, weighed as a good probe
USABLE = 2.0  # a machine whose best interval is within this many margins is timed at MAX_ROUNDS, with a warning
MEDIAN_EFFICIENCY = math.sqrt(math.pi / 2)  # the median's standard error over the mean's, for normal noise
Z = {0.9: 1.645, 0.95: 1.96, 0.99: 2.576}


HALF_WIDTH_FLOOR = 0.005  # no probe weighs without bound in a speed model's fit
UNKNOWN_HALF_WIDTH = 0.05  # a probe without an interval counts as one known to about ±5%


def time_point(speedup: float, half_width: float) -> tuple[float, float]:
    """A probe as a speed model fits it: its time (1/speed-up) and that time's error (the interval's relative
    half-width, floored at ``HALF_WIDTH_FLOOR``, over the speed-up); a probe weighs 1/error²."""
    half = float(half_width) if math.isfinite(half_width) else UNKNOWN_HALF_WIDTH
    return 1.0 / float(speedup), max(HALF_WIDTH_FLOOR, half) / float(speedup)


def weighted_fit(design: np.ndarray, times: np.ndarray, errors: np.ndarray) -> np.ndarray:
    """The coefficients of weighted least squares: ``times ≈ design @ coefficients``, each row weighed by
    1 / ``errors`` squared (the fit both speed models share)."""
    w = 1.0 / np.asarray(errors, dtype=float)
    return np.linalg.lstsq(design * w[:, None], np.asarray(times, dtype=float) * w, rcond=None)[0]


class TooNoisy(SparseCSEError):
    """The machine's noise at the target's shape is too large for the rounds allowed to resolve the margin."""


@dataclass(frozen=True)
class Interval:
    """A figure (the median of per-round ratios) and the ``confidence`` interval ``[low, high]`` around it."""

    median: float
    low: float
    high: float
    confidence: float = CONFIDENCE

    @property
    def half_width(self) -> float:
        """Half the interval's width over the median (e.g. 0.03, a figure known to about ±3%)."""
        return (self.high - self.low) / 2 / self.median if self.median > 0 else math.inf

    def contains(self, value: float) -> bool:
        """Whether ``value`` lies in the interval (its ends included)."""
        return self.low <= value <= self.high

    def describe(self) -> str:
        """e.g. ``2.06x (99% interval 1.98-2.12x)``."""
        return f"{self.median:.2f}x ({self.confidence:.0%} interval {self.low:.2f}-{self.high:.2f}x)"


def _binomial_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(0, k + 1)) / 2 ** n


def order_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, int]:
    """The 0-based ranks (lo, hi) of the sorted rounds that bound the median's ``confidence`` interval: the largest
    lo with P(at most lo rounds below the true median) <= (1 - confidence) / 2, and its mirror; (0, n - 1) when
    even the extremes cannot reach the confidence (few rounds)."""
    alpha = (1 - confidence) / 2
    lo = 0
    while lo + 1 < n - 2 - lo and _binomial_cdf(lo + 1, n) <= alpha:  # x[lo] misses when at most lo rounds fall below
        lo += 1
    return lo, n - 1 - lo


def median_interval(ratios: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The median of ``ratios`` and its distribution-free ``confidence`` interval (order statistics)."""
    values = np.sort(np.asarray(ratios, dtype=float))
    if values.size == 0:
        raise ValueError("An interval needs at least one round.")
    lo, hi = order_ranks(values.size, confidence)
    return Interval(float(np.median(values)), float(values[lo]), float(values[hi]), confidence)


def noise(ratios: Sequence[float]) -> float:
    """The spread of per-round ratios as a robust standard deviation of their logs (1.4826 x the median absolute
    deviation; about the relative standard deviation of one round's ratio)."""
    logs = np.log(np.asarray(ratios, dtype=float))
    return float(1.4826 * np.median(np.abs(logs - np.median(logs))))


def expected_half_width(sigma: float, rounds: int, confidence: float = CONFIDENCE) -> float:
    """The relative half-width the median's interval is expected to have over ``rounds`` rounds of noise ``sigma``
    (the normal approximation of the median's standard error)."""
    return Z[confidence] * MEDIAN_EFFICIENCY * sigma / math.sqrt(rounds)


def rounds_needed(sigma: float, margin: float, confidence: float = CONFIDENCE) -> int:
    """The fewest rounds (at least ``MIN_ROUNDS``) whose expected interval (:func:`expected_half_width`) is narrower
    than ``margin``; may exceed ``MAX_ROUNDS`` (:func:`check_precision` says what then)."""
    if margin <= 0:
        return MAX_ROUNDS + 1
    return max(MIN_ROUNDS, math.ceil((Z[confidence] * MEDIAN_EFFICIENCY * sigma / margin) ** 2))


def check_precision(sigma: float, margin: float, where: str, confidence: float = CONFIDENCE) -> int:
    """The rounds a timing needs to resolve ``margin`` on noise ``sigma`` (:func:`rounds_needed`), or
    :class:`TooNoisy` saying plainly that this machine cannot (``where``: the shape, in words)."""
    rounds = rounds_needed(sigma, margin, confidence)
    if rounds <= MAX_ROUNDS:
        return rounds
    best = expected_half_width(sigma, MAX_ROUNDS, confidence)
    raise TooNoisy(f"This machine is too noisy at {where} to resolve a {margin:.0%} margin: the input model timed "
                   f"against itself varies by {sigma:.1%} a round, so even {MAX_ROUNDS} rounds leave a figure "
                   f"uncertain by ±{best:.1%}; run it on a quieter machine, or pass --when-busy wait.")


def usable_rounds(sigma: float, margin: float, where: str, confidence: float = CONFIDENCE) -> tuple[int, str | None]:
    """(rounds, None) as :func:`check_precision` gives them; on a machine too noisy for ``margin`` whose best
    interval over ``MAX_ROUNDS`` rounds is still within ``USABLE`` margins, (``MAX_ROUNDS``, a warning saying so);
    noisier than that, :class:`TooNoisy`.

        >>> usable_rounds(0.02, 0.05, "batch 1")
        (5, None)
        >>> usable_rounds(0.12, 0.05, "batch 1")[0]
        25
    """
    try:
        return check_precision(sigma, margin, where, confidence), None
    except TooNoisy:
        best = expected_half_width(sigma, MAX_ROUNDS, confidence)
        if best > USABLE * margin:
            raise
        return MAX_ROUNDS, (f"this machine is noisy at {where}: the input model timed against itself varies by "
                            f"{sigma:.1%} a round, so a figure over {MAX_ROUNDS} rounds is uncertain by ±{best:.1%}, "
                            f"more than the {margin:.0%} margin; every figure is timed over {MAX_ROUNDS} rounds and "
                            "judged by its own interval")


@dataclass(frozen=True)
class SpeedModel:
    """Time (1/speed-up) as a line in kept FLOPs, ``time = intercept + slope x budget``, fitted through the probes
    of one depth (``SpeedModel.fit``)."""

    intercept: float
    slope: float
    points: int

    @classmethod
    def fit(cls, probes: Sequence[tuple[float, float, float]], anchor: bool = False) -> "SpeedModel | None":
        """Weighted least squares through ``probes`` (budget, speed-up, relative half-width of its interval), each
        weighted by its precision (1 / its variance in time, a floor of 0.5% on the half-width so no probe weighs
        without bound); ``anchor``: the dense model (budget 1, time 1) is a point too, used only while fewer than
        two budgets are probed. None when no line can be drawn or it does not rise with the budget."""
        pts = [(float(b), *time_point(s, h)) for b, s, h in probes if s > 0]
        if anchor and len({round(b, 6) for b, _, _ in pts}) < 2:
            pts.append((1.0, 1.0, HALF_WIDTH_FLOOR))
        if len({round(b, 6) for b, _, _ in pts}) < 2:
            return None
        design = np.array([[1.0, b] for b, _, _ in pts])
        intercept, slope = weighted_fit(design, np.array([t for _, t, _ in pts]), np.array([e for _, _, e in pts]))
        if not slope > 1e-9:
            return None
        return cls(float(intercept), float(slope), len(pts))

    def speedup(self, budget: float) -> float:
        """The speed-up the line predicts at ``budget``."""
        return 1.0 / (self.intercept + self.slope * budget)

    def budget(self, aim: float) -> float:
        """The budget the line predicts runs ``aim`` times as fast (rounded down to 1e-4)."""
        return math.floor((1.0 / aim - self.intercept) / self.slope * 1e4) / 1e4


@dataclass(frozen=True)
class DepthSpeedModel:
    """Time (1/speed-up) across depths: ``time = fixed + per_layer x rest + per_flop x budget x rest``, where
    ``rest`` is the share of the input model's layers a candidate keeps and ``budget`` the kept fraction of their
    FLOPs. Each kept layer costs its FLOPs and a fixed part no width cut removes (LayerNorms, softmax, small kernels,
    dispatch); the rest of the model (embeddings, pooling, tokenization) costs ``fixed``. One model through every
    probe of every depth places each depth's budget from all of them (``DepthSpeedModel.fit``), so a depth needs a
    probe or two near its aim rather than a search of its own."""

    fixed: float
    per_layer: float
    per_flop: float
    layers: int
    points: int

    @classmethod
    def fit(cls, probes: Sequence[tuple[int, float, float, float]], layers: int) -> "DepthSpeedModel | None":
        """Weighted least squares through ``probes`` (layers removed, budget of the rest, speed-up, relative
        half-width of its interval; weights as :meth:`SpeedModel.fit`) and the input model itself (nothing removed,
        budget 1, time 1, weighed as a probe known to ``ANCHOR_HALF_WIDTH``). None while the points cannot tell the
        three costs apart (fewer than two depths, or two budgets) or where time does not rise with the budget.

            >>> truth = lambda k, b: 1 / (0.15 + 0.25 * (6 - k) / 6 + 0.6 * b * (6 - k) / 6)
            >>> m = DepthSpeedModel.fit([(k, b, truth(k, b), 0.03) for k, b in [(0, 0.5), (3, 0.9)]], 6)
            >>> round(m.budget(2, 2.1), 3), round(m.speedup(3, 0.7), 3)
            (0.399, 2.062)
        """
        rows = [(1.0, 1.0, 1.0, ANCHOR_HALF_WIDTH)]
        for removed, budget, speedup, half in probes:
            if speedup > 0 and math.isfinite(speedup):
                rest = (layers - int(removed)) / layers
                rows.append((rest, float(budget) * rest, *time_point(speedup, half)))
        x = np.array([[1.0, r, f] for r, f, _, _ in rows])
        if len(rows) < 3 or np.linalg.matrix_rank(x, tol=1e-6) < 3:
            return None
        fixed, per_layer, per_flop = weighted_fit(x, np.array([r[2] for r in rows]), np.array([r[3] for r in rows]))
        if not per_flop > 1e-9:
            return None
        return cls(float(fixed), float(per_layer), float(per_flop), int(layers), len(rows) - 1)

    def _rest(self, removed: int) -> float:
        return (self.layers - int(removed)) / self.layers

    def speedup(self, removed: int, budget: float) -> float:
        """The speed-up the model predicts for ``removed`` layers removed and ``budget`` of the rest's FLOPs kept."""
        rest = self._rest(removed)
        return 1.0 / (self.fixed + self.per_layer * rest + self.per_flop * float(budget) * rest)

    def budget(self, removed: int, aim: float) -> float:
        """The budget of the rest that the model predicts runs ``aim`` times as fast with ``removed`` layers removed
        (rounded down to 1e-4; below 0 where even nothing kept would be too slow)."""
        rest = self._rest(removed)
        return math.floor((1.0 / aim - self.fixed - self.per_layer * rest) / (self.per_flop * rest) * 1e4) / 1e4
