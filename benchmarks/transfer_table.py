"""The paper's Table 2: SentEval transfer tasks for several models, each with its interval where the
protocol allows one, and the paired difference to a baseline row.

Reads result files from ``sparsecse eval --tasks TASK --out DIR/LABEL-TASK.json`` (one file per model and
task, so the tasks can run side by side) and writes a markdown table and a JSON record:

- MR, CR, SUBJ, MPQA (10-fold cross-validation): accuracy ± the standard deviation of the outer folds; the
  difference to the baseline is paired fold by fold (same folds: same seed and data), with how many of
  the folds agree in sign;
- SST-2, TREC, MRPC (one test set): accuracy with a percentile-bootstrap 95% interval over the test items;
  the difference to the baseline has a paired-bootstrap interval and p over the same items.

    python benchmarks/transfer_table.py --results runs/transfer --rows dense,s0.04-l0.25,control,rewound \
        --baseline dense --out docs/figures/evidence/minilm_transfer.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from sparsecse.evaluation.transfer_intervals import FOLD_TASKS, paired_transfer_difference

TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")


def load(results: Path, label: str, task: str) -> dict:
    record = json.loads((results / f"{label}-{task}.json").read_text())
    return {"score": record["scores"][task], "details": record["details"][task], "seconds": record["timing"]["total_s"],
            "device": record["settings"].get("device"), "protocol": record["settings"].get("transfer_protocol"),
            "model": record.get("model"), "mask": (record.get("mask") or {}).get("path")}


def cell(entry: dict, task: str) -> str:
    d = entry["details"]
    if task in FOLD_TASKS:
        return f"{entry['score']:.2f} ± {d['fold_std']:.2f}"
    lo, hi = d["ci"]
    return f"{entry['score']:.2f} [{lo:.1f}, {hi:.1f}]"


def difference(entry: dict, base: dict, task: str) -> dict:
    return paired_transfer_difference({task: base["details"]}, {task: entry["details"]})[task]


def diff_cell(d: dict) -> str:
    if "ci" in d:
        lo, hi = d["ci"]
        mark = "" if lo <= 0 <= hi else " ✓"
        return f"{d['diff']:+.2f} [{lo:+.1f}, {hi:+.1f}]{mark}"
    return f"{d['diff']:+.2f} ± {d['fold_std']:.2f} ({d['folds_agree']})"


def build(results: Path, rows: list[str], names: dict[str, str], baseline: str) -> tuple[list[str], dict]:
    data = {r: {t: load(results, r, t) for t in TASKS} for r in rows}
    record = {"rows": {}, "baseline": baseline}
    lines = ["| model | " + " | ".join(TASKS) + " | avg. |", "|---" * (len(TASKS) + 2) + "|"]
    for r in rows:
        avg = float(np.mean([data[r][t]["score"] for t in TASKS]))
        lines.append(f"| {names.get(r, r)} | " + " | ".join(cell(data[r][t], t) for t in TASKS) + f" | {avg:.2f} |")
        record["rows"][r] = {"avg": avg, "tasks": {t: {"acc": data[r][t]["score"], "seconds": data[r][t]["seconds"],
                                                       **{k: v for k, v in data[r][t]["details"].items()
                                                          if k in ("ci", "fold_std", "fold_range", "f1")}}
                                                   for t in TASKS}}
    lines += ["", f"Difference to {names.get(baseline, baseline)} (B − A; ✓: the paired interval excludes 0):", "",
              "| model | " + " | ".join(TASKS) + " | avg. |", "|---" * (len(TASKS) + 2) + "|"]
    base_avg = record["rows"][baseline]["avg"]
    for r in rows:
        if r == baseline:
            continue
        diffs = {t: difference(data[r][t], data[baseline][t], t) for t in TASKS}
        record["rows"][r]["vs_baseline"] = diffs
        lines.append(f"| {names.get(r, r)} | " + " | ".join(diff_cell(diffs[t]) for t in TASKS)
                     + f" | {record['rows'][r]['avg'] - base_avg:+.2f} |")
    lines += ["", "Evaluation time per task (s, encoding + classifier, as run):", "",
              "| model | " + " | ".join(TASKS) + " |", "|---" * (len(TASKS) + 1) + "|"]
    for r in rows:
        lines.append(f"| {names.get(r, r)} | " + " | ".join(f"{data[r][t]['seconds']:.0f}" for t in TASKS) + " |")
    first = data[rows[0]][TASKS[0]]
    record["protocol"], record["device"] = first["protocol"], first["device"]
    return lines, record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, required=True, help="folder of LABEL-TASK.json result files")
    parser.add_argument("--rows", required=True, help="labels, comma-separated, in table order")
    parser.add_argument("--name", action="append", default=[], help="LABEL=display name (repeatable)")
    parser.add_argument("--baseline", required=True, help="the label the differences are taken against")
    parser.add_argument("--out", type=Path, required=True, help="markdown file (a .json beside it)")
    args = parser.parse_args()
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    if args.baseline not in rows:
        raise SystemExit(f"The baseline {args.baseline!r} is not one of the rows.")
    names = dict(n.split("=", 1) for n in args.name)
    missing = [f"{r}-{t}.json" for r in rows for t in TASKS if not (args.results / f"{r}-{t}.json").is_file()]
    if missing:
        raise SystemExit(f"Missing result files in {args.results}: {', '.join(missing)}")
    lines, record = build(args.results, rows, names, args.baseline)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
