"""Peak memory while encoding, measured in a fresh process.

PyTorch allocates its CPU tensors outside Python's allocator, so ``tracemalloc`` does not see them; what
the operating system counts is the honest figure. :func:`peak_encode_memory` starts a new Python process
that imports torch and sparsecse, loads the model and encodes the sentences, and reads that process's peak
resident set size (``VmHWM`` on Linux, else ``getrusage``'s ``ru_maxrss``) three times: after the imports, after
loading, after encoding. The peak includes the Python interpreter and torch themselves; the difference between the last
two is what encoding added on top of the loaded model (0 when loading itself peaked higher). On its own::

    python -m sparsecse.evaluation.memory MODEL SENTENCES.json BATCH_SIZE   # prints the three peaks as JSON
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Sequence

from sparsecse.errors import SparseCSEError
from sparsecse.modeling.encoder import SentenceEncoder


def _peak_rss_bytes() -> int:
    # Linux: VmHWM, the high-water mark of this process's own memory. getrusage's ru_maxrss survives execve and
    # starts at the parent's resident size, so a child of a large process would report the parent's.
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) * (1 if sys.platform == "darwin" else 1024)  # bytes on macOS, KiB on Linux


def peak_encode_memory(model: str | os.PathLike, sentences: Sequence[str], batch_size: int = 32,
                       threads: int | None = None, timeout: float = 1800) -> dict[str, Any]:
    """The peak resident memory of a fresh process that loads ``model`` and encodes ``sentences`` (torch fp32).

    Args:
        model: a model directory or name (loaded with :meth:`~sparsecse.modeling.encoder.SentenceEncoder.load`).
        sentences: what it encodes.
        batch_size: sentences per batch.
        threads: torch threads in the process (default: torch's own choice).
        timeout: seconds before the measurement is abandoned.

    Returns:
        ``peak_rss_bytes`` (the process's high-water mark), ``loaded_rss_bytes`` (after loading),
        ``runtime_rss_bytes`` (after importing torch and sparsecse, before loading), ``encode_extra_bytes``
        (peak minus loaded), ``sentences``, ``batch_size`` and ``method`` (what was measured, in words).

    Raises:
        SparseCSEError: when the measuring process fails.
    """
    if not sentences:
        raise SparseCSEError("Peak memory needs at least one sentence to encode.")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(list(sentences), f)
    try:
        command = [sys.executable, "-m", "sparsecse.evaluation.memory", str(model), f.name, str(batch_size)]
        if threads:
            command.append(str(threads))
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    finally:
        os.unlink(f.name)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise SparseCSEError(f"Measuring the peak memory of {model} failed: {last}")
    peaks = json.loads(done.stdout.strip().splitlines()[-1])
    return {**peaks, "encode_extra_bytes": max(0, peaks["peak_rss_bytes"] - peaks["loaded_rss_bytes"]),
            "sentences": len(sentences), "batch_size": batch_size,
            "method": (f"peak resident set size (VmHWM) of a fresh process that loads the model and encodes "
                       f"{len(sentences):,} sentences in batches of {batch_size}, torch fp32; it includes Python "
                       f"and torch ({peaks['runtime_rss_bytes'] / 2 ** 20:.0f} MiB before the model was loaded)")}


def _measure(model: str, sentences_file: str, batch_size: int, threads: int | None) -> dict[str, int]:
    import torch

    if threads:
        torch.set_num_threads(threads)
    with open(sentences_file, encoding="utf-8") as f:
        sentences = json.load(f)
    runtime = _peak_rss_bytes()
    encoder = SentenceEncoder.load(model, device="cpu")
    loaded = _peak_rss_bytes()
    encoder.encode(sentences, batch_size=batch_size)
    return {"runtime_rss_bytes": runtime, "loaded_rss_bytes": loaded, "peak_rss_bytes": _peak_rss_bytes()}


if __name__ == "__main__":
    args = sys.argv[1:]
    print(json.dumps(_measure(args[0], args[1], int(args[2]), int(args[3]) if len(args) > 3 else None)))
