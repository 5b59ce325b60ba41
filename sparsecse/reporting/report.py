"""Rebuild a sweep's tidy results table, paper-style summary and figures from its point files.

Nothing is recomputed: :func:`report` only reads ``DIR/points/**.json`` (and the score file for the
head-importance heat maps), so it works on a finished sweep or on one still running.
"""


from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from sparsecse.errors import SparseCSEError
from sparsecse.artifacts.files import atomic_file, write_json
from sparsecse.evaluation.tasks import STS_TASKS, TRANSFER_TASKS
from sparsecse.artifacts.sweep_layout import SWEEP_FILE, read_sweep_state
from sparsecse.reporting.control_comparisons import comparison_table, control_comparisons, control_lines
from sparsecse.reporting.dense_comparisons import dense_comparison_lines, dense_comparison_table, dense_comparisons
from sparsecse.reporting.formatting import AVG_STS, AVG_TRANSFER
from sparsecse.reporting.figures import make_figures
from sparsecse.artifacts.model_names import model_label
from sparsecse.reporting.tables import (best_points, load_points, point_frame, picks_table, average_grid,
                                     results_table)
from sparsecse.artifacts.sweep_layout import RESULTS_CSV, RESULTS_JSON, SUMMARY_FILE

__all__ = ["report", "summary_markdown", "load_points", "results_table", "point_frame", "best_points"]


def rewind_settings_lines(out: Path | None, table: pd.DataFrame | None = None) -> list[str]:
    """One summary line per rewinding setting of the sweep in ``out`` (objective, corpus, arguments, seeds, init)."""
    lines = []
    for settings_path in sorted(Path(out).glob("rewound/*/settings.json")) if out else []:
        try:
            settings = json.loads(settings_path.read_text())
        except (OSError, ValueError):
            continue  # a damaged settings record only loses its line in the summary
        rid = settings_path.parent.name
        seeds = [] if table is None else sorted(table[table["rewind_id"] == rid]["seed"].dropna().unique())
        seeds_text = (f"seeds {', '.join(f'{x:g}' for x in seeds)}" if seeds else f"seed {settings.get('seed')}")
        args = ", ".join(f"{k} {v}" for k, v in (settings.get("args") or {}).items()) or "the recipe's defaults"
        lines.append(f"- rewinding `{rid}`: objective {settings.get('objective')}, corpus "
                     f"`{settings.get('corpus')}`, {args}, {seeds_text}, "
                     f"init {settings.get('init') or 'the model (or its recorded initial checkpoint)'}")
    return lines


def summary_markdown(table: pd.DataFrame, state: dict[str, Any], out: Path | None = None,
                     comparisons: list[dict[str, Any]] | None = None) -> str:
    """The sweep's summary.md: baseline, best points, averages, rewound points and their comparisons."""
    fp = state.get("fingerprint", {})
    runs = state.get("runs", [])
    model = fp.get("model", "?")
    frame = point_frame(table) if len(table) else None
    lines = [f"# Sweep summary: {model_label(model)}", "",
             f"- model: `{model}` (pooling {fp.get('pooling')}, max length {fp.get('max_length')})",
             f"- scoring: STS-B {fp.get('scoring', {}).get('split')}, batch {fp.get('scoring', {}).get('batch_size')}, "
             f"seed {fp.get('scoring', {}).get('seed')}; pruning scope {fp.get('pruning', {}).get('scope')}",
             f"- points: {0 if frame is None else len(frame)} evaluated; " + (
                 f"sweep time {sum(r.get('seconds', 0) for r in runs) / 60:.1f} min over {len(runs)} run(s)"
                 if runs else "no finished run recorded yet (running, or killed)"),
             *rewind_settings_lines(out, table), ""]
    if frame is None:
        return "\n".join(lines + ["No evaluated points yet.", ""])
    tasks = set(table["task"])
    for group, title, avg_label, key in ((STS_TASKS, "STS (Spearman × 100)", "Avg.", AVG_STS),
                                         (TRANSFER_TASKS, "Transfer (accuracy)", "Avg.", AVG_TRANSFER)):
        present = [t for t in group if t in tasks]
        if not present:
            continue
        lines += [f"## {title}", "",
                  "Differences to the dense baseline in parentheses; `@s, λ` is where the best value was found; "
                  "a configuration rewound with several seeds shows mean ± standard deviation over its seeds.",
                  "", *picks_table(table, present, avg_label), ""]
        grid = average_grid(table, key)
        if grid:
            lines += [f"### {'Average STS' if key == AVG_STS else 'Average transfer accuracy'} by sparsity and λ",
                      "", "Bold: the best λ at that sparsity. Params removed: share of the transformer layers' "
                      "parameters.", "", *grid, ""]
        if key == AVG_STS and comparisons:
            lines += control_lines(comparisons, present)
    if frame["alignment"].notna().any():
        au = frame[frame["alignment"].notna()].sort_values(["variant", "sparsity"])
        lines += ["## Alignment and uniformity (smaller is better)", "",
                  "| point | alignment | uniformity | avg. STS |", "|---|---|---|---|"]
        for _, r in au.iterrows():
            avg = "–" if pd.isna(r[AVG_STS]) else f"{r[AVG_STS]:.2f}"
            lines.append(f"| {r['point']} | {r['alignment']:.4g} | {r['uniformity']:.4g} | {avg} |")
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- seeds vs the control
def report(out: str | os.PathLike, figures: bool = True, replicates: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Write ``results.csv``, ``results.json``, ``summary.md``, ``figures/`` and, when rewound points have a
    control, ``comparisons.csv`` (each against the control over seeds; ``replicates`` paired bootstrap
    replicates with ``seed``) for the sweep in ``out``."""
    out = Path(out)
    state_path = out / SWEEP_FILE
    if not state_path.is_file():
        raise SparseCSEError(f"{out} is not a sweep directory (it has no {SWEEP_FILE}).")
    state = read_sweep_state(out)
    points = load_points(out)
    if not points:
        raise SparseCSEError(f"The sweep in {out} has no evaluated points yet.")
    table = write_tables(out, points, state)
    comparisons = control_comparisons(out, replicates, seed)
    if comparisons:
        with atomic_file(out / "comparisons.csv", overwrite=True) as tmp:
            comparison_table(comparisons).to_csv(tmp, index=False)
    against_dense = dense_comparisons(out, points, replicates, seed)
    if against_dense:
        with atomic_file(out / "dense_comparisons.csv", overwrite=True) as tmp:
            dense_comparison_table(against_dense).to_csv(tmp, index=False)
    summary = summary_markdown(table, state, out, comparisons) + "\n".join(dense_comparison_lines(against_dense))
    with atomic_file(out / SUMMARY_FILE, overwrite=True) as tmp:
        tmp.write_text(summary)
    written = make_figures(out, table, state, comparisons) if figures else []
    return {"results_csv": out / RESULTS_CSV, "results_json": out / RESULTS_JSON,
            "summary": out / SUMMARY_FILE, "figures": written, "table": table, "summary_text": summary,
            "comparisons": comparisons, "dense_comparisons": against_dense}


def write_tables(out: Path, points: list[dict[str, Any]], state: dict[str, Any]) -> pd.DataFrame:
    """Write results.csv and results.json from the points; returns the table."""
    table = results_table(points, model=state.get("fingerprint", {}).get("model"))
    with atomic_file(out / RESULTS_CSV, overwrite=True) as tmp:
        table.to_csv(tmp, index=False)
    write_json(out / RESULTS_JSON, json.loads(table.to_json(orient="records")))
    return table

