"""Time the full 7-task STS evaluation of all-MiniLM-L6-v2: sparsecse's path vs a plain reference.

Both run in this process on the same loaded model and the same data:
- plain: every pair's two sentences encoded in file order, batches of 64 pairs padded to their
  longest sentence (what a SentEval batcher does);
- sparsecse: ``evaluate(tasks="sts")``: each distinct sentence once, length-sorted batches.
They must print the same scores (up to float rounding); the ratio is plain time / sparsecse time.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/eval_speed.py [--data-dir D] [--rounds 1] [--precision bf16]

On a shared machine, other processes skew the timings: the load average is printed with them. With several
``--rounds`` (the two paths alternating), the speed-up is the median over rounds of each round's ratio, with the spread
of the rounds, and the seconds are the median round's (sparsecse.targets.timing.Timing, as every speed figure).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.evaluation import STS_TASKS, evaluate
from sparsecse.evaluation.embedding import normalize_text
from sparsecse.evaluation.sts import cosine_rows, load_sts_task, spearman100
from sparsecse.evaluation.config import EvaluationConfig
from sparsecse.targets.timing import Timing

PLAIN_BATCH = 64


@torch.inference_mode()
def plain_sts(encoder: SentenceEncoder, data_dir) -> tuple[dict[str, float], int]:
    """({task: Spearman 'all'}, sentences encoded) the straightforward way."""
    scores, encoded = {}, 0
    for task in STS_TASKS:
        predicted, gold = [], []
        for pairs in load_sts_task(data_dir, task).values():
            for start in range(0, len(pairs), PLAIN_BATCH):
                batch = pairs[start:start + PLAIN_BATCH]
                a = encoder(**encoder.tokenize([normalize_text(p.s1) for p in batch])).numpy()
                b = encoder(**encoder.tokenize([normalize_text(p.s2) for p in batch])).numpy()
                predicted.append(cosine_rows(a, b))
                gold += [p.score for p in batch]
                encoded += 2 * len(batch)
        scores[task] = spearman100(np.concatenate(predicted), gold)
    return scores, encoded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("SPARSECSE_DATA") or
                        os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "senteval"))
    parser.add_argument("--model", default=None, help="default: the embedded all-MiniLM-L6-v2")
    parser.add_argument("--rounds", type=int, default=1, help="timed rounds of each path (alternating)")
    parser.add_argument("--precision", default="fp32", help="precision of the sparsecse path (fp32, bf16)")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--skip-plain", action="store_true", help="time only the sparsecse path")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    start = time.perf_counter()
    encoder = SentenceEncoder.load(args.model, device="cpu")
    load_s = time.perf_counter() - start
    print(f"model {encoder.source} (pooling {encoder.pooling}, max_length {encoder.max_length}), "
          f"loaded in {load_s:.1f} s; torch threads {torch.get_num_threads()}, cpus {os.cpu_count()}")

    plain_times, fast_times = [], []
    for _ in range(args.rounds):
        load_before = os.getloadavg()[0]
        t, cpu = time.perf_counter(), time.process_time()
        plain_scores, plain_sentences = ({}, 0) if args.skip_plain else plain_sts(encoder, args.data_dir)
        plain_times.append(time.perf_counter() - t)
        plain_cpu = time.process_time() - cpu
        t, cpu = time.perf_counter(), time.process_time()
        result = evaluate(encoder, config=EvaluationConfig(tasks="sts", data_dir=args.data_dir,
            precision=args.precision, batch_size=args.batch_size, align_uniform=False))
        fast_times.append(time.perf_counter() - t)
        fast_cpu = time.process_time() - cpu
        # CPU seconds / threads approximates the wall time on an idle machine (spinning threads inflate it)
        print(f"  run: plain {plain_times[-1]:.1f} s wall ({plain_cpu:.0f} CPU-s), sparsecse {fast_times[-1]:.1f} s "
              f"wall ({fast_cpu:.0f} CPU-s)  (load average {load_before:.1f} -> {os.getloadavg()[0]:.1f})", flush=True)

    fast_scores = result["scores"]
    if args.skip_plain:
        distinct = result["timing"]["sentences_encoded"]
        print("\n".join(f"{task:<16} {fast_scores[task]:8.2f}" for task in STS_TASKS))
        fast_s = float(np.median(fast_times))
        print(f"average          {result['avg_sts']:8.2f}\nsparsecse: {fast_s:.1f} s, {distinct / fast_s:.0f} sent/s")
        return
    print(f"\n{'task':<16} {'plain':>8} {'sparsecse':>10} {'diff':>8}")
    for task in STS_TASKS:
        print(f"{task:<16} {plain_scores[task]:8.2f} {fast_scores[task]:10.2f} "
              f"{fast_scores[task] - plain_scores[task]:+8.4f}")
    print(f"{'average':<16} {np.mean(list(plain_scores.values())):8.2f} {result['avg_sts']:10.2f}")
    max_diff = max(abs(fast_scores[t] - plain_scores[t]) for t in STS_TASKS)

    plain_s, fast_s = float(np.median(plain_times)), float(np.median(fast_times))
    ratio = Timing.of(np.divide(plain_times, fast_times))
    distinct = result["timing"]["sentences_encoded"]
    print(f"\nplain:     {plain_s:6.1f} s  {plain_sentences} sentences encoded, {plain_sentences / plain_s:6.0f} sent/s")
    print(f"sparsecse: {fast_s:6.1f} s  {distinct} distinct sentences encoded, {distinct / fast_s:6.0f} sent/s "
          f"({plain_sentences / fast_s:.0f} pair-sentences/s; encoding {result['timing']['encode_s']:.1f} s)")
    print(f"speed-up:  {ratio.speedup:.2f}x ±{ratio.spread:.0%}   (target >= 1.8x; suite target <= 75 s, stretch 60 s)")
    print(f"largest score difference: {max_diff:.4f}  (precision {args.precision})")


if __name__ == "__main__":
    main()
