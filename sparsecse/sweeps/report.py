"""Rebuild a sweep's tidy results table, paper-style summary and figures from its point files.

Nothing is recomputed: :func:`report` only reads ``DIR/points/**.json`` (and the score file for the
head-importance heat maps), so it works on a finished sweep or on one still running.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from sparsecse.errors import SparseCSEError
from sparsecse.artifacts.files import atomic_file, write_json
from sparsecse.evaluation.tasks import STS_TASKS, TRANSFER_TASKS
from sparsecse.sweeps.layout import POINTS_DIR, SCORES_FILE, SWEEP_FILE, Variant, read_point, read_sweep_state
from sparsecse.sweeps.dense_comparisons import dense_comparison_lines, dense_comparison_table, dense_comparisons

COLUMNS = ["model", "variant", "objective", "rewind_id", "sparsity", "lambda", "seed", "task", "score", "avg_sts",
           "avg_transfer", "alignment", "uniformity", "heads_pruned", "neurons_pruned", "param_sparsity",
           "keep_flops", "kept_flops_ratio", "eval_seconds", "rewind_seconds", "point"]
SHORT_NAMES = {"STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R"}
AVG_STS, AVG_TRANSFER = "avg_sts", "avg_transfer"


# ---------------------------------------------------------------------------- the table
def load_points(out: str | os.PathLike) -> list[dict[str, Any]]:
    """Every point record of a sweep, each with its name (its path under points/, no suffix)."""
    root = Path(out) / "points"
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
    scores and averages are their means, ``<column>_std`` their standard deviations (ddof 1; empty
    for one seed) and ``n_seeds`` how many there are.
    """
    from sparsecse.evaluation.seeds import config_name

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
def _best_row(frame: pd.DataFrame, column: str) -> pd.Series | None:
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
        return {"sparsity": float(row["sparsity"]), "lambda": lam, "score": value, "std": _std(row, c),
                "diff": diff(c, value)}

    picks: dict[str, Any] = {"baseline": baseline, "best_average": None, "best_per_task": {}}
    best = _best_row(pool, avg_key)
    if best is not None:
        scores = {c: (None if pd.isna(best[c]) else float(best[c])) for c in columns}
        picks["best_average"] = {"sparsity": float(best["sparsity"]),
                                 "lambda": None if pd.isna(best["lambda"]) else float(best["lambda"]),
                                 "scores": scores, "std": {c: _std(best, c) for c in columns},
                                 "diff": {c: diff(c, v) for c, v in scores.items()}}
    for c in columns:
        row = _best_row(pool, c)
        if row is not None:
            picks["best_per_task"][c] = describe(row, c)
    return picks


def _std(row, column: str) -> float | None:
    """The standard deviation over seeds of ``column`` in a point_frame row (None: one seed)."""
    value = row.get(f"{column}_std")
    return None if value is None or pd.isna(value) else float(value)


# ---------------------------------------------------------------------------- markdown
def _signed(x: float | None) -> str:
    return "" if x is None else f"{x:+.2f}".replace("-", "−")


def _cell(value, delta=None, where: str = "", std: float | None = None) -> str:
    if value is None:
        return "–"
    text = f"{value:.2f}" + ("" if std is None else f" ± {std:.2f}")
    if delta is not None:
        text += f" ({_signed(delta)})"
    return text + (f" {where}" if where else "")


