"""Timing in a fresh process. A run's own process has scored, pruned, trained and allocated for most of an hour,
and a model timed there runs at a speed no server that loads it sees: a small model's fixed per-call costs grow
most (a pruned all-MiniLM-L6-v2 measured about a tenth slower against its input in a long run's process than in
a fresh one, on the same machine and sentences). So targets time model directories in a worker: a spawned process that only loads models
and times them, keeping what it loaded for the next call.

    >>> seconds = run(interleaved, {"input": OnDisk("runs/x/input"), "probe1": OnDisk("runs/x/probe1")},
    ...               requests, 128, 5, 2)  # doctest: +SKIP

``SPARSECSE_TIMING=inline`` times in the calling process instead (the tests that replace the clock,
:func:`sparsecse.evaluation.speed.clock`, need it); so do encoders already loaded (a GPU engine's, or a test's).
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from sparsecse.errors import SparseCSEError

ENV = "SPARSECSE_TIMING"  # "fresh" (the default) or "inline"


@dataclass(frozen=True)
class OnDisk:
    """A model directory as a timing loads it: a torch directory (fp32 on the CPU) or an exported one
    (its runtime with ``threads`` intra-op threads; None: torch's)."""

    path: str
    threads: int | None = None

    def stamp(self) -> int:
        """When the directory last changed (a directory written again holds another model)."""
        return max((f.stat().st_mtime_ns for f in Path(self.path).iterdir() if f.is_file()), default=0)

    def load(self):
        """The encoder the directory holds (:func:`~sparsecse.serving.loading.load_encoder`)."""
        from sparsecse.serving.loading import load_encoder

        return load_encoder(self.path, device="cpu", threads=self.threads)


def mode() -> str:
    """Where timings run: ``fresh`` (a worker process) unless ``SPARSECSE_TIMING`` says ``inline``."""
    value = os.environ.get(ENV, "fresh").strip().lower() or "fresh"
    if value not in ("fresh", "inline"):
        raise SparseCSEError(f"{ENV}={value!r} is not a timing mode; use fresh or inline.")
    return value


_POOL: ProcessPoolExecutor | None = None
_LOADED: dict[tuple[str, int | None, int], Any] = {}  # in the worker: what it loaded, by directory and stamp


def _pool() -> ProcessPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        atexit.register(close)
    return _POOL


def close() -> None:
    """Stop the worker (a later timing starts a new one)."""
    global _POOL
    if _POOL is not None:
        _POOL.shutdown(wait=True, cancel_futures=True)
        _POOL = None


def _loaded(models: dict[str, OnDisk]) -> dict[str, Any]:
    """In the worker: the encoders of ``models``, loaded once; models no longer asked for are let go."""
    keys = {name: (m.path, m.threads, m.stamp()) for name, m in models.items()}
    for key in [k for k in _LOADED if k not in keys.values()]:
        del _LOADED[key]
    for name, m in models.items():
        if keys[name] not in _LOADED:
            _LOADED[keys[name]] = m.load()
    return {name: _LOADED[keys[name]] for name in models}


def _call(function: Callable, models: dict[str, OnDisk], args: tuple) -> Any:
    return function(_loaded(models), *args)


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
        try:
            return _pool().submit(_call, function, dict(models), args).result()
        except BrokenProcessPool as exc:  # the worker died (out of memory, killed): the next timing starts anew
            close()
            raise SparseCSEError(f"The timing process stopped before it finished ({exc}); nothing was timed, so "
                                 "nothing is chosen: run the command again (with --resume where it has one).") from exc
    encoders = {name: m.load() if isinstance(m, OnDisk) else m for name, m in models.items()}
    return function(encoders, *args)
