"""Matplotlib figures (PNG/SVG by the file suffix), drawn off-screen."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from sparsecse.artifacts.files import atomic_file
from sparsecse.artifacts.destinations import check_destination
from sparsecse.errors import SparseCSEError


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


FIGURE_FORMATS = ("png", "svg", "pdf")


def check_figure_path(out: str | os.PathLike, overwrite: bool = False, option: str = "--heatmap",
                      inputs=None) -> Path:
    """Refuse, before any work, a figure path whose suffix matplotlib cannot write or that exists."""

    out = Path(out)
    if out.suffix.lstrip(".").lower() not in FIGURE_FORMATS:
        raise SparseCSEError(f"{option} {out} must end in {', '.join('.' + f for f in FIGURE_FORMATS)}.")
    return check_destination(out, overwrite, inputs=inputs, option=option)


def _save(fig, out: str | os.PathLike, close: bool = True) -> Path:

    out = Path(out)
    with atomic_file(out, overwrite=True) as tmp:
        fig.savefig(tmp, format=out.suffix.lstrip(".") or "png", dpi=150, bbox_inches="tight")
    if close:
        _pyplot().close(fig)
    return out


def head_importance_heatmap(head_scores, out: str | os.PathLike, pruned=None, title: str | None = None) -> Path:
    """Layers x heads heat map of importance; ``pruned`` (bool [L, H], True = removed) marks heads with x."""
    plt = _pyplot()
    scores = np.asarray(head_scores, dtype=float)
    layers, heads = scores.shape
    fig, ax = plt.subplots(figsize=(0.45 * heads + 2, 0.45 * layers + 1.2))
    image = ax.imshow(scores, cmap="viridis", aspect="auto")
    fig.colorbar(image, ax=ax, label="importance E|dL/dξ|")
    if pruned is not None:
        ys, xs = np.nonzero(np.asarray(pruned, dtype=bool))
        ax.scatter(xs, ys, marker="x", color="red", s=60, label="pruned")
        if len(xs):
            ax.legend(loc="upper right", bbox_to_anchor=(1.0, 1.18), fontsize=8)
    ax.set_xticks(range(heads))
    ax.set_yticks(range(layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title or "Head importance")
    return _save(fig, out)


# ---------------------------------------------------------------------------- sweep figures
Curve = tuple  # (sparsities, values) or, for markers, (sparsities, values, standard deviations, labels)


def save_both(fig, out_stem: str | os.PathLike) -> list[Path]:
    """Save ``fig`` as ``<stem>.png`` and ``<stem>.svg`` (closing it afterwards)."""
    stem = Path(out_stem)
    return [_save(fig, stem.with_name(stem.name + ".png"), close=False), _save(fig, stem.with_name(stem.name + ".svg"))]


def _percent(s: float) -> str:
    return f"{100 * s:.3g}%"


def _sparsity_axis(ax, sparsities) -> dict[float, int]:
    """Evenly spaced categorical x positions for the grid (1-10% and 20-50% read equally well)."""
    ticks = sorted({float(s) for s in sparsities})
    ax.set_xticks(range(len(ticks)))
    ax.set_xticklabels([_percent(s) for s in ticks], rotation=45 if len(ticks) > 8 else 0, fontsize=8)
    ax.set_xlabel("sparsity (heads and FFN neurons removed)")
    return {s: i for i, s in enumerate(ticks)}


MARKER_COLORS = ("crimson", "black", "darkviolet", "saddlebrown")
REFERENCE_STYLES = (("crimson", ":"), ("darkviolet", ":"), ("saddlebrown", ":"))


def _draw_curves(ax, curves: dict[str, Curve], markers: dict[str, Curve] | None, baseline: float | None,
                 references: dict[str, float] | None = None, baseline_label: str = "dense"):
    everything = [s for curve in list(curves.values()) + list((markers or {}).values()) for s in curve[0]]
    pos = _sparsity_axis(ax, everything)
    for label, (xs, ys) in curves.items():
        ax.plot([pos[float(s)] for s in xs], ys, marker="o", markersize=3, linewidth=1.3, label=label)
    for (label, curve), color in zip((markers or {}).items(), MARKER_COLORS * 4):
        xs, ys = [pos[float(s)] for s in curve[0]], curve[1]
        errors = curve[2] if len(curve) > 2 and any(curve[2]) else None
        if errors is not None:  # standard deviation over seeds
            ax.errorbar(xs, ys, yerr=errors, fmt="none", ecolor=color, elinewidth=1.2, capsize=4, zorder=4)
        ax.scatter(xs, ys, marker="*", s=90, zorder=5, color=color, label=label)
        for x, y, text in zip(xs, ys, curve[3] if len(curve) > 3 else []):
            if text:  # e.g. ✓: the difference to the control holds
                ax.annotate(text, (x, y), xytext=(6, 4), textcoords="offset points", color=color, fontsize=9)
    if baseline is not None:
        ax.axhline(baseline, color="black", linestyle="--", linewidth=1, label=baseline_label)
    for (label, value), (color, style) in zip((references or {}).items(), REFERENCE_STYLES * 4):
        value, spread = value if isinstance(value, tuple) else (value, 0.0)
        ax.axhline(value, color=color, linestyle=style, linewidth=1.2, label=label)
        if spread:  # mean ± standard deviation over seeds as a band
            ax.axhspan(value - spread, value + spread, color=color, alpha=0.12, linewidth=0)
    ax.grid(alpha=0.3)


def score_vs_sparsity(curves: dict[str, Curve], out_stem, baseline: float | None = None,
                      markers: dict[str, Curve] | None = None, references: dict[str, float] | None = None,
                      ylabel: str = "average STS (Spearman x 100)", title: str | None = None) -> list[Path]:
    """One line per λ (``curves``: label -> (sparsities, values)); the dense model as a dashed line;
    ``markers`` (e.g. rewound points) as stars, with error bars when they carry standard deviations and
    their labels (e.g. ✓ where a difference to the control holds) beside them;
    ``references`` (e.g. the dense model retrained: a value or (mean, std)) as dotted lines, with a
    ± std band."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    _draw_curves(ax, curves, markers, baseline, references)
    ax.set_ylabel(ylabel)
    ax.set_title(title or "Average STS vs sparsity")
    ax.legend(fontsize=8, loc="best")
    return save_both(fig, out_stem)


