"""The card's serving table: one speed figure per shape. The final model and its input model are timed side by side
in one interleaved run, in a fresh process (nothing the run loaded or allocated before is in its way), at batch 1,
the target's batch and 128, on 1 thread and on all of the machine's cores (and on the target's threads, where they
are neither). Each row gives the speed-up (the median over rounds of the ratio of the two models' summed request
times, with its spread) and the p50 / p95 latency of one request of that batch for both models; the row the target
was judged by is marked. On its own::

    python -m sparsecse.targets.serving ARGS.json   # prints the rows as JSON (ARGS: see serving_table)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from sparsecse.errors import SparseCSEError
from sparsecse.evaluation import speed
from sparsecse.serving.loading import load_encoder
from sparsecse.targets.engines import on_engine
from sparsecse.targets.fresh import OnDisk
from sparsecse.targets.spec import DEFAULT_BATCH_SIZE, DEFAULT_ENGINE, Shape, Target, engines
from sparsecse.targets.timing import ROUNDS, requests, thin

SERVING_BATCHES = (1, DEFAULT_BATCH_SIZE)  # with the target's batch
SERVING_REQUESTS = 32  # requests per round of a row, picked evenly over the lengths (the table has many rows)


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity; else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def serving_grid(shape: Shape, cores: int) -> list[tuple[int, int]]:
    """(threads, batch) of every row: threads 1, ``cores`` and the shape's; batches 1, the shape's and 128."""
    threads = sorted({1, cores, shape.threads})
    batches = sorted({*SERVING_BATCHES, shape.batch_size})
    return [(t, b) for t in threads for b in batches]


def measure_grid(model, reference, sentences: list[str], grid: list[tuple[int, int]], judged: tuple[int, int],
                 rounds: int = ROUNDS) -> list[dict[str, Any]]:
    """The rows of the table for two encoders already on their engine (see the module docstring).

    Args:
        model: the final model.
        reference: the input model.
        sentences: the timed sentences, longest first.
        grid: (threads, batch) per row.
        judged: the (threads, batch) the target was judged at.
        rounds: interleaved rounds per row.

    Returns:
        The rows, each a dict of ``threads``, ``batch``, ``speedup``, ``spread``, ``p50_ms``, ``p95_ms``,
        ``input_p50_ms``, ``input_p95_ms``, ``requests``, ``judged``.
    """
    rows = []
    for threads, batch in grid:
        timed = thin(requests(sentences, Shape("latency-p50", batch, threads)), SERVING_REQUESTS)
        with speed.torch_threads(threads):
            seconds = speed.interleaved_rounds({"input": reference, "model": model}, timed, batch, rounds)
        ratios = seconds["input"].sum(axis=1) / seconds["model"].sum(axis=1)
        median = float(np.median(ratios))
        q25, q75 = np.percentile(ratios, [25, 75])

        def ms(key: str, q: float) -> float:
            return round(float(np.median(np.percentile(seconds[key], q, axis=1))) * 1000, 3)

        rows.append({"threads": threads, "batch": batch, "speedup": round(median, 4),
                     "spread": round(float((q75 - q25) / median), 4), "p50_ms": ms("model", 50),
                     "p95_ms": ms("model", 95), "input_p50_ms": ms("input", 50), "input_p95_ms": ms("input", 95),
                     "requests": len(timed), "judged": (threads, batch) == tuple(judged)})
    return rows


def serving_table(target: Target, shape: Shape, input_model: str, model_dir: str, sentences: list[str],
                  work: str | os.PathLike, calibration: str | os.PathLike | None = None,
                  timeout: float = 3600) -> dict[str, Any]:
    """The serving table of ``model_dir`` against ``input_model``, measured in a fresh process.

    Args:
        target: the target the run aimed at (its engine).
        shape: the serving shape it was judged at (marked).
        input_model: the input model.
        model_dir: the final model.
        sentences: the timed sentences (longest first).
        work: a scratch directory for exported copies.
        calibration: the corpus an int8 engine calibrates on.
        timeout: seconds before the measurement is abandoned.

    Returns:
        ``rows`` (:func:`measure_grid`), ``engine``, ``metric`` (the one the target was judged by), ``cores``,
        ``rounds`` and ``method`` (in words).

    Raises:
        SparseCSEError: when the measuring process fails.
    """
    cores = machine_cores()
    args = {"engine": target.engine, "input": str(input_model), "model": str(model_dir), "sentences": sentences,
            "grid": serving_grid(shape, cores), "judged": [shape.threads, shape.batch_size], "work": str(work),
            "calibration": None if calibration is None else str(calibration), "loader": shape.loader}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(args, f)
    try:
        done = subprocess.run([sys.executable, "-m", "sparsecse.targets.serving", f.name], capture_output=True,
                              text=True, timeout=timeout)
    finally:
        os.unlink(f.name)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise SparseCSEError(f"Measuring the serving table of {model_dir} failed: {last}")
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    return {"rows": rows, "engine": target.engine, "metric": shape.metric, "cores": cores, "rounds": ROUNDS,
            "method": (f"The model and its input timed side by side in one interleaved run ({ROUNDS} rounds, each "
                       f"model encoding its whole round in its turn) in a fresh process on {len(sentences):,} "
                       f"sentences, {target.engine}{'' if shape.loader == 'sparsecse' else ' via ' + shape.loader}; speed-up: the median ratio "
                       "of their summed request times, ± the spread of the rounds; latency: one request of the "
                       "batch")}


def _main(path: str) -> None:
    args = json.loads(Path(path).read_text())
    engine, work = args["engine"], Path(args["work"])
    if engine == DEFAULT_ENGINE:
        placed = {k: OnDisk(args[k], loader=args["loader"]).load() for k in ("model", "input")}
    else:  # exported once; an exported runtime takes its threads when loaded (below)
        placed = {k: on_engine(args[k], engine, work / k, args.get("calibration")) for k in ("model", "input")}
    exported = engines()[engine] is not None
    rows = []
    for threads, batch in args["grid"]:
        model, reference = (load_encoder(work / k, threads=threads) if exported else placed[k]
                            for k in ("model", "input"))
        rows += measure_grid(model, reference, args["sentences"], [(threads, batch)], tuple(args["judged"]))
    print(json.dumps(rows))


if __name__ == "__main__":
    _main(sys.argv[1])
