"""Cost of gate scoring against a plain forward+backward of the same batches, in one run.

    python benchmarks/score_overhead.py [--batches 8] [--rounds 5] [--data-dir D]

Scoring = one forward + one backward per batch with row-group gates (weights frozen), giving both
∂L_align/∂gate and ∂L_uniform/∂gate. References, same batches, no gates:
  plain-frozen : weights frozen, gradient w.r.t. the input embeddings (the least backward that
                 still reaches every layer, as gate gradients must);
  plain-train  : ordinary backward into the weights (what fine-tuning pays).
Target: scoring costs at most 10% more than plain-frozen. Each ratio is the median over the rounds of the round's own
ratio, with the spread of the rounds (sparsecse.targets.timing.Timing, as every speed figure). Also times `prune` on a
14 x 3 grid.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from sparsecse.scoring.alignment import alignment_loss, uniformity_loss
from sparsecse.data.sts import read_sts_benchmark
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.pruning.prune import prune_grid
from sparsecse.scoring.gradients import compute_gradients, make_batches
from sparsecse.scoring.scores import GateScores
from sparsecse.targets.timing import ROUNDS, Timing


def plain_pass(encoder, batches, train_weights: bool) -> None:
    for p in encoder.parameters():
        p.requires_grad_(train_weights)
    embeddings = encoder.model.get_input_embeddings()
    for batch in batches:
        n = len(batch.pairs)
        feats = encoder.tokenize(batch.rows())
        if train_weights:
            emb = encoder(**feats)
        else:
            inputs = embeddings(feats["input_ids"]).detach().requires_grad_()
            emb = encoder(inputs_embeds=inputs, attention_mask=feats["attention_mask"],
                          **{k: v for k, v in feats.items() if k not in ("input_ids", "attention_mask")})
        loss = 0.5 * alignment_loss(emb[:n], emb[n:2 * n]) + 0.5 * uniformity_loss(emb[2 * n:])
        loss.backward()
        encoder.zero_grad(set_to_none=True)
    for p in encoder.parameters():
        p.requires_grad_(True)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--data-dir", default=os.environ.get("SPARSECSE_DATA", "../shared/data/senteval"))
    args = parser.parse_args()

    encoder = SentenceEncoder.load(None)
    encoder.eval()
    batches = make_batches(read_sts_benchmark(args.data_dir, "train"), 64, 0, max_batches=args.batches)
    rows = sum(len(b.rows()) for b in batches)
    print(f"all-MiniLM-L6-v2, STS-B train: {len(batches)} batches, {rows} sentences, "
          f"torch threads {torch.get_num_threads()}")
    plain_pass(encoder, batches[:1], False)  # warm-up
    times = {"scoring (gates)": [], "plain-frozen": [], "plain-train": []}
    results = []
    for _ in range(args.rounds):  # interleaved so background load hits all three alike
        times["plain-frozen"].append(timed(lambda: plain_pass(encoder, batches, False)))
        times["scoring (gates)"].append(timed(lambda: results.append(compute_gradients(encoder, batches))))
        times["plain-train"].append(timed(lambda: plain_pass(encoder, batches, True)))
    for name, t in times.items():
        median = float(np.median(t))
        print(f"  {name:16s} {median:7.2f} s  ({len(batches) / median:.2f} batches/s, the median round)")
    for reference, target in (("plain-frozen", " (target <= 1.10)"), ("plain-train", "")):
        ratio = Timing.of(np.divide(times["scoring (gates)"], times[reference]))
        print(f"scoring / {reference:12s} = {ratio.speedup:.3f} ±{ratio.spread:.1%}{target}")

    scores = GateScores(*results[-1], manifest={"kind": "scores"})
    start = time.perf_counter()
    grid = prune_grid(scores, "0.01:0.10:0.01,0.2:0.5:0.1", "0.25,0.5,0.75")
    print(f"prune: {len(grid)} masks (14 sparsities x 3 lambdas) in {time.perf_counter() - start:.3f} s "
          f"(target < 2 s)")


if __name__ == "__main__":
    main()