def tasks_vs_sparsity(per_task: dict[str, dict[str, Curve]], out_stem, baselines: dict[str, float] | None = None,
                      markers: dict[str, dict[str, Curve]] | None = None,
                      references: dict[str, dict[str, float]] | None = None, ylabel: str = "Spearman x 100",
                      title: str | None = None, columns: int = 4) -> list[Path]:
    """Small multiples: one panel per task, each with one line per λ and the dense baseline."""
    plt = _pyplot()
    tasks = list(per_task)
    rows = max(1, -(-len(tasks) // columns))
    cols = min(columns, len(tasks)) or 1
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows), squeeze=False)
    for ax, task in zip(axes.flat, tasks):
        _draw_curves(ax, per_task[task], (markers or {}).get(task), (baselines or {}).get(task),
                     (references or {}).get(task))
        ax.set_title(task, fontsize=10)
        ax.set_xlabel("")
        ax.tick_params(axis="x", labelsize=6)
    for ax in list(axes.flat)[len(tasks):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.supylabel(ylabel, fontsize=9)
    fig.suptitle(title or "Each task vs sparsity")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8,
               bbox_to_anchor=(0.5, 0.0))
    return save_both(fig, out_stem)


def alignment_uniformity(points: list[dict], out_stem, title: str | None = None) -> list[Path]:
    """Alignment (x) vs uniformity (y), smaller is better for both, coloured by the STS average.

    ``points``: dicts with alignment, uniformity, avg_sts, label and kind ("dense", "masked", "rewound");
    points without alignment/uniformity are skipped.
    """
    plt = _pyplot()
    points = [p for p in points if p.get("alignment") is not None and p.get("uniformity") is not None]
    fig, ax = plt.subplots(figsize=(6.2, 4.8))
    if points:
        values = [p.get("avg_sts") for p in points]
        finite = [v for v in values if v is not None]
        vmin, vmax = (min(finite), max(finite)) if finite else (0, 1)
        styles = {"dense": ("*", 220), "masked": ("o", 40), "rewound": ("D", 60)}
        image, handles = None, []
        from matplotlib.lines import Line2D

        for kind, (marker, size) in styles.items():
            group = [p for p in points if p.get("kind") == kind]
            if not group:
                continue
            image = ax.scatter([p["alignment"] for p in group], [p["uniformity"] for p in group],
                               c=[p.get("avg_sts") if p.get("avg_sts") is not None else np.nan for p in group],
                               cmap="viridis", vmin=vmin, vmax=vmax, marker=marker, s=size,
                               edgecolors="black", linewidths=0.5)
            handles.append(Line2D([], [], marker=marker, linestyle="", color="lightgray", markeredgecolor="black",
                                  markersize=size ** 0.5 * 0.8, label=kind))
        for p in points:
            if p.get("label"):
                ax.annotate(p["label"], (p["alignment"], p["uniformity"]), fontsize=6, xytext=(3, 3),
                            textcoords="offset points")
        if image is not None:
            fig.colorbar(image, ax=ax, label="average STS")
        ax.legend(handles=handles, fontsize=8, loc="best")
    else:
        ax.text(0.5, 0.5, "no alignment/uniformity recorded", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("alignment  E‖h−h⁺‖²  (smaller is better)")
    ax.set_ylabel("uniformity  log E exp(−2‖hᵢ−hⱼ‖²)  (smaller is better)")
    ax.set_title(title or "Alignment vs uniformity")
    ax.grid(alpha=0.3)
    return save_both(fig, out_stem)


def pruned_per_layer(points: dict[str, tuple[list[int], list[int]]], out_stem, heads_per_layer: int | None = None,
                     neurons_per_layer: int | None = None, title: str | None = None) -> list[Path]:
    """Grouped bars: heads (left) and FFN neurons (right) removed in each layer, one bar per chosen point.

    ``points``: label -> (heads pruned per layer, neurons pruned per layer).
    """
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    labels = list(points)
    layers = max((len(h) for h, _ in points.values()), default=0)
    width = 0.8 / max(1, len(labels))
    x = np.arange(layers)
    for k, label in enumerate(labels):
        heads, neurons = (np.asarray(v, dtype=float) for v in points[label])
        offset = (k - (len(labels) - 1) / 2) * width
        left.bar(x + offset, heads, width, label=label)
        right.bar(x + offset, neurons, width, label=label)
    for ax, what, limit in ((left, "heads", heads_per_layer), (right, "FFN neurons", neurons_per_layer)):
        ax.set_xticks(x)
        ax.set_xticklabels([str(i) for i in x])
        ax.set_xlabel("layer")
        ax.set_ylabel(f"{what} removed" + (f" (of {limit})" if limit else ""))
        ax.grid(axis="y", alpha=0.3)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    left.set_title("attention heads removed per layer", fontsize=10)
    right.set_title("FFN neurons removed per layer", fontsize=10)
    right.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save_both(fig, out_stem)
