"""Rewound configurations against their retrained control, over seeds (the report's paired tests)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from sparsecse.evaluation.tasks import STS_TASKS
from sparsecse.artifacts.sweep_layout import Variant
from sparsecse.reporting.formatting import AVG_STS, SHORT_NAMES, format_cell, signed, where_found
from sparsecse.reporting.tables import load_points
from sparsecse.evaluation.results_file import load_pairs
from sparsecse.evaluation.seeds import compare_to_control, config_name
from sparsecse.artifacts.sweep_layout import PAIRS_DIR


COMPARISON_COLUMNS = ["rewind_id", "objective", "sparsity", "lambda", "point", "task", "n_seeds", "seeds",
                      "point_mean", "point_std", "control_mean", "control_std", "diff_mean", "diff_std",
                      "diff_per_seed", "seeds_same_sign", "paired_diff", "paired_ci_low", "paired_ci_high",
                      "paired_p", "holds"]


def control_comparisons(out: str | os.PathLike, replicates: int = 1000, seed: int = 0) -> list[dict[str, Any]]:
    """Every rewound configuration against its setting's retrained control (rewound dense), over their
    common seeds: see :mod:`sparsecse.evaluation.seeds` for when a difference holds."""

    out = Path(out)

    def pairs_of(name: str):
        path = out / PAIRS_DIR / f"{name}.safetensors"
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
            f"| {c['objective']} {where_found(c['sparsity'], c['lambda'])} | {len(r['seeds']['seeds'])} | "
            f"{format_cell(r['point'][0], std=r['point'][1])} | {format_cell(r['control'][0], std=r['control'][1])} | "
            f"{signed(r['seeds']['mean'])}" + (f" ± {r['seeds']['std']:.2f}" if r["seeds"]["std"] is not None else "")
            + f" | {' '.join(signed(d) for d in r['seeds']['per_seed'])} | {'yes' if r['seeds']['same_sign'] else 'no'} | "
            + (f"[{signed(paired['ci'][0])}, {signed(paired['ci'][1])}] | {paired['p']:.3f}" if paired
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
            cells.append("–" if r is None else f"{signed(r['seeds']['mean'])} {_mark(r)}".rstrip())
        lines.append(f"| {c['objective']} {where_found(c['sparsity'], c['lambda'])} | " + " | ".join(cells) + " |")
    return lines + [""]


# ---------------------------------------------------------------------------- figures
