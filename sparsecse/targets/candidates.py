"""The candidates a budget search tried: one row each (budget, units kept, measured speed-up, dev score), kept
beside the model as a table (CSV) and a plot (speed-up against dev score, the target drawn in)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sparsecse.artifacts.files import atomic_file

TABLE = "candidates.csv"
MAX_STEP_DOWN = 0.5  # an unanchored speed search's step beyond every probe keeps at least this much of the smallest
PLOT = "candidates.png"


@dataclass
class Candidate:
    """One budget the search tried.

    Args:
        keep_flops: the kept fraction of the layer FLOPs per token the probe was pruned to.
        heads_kept, neurons_kept: the units its mask keeps.
        speedup: encode speed-up over the input model on the target's engine at its serving shape (the median of
            interleaved rounds); ``spread``: the interquartile range of the rounds' ratios over that median.
        dev_score: its dev score (the dev set's metric x 100); ``drop``: the input model's minus it.
        stage: ``speed`` (one-shot prune, no refit: a timing probe), ``quality`` (pruned and refit as the prune
            stage does, so its dev score is the one the bound is checked on) or ``planned`` (a depth finalist built
            at the budget the speed model fitted across depths gives, scored on dev, not timed: ``speedup`` NaN).
        meets: whether it meets every part of the target it was checked against.
        layers_removed: whole layers the candidate removed (:mod:`sparsecse.targets.depth`); ``keep_flops`` is
            then the kept fraction of the remaining layers' FLOPs.
        dev_recovered: its dev score after a short recovery, where finalists were judged so (else None).
        retimed: whether it was timed again (its order contradicted its size).
        half_width: its figure's interval's half-width over the median (:mod:`sparsecse.targets.statistics`).
        predicted: the speed-up the search's fitted speed model gives at its budget (:mod:`sparsecse.targets.choice`).
        confirmed: where it was chosen, the speed-up of its fresh, independent timing; ``confirmed_half_width`` that
            timing's interval's half-width; ``confirmed_with_probe``: whether that timing holds the candidate's own
            probe (a winner chosen untimed, whose first timing was already independent of the choice), so a speed
            model counts it once, as the confirmation.
        stepped_up_from: where it is a wider candidate a confirmation over the aim stepped up to, the budget of the
            candidate confirmed before it (:func:`~sparsecse.targets.choice.stepped_up`).
    """

    keep_flops: float
    heads_kept: int
    neurons_kept: int
    speedup: float
    dev_score: float
    drop: float
    stage: str
    meets: bool = False
    chosen: bool = False
    spread: float = 0.0
    retimed: bool = False
    layers_removed: int = 0
    dev_recovered: float | None = None
    half_width: float = math.nan
    predicted: float = math.nan
    confirmed: float = math.nan
    confirmed_half_width: float = math.nan
    confirmed_with_probe: bool = False
    stepped_up_from: float = math.nan

    def reaches(self, aim: float) -> bool:
        """Whether it reaches a speed search's ``aim``: at or above it, or meeting the target and short of the aim
        by less than its own timing spread (else a probe 0.3% under the aim loses to a far smaller one that
        overshoots it)."""
        return self.speedup >= aim or (self.meets and self.speedup * (1 + self.spread) >= aim)

    def fell_short(self, aim: float) -> bool:
        """Whether its whole interval (its spread where it has none) fell short of ``aim``: a speed probe that bounds
        the budget of its depth from above (the safe side)."""
        half = self.half_width if math.isfinite(self.half_width) else self.spread
        return self.speedup * (1 + half) < aim

    def figures(self) -> list[tuple[float, float]]:
        """What a speed model fits of it, each (speed-up, its interval's relative half-width): its probe's figure,
        and its confirmation's where it was confirmed (one more independent point); the confirmation alone where
        that timing holds the probe's (``confirmed_with_probe``), so no timing counts twice."""
        probe = [] if self.confirmed_with_probe else [(self.speedup, self.half_width)]
        return probe + ([(self.confirmed, self.confirmed_half_width)] if math.isfinite(self.confirmed) else [])

    @property
    def dev_text(self) -> str:
        """``dev 84.12`` (``dev n/a`` where every embedding is the same and the metric is undefined)."""
        return f"dev {self.dev_score:.2f}" if math.isfinite(self.dev_score) else "dev n/a: constant embeddings"

    def describe(self) -> str:
        """e.g. ``kept FLOPs 0.450: 2.06x ±3%, dev 84.12 (drop +0.71)``, or ``2 layers removed, kept FLOPs of the
        rest 0.800: ...`` for a depth candidate (and its dev score after recovery, where it was measured)."""
        depth = f"{self.layers_removed} layers removed, kept FLOPs of the rest" if self.layers_removed else "kept FLOPs"
        recovered = "" if self.dev_recovered is None else f", dev {self.dev_recovered:.2f} after recovery"
        speed = f"{self.speedup:.2f}x ±{self.spread:.0%}" if math.isfinite(self.speedup) else "untimed"
        return f"{depth} {self.keep_flops:.3f}: {speed}, {self.dev_text} (drop {self.drop:+.2f}){recovered}"


SHAPE_COLUMNS = ("metric", "batch_size", "threads", "engine")  # the serving shape every row was timed at


def write_table(candidates: list[Candidate], path: str | Path, shape: dict[str, Any] | None = None) -> Path:
    """The candidates as CSV, in the order they were tried, each row with the serving shape (``shape``, a
    :meth:`~sparsecse.targets.spec.Shape.to_dict`) it was timed at.

    Args:
        candidates: the rows.
        path: the CSV file (replaced).
        shape: the serving shape (None: no shape columns).

    Returns:
        ``path``.
    """
    import pandas as pd

    path = Path(path)
    extra = {k: shape[k] for k in SHAPE_COLUMNS} if shape else {}
    frame = pd.DataFrame([{**asdict(c), **extra} for c in candidates])
    with atomic_file(path, overwrite=True) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.4f")
    return path


def read_table(path: str | Path) -> list[Candidate]:
    """The candidates a table written by :func:`write_table` holds."""
    import pandas as pd

    frame = pd.read_csv(path)
    return [Candidate(**{k: _cell(k, v) for k, v in row.items() if k not in SHAPE_COLUMNS})
            for row in frame.to_dict("records")]


def _cell(column: str, value):
    if column in ("meets", "chosen", "retimed", "confirmed_with_probe"):
        return bool(value)
    if column == "layers_removed":
        return int(value)
    if column == "dev_recovered" and value != value:  # an empty cell reads back as NaN
        return None
    return value


def write_plot(candidates: list[Candidate], path: str | Path, target: dict[str, Any], title: str) -> Path:
    """Speed-up (x) against dev score (y) of every candidate, the chosen one ringed; the target's speed-up a
    vertical line and its dev floor a horizontal one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(6, 4))
    for stage, marker in (("speed", "o"), ("quality", "s")):
        chosen = [c for c in candidates if c.stage == stage]
        if chosen:
            ax.errorbar([c.speedup for c in chosen], [c.dev_score for c in chosen],
                        xerr=[c.speedup * c.spread / 2 for c in chosen], fmt="none", ecolor="grey", elinewidth=0.8)
            ax.scatter([c.speedup for c in chosen], [c.dev_score for c in chosen], marker=marker,
                       c=["tab:green" if c.meets else "tab:red" for c in chosen],
                       label=f"{stage} probes (green: meets the target)")
            for c in chosen:
                ax.annotate(f"{c.keep_flops:.2f}", (c.speedup, c.dev_score), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")
    for c in candidates:
        if c.chosen:
            ax.scatter([c.speedup], [c.dev_score], s=180, facecolors="none", edgecolors="black", label="chosen")
    if target.get("speedup"):
        ax.axvline(float(target["speedup"]), color="grey", linestyle="--", label=f"target {target['speedup']:g}x")
    floor = target.get("dev_floor")
    if floor is not None and math.isfinite(floor):
        ax.axhline(float(floor), color="grey", linestyle=":", label=f"dev floor {floor:.2f}")
    shape = target.get("shape") or {}
    where = (f"{shape['metric']}, batch {shape['batch_size']}, {shape['threads']} threads, " if shape else "")
    ax.set_xlabel(f"measured speed-up over the input model ({where}{target.get('engine', '')}; bars: spread)")
    ax.set_ylabel("dev score")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return save_png(fig, path)


def save_png(fig, path: str | Path) -> Path:
    """Write the matplotlib figure ``fig`` to ``path`` as a PNG (atomically, replacing it) and close it.

    Args:
        fig: the figure.
        path: where it goes.

    Returns:
        ``path``.
    """
    import matplotlib.pyplot as plt

    fig.tight_layout()
    with atomic_file(path, overwrite=True) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return Path(path)


def next_budget_line(points: list[tuple[float, float]], aim: float, floor: float, anchored: bool = True) -> float:
    """The budget where time (1/speed-up, with the dense model at (1, 1)) reaches 1/aim: between the probes that
    bracket it, the line through those two; beyond every probe, the least-squares line through them all (two noisy
    probes close together can slope the wrong way), or, where even that does not rise with the budget, time taken
    as proportional to the budget from the probe nearest the aim. ``anchored``: the dense model (1, 1) is a point
    (not for the width of a model with layers removed, whose whole rest is already faster); without it, a step
    beyond every probe goes down to ``MAX_STEP_DOWN`` of the smallest budget probed at most.

        >>> next_budget_line([(0.714, 1.70), (0.643, 1.73)], 2.1, 0.013, anchored=False)  # a shallow, noisy line
        0.3215
    """
    goal = 1.0 / aim
    pts = sorted({*([(1.0, 1.0)] if anchored else []), *[(b, 1.0 / s) for b, s in points]})
    below = [p for p in pts if p[1] <= goal]  # fast enough
    above = [p for p in pts if p[1] > goal]
    if below and above:
        (b0, t0), (b1, t1) = max(below), min(above)
        if abs(t1 - t0) < 1e-12:
            return max(floor, min(b0, b1) / 2)
        b = b0 + (goal - t0) * (b1 - b0) / (t1 - t0)
    else:
        slope, intercept = np.polyfit([p[0] for p in pts], [p[1] for p in pts], 1)
        if slope > 1e-9:
            b = (goal - intercept) / slope
        else:
            near_b, near_t = min(pts, key=lambda p: abs(p[1] - goal))
            b = near_b * goal / near_t
        if not anchored:  # two close, noisy probes can draw a shallow line that leaps to the floor
            b = max(b, min(p[0] for p in pts) * MAX_STEP_DOWN)
    return min(0.98, max(floor, b))
