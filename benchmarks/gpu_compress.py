"""`sparsecse compress --speedup 2.0` on a CUDA GPU: per stage the wall time, the training stages' steps per
second and the mean GPU utilisation, for all-MiniLM-L6-v2 and all-mpnet-base-v2.

Each model's run is the command a user types, in a child process; this process samples the GPU's
utilisation every ``--interval`` seconds in a thread (NVML through ``pynvml`` when it is installed, else
``torch.cuda.utilization``, which asks NVML too) and watches the run's ``times.jsonl``, where the run appends
each stage's seconds as the stage ends: a stage's window is [end - seconds, end], and its mean utilisation is
the mean of the samples inside it. Steps per second come from the training stages' summaries (the steps
alone, the device synchronized before the clock is read).

    python benchmarks/gpu_compress.py [--models all-MiniLM-L6-v2,all-mpnet-base-v2] [--corpus FILE]
        [--speedup 2.0] [--interval 0.5] [--work DIR] [--json OUT]

Without a CUDA GPU it says so and exits with status 2. Targets (issue: the GPU as a first-class machine):
L6 end to end within 2.5 minutes, mean utilisation of the student stage at least 40%.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

DEFAULT_MODELS = "all-MiniLM-L6-v2,all-mpnet-base-v2"
DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "unlabeled" / "train_sentences.txt"
TIMES = "times.jsonl"  # sparsecse.recipes.runner.TIMES: one line per finished stage
Reader = Callable[[], "float | None"]


def nvml_reader(index: int = 0) -> Reader | None:
    """A function -> the GPU's utilisation in % from NVML (``pynvml``), or None where pynvml is missing."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # noqa: BLE001 - no driver or no such device: the torch reader is tried next
        return None
    return lambda: float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)


def torch_reader(index: int = 0) -> Reader:
    """A function -> the GPU's utilisation in % from ``torch.cuda.utilization`` (None where it cannot say)."""
    import torch

    def read() -> float | None:
        try:
            return float(torch.cuda.utilization(index))
        except Exception:  # noqa: BLE001 - a missing NVML binding: no sample rather than a dead thread
            return None

    return read


def pick_reader(index: int = 0) -> tuple[str, Reader]:
    """(its name, the reader): NVML through pynvml, else torch.cuda.utilization."""
    reader = nvml_reader(index)
    return ("pynvml", reader) if reader is not None else ("torch.cuda.utilization", torch_reader(index))


class UtilizationSampler:
    """Samples ``read()`` every ``interval`` seconds in a thread, and notes each new line of ``times_file``
    with the time it was seen (a stage's end).

    Args:
        read: a function -> utilisation in % (None: no sample this time).
        interval: seconds between samples.
        times_file: the run's times.jsonl (None: no stages watched).
        clock: the clock (``time.monotonic``; tests pass their own).
    """

    def __init__(self, read: Reader, interval: float = 0.5, times_file: Path | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.read, self.interval, self.times_file, self.clock = read, float(interval), times_file, clock
        self.samples: list[tuple[float, float]] = []
        self.stages: list[dict[str, Any]] = []  # {"stage", "seconds", "end"} in the order the stages ended
        self._seen = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-utilisation", daemon=True)

    def tick(self) -> None:
        """One sample, and the stages that ended since the last one."""
        now, value = self.clock(), self.read()
        if value is not None:
            self.samples.append((now, float(value)))
        if self.times_file is not None and self.times_file.is_file():
            lines = self.times_file.read_text(encoding="utf-8").splitlines()
            for line in lines[self._seen:]:
                try:
                    entry = json.loads(line)
                    self.stages.append({"stage": entry["stage"], "seconds": float(entry["seconds"]), "end": now})
                except (ValueError, KeyError, TypeError):
                    continue
            self._seen = len(lines)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.tick()

    def start(self) -> "UtilizationSampler":
        self.tick()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.tick()

    def mean(self, start: float, end: float) -> float | None:
        """The mean utilisation of the samples taken in [start, end] (None: no sample there)."""
        inside = [value for t, value in self.samples if start <= t <= end]
        return sum(inside) / len(inside) if inside else None

    def stage_rows(self) -> list[dict[str, Any]]:
        """Per stage: its name, seconds and mean utilisation over [end - seconds, end]."""
        return [{"stage": s["stage"], "seconds": round(s["seconds"], 1),
                 "gpu_util_mean": _rounded(self.mean(s["end"] - s["seconds"], s["end"]))} for s in self.stages]


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def steps_per_second(out: Path) -> dict[str, float]:
    """{stage: steps/s} from the training stages' summaries in the run directory ``out``."""
    found: dict[str, float] = {}
    for summary in sorted((out / "stages").glob("*.summary.json")):
        data = json.loads(summary.read_text())
        if data.get("steps_per_second") is not None:
            found[summary.name.split("-", 1)[1].removesuffix(".summary.json")] = round(float(data["steps_per_second"]), 3)
    return found


def run_model(model: str, corpus: Path, speedup: float, work: Path, interval: float, reader: Reader) -> dict:
    """One ``compress --speedup`` run of ``model`` under the sampler: its stage rows and total time."""
    out = work / model.replace("/", "_")
    command = [str(Path(sys.executable).parent / "sparsecse"), "compress", "--model", model, "--corpus", str(corpus),
               "--speedup", str(speedup), "--out", str(out), "--overwrite"]
    sampler = UtilizationSampler(reader, interval, out / TIMES).start()
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True)
    finally:
        sampler.stop()
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    rates = steps_per_second(out)
    rows = [{**row, "steps_per_second": rates.get(row["stage"])} for row in sampler.stage_rows()]
    return {"model": model, "command": " ".join(command), "wall_s": round(wall, 1),
            "gpu_util_mean": _rounded(sampler.mean(started, started + wall)), "stages": rows}


def print_report(results: list[dict], source: str) -> None:
    print(f"GPU utilisation sampled with {source}")
    for result in results:
        print(f"\n{result['model']}: {result['wall_s'] / 60:.2f} min end to end, mean GPU utilisation "
              f"{result['gpu_util_mean']}%")
        print(f"  {'stage':<12} {'seconds':>8} {'steps/s':>8} {'GPU %':>6}")
        for row in result["stages"]:
            rate = "" if row["steps_per_second"] is None else f"{row['steps_per_second']:.2f}"
            util = "" if row["gpu_util_mean"] is None else f"{row['gpu_util_mean']:.0f}"
            print(f"  {row['stage']:<12} {row['seconds']:>8.1f} {rate:>8} {util:>6}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--speedup", type=float, default=2.0)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--device-index", type=int, default=0)
    parser.add_argument("--work", type=Path, default=None, help="where the runs go (default: a temporary directory)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("benchmarks/gpu_compress.py measures a CUDA GPU, and this machine has none (torch.cuda.is_available() "
              "is False).", file=sys.stderr)
        return 2
    if not args.corpus.is_file():
        print(f"The corpus {args.corpus} does not exist; pass --corpus FILE.", file=sys.stderr)
        return 2
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    source, reader = pick_reader(args.device_index)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        results = [run_model(m.strip(), args.corpus, args.speedup, work, args.interval, reader)
                   for m in args.models.split(",") if m.strip()]
    print_report(results, source)
    if args.json:
        args.json.write_text(json.dumps({"gpu": torch.cuda.get_device_name(args.device_index), "sampler": source,
                                         "date": time.strftime("%Y-%m-%d"), "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
