"""The speed of a model's exported graphs beside its own torch model, at batch 1 (latency p50) and batch 128
(throughput): what a stock model's card states for each backend ``export`` writes into its directory. Timed as
everything else is (:func:`~sparsecse.targets.report.stsb_speedups`: the STS-B test sentences, interleaved rounds
in a fresh process, the figure the median of the rounds' ratios with its interval); the torch model is loaded as
a target loads it, each graph by its runtime with the same threads.

    >>> speed = time_backends("runs/stock/model", "work/onnx-export", {"onnx/model.onnx": "fp32"},
    ...                       "data/senteval")  # doctest: +SKIP
    >>> [(r["kind"], r["batch"], r["speedup"]) for r in speed["rows"]]  # doctest: +SKIP
    [('fp32', 1, 1.21), ('fp32', 128, 1.04)]
"""

from __future__ import annotations

import os
from typing import Any

from sparsecse.modeling.cpu_features import describe_cpu
from sparsecse.targets.fresh import OnDisk, mode
from sparsecse.targets.report import stsb_speedups
from sparsecse.targets.statistics import CONFIDENCE
from sparsecse.targets.timing import ROUNDS, engine_threads

SHAPES = ((1, "latency-p50"), (128, "throughput"))  # (batch, metric): one query at a time, and a bulk encode


def time_backends(model_dir: str | os.PathLike, export_dir: str | os.PathLike, kinds: dict[str, str], data_dir,
                  rounds: int = ROUNDS, threads: int | None = None, show_progress: bool = False) -> dict[str, Any]:
    """Each graph of ``export_dir`` timed against the torch model ``model_dir`` at every shape of ``SHAPES``.

    Args:
        model_dir: the torch model (the 1x).
        export_dir: a complete exported directory (:func:`~sparsecse.exporting.export.write_export`'s).
        kinds: graph file (relative to ``export_dir``) to its kind (``fp32``, ``int8``, ``int8_static``).
        data_dir: the SentEval data (its STS-B test sentences are timed).
        rounds: interleaved rounds per shape.
        threads: intra-op threads of torch and of the graphs' runtime (None: torch's default here).
        show_progress: a progress bar.

    Returns:
        ``rows`` (one per graph and shape: ``file``, ``kind``, ``batch``, ``metric``, ``speedup``, ``interval``,
        ``figure`` and ``reference_figure``: ms per request at a latency, sentences per second at a throughput),
        ``method``, ``threads``, ``rounds`` and ``cpu`` (its name and features).
    """
    threads = threads or engine_threads()
    graphs = {file: OnDisk(os.path.abspath(export_dir), threads, file=file) for file in kinds}
    rows = []
    for batch, metric in SHAPES:
        timed, shape, _ = stsb_speedups(str(model_dir), graphs, data_dir, batch, threads, rounds, show_progress,
                                        metric)
        for file, timing in timed.items():
            interval = timing.interval
            rows.append({"file": file, "kind": kinds[file], "batch": batch, "metric": metric,
                         "speedup": round(timing.speedup, 3), "interval": [round(interval.low, 3),
                                                                           round(interval.high, 3)],
                         "figure": round(timing.figure, 3), "reference_figure": round(timing.reference_figure, 3)})
    method = (f"each graph timed against the torch model (loaded by {shape.loader}) on the STS-B test sentences, "
              f"{rounds} interleaved rounds {'in a fresh process' if mode() == 'fresh' else 'in the exporting process'}, "
              f"{threads} threads; the speed-up is the median of the "
              f"rounds' ratios, with its {CONFIDENCE:.0%} interval")
    return {"rows": rows, "method": method, "threads": threads, "rounds": rounds, "cpu": describe_cpu()}
