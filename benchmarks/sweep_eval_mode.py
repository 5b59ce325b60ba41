"""Which way should a sweep evaluate a pruned point: gated (masked) or physically shrunk first?

Side by side in one run, on all-MiniLM-L6-v2 (or --model): for each sparsity, the time to encode the
STS-B test sentences (what every STS evaluation spends its time on) with the mask attached as gates
(``masked``), against copying the model, shrinking the copy and encoding with it (``shrunk``; the copy
and the surgery are included). Rounds interleave (masked, shrunk, masked, ...) so background load hits
both alike; the figure is the median over ``--rounds`` of each round's ratio masked/shrunk, with the spread of the
rounds (the statistic every speed figure of sparsecse uses, :class:`sparsecse.targets.timing.Timing`). Printed:
each way's median seconds, the ratio with its spread, and the largest difference between the two embeddings (they
must agree).

    python benchmarks/sweep_eval_mode.py [--sparsities 0.02,0.1,0.3,0.5] [--rounds 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch

from sparsecse.data.sts import read_sts_benchmark
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.pruning.grid import parse_grid
from sparsecse.pruning.prune import prune
from sparsecse.scoring.score import ScoringConfig, score
from sparsecse.shrinking.surgery import shrink_encoder
from sparsecse.targets.timing import ROUNDS, Timing


def encode_masked(encoder, mask, sentences):
    gates = mask.apply(encoder.model)
    try:
        return encoder.encode(sentences, convert_to_numpy=False)
    finally:
        gates.detach()


def encode_shrunk(encoder, mask, sentences):
    small = shrink_encoder(copy.deepcopy(encoder), mask)
    return small.encode(sentences, convert_to_numpy=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--sparsities", default="0.02,0.1,0.3,0.5")
    ap.add_argument("--lambda", dest="lam", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--score-batches", type=int, default=8, help="scoring batches for the masks (any ranking will do)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    encoder = SentenceEncoder.load(args.model, device="cpu")
    pairs = read_sts_benchmark(args.data_dir, "test")
    sentences = [p.s1 for p in pairs] + [p.s2 for p in pairs]
    scores = score(encoder, config=ScoringConfig(data_dir=args.data_dir, max_batches=args.score_batches))
    print(f"{encoder.source}: {len(sentences)} STS-B test sentences, {args.threads} threads, the median of "
          f"{args.rounds} interleaved rounds")
    print(f"{'sparsity':>8} {'masked s':>9} {'shrunk s':>9} {'masked/shrunk':>14} {'spread':>7} {'max |diff|':>11}")
    for s in parse_grid(args.sparsities, "sparsity"):
        mask = prune(scores, s, args.lam)
        seconds = {"masked": [], "shrunk": []}
        outputs = {}
        for _ in range(args.rounds):
            for name, fn in (("masked", encode_masked), ("shrunk", encode_shrunk)):
                t0 = time.perf_counter()
                outputs[name] = fn(encoder, mask, sentences)
                seconds[name].append(time.perf_counter() - t0)
        ratio = Timing.of(np.divide(seconds["masked"], seconds["shrunk"]))
        diff = (outputs["masked"] - outputs["shrunk"]).abs().max().item()
        print(f"{s:>8g} {np.median(seconds['masked']):>9.2f} {np.median(seconds['shrunk']):>9.2f} "
              f"{ratio.speedup:>13.2f}x {ratio.spread:>6.0%} {diff:>11.2e}", flush=True)

if __name__ == "__main__":
    main()
