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
backward and optimizer step included), the best of ``--rounds`` rounds. Targets: 50% pruned
>= 1.4x dense; sparsecse dense no slower than sentence-transformers (ratio >= 1.0).

Masks: from ``--scores`` (a ``sparsecse score`` file, pruned at ``--lambda``) when given, else random
(seeded, at least one head kept per layer) — speed depends only on how many units go.

    python benchmarks/train_speed.py [--steps 20] [--warmup 3] [--rounds 2] [--threads 2] [--json OUT]
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

import torch  # noqa: E402

from sparsecse.data.corpus import read_corpus  # noqa: E402
from sparsecse.encoder import default_model_path  # noqa: E402
from sparsecse.masks import Mask  # noqa: E402
from sparsecse.pruning import masks_from_scores, prune  # noqa: E402
from sparsecse.training import rewind  # noqa: E402

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


def steps_per_second(starts: list[float], end: float, warmup: int) -> float:
    """From the start times of each step (and the end of the last): steps after warm-up per second."""
    times = starts[warmup:] + [end]
    return (len(times) - 1) / (times[-1] - times[0])


def time_rewind(mask: Mask, corpus: Path, model_dir: str, steps: int, warmup: int, batch: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        result = rewind(mask, corpus, Path(tmp) / "out", init=model_dir, max_steps=steps + warmup, batch_size=batch,
                        max_length=32, eval_steps=0, save_steps=0, show_progress=False, device="cpu")
    # the last interval ends where the next step would start; approximate it by the mean step
    starts = result.step_starts
    end = starts[-1] + (starts[-1] - starts[warmup]) / max(1, len(starts) - 1 - warmup)
    return steps_per_second(starts, end, warmup)


def time_sentence_transformers(sentences: list[str], model_dir: str, steps: int, warmup: int, batch: int) -> float:
    from sentence_transformers import InputExample, SentenceTransformer, losses
    from torch.utils.data import DataLoader

    model = SentenceTransformer(model_dir, device="cpu")
    model.max_seq_length = 32
    examples = [InputExample(texts=[s, s]) for s in sentences[: batch * (steps + warmup)]]
    loader = DataLoader(examples, shuffle=False, batch_size=batch, drop_last=True)
    loss = losses.MultipleNegativesRankingLoss(model, scale=20.0)
    starts: list[float] = []
    loss.register_forward_pre_hook(lambda module, args: starts.append(time.perf_counter()))
    model.old_fit(train_objectives=[(loader, loss)], epochs=1, warmup_steps=0, optimizer_params={"lr": 3e-5},
                  weight_decay=0.0, show_progress_bar=False)
    end = time.perf_counter()  # after the last optimizer step (plus old_fit's short wrap-up)
    return steps_per_second(starts, end, warmup)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS))
    parser.add_argument("--steps", type=int, default=20, help="timed steps per run (after warm-up)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
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
    best: dict[str, float] = {}
    for round_ in range(args.rounds):
        for name, run in runs.items():
            speed = run()
            best[name] = max(best.get(name, 0.0), speed)
            print(f"round {round_ + 1}: {name:24s} {speed:6.3f} steps/s", file=sys.stderr, flush=True)
    names = list(runs)
    pruned_ratio = best[names[1]] / best[names[0]]
    st_ratio = best[names[0]] / best[names[2]]
    print(f"\nall-MiniLM-L6-v2, batch {args.batch_size}, max length 32, {args.threads} threads, "
          f"{args.steps} timed steps, best of {args.rounds} rounds")
    for name in names:
        print(f"  {name:26s} {best[name]:6.3f} steps/s")
    print(f"  pruned / dense:            {pruned_ratio:5.2f}x  (target >= {PRUNED_TARGET}x) "
          f"{'OK' if pruned_ratio >= PRUNED_TARGET else 'MISSED'}")
    print(f"  sparsecse / ST (dense):    {st_ratio:5.2f}x  (target >= {ST_TARGET}x) "
          f"{'OK' if st_ratio >= ST_TARGET else 'MISSED'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"steps_per_second": best, "pruned_over_dense": pruned_ratio,
                                               "sparsecse_over_st": st_ratio, "args": vars(args)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
