"""The sweep's tidy results table and the summary tables built from it (best points, λ grids)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.tasks import STS_TASKS, TRANSFER_TASKS
from sparsecse.artifacts.sweep_layout import Variant, read_point
from sparsecse.reporting.formatting import AVG_STS, AVG_TRANSFER, SHORT_NAMES, format_cell, seed_std, where_found
from sparsecse.evaluation.seeds import config_name
from sparsecse.artifacts.sweep_layout import POINTS_DIR

COLUMNS = ["model", "variant", "objective", "rewind_id", "sparsity", "lambda", "seed", "task", "score", "avg_sts",
           "avg_transfer", "alignment", "uniformity", "heads_pruned", "neurons_pruned", "param_sparsity",
           "keep_flops", "kept_flops_ratio", "eval_seconds", "rewind_seconds", "point"]


# ---------------------------------------------------------------------------- the table
def load_points(out: str | os.PathLike) -> list[dict[str, Any]]:
    """Every point record of a sweep, each with its name (its path under points/, no suffix)."""
    root = Path(out) / POINTS_DIR
    points = []
    for path in sorted(root.rglob("*.json")):
        record = read_point(path)
        if not record or not record.get("scores"):  # e.g. an emptied file: dropping it would shrink the table silently
            raise SparseCSEError(f"The sweep point {path} holds no scores; delete it and run the sweep again to "
                                 "recompute it.")
        record["point"] = str(path.relative_to(root).with_suffix(""))
        points.append(record)
    return points


def results_table(points: Sequence[dict[str, Any]], model: str | None = None) -> pd.DataFrame:
    """One row per model x variant x sparsity x λ x seed x task (tidy), with the point's summary columns
    (``seed``: the rewinding seed of rewound points, empty for the others)."""
    rows = []
    for p in points:
        for task, value in p.get("scores", {}).items():
            row = {c: p.get(c) for c in COLUMNS if c not in ("model", "task", "score")}
            row.update(model=model, task=task, score=value)
            rows.append(row)
    table = pd.DataFrame(rows, columns=COLUMNS)
    order = {t: i for i, t in enumerate(STS_TASKS + TRANSFER_TASKS)}
    variant_order = {v.value: i for i, v in enumerate((Variant.DENSE, Variant.MASKED, Variant.REWOUND))}
    if len(table):
        table = table.assign(_v=table["variant"].map(variant_order), _t=table["task"].map(order).fillna(99))
        table = table.sort_values(["_v", "rewind_id", "lambda", "sparsity", "seed", "_t"], na_position="first")
        table = table.drop(columns=["_v", "_t"]).reset_index(drop=True)
    return table


SEED_STATS = ["avg_sts", "avg_transfer", "alignment", "uniformity"]


def point_frame(table: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration (tasks as columns), keeping variant, sparsity, λ and the averages.

    The seeds of a rewound configuration (points ``<name>-seed<k>``) become one row named ``<name>``:
    scores and averages are their means, ``<column>seed_std`` their standard deviations (ddof 1; empty
    for one seed) and ``n_seeds`` how many there are.
    """

    keys = ["variant", "rewind_id", "objective", "sparsity", "lambda"]
    extra = SEED_STATS + ["heads_pruned", "neurons_pruned", "param_sparsity", "point"]
    filled = table.assign(rewind_id=table["rewind_id"].fillna(""), objective=table["objective"].fillna(""),
                          _lam=table["lambda"].fillna(-1.0))
    wide = filled.pivot_table(index=["point"], columns="task", values="score", aggfunc="first")
    info = filled.drop_duplicates("point").set_index("point")[[k for k in keys + extra if k != "point"]]
    per_seed = info.join(wide).reset_index()
    per_seed["point"] = per_seed["point"].map(config_name)
    stats = [c for c in [*SEED_STATS, *wide.columns] if c in per_seed.columns]
    groups = per_seed.groupby("point", sort=False)
    frame = groups.first()
    frame[stats] = groups[stats].mean()
    std = groups[stats].std(ddof=1).add_suffix("_std")
    frame = frame.join(std).assign(n_seeds=groups.size())
    return frame.reset_index()


