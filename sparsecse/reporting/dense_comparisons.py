"""Every pruned point of a sweep that was not retrained, against the dense model, with evidence.

Each point's STS score difference to the dense point gets a paired-bootstrap 95% interval and p-value
over the test pairs (both scored on the same resampled pairs,
:func:`sparsecse.evaluation.bootstrap.paired_comparison`), from the per-pair similarities the sweep keeps in ``DIR/pairs/``. A difference
whose interval includes 0 is reported as "no difference measured".

Example::

    rows = dense_comparisons("runs/mpnet-sweep")
    rows[0]["point"], rows[0]["avg"]["diff"], rows[0]["avg"]["ci"], rows[0]["verdict"]
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from sparsecse.evaluation.bootstrap import TaskPairs, paired_comparison
from sparsecse.evaluation.results_file import load_pairs
from sparsecse.evaluation.tasks import STS_TASKS
from sparsecse.artifacts.sweep_layout import Variant
from sparsecse.artifacts.sweep_layout import PAIRS_DIR

NOT_RETRAINED = (Variant.MASKED, Variant.BUDGET, Variant.RECONSTRUCTED)
COLUMNS = ["point", "variant", "sparsity", "lambda", "keep_flops", "task", "dense", "pruned", "diff", "ci_low",
           "ci_high", "p", "verdict"]


def verdict(ci: Sequence[float]) -> str:
    """How a difference's interval reads: above 0, below 0, or no difference measured."""
    if ci[0] > 0:
        return "higher than dense"
    if ci[1] < 0:
        return "lower than dense"
    return "no difference measured"


def dense_comparisons(out: str | os.PathLike, points: Sequence[dict[str, Any]], replicates: int = 1000,
                      seed: int = 0) -> list[dict[str, Any]]:
    """``points`` (records with their ``point`` name, as the report loads them) that were not retrained,
    each against the dense point: ``{"point", "variant", ..., "tasks": {task: {...}}, "avg": {"a", "b",
    "diff", "ci", "p"}, "verdict"}``. Points without stored pairs, or a sweep without a dense point, give none."""
    pairs_dir = Path(out) / PAIRS_DIR
    dense = next((p for p in points if p.get("variant") == Variant.DENSE), None)
    dense_file = pairs_dir / "dense.safetensors"
    if dense is None or not dense_file.is_file():
        return []
    base = load_pairs(dense_file)
    rows = []
    for point in points:
        path = pairs_dir / f"{point['point']}.safetensors"
        if point.get("variant") not in NOT_RETRAINED or not path.is_file():
            continue
        pruned = load_pairs(path)
        tasks = [t for t in STS_TASKS if t in base and t in pruned and t in dense["scores"] and t in point["scores"]]
        if not tasks:
            continue
        result = paired_comparison(
            {t: base[t]["similarity"] for t in tasks}, {t: pruned[t]["similarity"] for t in tasks},
            {t: TaskPairs.of(base[t]["gold"], list(base[t]["subsets"].values())) for t in tasks},
            {t: dense["scores"][t] for t in tasks}, {t: point["scores"][t] for t in tasks}, replicates, seed,
            unpaired=False)
        rows.append({"point": point["point"], "variant": str(Variant(point["variant"]).value),
                     "sparsity": point.get("sparsity"), "lambda": point.get("lambda"),
                     "keep_flops": point.get("keep_flops"), "tasks": result["tasks"], "avg": result["avg"],
                     "verdict": verdict(result["avg"]["ci"])})
    return rows


def dense_comparison_table(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Tidy rows (one per point x task, ``avg_sts`` included) of :func:`dense_comparisons`."""
    out = []
    for row in rows:
        for task, r in [*row["tasks"].items(), ("avg_sts", row["avg"])]:
            out.append({"point": row["point"], "variant": row["variant"], "sparsity": row["sparsity"],
                        "lambda": row["lambda"], "keep_flops": row["keep_flops"], "task": task, "dense": r["a"],
                        "pruned": r["b"], "diff": r["diff"], "ci_low": r["ci"][0], "ci_high": r["ci"][1],
                        "p": r["p"], "verdict": verdict(r["ci"])})
    return pd.DataFrame(out, columns=COLUMNS)


def dense_comparison_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Markdown: every point that was not retrained minus the dense model, with its paired interval."""
    if not rows:
        return []
    lines = ["### Pruned without retraining vs dense, paired", "",
             "B − A = the pruned point minus the dense model on the 7-task STS average; 95% interval and p from a "
             "paired bootstrap over the test pairs (both scored on the same resampled pairs, 1000 replicates). "
             "An interval that includes 0 reads \"no difference measured\".", "",
             "| point | avg. STS | dense | B − A | paired 95% interval | p | verdict |",
             "|---|---|---|---|---|---|---|"]
    for row in sorted(rows, key=lambda r: -r["avg"]["diff"]):
        a = row["avg"]
        lines.append(f"| {row['point']} | {a['b']:.2f} | {a['a']:.2f} | {a['diff']:+.2f} | "
                     f"[{a['ci'][0]:+.2f}, {a['ci'][1]:+.2f}] | {a['p']:.3f} | {row['verdict']} |")
    return lines + [""]
