"""Encoding speed of shrunk models against the dense model, measured side by side in one run.

all-MiniLM-L6-v2 (the default model) is pruned at each sparsity (a fraction of heads and of FFN
neurons), physically shrunk, saved to a scratch directory and timed against the dense model on the CPU as a
target times its candidates (:func:`sparsecse.targets.report.stsb_speedups`: the distinct STS-B test sentences,
``--rounds`` interleaved rounds in a fresh process, the median of the rounds' ratios with its interval). Printed
per sparsity: parameters, FLOPs per token and its ratio to the dense model, measured speedup [its interval],
speedup / FLOPs ratio, and the STS-B test score (cosine Spearman x100 as sparsecse eval computes it, no
retraining).

Masks: from ``--scores`` (a ``sparsecse score`` file, pruned at ``--lambda``) when given, else random
(random scores ranked globally, seeded, at least one head kept per layer).

    python benchmarks/shrink_speed.py [--scores SCORES] [--threads 2] [--rounds 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from sparsecse.data.sts import read_sts_benchmark  # noqa: E402
from sparsecse.modeling.encoder import SentenceEncoder  # noqa: E402
from sparsecse.evaluation.sts import cosine_rows, spearman100  # noqa: E402
from sparsecse.modeling.flops import count_parameters, flops_per_token  # noqa: E402
from sparsecse.modeling.adapters import uniform_shape  # noqa: E402
from sparsecse.pruning.masks import Mask  # noqa: E402
from sparsecse.pruning.prune import prune  # noqa: E402
from sparsecse.pruning.selection import masks_from_scores  # noqa: E402
from sparsecse.shrinking.surgery import shrink_encoder  # noqa: E402
from sparsecse.shrinking.shrink import save_model_dir  # noqa: E402
from sparsecse.targets.report import stsb_speedups  # noqa: E402
from sparsecse.targets.timing import ROUNDS  # noqa: E402

TARGETS = {0.3: 1.3, 0.5: 1.6}  # minimum speedups on 2 cores
FLOPS_SHARE_TARGET = 0.85  # measured speedup >= this share of the FLOPs ratio


def random_mask(model, sparsity: float, seed: int) -> Mask:
    layers, heads, ffn = uniform_shape(model)
    g = torch.Generator().manual_seed(seed)
    keep = masks_from_scores(torch.rand(layers, heads, generator=g), torch.rand(layers, ffn, generator=g), sparsity)
    return Mask(*keep, manifest={"sparsity": sparsity, "source": f"random, seed {seed}"})


def stsb_score(embeddings: np.ndarray, pairs) -> float:
    """Spearman x100 between cosine similarity and gold score (sparsecse.evaluation's STS protocol)."""
    n = len(pairs)
    return spearman100(cosine_rows(embeddings[:n], embeddings[n:]), [p.score for p in pairs])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model (default: all-MiniLM-L6-v2)")
    parser.add_argument("--data-dir", default=None, help="SentEval data (default: $SPARSECSE_DATA / cache)")
    parser.add_argument("--sparsities", default="0.1,0.3,0.5")
    parser.add_argument("--scores", default=None, help="score file for score-based masks (else random masks)")
    parser.add_argument("--lambda", dest="lam", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved timing rounds")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--align-ffn", type=int, default=8, help="as `sparsecse shrink --align-ffn` (1 = exact)")
    parser.add_argument("--json", dest="json_out", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sparsities = [float(s) for s in args.sparsities.split(",")]

    pairs = read_sts_benchmark(args.data_dir, "test")
    sentences = [p.s1 for p in pairs] + [p.s2 for p in pairs]
    dense = SentenceEncoder.load(args.model, device="cpu")
    distinct = list(dict.fromkeys(sentences))
    ids = dense.tokenizer(distinct, truncation=True, max_length=dense.max_length)["input_ids"]
    seq_len = round(statistics.mean(len(i) for i in ids))

    models = {0.0: dense}
    masks = {}
    for s in sparsities:
        mask = prune(args.scores, s, args.lam) if args.scores else random_mask(dense.model, s, args.seed)
        masks[s] = mask
        models[s] = shrink_encoder(copy.deepcopy(dense), mask, align_ffn=args.align_ffn)
    mask_kind = f"score-based ({args.scores}, lambda {args.lam})" if args.scores else f"random (seed {args.seed})"
    print(f"{len(distinct)} distinct STS-B test sentences, mean {seq_len} tokens; {args.threads} threads; "
          f"masks: {mask_kind}; FFN aligned to {args.align_ffn}; the median of {args.rounds} interleaved rounds' "
          "ratios, timed as targets time", file=sys.stderr)

    order = list(models)
    with tempfile.TemporaryDirectory(prefix="shrink-speed-") as scratch:
        dirs = {s: str(Path(scratch) / f"s{s:g}") for s in order}
        for s in order:
            save_model_dir(models[s], dirs[s])
        timed, _, timed_sentences = stsb_speedups(dirs[0.0], {str(s): dirs[s] for s in order if s}, args.data_dir,
                                                  args.batch_size, args.threads, args.rounds)
    embeddings = {s: models[s].encode(sentences, batch_size=args.batch_size) for s in order}

    dense_flops = flops_per_token(dense, seq_len)
    reference = next(iter(timed.values())).reference_figure if timed else float("nan")
    rows = []
    for s, encoder in models.items():
        flops = flops_per_token(encoder, seq_len)
        timing = timed.get(str(s))
        row = {
            "sparsity": s,
            "heads_pruned": masks[s].heads_pruned if s else 0,
            "neurons_pruned": masks[s].neurons_pruned if s else 0,
            "parameters": count_parameters(encoder),
            "layer_parameters": count_parameters(encoder, "layers"),
            "flops_per_token": flops,
            "flops_ratio": dense_flops / flops,
            "sentences_per_second": timing.figure if timing else reference,
            "speedup": timing.speedup if timing else 1.0,
            "speedup_ci": [timing.interval.low, timing.interval.high] if timing else [1.0, 1.0],
            "stsb_test": stsb_score(embeddings[s], pairs),
        }
        row["speedup_share_of_flops_ratio"] = row["speedup"] / row["flops_ratio"]
        rows.append(row)

    print(f"{'sparsity':>8} {'params':>11} {'layer params':>12} {'GFLOPs/tok':>10} {'FLOPs ratio':>11} "
          f"{'sent/s':>8} {'speedup':>8} {'interval':>14} {'share':>6} {'STS-B':>6}  targets")
    failures = []
    for row in rows:
        s = row["sparsity"]
        checks = []
        if s in TARGETS:
            ok = row["speedup"] >= TARGETS[s]
            checks.append(f"speedup>={TARGETS[s]}x {'ok' if ok else 'MISSED'}")
            failures += [] if ok else [s]
        if s:
            ok = row["speedup_share_of_flops_ratio"] >= FLOPS_SHARE_TARGET
            checks.append(f"share>={FLOPS_SHARE_TARGET:.0%} {'ok' if ok else 'MISSED'}")
            failures += [] if ok else [s]
        print(f"{s:>8.0%} {row['parameters']:>11,} {row['layer_parameters']:>12,} {row['flops_per_token'] / 1e9:>10.4f} "
              f"{row['flops_ratio']:>10.2f}x {row['sentences_per_second']:>8.0f} {row['speedup']:>7.2f}x "
              f"{'[{:.2f}, {:.2f}]'.format(*row['speedup_ci']):>14} {row['speedup_share_of_flops_ratio']:>6.0%} "
              f"{row['stsb_test']:>6.2f}  "
              f"{', '.join(checks)}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"seq_len": seq_len, "threads": args.threads, "align_ffn": args.align_ffn, "masks": mask_kind,
                       "rounds": args.rounds, "batch_size": args.batch_size, "sentences": len(timed_sentences),
                       "round_ratios": {s: list(t.ratios) for s, t in timed.items()}, "rows": rows}, f, indent=2)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