# ---------------------------------------------------------------------------- best picks
def best_row(frame: pd.DataFrame, column: str) -> pd.Series | None:
    """The row with the highest ``column``; ties go to the lower sparsity, then the lower λ."""
    frame = frame[frame[column].notna()]
    if frame.empty:
        return None
    ordered = frame.assign(_neg=-frame[column], _lam=frame["lambda"].fillna(-1.0))
    return ordered.sort_values(["_neg", "sparsity", "_lam"], kind="stable").iloc[0]


def best_points(table: pd.DataFrame, tasks: Sequence[str], variant: Variant = Variant.MASKED,
                rewind_id: str | None = None) -> dict[str, Any]:
    """Paper Table 1's picks for one variant: the dense baseline, the best-average point and the best
    point per task, each with its difference to the baseline.

    Returns ``{"baseline": {task: x}, "best_average": {"sparsity", "lambda", "scores", "std", "diff"},
    "best_per_task": {task: {"sparsity", "lambda", "score", "std", "diff"}}}``, the average under the key
    ``avg_sts`` (or ``avg_transfer`` for transfer tasks). Only pruned points (sparsity > 0) compete; a
    configuration rewound with several seeds competes with its seed mean (``std`` over its seeds).
    """
    frame = point_frame(table)
    avg_key = AVG_TRANSFER if all(t in TRANSFER_TASKS for t in tasks) else AVG_STS
    columns = [t for t in tasks if t in frame.columns] + [avg_key]
    dense = frame[frame["variant"] == Variant.DENSE]
    baseline = {c: float(dense.iloc[0][c]) for c in columns if len(dense) and pd.notna(dense.iloc[0][c])}
    pool = frame[(frame["variant"] == variant) & (frame["sparsity"] > 0)]
    if rewind_id is not None:
        pool = pool[pool["rewind_id"] == rewind_id]

    def diff(c, value):
        return None if c not in baseline or value is None else float(value) - baseline[c]

    def describe(row, c):
        value = None if pd.isna(row[c]) else float(row[c])
        lam = None if pd.isna(row["lambda"]) else float(row["lambda"])
        return {"sparsity": float(row["sparsity"]), "lambda": lam, "score": value, "std": seed_std(row, c),
                "diff": diff(c, value)}

    picks: dict[str, Any] = {"baseline": baseline, "best_average": None, "best_per_task": {}}
    best = best_row(pool, avg_key)
    if best is not None:
        scores = {c: (None if pd.isna(best[c]) else float(best[c])) for c in columns}
        picks["best_average"] = {"sparsity": float(best["sparsity"]),
                                 "lambda": None if pd.isna(best["lambda"]) else float(best["lambda"]),
                                 "scores": scores, "std": {c: seed_std(best, c) for c in columns},
                                 "diff": {c: diff(c, v) for c, v in scores.items()}}
    for c in columns:
        row = best_row(pool, c)
        if row is not None:
            picks["best_per_task"][c] = describe(row, c)
    return picks


