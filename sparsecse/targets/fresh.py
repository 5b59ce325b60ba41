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

import contextlib
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Callable

from sparsecse.errors import SparseCSEError
from sparsecse.evaluation import speed
from sparsecse.serving import st_encoder
from sparsecse.serving.loading import load_encoder

ENV = "SPARSECSE_TIMING"  # "fresh" (the default) or "inline"


@dataclass(frozen=True)
class OnDisk:
    """A model directory as a timing loads it: a torch directory (fp32 on the CPU) through ``loader``
    (``sparsecse`` or ``sentence-transformers``), or an exported one (its runtime with ``threads`` intra-op
    threads, None: torch's; ``file``: one of its graphs, None: the one its export chose)."""

    path: str
    threads: int | None = None
    loader: str = "sparsecse"
    file: str | None = None

    def load(self):
        """The encoder the directory holds (:func:`~sparsecse.serving.loading.load_encoder`, or
        :class:`~sparsecse.serving.st_encoder.SentenceTransformersEncoder` for a torch directory served by
        sentence-transformers)."""
        if self.loader == st_encoder.NAME:
            return st_encoder.SentenceTransformersEncoder.load(self.path)
        return load_encoder(self.path, device="cpu", threads=self.threads, file=self.file)


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


def _serve(model: OnDisk, requests: list[list[str]], batch_size: int, threads: int | None, conn) -> None:
    """A serving process: load ``model``, encode one warm-up request, say ``ready``, then time each list of request
    indices it is sent (one untimed warm-up request first, as a server that has been serving keeps its caches warm)
    and send back their seconds, until it is sent None."""
    try:
        encoder = model.load()
        with speed.torch_threads(threads):
            speed.clock(encoder, requests[0], batch_size)
            conn.send("ready")
            while (indices := conn.recv()) is not None:
                conn.send(_turn(encoder, requests, indices, batch_size))
    finally:
        conn.close()


def _turn(encoder, requests: list[list[str]], indices: list[int], batch_size: int) -> list[float]:
    """One turn of a served model: an untimed warm-up request, then the seconds of each request of ``indices``."""
    speed.clock(encoder, requests[indices[0]], batch_size)
    return [speed.clock(encoder, requests[i], batch_size) for i in indices]


class Servers:
    """The models each served alone in a fresh process of its own, kept for the whole timing so that their turns
    can alternate a few requests at a time (:func:`serving`); with encoders already loaded or
    ``SPARSECSE_TIMING=inline``, the models are timed here instead (the tests that replace the clock)."""

    def __init__(self, models: dict[str, Any], requests: list[list[str]], batch_size: int, threads: int | None):
        self.requests, self.batch_size, self.threads = requests, batch_size, threads
        self.inline = not all(isinstance(m, OnDisk) for m in models.values()) or mode() == "inline"
        self.models, self.pipes, self.processes = models, {}, {}

    def start(self) -> None:
        """Start every model's process (or load the inline models) and wait until each has warmed up."""
        if self.inline:
            self.models = {k: m.load() if isinstance(m, OnDisk) else m for k, m in self.models.items()}
            for encoder in self.models.values():
                speed.clock(encoder, self.requests[0], self.batch_size)
            return
        spawn = multiprocessing.get_context("spawn")
        for key, model in self.models.items():
            here, there = spawn.Pipe()
            process = spawn.Process(target=_serve, args=(model, self.requests, self.batch_size, self.threads, there),
                                    daemon=True)
            process.start()
            there.close()
            self.pipes[key], self.processes[key] = here, process
        for key in self.models:
            self._receive(key)

    def time(self, key: str, indices) -> list[float]:
        """The seconds of each request of ``indices`` on model ``key`` (after one untimed warm-up request)."""
        indices = list(indices)
        if self.inline:
            with speed.torch_threads(self.threads):
                return _turn(self.models[key], self.requests, indices, self.batch_size)
        self.pipes[key].send(indices)
        return self._receive(key)

    def _receive(self, key: str):
        try:
            return self.pipes[key].recv()
        except (EOFError, OSError) as exc:  # the process died (out of memory, killed) or failed to load
            raise SparseCSEError(f"The timing process of {key} stopped before it finished ({type(exc).__name__}); "
                                 "nothing was timed, so nothing is chosen: run the command again (with --resume "
                                 "where it has one).") from None

    def stop(self) -> None:
        """Tell every process to end, and wait for it."""
        for key, pipe in self.pipes.items():
            with contextlib.suppress(OSError, BrokenPipeError):
                pipe.send(None)
            self.processes[key].join(timeout=30)
            if self.processes[key].is_alive():
                self.processes[key].kill()
            pipe.close()


@contextlib.contextmanager
def serving(models: dict[str, Any], requests: list[list[str]], batch_size: int, threads: int | None):
    """:class:`Servers` for ``models`` (name to :class:`OnDisk` or a loaded encoder), started, and stopped after the
    block.

        >>> with serving({"input": OnDisk("a"), "small": OnDisk("b")}, requests, 1, 2) as servers:  # doctest: +SKIP
        ...     servers.time("small", range(5))
    """
    servers = Servers(models, requests, batch_size, threads)
    try:
        servers.start()
        yield servers
    finally:
        servers.stop()