def _where(sparsity: float, lam: float | None) -> str:
    return f"@{100 * sparsity:.3g}%" + (f", λ={lam:g}" if lam is not None else "")


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
    lines.append("| dense | " + " | ".join(_cell(base.get(c)) for c in columns) + " |")
    for variant, rid, label in variants:
        picks = best_points(table, tasks, variant, rid)
        if variant == Variant.REWOUND:
            control = frame[(frame["variant"] == Variant.REWOUND) & (frame["rewind_id"] == rid) & (frame["sparsity"] == 0)]
            if len(control):
                row = control.iloc[0]
                lines.append(f"| dense + retrained ({row['objective']}), control | " + " | ".join(
                    _cell(None if pd.isna(row[c]) else float(row[c]),
                          None if pd.isna(row[c]) or c not in base else float(row[c]) - base[c], std=_std(row, c))
                    for c in columns) + " |")
        best = picks["best_average"]
        if best is None:
            continue
        lines.append(f"| {label}, best avg. {_where(best['sparsity'], best['lambda'])} | " + " | ".join(
            _cell(best["scores"][c], best["diff"][c], std=best["std"][c]) for c in columns) + " |")
        per_task = picks["best_per_task"]
        lines.append(f"| {label}, best per task | " + " | ".join(
            _cell(per_task[c]["score"], per_task[c]["diff"], _where(per_task[c]["sparsity"], per_task[c]["lambda"]),
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
    return _cell(float(hit.iloc[0][key]), std=_std(hit.iloc[0], key)) + ("" if pd.isna(lam) else f" (λ={lam:g})")


def model_label(model) -> str:
    """A short name for a model path: the embedded default by its name, else the directory's name."""
    from sparsecse.modeling.encoder import DEFAULT_MODEL_NAME, default_model_path

    try:
        if str(model) == str(default_model_path()):
            return DEFAULT_MODEL_NAME
    except SparseCSEError:
        pass
    path = Path(str(model))
    return path.parent.name if path.name in ("model", "") else path.name


def rewind_settings_lines(out: Path | None, table: pd.DataFrame | None = None) -> list[str]:
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
COMPARISON_COLUMNS = ["rewind_id", "objective", "sparsity", "lambda", "point", "task", "n_seeds", "seeds",
                      "point_mean", "point_std", "control_mean", "control_std", "diff_mean", "diff_std",
                      "diff_per_seed", "seeds_same_sign", "paired_diff", "paired_ci_low", "paired_ci_high",
                      "paired_p", "holds"]


def control_comparisons(out: str | os.PathLike, replicates: int = 1000, seed: int = 0) -> list[dict[str, Any]]:
    """Every rewound configuration against its setting's retrained control (rewound dense), over their
    common seeds: see :mod:`sparsecse.evaluation.seeds` for when a difference holds."""
    from sparsecse.evaluation.results_file import load_pairs
    from sparsecse.evaluation.seeds import compare_to_control, config_name

    out = Path(out)

    def pairs_of(name: str):
        path = out / "pairs" / f"{name}.safetensors"
        return load_pairs(path) if path.is_file() else None

    rewound = [{**p, "seed": p.get("seed", 0)} for p in load_points(out) if p.get("variant") == Variant.REWOUND]
    found = []
    for rid in sorted({p["rewind_id"] for p in rewound}):
        mine = [p for p in rewound if p["rewind_id"] == rid]
        control = [p for p in mine if p["sparsity"] == 0 and p.get("lambda") is None]
        tasks = [t for t in STS_TASKS if any(t in p.get("scores", {}) for p in mine)]
        if not control or not tasks:
            continue
        configs: dict[str, list[dict]] = {}
        for p in mine:
            if p["sparsity"] > 0:
                configs.setdefault(config_name(p["point"]), []).append(p)
        for name, group in sorted(configs.items(), key=lambda kv: (kv[1][0]["sparsity"], kv[1][0]["lambda"])):
            result = compare_to_control(group, control, tasks, pairs_of, replicates, seed)
            if result["rows"]:
                found.append({"rewind_id": rid, "objective": group[0].get("objective"), "point": name,
                              "sparsity": group[0]["sparsity"], "lambda": group[0]["lambda"], **result})
    return found


def comparison_table(comparisons: list[dict[str, Any]]) -> pd.DataFrame:
    """Tidy rows (one per configuration x task, ``avg_sts`` included) of :func:`control_comparisons`."""
    rows = []
    for c in comparisons:
        for task, r in c["rows"].items():
            paired = r["paired"] or {}
            rows.append({
                "rewind_id": c["rewind_id"], "objective": c["objective"], "sparsity": c["sparsity"],
                "lambda": c["lambda"], "point": c["point"], "task": task, "n_seeds": len(r["seeds"]["seeds"]),
                "seeds": " ".join(map(str, r["seeds"]["seeds"])), "point_mean": r["point"][0],
                "point_std": r["point"][1], "control_mean": r["control"][0], "control_std": r["control"][1],
                "diff_mean": r["seeds"]["mean"], "diff_std": r["seeds"]["std"],
                "diff_per_seed": " ".join(f"{d:+.4f}" for d in r["seeds"]["per_seed"]),
                "seeds_same_sign": r["seeds"]["same_sign"], "paired_diff": paired.get("diff"),
                "paired_ci_low": (paired.get("ci") or [None])[0], "paired_ci_high": (paired.get("ci") or [None, None])[1],
                "paired_p": paired.get("p"), "holds": r["holds"]})
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def _mark(row: dict[str, Any]) -> str:
    if row["holds"]:
        return "✓"
    return "".join(m for m, ok in (("s", row["seeds"]["same_sign"]), ("p", row["paired_excludes_zero"])) if ok)


def control_lines(comparisons: list[dict[str, Any]], tasks: Sequence[str]) -> list[str]:
    """Markdown: each rewound configuration minus the retrained control, seed by seed and paired."""
    lines = ["### Rewound vs the retrained control, over seeds", "",
             "B − A = rewound point minus the dense model retrained the same way, seed k against seed k. "
             "**Seeds agree**: B − A has the same sign for every seed (needs two or more). **Paired**: the 95% "
             "interval of the difference of the seed means from a paired bootstrap over the test pairs (each "
             "replicate resamples the pairs once and rescores every seed of both; 1000 replicates, pooled "
             "over seeds, not one test per seed) excludes 0; p is its two-sided p-value. **Holds** (✓): both, "
             "in the same direction.", "",
             "| rewound point | seeds | avg. STS | control | B − A (mean ± std) | per seed | seeds agree | "
             "paired 95% interval | p | holds |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in comparisons:
        r = c["rows"].get(AVG_STS)
        if r is None:
            continue
        paired = r["paired"]
        lines.append(
            f"| {c['objective']} {_where(c['sparsity'], c['lambda'])} | {len(r['seeds']['seeds'])} | "
            f"{_cell(r['point'][0], std=r['point'][1])} | {_cell(r['control'][0], std=r['control'][1])} | "
            f"{_signed(r['seeds']['mean'])}" + (f" ± {r['seeds']['std']:.2f}" if r["seeds"]["std"] is not None else "")
            + f" | {' '.join(_signed(d) for d in r['seeds']['per_seed'])} | {'yes' if r['seeds']['same_sign'] else 'no'} | "
            + (f"[{_signed(paired['ci'][0])}, {_signed(paired['ci'][1])}] | {paired['p']:.3f}" if paired
               else "– (no per-pair similarities stored) | –")
            + f" | {'✓' if r['holds'] else '–'} |")
    header = [SHORT_NAMES.get(t, t) for t in tasks] + ["Avg."]
    lines += ["", "Per task, B − A of the seed means; ✓ holds, s: only the seeds agree, p: only the paired "
              "interval excludes 0.", "", "| rewound point | " + " | ".join(header) + " |",
              "|" + "---|" * (len(header) + 1)]
    for c in comparisons:
        cells = []
        for key in [*tasks, AVG_STS]:
            r = c["rows"].get(key)
            cells.append("–" if r is None else f"{_signed(r['seeds']['mean'])} {_mark(r)}".rstrip())
        lines.append(f"| {c['objective']} {_where(c['sparsity'], c['lambda'])} | " + " | ".join(cells) + " |")
    return lines + [""]


# ---------------------------------------------------------------------------- figures
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
        markers[label] = (list(g["sparsity"]), list(g[column]), [_std(r, column) or 0.0 for _, r in g.iterrows()],
                          ["✓" if (rid, s) in holds else "" for s in g["sparsity"]])
    return markers


def _retrained_dense(frame: pd.DataFrame, column: str) -> dict[str, tuple[float, float]]:
    """The retrained control per setting: (seed mean, seed standard deviation or 0)."""
    control = frame[(frame["variant"] == Variant.REWOUND) & (frame["sparsity"] == 0) & frame[column].notna()]
    return {f"dense + retrained ({r['objective']})" + (" ± std" if _std(r, column) else ""):
            (float(r[column]), _std(r, column) or 0.0) for _, r in control.iterrows()}


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
    best = _best_row(masked, AVG_STS) if masked[AVG_STS].notna().any() else masked.iloc[0]
    same = masked[masked["lambda"] == best["lambda"]].sort_values("sparsity")
    spread = {round(k * (len(same) - 1) / max(1, count - 2)) for k in range(count - 1)}
    picks = {float(best["sparsity"])} | {float(same.iloc[i]["sparsity"]) for i in spread}
    return [same[same["sparsity"] == s].iloc[0] for s in sorted(picks)]


def make_figures(out: Path, table: pd.DataFrame, state: dict[str, Any],
                 comparisons: list[dict[str, Any]] | None = None) -> list[Path]:
    from sparsecse.sweeps import plots

    figures = out / "figures"
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
    from sparsecse.sweeps import plots
    from sparsecse.compress.masks import Mask
    from sparsecse.compress.pruning import mask_filename
    from sparsecse.compress.scoring import GateScores

    if not (out / SCORES_FILE).is_file():
        return []
    scores = GateScores.load(out / SCORES_FILE)
    written = []
    masked = frame[frame["variant"] == Variant.MASKED]
    for lam, group in masked.groupby("lambda"):
        best = _best_row(group, AVG_STS) if group[AVG_STS].notna().any() else group.iloc[0]
        mask_path = out / "masks" / mask_filename(float(best["sparsity"]), float(lam))
        pruned = ~Mask.load(mask_path).head_mask if mask_path.is_file() else None
        stem = figures / f"head_importance_l{lam:g}"
        title = f"Head importance, λ={lam:g} (x: removed at {100 * best['sparsity']:.3g}%)"
        written += [plots.head_importance_heatmap(scores.head_scores(float(lam)), stem.with_name(stem.name + suffix), pruned,
                                                  title) for suffix in (".png", ".svg")]
    return written


# ---------------------------------------------------------------------------- entry point
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
    with atomic_file(out / "summary.md", overwrite=True) as tmp:
        tmp.write_text(summary)
    written = make_figures(out, table, state, comparisons) if figures else []
    return {"results_csv": out / "results.csv", "results_json": out / "results.json",
            "summary": out / "summary.md", "figures": written, "table": table, "summary_text": summary,
            "comparisons": comparisons, "dense_comparisons": against_dense}


def write_tables(out: Path, points: list[dict[str, Any]], state: dict[str, Any]) -> pd.DataFrame:
    table = results_table(points, model=state.get("fingerprint", {}).get("model"))
    with atomic_file(out / "results.csv", overwrite=True) as tmp:
        table.to_csv(tmp, index=False)
    write_json(out / "results.json", json.loads(table.to_json(orient="records")))
    return table
