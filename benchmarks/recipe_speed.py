"""What each speed lever of the recipes (``compress --recipe``) buys on this machine, measured side by side.

1. **Teacher embeddings**: all-mpnet-base-v2 (the slowest teacher of the shipped recipes) embeds the same
   seeded sample of the corpus in torch fp32 and under bf16 autocast, in ``--teacher-rounds`` interleaved rounds (the
   targets' method: the speed-up is the median of the rounds' ratios, each figure its median round); sentences per
   second and the smallest and mean cosine of bf16 to fp32. (``teacher_precision: auto``
   takes bf16 only where the CPU has AVX512-BF16 or AMX.)
2. **Training steps**: all-MiniLM-L6-v2 distilled (MSE) from paraphrase-MiniLM-L3-v2 on the same sample, with
   and without length-bucketed batches, rounds interleaved; optimisation steps per second (teacher
   embeddings, computed once and cached, are not counted). With ``--bf16-check``, a short run in bf16 autocast
   beside fp32: the loss at every step of both.

The CPU's features are printed beside the figures; ratios from different machines are not comparable.

    python benchmarks/recipe_speed.py [--sentences 3200] [--steps 30] [--rounds 2] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from sparsecse.data.corpus import read_corpus  # noqa: E402
from sparsecse.modeling.cpu_features import describe_cpu  # noqa: E402
from sparsecse.modeling.encoder import SentenceEncoder, cpu_has_native_bf16  # noqa: E402
from sparsecse.training.config import TrainingConfig  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared"
CORPUS = SHARED / "data" / "unlabeled" / "train_sentences.txt"
L3 = SHARED / "models" / "paraphrase-MiniLM-L3-v2"


def sample_file(corpus: Path, n: int, seed: int, folder: Path) -> Path:
    lines = read_corpus(corpus)
    random.Random(seed).shuffle(lines)
    path = folder / f"sample-{n}.txt"
    path.write_text("\n".join(lines[:n]) + "\n")
    return path


def teacher_throughput(model: str, sentences: list[str], rounds: int, max_length: int) -> dict:
    encoder = SentenceEncoder.load(model, device="cpu")
    encoder.max_length = max_length
    seconds: dict[str, list[float]] = {"fp32": [], "bf16": []}
    emb = {}
    for r in range(rounds):
        for precision in (list(seconds) if r % 2 == 0 else list(seconds)[::-1]):  # the order alternating
            t0 = time.perf_counter()
            emb[precision] = np.asarray(encoder.encode(sentences, precision=precision), dtype=np.float64)
            seconds[precision].append(time.perf_counter() - t0)
    a, b = emb["fp32"], emb["bf16"]
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    fp32, bf16 = np.asarray(seconds["fp32"]), np.asarray(seconds["bf16"])
    return {"model": model, "sentences": len(sentences), "rounds": rounds,
            "fp32_sentences_per_s": round(len(sentences) / float(np.median(fp32)), 2),
            "bf16_sentences_per_s": round(len(sentences) / float(np.median(bf16)), 2),
            "bf16_speedup": round(float(np.median(fp32 / bf16)), 3),
            "bf16_min_cosine": round(float(cos.min()), 6), "bf16_mean_cosine": round(float(cos.mean()), 6)}


def train_once(corpus: Path, out: Path, steps: int, bucket: bool, mixed_precision: str = "no") -> dict:
    from sparsecse.training.api import train

    result = train(None, str(corpus), str(out), objective="distill",
                   objective_args={"teacher": str(L3), "loss": "mse"}, config=TrainingConfig(max_steps=steps,
                       eval_steps=0, batch_size=64, lr=1e-4, show_progress=False, bucket_by_length=bucket,
                       mixed_precision=mixed_precision, overwrite=True, device="cpu"))
    return {"steps_per_second": result.steps_per_second, "losses": [result.losses[s] for s in sorted(result.losses)]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=3200, help="corpus sample for training (seeded)")
    parser.add_argument("--teacher-sentences", type=int, default=256)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--teacher-rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--bf16-check", action="store_true", help="also a short bf16 training run beside fp32")
    parser.add_argument("--skip-teacher", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    report = {"cpu": describe_cpu(), "native_bf16": cpu_has_native_bf16(), "threads": args.threads}
    print(report["cpu"], flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = sample_file(CORPUS, args.sentences, 0, tmp)
        if not args.skip_teacher:
            sample = read_corpus(corpus)[: args.teacher_sentences]
            report["teacher"] = teacher_throughput("all-mpnet-base-v2", sample, args.teacher_rounds, 32)
            print(json.dumps(report["teacher"]), flush=True)
        rates = {"plain": [], "bucketed": []}
        for r in range(args.rounds):
            for name in (("plain", "bucketed") if r % 2 == 0 else ("bucketed", "plain")):
                run = train_once(corpus, tmp / f"{name}-{r}", args.steps, name == "bucketed")
                rates[name].append(run["steps_per_second"])
        report["training"] = {name: round(max(v), 3) for name, v in rates.items()}
        report["training"]["bucketing_speedup"] = round(report["training"]["bucketed"] / report["training"]["plain"], 3)
        print(json.dumps(report["training"]), flush=True)
        if args.bf16_check:
            fp32 = train_once(corpus, tmp / "fp32", args.steps, True, "no")
            bf16 = train_once(corpus, tmp / "bf16", args.steps, True, "bf16")
            report["bf16_training"] = {"fp32_losses": fp32["losses"], "bf16_losses": bf16["losses"],
                                       "fp32_steps_per_second": fp32["steps_per_second"],
                                       "bf16_steps_per_second": bf16["steps_per_second"],
                                       "largest_relative_loss_difference": max(
                                           abs(a - b) / abs(a) for a, b in zip(fp32["losses"], bf16["losses"]))}
            print(json.dumps({k: v for k, v in report["bf16_training"].items() if "losses" not in k}), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