def picks_table(table: pd.DataFrame, tasks: Sequence[str], avg_label: str) -> list[str]:
    """Markdown rows: the dense baseline, then best-average and best-per-task rows for every variant."""
    frame = point_frame(table)
    avg_key = AVG_TRANSFER if all(t in TRANSFER_TASKS for t in tasks) else AVG_STS
    columns = [t for t in tasks if t in frame.columns] + [avg_key]
    header = ["", *[SHORT_NAMES.get(t, t) for t in columns[:-1]], avg_label]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    variants = [(Variant.MASKED, None, "pruned (no retraining)")]
    for rid, objective in frame[frame["variant"] == Variant.REWOUND][["rewind_id", "objective"]].drop_duplicates().values:
        variants.append((Variant.REWOUND, rid, f"pruned + rewound ({objective}, {rid})"))
    base = best_points(table, tasks)["baseline"]
    lines.append("| dense | " + " | ".join(format_cell(base.get(c)) for c in columns) + " |")
    for variant, rid, label in variants:
        picks = best_points(table, tasks, variant, rid)
        if variant == Variant.REWOUND:
            control = frame[(frame["variant"] == Variant.REWOUND) & (frame["rewind_id"] == rid) & (frame["sparsity"] == 0)]
            if len(control):
                row = control.iloc[0]
                lines.append(f"| dense + retrained ({row['objective']}), control | " + " | ".join(
                    format_cell(None if pd.isna(row[c]) else float(row[c]),
                          None if pd.isna(row[c]) or c not in base else float(row[c]) - base[c], std=seed_std(row, c))
                    for c in columns) + " |")
        best = picks["best_average"]
        if best is None:
            continue
        lines.append(f"| {label}, best avg. {where_found(best['sparsity'], best['lambda'])} | " + " | ".join(
            format_cell(best["scores"][c], best["diff"][c], std=best["std"][c]) for c in columns) + " |")
        per_task = picks["best_per_task"]
        lines.append(f"| {label}, best per task | " + " | ".join(
            format_cell(per_task[c]["score"], per_task[c]["diff"], where_found(per_task[c]["sparsity"], per_task[c]["lambda"]),
                  per_task[c]["std"])
            if c in per_task else "–" for c in columns) + " |")
    return lines


def average_grid(table: pd.DataFrame, key: str = AVG_STS) -> list[str]:
    """Markdown: ``key`` by sparsity (rows) and λ (columns), rewound points in extra columns."""
    frame = point_frame(table)
    pruned = frame[frame["sparsity"] > 0]
    if pruned.empty or pruned[key].isna().all():
        return []
    lambdas = sorted(pruned[pruned["variant"] == Variant.MASKED]["lambda"].dropna().unique())
    rewinds = [tuple(r) for r in pruned[pruned["variant"] == Variant.REWOUND][["rewind_id", "objective"]]
               .drop_duplicates().values]
    header = ["sparsity", "params removed", *[f"λ={lam:g}" for lam in lambdas],
              *[f"rewound {obj} ({rid})" for rid, obj in rewinds]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    dense = frame[frame["variant"] == Variant.DENSE]
    if len(dense) and pd.notna(dense.iloc[0][key]):
        lines.append("| 0 (dense) | 0% | " + " | ".join([f"{dense.iloc[0][key]:.2f}"] * len(lambdas)) +
                     "".join(f" | {_rewound_cell(frame, rid, 0.0, key)}" for rid, _ in rewinds) + " |")
    for s in sorted(pruned["sparsity"].unique()):
        at = pruned[pruned["sparsity"] == s]
        masked = at[at["variant"] == Variant.MASKED]
        ps = at["param_sparsity"].dropna()
        cells = [f"{100 * s:.3g}%", f"{100 * ps.iloc[0]:.1f}%" if len(ps) else "–"]
        for lam in lambdas:
            hit = masked[masked["lambda"] == lam][key].dropna()
            best = masked[key].max()
            cells.append("–" if hit.empty else (f"**{hit.iloc[0]:.2f}**" if hit.iloc[0] == best and len(lambdas) > 1
                                                else f"{hit.iloc[0]:.2f}"))
        cells += [_rewound_cell(frame, rid, s, key) for rid, _ in rewinds]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _rewound_cell(frame, rid, s, key) -> str:
    hit = frame[(frame["variant"] == Variant.REWOUND) & (frame["rewind_id"] == rid) & (frame["sparsity"] == s)]
    if hit.empty or pd.isna(hit.iloc[0][key]):
        return "–"
    lam = hit.iloc[0]["lambda"]
    return format_cell(float(hit.iloc[0][key]), std=seed_std(hit.iloc[0], key)) + ("" if pd.isna(lam) else f" (λ={lam:g})")