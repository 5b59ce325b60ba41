"""Reproduce MTEB's published STS figures for all-mpnet-base-v2 with sparsecse's evaluation.

MTEB scores cosine Spearman x100 on STS12-16 (every subset in one set, as ``sparsecse eval``'s "all"
aggregation), STS-B test and SICK-R. Its SICK-R is the whole SICK corpus (train + trial + test, 9,927
pairs), where SentEval/SimCSE use the 4,927 test pairs; this script scores both. The model is
encoded with its own pooling (mean) and max length (384), in fp32.

    python benchmarks/mteb_sts_check.py [--model all-mpnet-base-v2] [--tasks STS12,...,SICK-R-all]
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from sparsecse.data.sts import read_sick  # noqa: E402
from sparsecse.modeling.encoder import SentenceEncoder  # noqa: E402
from sparsecse.evaluation.sts import cosine_rows, spearman100  # noqa: E402
from sparsecse.evaluation.config import EvaluationConfig  # noqa: E402

# MTEB results repository (embeddings-benchmark/results, sentence-transformers__all-mpnet-base-v2):
# cosine_spearman x100 of the test split.
PUBLISHED = {"STS12": 72.63, "STS13": 83.48, "STS14": 78.00, "STS15": 85.66, "STS16": 80.03,
             "STSBenchmark": 83.42, "SICK-R-all": 80.59}


def sick_all(encoder, data_dir) -> float:
    pairs = [p for split in ("train", "trial", "test") for p in read_sick(data_dir, split)]
    emb = encoder.encode([p.s1 for p in pairs] + [p.s2 for p in pairs], show_progress=True, desc="SICK all")
    n = len(pairs)
    return spearman100(cosine_rows(emb[:n], emb[n:]), [p.score for p in pairs])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="all-mpnet-base-v2")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--tasks", default=",".join(PUBLISHED))
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tasks = args.tasks.split(",")
    encoder = SentenceEncoder.load(args.model, device="cpu")
    start = time.perf_counter()
    ours: dict[str, float] = {}
    sts = [t for t in tasks if t != "SICK-R-all"]
    if sts:
        from sparsecse.evaluation import evaluate

        ours.update(evaluate(encoder, config=EvaluationConfig(tasks=sts, data_dir=args.data_dir,
            show_progress=True))["scores"])
    if "SICK-R-all" in tasks:
        ours["SICK-R-all"] = sick_all(encoder, args.data_dir)
    print(f"{'task':14} {'sparsecse':>10} {'MTEB':>8} {'diff':>7}")
    for task in tasks:
        ref = PUBLISHED.get(task)
        diff = f"{ours[task] - ref:+.2f}" if ref is not None else "-"
        print(f"{task:14} {ours[task]:10.2f} {ref if ref is not None else '-':>8} {diff:>7}")
    print(f"({time.perf_counter() - start:.0f} s, pooling {encoder.pooling}, max length {encoder.max_length})")
    print(json.dumps({"scores": ours, "published": PUBLISHED}))


if __name__ == "__main__":
    main()
