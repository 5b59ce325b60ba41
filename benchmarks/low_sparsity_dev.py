"""SparseCSE's own recipe on a small model: remove a few harmful heads and FFN neurons, no retraining.

Scores the model once on STS-B train, gates it with the mask of every (sparsity, λ) of the grid and
scores STS-B dev; the best dev point is the one to report (its mask is saved; shrink it and evaluate it
on the 7 STS tasks once). Writes OUT/dev_grid.json and OUT/dev_grid.md.

    python benchmarks/low_sparsity_dev.py --model ../shared/models/paraphrase-MiniLM-L3-v2 --out runs/l3s
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def table(grid: dict) -> str:
    """The dev grid as markdown: a row per sparsity, a column per λ, and the kept layer FLOPs."""
    lambdas = sorted({r["lambda"] for r in grid["rows"] if r["lambda"] is not None})
    by: dict[float, dict[float, dict]] = {}
    for r in grid["rows"]:
        if r["lambda"] is not None:
            by.setdefault(r["sparsity"], {})[r["lambda"]] = r
    chosen = grid["chosen"]
    lines = [f"STS-B dev (Spearman x 100) of {grid['model']} gated by SparseCSE masks (abs_grad, one head kept per "
             "layer, no retraining), from one score file on STS-B train (`benchmarks/low_sparsity_dev.py`).", "",
             f"Dense: **{grid['dense_dev']:.2f}**. Chosen (best dev): sparsity {chosen['sparsity']:g}, "
             f"λ {chosen['lambda']:g}.", "",
             "| sparsity | " + " | ".join(f"λ {lam:g}" for lam in lambdas) + " | kept layer FLOPs |",
             "|---:|" + "---:|" * (len(lambdas) + 1)]
    for s, row in sorted(by.items()):
        lines.append(f"| {s:g} | " + " | ".join(f"{row[lam]['dev']:.2f}" for lam in lambdas)
                     + f" | {row[lambdas[0]]['kept_flops']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--sparsities", default="0.04,0.05,0.06,0.08,0.1,0.12,0.15,0.2")
    parser.add_argument("--lambdas", default="0.25,0.5,0.75")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)

    import sparsecse
    from sparsecse.modeling.encoder import SentenceEncoder

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scores_path = out / "scores.safetensors"
    if not scores_path.exists():
        sparsecse.score(args.model, sparsecse.ScoringConfig(data_dir=args.data_dir)).save(scores_path)
    scores = sparsecse.GateScores.load(scores_path)
    encoder = SentenceEncoder.load(args.model, device="cpu")
    dev = sparsecse.EvaluationConfig(tasks="STSBenchmark", sts_split="dev", align_uniform=False, data_dir=args.data_dir)
    dense = sparsecse.evaluate(encoder, config=dev)["scores"]["STSBenchmark"]
    rows = [{"sparsity": 0.0, "lambda": None, "dev": dense}]
    for s in map(float, args.sparsities.split(",")):
        for lam in map(float, args.lambdas.split(",")):
            mask = sparsecse.prune(scores, s, lam)
            score = sparsecse.evaluate(encoder, mask=mask, config=dev)["scores"]["STSBenchmark"]
            rows.append({"sparsity": s, "lambda": lam, "dev": score, "kept_flops": mask.manifest["kept_flops_ratio"]})
            print(rows[-1], flush=True)
    chosen = max(rows[1:], key=lambda r: r["dev"])
    grid = {"model": str(args.model), "dense_dev": dense, "rows": rows, "chosen": chosen}
    (out / "dev_grid.json").write_text(json.dumps(grid, indent=2) + "\n")
    (out / "dev_grid.md").write_text(table(grid))
    sparsecse.prune(scores, chosen["sparsity"], chosen["lambda"]).save(out / "mask.safetensors")
    print(table(grid))


if __name__ == "__main__":
    main()
