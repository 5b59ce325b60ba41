"""STS-B dev Spearman, the model-selection signal SimCSE uses during training."""

from __future__ import annotations

from typing import Callable

from sparsecse.data.paths import resolve_data_dir
from sparsecse.data.sts import read_sts_benchmark
from sparsecse.evaluation import evaluate


def stsb_dev_evaluator(data_dir) -> Callable[[object], float]:
    """A function encoder -> STS-B dev Spearman x 100 (sparsecse.evaluation's STS protocol).

    The data is checked here, so a missing STS-B fails before training starts.
    """

    root = resolve_data_dir(data_dir)
    read_sts_benchmark(root, "dev")

    def score(encoder) -> float:
        result = evaluate(encoder, tasks="STSBenchmark", data_dir=root, sts_split="dev", align_uniform=False)
        return float(result["scores"]["STSBenchmark"])

    return score
