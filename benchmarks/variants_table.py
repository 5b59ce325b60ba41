"""Choose among trained variants on STS-B dev, then report the chosen one's test figure.

For each group of variants (e.g. every distillation recipe tried at one budget), reads each variant's best
STS-B dev score from its training log (``DIR/NAME/train_log.jsonl``, ``stsb_dev_spearman``) and its 7-task
test evaluation (``EVALS/NAME.json`` from ``sparsecse eval --out``), picks the variant with the best dev score
and writes a markdown table in which only the chosen variant's test average is the group's result; the
other variants' test figures are listed for transparency, marked as not chosen.

    python benchmarks/variants_table.py --runs runs/d --evals runs/final \
        --group "L6 kept 0.7=l6f07-self,l6f07-self3,l6f07-mpsim,l6f07-mpsim3" --out table.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def best_dev(run: Path) -> float:
    values = [json.loads(line).get("stsb_dev_spearman") for line in (run / "train_log.jsonl").read_text().splitlines()
              if line.strip()]
    values = [v for v in values if v is not None]
    if not values:
        raise SystemExit(f"{run} logged no STS-B dev score.")
    return max(values)


def test_avg(evals: Path, name: str) -> float:
    return json.loads((evals / f"{name}.json").read_text())["avg_sts"]


def table(groups: dict[str, list[str]], runs: Path, evals: Path, recipes: dict[str, str]) -> list[str]:
    lines = ["| budget | variant | recipe | STS-B dev (best step) | 7-task STS test | chosen on dev |",
             "|---|---|---|---|---|---|"]
    for group, names in groups.items():
        devs = {n: best_dev(runs / n) for n in names}
        chosen = max(names, key=lambda n: devs[n])
        for n in names:
            mark = "**chosen**" if n == chosen else "–"
            test = f"**{test_avg(evals, n):.2f}**" if n == chosen else f"{test_avg(evals, n):.2f} (not chosen)"
            lines.append(f"| {group} | {n} | {recipes.get(n, '')} | {devs[n]:.2f} | {test} | {mark} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, required=True, help="folder of training output directories")
    parser.add_argument("--evals", type=Path, required=True, help="folder of NAME.json test evaluations")
    parser.add_argument("--group", action="append", required=True, help="LABEL=NAME,NAME,... (repeatable)")
    parser.add_argument("--recipe", action="append", default=[], help="NAME=description (repeatable)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    groups = {}
    for spec in args.group:
        label, _, names = spec.partition("=")
        groups[label] = [n.strip() for n in names.split(",") if n.strip()]
    lines = table(groups, args.runs, args.evals, dict(r.split("=", 1) for r in args.recipe))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
