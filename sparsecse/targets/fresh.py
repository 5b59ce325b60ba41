"""Timing in a fresh process. A run's own process has scored, pruned, trained and allocated for most of an hour,
and a model timed there runs at a speed no server that loads it sees: a small model's fixed per-call costs grow
most (a pruned all-MiniLM-L6-v2 measured about a tenth slower against its input in a long run's process than in
a fresh one, on the same machine and sentences; so did a timing worker kept for an hour). So targets time model
directories in a worker: a spawned process, new for every timing, that only loads the models it times.

    >>> seconds = run(interleaved, {"input": OnDisk("runs/x/input"), "probe1": OnDisk("runs/x/probe1")},
    ...               requests, 128, 5, 2)  # doctest: +SKIP

``SPARSECSE_TIMING=inline`` times in the calling process instead (the tests that replace the clock,
:func:`sparsecse.evaluation.speed.clock`, need it); so do encoders already loaded (a GPU engine's, or a test's).
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Callable

from sparsecse.errors import SparseCSEError
from sparsecse.serving import st_encoder
from sparsecse.serving.loading import load_encoder

ENV = "SPARSECSE_TIMING"  # "fresh" (the default) or "inline"


@dataclass(frozen=True)
class OnDisk:
    """A model directory as a timing loads it: a torch directory (fp32 on the CPU) through ``loader``
    (``sparsecse`` or ``sentence-transformers``), or an exported one (its runtime with ``threads`` intra-op
    threads; None: torch's)."""

    path: str
    threads: int | None = None
    loader: str = "sparsecse"

    def load(self):
        """The encoder the directory holds (:func:`~sparsecse.serving.loading.load_encoder`, or
        :class:`~sparsecse.serving.st_encoder.SentenceTransformersEncoder` for a torch directory served by
        sentence-transformers)."""
        if self.loader == st_encoder.NAME:
            return st_encoder.SentenceTransformersEncoder.load(self.path)
        return load_encoder(self.path, device="cpu", threads=self.threads)


def mode() -> str:
    """Where timings run: ``fresh`` (a worker process) unless ``SPARSECSE_TIMING`` says ``inline``."""
    value = os.environ.get(ENV, "fresh").strip().lower() or "fresh"
    if value not in ("fresh", "inline"):
        raise SparseCSEError(f"{ENV}={value!r} is not a timing mode; use fresh or inline.")
    return value


def _worker() -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))


def _call(function: Callable, models: dict[str, OnDisk], args: tuple) -> Any:
    return function({name: m.load() for name, m in models.items()}, *args)


def run(function: Callable, models: dict[str, Any], *args) -> Any:
    """``function(encoders, *args)``, where ``encoders`` are ``models`` loaded: in the worker when every model is
    :class:`OnDisk` and the mode is ``fresh``, else here (an :class:`OnDisk` loaded for the call).

    Args:
        function: a module-level function (the worker imports it by name).
        models: name to :class:`OnDisk` or an encoder already loaded.
        args: ``function``'s other arguments (picklable).

    Returns:
        What ``function`` returns.
    """
    on_disk = all(isinstance(m, OnDisk) for m in models.values())
    if on_disk and mode() == "fresh":
        worker = _worker()  # one per timing: a worker that has loaded and freed many models slows small ones too
        try:
            return worker.submit(_call, function, dict(models), args).result()
        except BrokenProcessPool as exc:  # the worker died (out of memory, killed)
            raise SparseCSEError(f"The timing process stopped before it finished ({exc}); nothing was timed, so "
                                 "nothing is chosen: run the command again (with --resume where it has one).") from exc
        finally:
            worker.shutdown(wait=True, cancel_futures=True)
    encoders = {name: m.load() if isinstance(m, OnDisk) else m for name, m in models.items()}
    return function(encoders, *args)
