"""Training speed of `rewind` on all-MiniLM-L6-v2: dense vs 50% pruned, and against
sentence-transformers' unsupervised SimCSE recipe, measured side by side in one run.

Three trainers run the same batches (64 sentences of the wiki sample, max length 32) on the CPU:

* ``rewind dense``  — sparsecse's loop, SimCSE objective, a mask that prunes nothing;
* ``rewind 50%``    — the same with 50% of heads and 50% of FFN neurons physically removed;
* ``st simcse``     — sentence-transformers' recipe for unsupervised SimCSE: every sentence paired
  with itself, MultipleNegativesRankingLoss (scale 20 = temperature 0.05), trained with
  ``SentenceTransformer.old_fit`` (ST's own loop; its v3 Trainer needs the `datasets` package).

Runs interleave (dense, 50%, st, dense, ...) so background load hits all alike. Speed = steps per
second from step-to-step intervals after ``--warmup`` steps (data loading, tokenization, forward,
backward and optimizer step included), in wall-clock steps/s and in process CPU seconds per step (steadier when
other jobs share the CPU); each ratio is the median over ``--rounds`` of the round's own ratio, with the spread of
the rounds (the statistic of every speed figure in sparsecse, :class:`sparsecse.targets.timing.Timing`). Targets: 50% pruned >= 1.4x
dense; sparsecse dense no slower than sentence-transformers (ratio >= 1.0).

Masks: from ``--scores`` (a ``sparsecse score`` file, pruned at ``--lambda``) when given, else random
(seeded, at least one head kept per layer) — speed depends only on how many units go.

    python benchmarks/train_speed.py [--steps 20] [--warmup 3] [--rounds 3] [--threads 2] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from sparsecse.data.corpus import read_corpus  # noqa: E402
from sparsecse.modeling.encoder import default_model_path  # noqa: E402
from sparsecse.pruning.masks import Mask  # noqa: E402
from sparsecse.pruning.prune import prune  # noqa: E402
from sparsecse.pruning.selection import masks_from_scores  # noqa: E402
from sparsecse.targets.timing import Timing  # noqa: E402
from sparsecse.training import rewind  # noqa: E402
from sparsecse.training.batches import CorpusSampler  # noqa: E402
from sparsecse.training.config import TrainingConfig  # noqa: E402

PRUNED_TARGET = 1.4
ST_TARGET = 1.0
DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "wiki" / "wiki1m_sample.txt"


def make_mask(model_dir: str, sparsity: float, scores: str | None, lam: float, seed: int = 0) -> Mask:
    if scores:
        mask = prune(scores, sparsity, lam)
    else:
        g = torch.Generator().manual_seed(seed)
        keep = masks_from_scores(torch.rand(6, 12, generator=g), torch.rand(6, 1536, generator=g), sparsity)
        mask = Mask(*keep)
    mask.manifest.update({"model": model_dir, "pooling": "mean", "sparsity": sparsity})
    return mask


class StepClock:
    """Wall-clock and process CPU time at the start of every step (a hook on the loss's forward).

    Speed is measured from step start to step start, so everything a step costs (data, tokenization,
    forward, backward, optimizer) counts for both trainers. CPU seconds per step (all threads) are
    the steadier figure when other jobs share the machine; wall-clock steps/s is what a user sees.
    """

    def __init__(self):
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def tick(self, *_):
        self.wall.append(time.perf_counter())
        self.cpu.append(time.process_time())

    def rates(self, warmup: int) -> tuple[float, float]:
        """(steps per wall second, CPU seconds per step) over whole steps after warm-up; the last step
        is left out (its end is not seen: output writing follows it)."""
        steps = len(self.wall) - 1 - warmup
        return steps / (self.wall[-1] - self.wall[warmup]), (self.cpu[-1] - self.cpu[warmup]) / steps


def time_rewind(mask: Mask, corpus: Path, model_dir: str, steps: int, warmup: int, batch: int) -> tuple[float, float]:
    from sparsecse.objectives.simcse import SimCSE

    clock, forward = StepClock(), SimCSE.forward

    def timed_forward(self, batch):
        clock.tick()
        return forward(self, batch)

    SimCSE.forward = timed_forward
    try:
        with tempfile.TemporaryDirectory() as tmp:
            rewind(mask, corpus, Path(tmp) / "out", init=model_dir, config=TrainingConfig(
                max_steps=steps + warmup + 1, batch_size=batch, max_length=32, eval_steps=0, save_steps=0,
                show_progress=False, device="cpu"))
    finally:
        SimCSE.forward = forward
    return clock.rates(warmup)


def time_sentence_transformers(sentences: list[str], model_dir: str, steps: int, warmup: int,
                               batch: int) -> tuple[float, float]:
    from sentence_transformers import InputExample, SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from torch.utils.data import DataLoader

    model = SentenceTransformer(model_dir, device="cpu")
    model.max_seq_length = 32
    # the batches sparsecse's loop trains on (seed 0): the same sentences, so the same padded lengths
    sampler = CorpusSampler(sentences, batch, seed=0)
    examples = [InputExample(texts=[s, s]) for step in range(steps + warmup + 1) for s in sampler.local_batch(step)]
    loader = DataLoader(examples, shuffle=False, batch_size=batch, drop_last=True)
    loss = MultipleNegativesRankingLoss(model, scale=20.0)  # scale 20 = temperature 0.05
    clock = StepClock()
    loss.register_forward_pre_hook(clock.tick)
    model.old_fit(train_objectives=[(loader, loss)], epochs=1, warmup_steps=0, optimizer_params={"lr": 3e-5},
                  weight_decay=0.0, show_progress_bar=False)
    return clock.rates(warmup)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS))
    parser.add_argument("--steps", type=int, default=20, help="timed steps per run (after warm-up)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sparsity", type=float, default=0.5)
    parser.add_argument("--scores", default=None)
    parser.add_argument("--lambda", dest="lam", type=float, default=0.5)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model_dir = default_model_path()
    corpus = Path(args.corpus)
    sentences = read_corpus(corpus)
    dense = Mask.full(6, 12, 1536)
    dense.manifest.update({"model": model_dir, "pooling": "mean"})
    pruned = make_mask(model_dir, args.sparsity, args.scores, args.lam)
    runs = {
        "rewind dense": lambda: time_rewind(dense, corpus, model_dir, args.steps, args.warmup, args.batch_size),
        f"rewind {args.sparsity:.0%} pruned": lambda: time_rewind(pruned, corpus, model_dir, args.steps,
                                                                  args.warmup, args.batch_size),
        "st simcse (MNRL)": lambda: time_sentence_transformers(sentences, model_dir, args.steps, args.warmup,
                                                               args.batch_size),
    }
    wall: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    for round_ in range(args.rounds):
        for name, run in runs.items():
            steps_per_second, cpu_per_step = run()
            wall[name].append(steps_per_second)
            cpu[name].append(cpu_per_step)
            print(f"round {round_ + 1}: {name:24s} {steps_per_second:6.3f} steps/s  {cpu_per_step:6.2f} CPU s/step",
                  file=sys.stderr, flush=True)
    dense, pruned, st = runs
    timings = {
        "pruned_over_dense_wall": Timing.of(np.divide(wall[pruned], wall[dense])),
        "pruned_over_dense_cpu": Timing.of(np.divide(cpu[dense], cpu[pruned])),
        "sparsecse_over_st_wall": Timing.of(np.divide(wall[dense], wall[st])),
        "sparsecse_over_st_cpu": Timing.of(np.divide(cpu[st], cpu[dense])),
    }
    ratios = {key: round(t.speedup, 4) for key, t in timings.items()}
    print(f"\nall-MiniLM-L6-v2, batch {args.batch_size}, max length 32, {args.threads} threads, "
          f"{args.steps} timed steps after {args.warmup} warm-up, the median of {args.rounds} interleaved rounds")
    print(f"  {'':26s} {'steps/s':>8s} {'CPU s/step':>11s}")
    for name in runs:
        print(f"  {name:26s} {np.median(wall[name]):8.3f} {np.median(cpu[name]):11.2f}")
    for label, key, target in (("pruned / dense", "pruned_over_dense", PRUNED_TARGET),
                               ("sparsecse / ST (dense)", "sparsecse_over_st", ST_TARGET)):
        on_wall, on_cpu = timings[f"{key}_wall"], timings[f"{key}_cpu"]
        verdict = "OK" if min(on_wall.speedup, on_cpu.speedup) >= target else "MISSED"
        print(f"  {label:24s} {on_wall.speedup:5.2f}x ±{on_wall.spread:.0%} wall, {on_cpu.speedup:5.2f}x "
              f"±{on_cpu.spread:.0%} CPU  (target >= {target}x) {verdict}")
    if args.json:
        Path(args.json).write_text(json.dumps({"steps_per_second": wall, "cpu_seconds_per_step": cpu,
                                               **ratios, "args": vars(args)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
