"""The sweep report's figures: STS against sparsity, alignment/uniformity, heat maps, units per layer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from sparsecse.evaluation.tasks import STS_TASKS, TRANSFER_TASKS
from sparsecse.artifacts.sweep_layout import SCORES_FILE, Variant
from sparsecse.reporting.formatting import AVG_STS, AVG_TRANSFER, SHORT_NAMES, seed_std
from sparsecse.artifacts.model_names import model_label
from sparsecse.reporting.tables import best_row, load_points, point_frame
from sparsecse.pruning.masks import Mask
from sparsecse.pruning.prune import mask_filename
from sparsecse.scoring.scores import GateScores
from sparsecse.reporting import plots
from sparsecse.artifacts.sweep_layout import FIGURES_DIR, MASKS_DIR


def _curves(frame: pd.DataFrame, column: str) -> dict[str, tuple[list[float], list[float]]]:
    masked = frame[(frame["variant"] == Variant.MASKED) & frame[column].notna()]
    return {f"λ={lam:g}": (list(g.sort_values("sparsity")["sparsity"]), list(g.sort_values("sparsity")[column]))
            for lam, g in masked.groupby("lambda")}


def _rewound_markers(frame: pd.DataFrame, column: str, comparisons: list[dict[str, Any]] | None = None
                     ) -> dict[str, tuple[list[float], list[float], list[float], list[str]]]:
    """Rewound points per setting: (sparsities, seed means, seed standard deviations or 0, marks), the mark
    "✓" where the difference to the retrained control holds (see :func:`control_comparisons`)."""
    holds = {(c["rewind_id"], c["sparsity"]) for c in comparisons or []
             if c["rows"].get(column, {}).get("holds")}
    rewound = frame[(frame["variant"] == Variant.REWOUND) & (frame["sparsity"] > 0) & frame[column].notna()]
    markers = {}
    for (rid, obj), g in rewound.groupby(["rewind_id", "objective"]):
        g = g.sort_values("sparsity")
        seeds = int(g["n_seeds"].max())
        label = f"rewound ({obj})" + (f", mean ± std of {seeds} seeds" if seeds > 1 else "")
        markers[label] = (list(g["sparsity"]), list(g[column]), [seed_std(r, column) or 0.0 for _, r in g.iterrows()],
                          ["✓" if (rid, s) in holds else "" for s in g["sparsity"]])
    return markers


def _retrained_dense(frame: pd.DataFrame, column: str) -> dict[str, tuple[float, float]]:
    """The retrained control per setting: (seed mean, seed standard deviation or 0)."""
    control = frame[(frame["variant"] == Variant.REWOUND) & (frame["sparsity"] == 0) & frame[column].notna()]
    return {f"dense + retrained ({r['objective']})" + (" ± std" if seed_std(r, column) else ""):
            (float(r[column]), seed_std(r, column) or 0.0) for _, r in control.iterrows()}


def _baseline(frame, column):
    dense = frame[frame["variant"] == Variant.DENSE]
    return None if dense.empty or pd.isna(dense.iloc[0][column]) else float(dense.iloc[0][column])


LABELLED_SPARSITIES = (0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5)


def au_label(row, labelled_lambda) -> str:
    """A short label for some points of the alignment-uniformity plot (all of them would be unreadable)."""
    s = f"{100 * row['sparsity']:.3g}%"
    if row["variant"] == Variant.REWOUND:
        return "retrained" if row["sparsity"] == 0 else f"rewound {s}"
    return s if row["lambda"] == labelled_lambda and round(row["sparsity"], 6) in LABELLED_SPARSITIES else ""


def _count_sts(frame: pd.DataFrame) -> int:
    return sum(t in frame.columns for t in STS_TASKS)


def chosen_points(frame: pd.DataFrame, count: int = 4) -> list[pd.Series]:
    """Masked points for the per-layer figure: the best-average point, and at its λ the smallest, the
    largest and evenly spread sparsities in between (``count`` in all, at most)."""
    masked = frame[(frame["variant"] == Variant.MASKED)]
    if masked.empty:
        return []
    best = best_row(masked, AVG_STS) if masked[AVG_STS].notna().any() else masked.iloc[0]
    same = masked[masked["lambda"] == best["lambda"]].sort_values("sparsity")
    spread = {round(k * (len(same) - 1) / max(1, count - 2)) for k in range(count - 1)}
    picks = {float(best["sparsity"])} | {float(same.iloc[i]["sparsity"]) for i in spread}
    return [same[same["sparsity"] == s].iloc[0] for s in sorted(picks)]


def make_figures(out: Path, table: pd.DataFrame, state: dict[str, Any],
                 comparisons: list[dict[str, Any]] | None = None) -> list[Path]:
    """Write the sweep's figures (PNG and SVG) under ``out/figures`` from its results ``table``; returns the files."""
    figures = out / FIGURES_DIR
    figures.mkdir(exist_ok=True)
    frame = point_frame(table)
    written: list[Path] = []
    if frame[AVG_STS].notna().any():
        written += plots.score_vs_sparsity(_curves(frame, AVG_STS), figures / "avg_sts_vs_sparsity",
                                           _baseline(frame, AVG_STS), _rewound_markers(frame, AVG_STS, comparisons),
                                           _retrained_dense(frame, AVG_STS),
                                           title=f"Average STS ({_count_sts(frame)} tasks) vs sparsity")
    for group, stem, ylabel in ((STS_TASKS, "sts_tasks_vs_sparsity", "Spearman x 100"),
                                (TRANSFER_TASKS, "transfer_tasks_vs_sparsity", "accuracy")):
        present = [t for t in group if t in frame.columns and frame[t].notna().any()]
        if not present:
            continue
        avg = AVG_STS if group is STS_TASKS else AVG_TRANSFER
        panels = present + ([avg] if frame[avg].notna().any() else [])
        names = {p: SHORT_NAMES.get(p, p) if p != avg else "Avg." for p in panels}
        written += plots.tasks_vs_sparsity(
            {names[p]: _curves(frame, p) for p in panels}, figures / stem,
            {names[p]: _baseline(frame, p) for p in panels if _baseline(frame, p) is not None},
            {names[p]: _rewound_markers(frame, p, comparisons) for p in panels},
            {names[p]: _retrained_dense(frame, p) for p in panels}, ylabel=ylabel,
            title=("STS tasks" if group is STS_TASKS else "Transfer tasks") + " vs sparsity")
    if frame["alignment"].notna().any():
        lambdas = sorted(frame[frame["variant"] == Variant.MASKED]["lambda"].dropna().unique())
        median_lambda = lambdas[len(lambdas) // 2] if lambdas else None
        au = []
        for _, r in frame.iterrows():
            label = "dense" if r["variant"] == Variant.DENSE else au_label(r, median_lambda)
            au.append({"alignment": r["alignment"], "uniformity": r["uniformity"],
                       "avg_sts": None if pd.isna(r[AVG_STS]) else r[AVG_STS], "label": label,
                       "kind": r["variant"]})
        written += plots.alignment_uniformity(au, figures / "alignment_uniformity",
                                              title="Alignment vs uniformity (colour: average STS)")
    records = {r["point"]: r for r in load_points(out)}
    chosen = chosen_points(frame)
    if chosen:
        fp = state.get("fingerprint", {})
        shape = None
        per_layer = {}
        for row in chosen:
            rec = records[row["point"]]
            per_layer[f"{100 * row['sparsity']:.3g}%, λ={row['lambda']:g}"] = (
                rec.get("heads_pruned_per_layer", []), rec.get("neurons_pruned_per_layer", []))
            shape = rec
        layers = len(shape.get("heads_pruned_per_layer", [])) or 1
        written += plots.pruned_per_layer(
            per_layer, figures / "pruned_per_layer", heads_per_layer=shape.get("heads_total", 0) // layers,
            neurons_per_layer=shape.get("neurons_total", 0) // layers,
            title=f"Units removed per layer ({model_label(fp.get('model', ''))})")
    written += _heatmaps(out, frame, figures)
    return written


def _heatmaps(out: Path, frame: pd.DataFrame, figures: Path) -> list[Path]:
    """Head importance per λ, with the heads removed at that λ's best-average sparsity marked."""

    if not (out / SCORES_FILE).is_file():
        return []
    scores = GateScores.load(out / SCORES_FILE)
    written = []
    masked = frame[frame["variant"] == Variant.MASKED]
    for lam, group in masked.groupby("lambda"):
        best = best_row(group, AVG_STS) if group[AVG_STS].notna().any() else group.iloc[0]
        mask_path = out / MASKS_DIR / mask_filename(float(best["sparsity"]), float(lam))
        pruned = ~Mask.load(mask_path).head_mask if mask_path.is_file() else None
        stem = figures / f"head_importance_l{lam:g}"
        title = f"Head importance, λ={lam:g} (x: removed at {100 * best['sparsity']:.3g}%)"
        written += [plots.head_importance_heatmap(scores.head_scores(float(lam)), stem.with_name(stem.name + suffix), pruned,
                                                  title) for suffix in (".png", ".svg")]
    return written


# ---------------------------------------------------------------------------- entry point
