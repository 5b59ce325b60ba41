"""What a user aims at: a measured speed-up on an engine, or a largest dev-score drop (one of the two).

    >>> Target(speedup=2.0).check().engine
    'torch-fp32'
    >>> Target(speedup=float("nan")).check()
    Traceback (most recent call last):
    ...
    sparsecse.errors.SparseCSEError: The speed-up target must be a finite number above 1 (the input model is 1x); got nan.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, replace
from typing import Any

from sparsecse.artifacts.export_formats import format_names, get_format
from sparsecse.errors import SparseCSEError
from sparsecse.serving import st_encoder

DEFAULT_ENGINE = "torch-fp32"  # the torch model itself, in fp32
GPU_ENGINE = "torch-cuda"  # the torch model on the GPU under bf16 autocast (fp16 where bf16 is missing)
METRICS = ("throughput", "latency-p50", "latency-p95")  # what a speed-up compares (see :class:`Shape`)
LOADERS = (st_encoder.NAME, "sparsecse")  # what loads a torch-fp32 model to time it (see Target.loader)
WHEN_BUSY = ("stop", "wait")  # a timing whose spread stays too wide: stop, or wait for a quieter machine


def engines() -> dict[str, tuple[str, str | None] | None]:
    """{engine name: (export format, quantization)}: ``torch-fp32`` (None), then each registered export format
    (:mod:`sparsecse.artifacts.export_formats`) in fp32 (``onnx``) and each of its quantizations (``openvino-int8``);
    ``torch-cuda`` (None too: the torch model, on the GPU) follows ``torch-fp32``.

    >>> engines()["openvino-int8"]
    ('openvino', 'int8')
    """
    found: dict[str, tuple[str, str | None] | None] = {DEFAULT_ENGINE: None, GPU_ENGINE: None}
    for name in format_names():
        found[name] = (name, None)
        for quantization in get_format(name).quantizations:
            found[f"{name}-{quantization.name}"] = (name, quantization.name)
    return found


DEFAULT_BATCH_SIZE = 128  # the batch size a throughput is measured at unless the user names one
LATENCY_BATCH_SIZE = 1  # a latency metric's default request: one sentence
DEFAULT_PROBES = 6
PLAIN_NUMBER = re.compile(r"^[-+]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|inf|nan)$",
                          re.IGNORECASE)  # no 1_5 (inf and nan are numbers the checks then refuse as not finite)


def machine_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system has one, else ``os.cpu_count()``)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


MAX_SPREAD = 0.1  # the widest relative spread (IQR / median of the per-round ratios) a timing may keep


def default_loader(engine: str) -> str:
    """What loads a model on ``engine`` to time it when the target names no loader: sentence-transformers for
    ``torch-fp32`` where it is installed, else sparsecse (the only one for the other engines, which time their own
    runtime)."""
    return st_encoder.NAME if engine == DEFAULT_ENGINE and st_encoder.available() else "sparsecse"


@dataclass(frozen=True)
class Shape:
    """How a model is served, hence how its speed is measured: ``metric`` is ``throughput`` (sentences per second
    over many batches of ``batch_size``) or ``latency-p50`` / ``latency-p95`` (that percentile of the time one
    request of ``batch_size`` sentences takes); ``threads`` is the engine's intra-op threads while timing (resolved:
    the engine's default on this machine when the user named none, ``threads_default`` then True); ``sentences``
    names where the timed sentences come from (``dev`` or a file).

    >>> Shape("latency-p50", 1, 2, "dev").describe()
    'latency-p50 at batch 1 on 2 threads, torch-fp32'
    """

    metric: str
    batch_size: int
    threads: int
    sentences: str = "dev"
    engine: str = DEFAULT_ENGINE
    threads_default: bool = False
    loader: str = "sparsecse"

    @property
    def latency(self) -> bool:
        """Whether the metric is a latency percentile (else throughput)."""
        return self.metric != "throughput"

    @property
    def percentile(self) -> float:
        """The latency percentile the metric names (50 for throughput's per-round figure too)."""
        return float(self.metric.split("-p")[1]) if self.latency else 50.0

    def describe(self) -> str:
        """One phrase, e.g. ``throughput at batch 128 on 2 threads, torch-fp32``."""
        served = f" via {self.loader}" if self.loader != "sparsecse" else ""
        return (f"{self.metric} at batch {self.batch_size} on {self.threads} thread{'s' if self.threads != 1 else ''}, "
                f"{self.engine}{served}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the manifest's and the card's ``shape``)."""
        return {"metric": self.metric, "batch_size": self.batch_size, "threads": self.threads,
                "threads_default": self.threads_default, "sentences": self.sentences, "engine": self.engine, "loader": self.loader}


def _number(value: Any) -> float | None:
    """A number as users write it (``float()`` alone reads ``1_5`` as 15: refused)."""
    if isinstance(value, bool) or (isinstance(value, str) and not PLAIN_NUMBER.match(value.strip())):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Target:
    """A compression target: a speed-up or a largest dev drop (the two together are refused).

    Args:
        speedup: the encode speed-up over the input model to reach, measured on ``engine`` at ``batch_size``
            on the dev sentences (> 1), or None.
        max_drop: the largest drop of the dev score (the dev set's metric x 100, e.g. Spearman x 100) below the
            input model's own, measured the same way (>= 0), or None. It asks for the fastest candidate within
            the bound; it cannot go with ``speedup``.
        engine: where speed is measured: one of :func:`engines`.
        batch_size: sentences per batch (a throughput) or per request (a latency) when timing; None: 128 for a
            throughput, 1 for a latency.
        threads: the engine's intra-op threads while timing (None: the engine's default on this machine, recorded).
        metric: ``throughput``, ``latency-p50`` or ``latency-p95`` (see :class:`Shape`).
        timing_sentences: a file of sentences (one per line) to time on (None: the dev set's sentences).
        max_spread: the widest spread a timing may keep (relative IQR of its per-round ratios) before it is timed
            again and, if it stays wider, the machine is called too busy.
        when_busy: ``stop`` (raise, naming what was measured) or ``wait`` (wait for a quieter machine, then time
            again) when a timing stays too spread.
        margin: probes aim ``speedup x (1 + margin)``, since the final model (pruned in steps, distilled) is timed
            again and its speed-up varies around the probe's (by about 3.5% over six L6 targets at batch 128; with
            3% one of a curve's three targets often landed just short).
        probes: the most candidate budgets the search tries.
        depth: with a speed-up, candidates may also remove up to this many whole layers (0: width only;
            :mod:`sparsecse.targets.depth`); None (``auto``): :meth:`resolved_depth` decides from the metric.
        loader: what loads a ``torch-fp32`` model to time it, as its users serve it: ``sentence-transformers``
            (its ``encode``, with that library's per-call work; :mod:`sparsecse.serving.st_encoder`) or
            ``sparsecse`` (:class:`~sparsecse.modeling.encoder.SentenceEncoder`); None: sentence-transformers where
            it is installed, else sparsecse (the resolved one is recorded with the shape). Other engines time their
            own runtime.
        speedup_of: a model (name or directory) whose speed-up over the input, measured at the same serving shape,
            is the target: "as fast as the model a user would download instead" (:mod:`sparsecse.targets.relative`
            measures it when the run starts and sets ``speedup`` to it; the final model is timed beside it). It
            replaces ``speedup`` and cannot go with ``max_drop``.
        minutes: the most wall-clock minutes the run aiming at it may take (None: no limit): its last training
            stage ends in time, the learning-rate schedule fitted to the steps that fit
            (:mod:`sparsecse.training.time_limit`); the stages before it run in full.
    """

    speedup: float | None = None
    max_drop: float | None = None
    engine: str = DEFAULT_ENGINE
    batch_size: int | None = None
    margin: float = 0.05
    probes: int = DEFAULT_PROBES
    threads: int | None = None
    metric: str = "throughput"
    timing_sentences: str | None = None
    max_spread: float = MAX_SPREAD
    when_busy: str = "stop"
    depth: int | None = None
    loader: str | None = None
    speedup_of: str | None = None
    minutes: float | None = None

    def check(self, where: str = "") -> "Target":
        """The target itself once every setting is valid (one sentence naming the setting otherwise)."""
        prefix = f"{where}: " if where else ""
        if self.speedup_of is not None:
            return self._check_relative(prefix)
        if self.speedup is None and self.max_drop is None:
            raise SparseCSEError(f"{prefix}a target needs a speed-up (--speedup) or a largest dev drop (--max-drop).")
        if self.speedup is not None and self.max_drop is not None:
            raise SparseCSEError(f"{prefix}Give a speed-up (--speedup) or a largest dev drop (--max-drop), not both: "
                                 "the speed search judges candidates before they are distilled, so it cannot hold a "
                                 "dev bound (check the drop on the model's card).")
        if self.speedup is not None:
            value = _number(self.speedup)
            if value is None or not math.isfinite(value) or value <= 1:
                raise SparseCSEError(f"{prefix}The speed-up target must be a finite number above 1 (the input model "
                                     f"is 1x); got {self.speedup!r}.")
        if self.max_drop is not None:
            value = _number(self.max_drop)
            if value is None or not math.isfinite(value) or value < 0:
                raise SparseCSEError(f"{prefix}The largest dev drop (--max-drop) must be a finite number of at least "
                                     f"0 points; got {self.max_drop!r}.")
        if self.engine not in engines():
            raise SparseCSEError(f"{prefix}Unknown engine {self.engine!r}; choose one of {', '.join(engines())}.")
        if self.metric not in METRICS:
            raise SparseCSEError(f"{prefix}Unknown speed metric {self.metric!r}; choose one of {', '.join(METRICS)}.")
        if self.batch_size is not None and (isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int)
                                            or self.batch_size < 1):
            kind = "request size of a latency" if self.metric != "throughput" else "timing batch size"
            raise SparseCSEError(f"{prefix}The {kind} (--batch-size) must be a whole number of at least 1; got "
                                 f"{self.batch_size!r}.")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise SparseCSEError(f"{prefix}The timing threads (--threads) must be a whole number of at least 1; got "
                                 f"{self.threads!r}.")
        if self.threads is not None and self.threads > machine_cpus():
            raise SparseCSEError(f"{prefix}The timing threads (--threads {self.threads}) are more than this machine's "
                                 f"{machine_cpus()} CPUs; give at most {machine_cpus()}.")
        if self.timing_sentences is not None and not isinstance(self.timing_sentences, str):
            raise SparseCSEError(f"{prefix}The timing sentences must be a file name; got {self.timing_sentences!r}.")
        spread = _number(self.max_spread)
        if spread is None or not 0 < spread < 1:
            raise SparseCSEError(f"{prefix}The target's max_spread must be in (0, 1); got {self.max_spread!r}.")
        if self.when_busy not in WHEN_BUSY:
            raise SparseCSEError(f"{prefix}when_busy must be one of {', '.join(WHEN_BUSY)}; got {self.when_busy!r}.")
        margin = _number(self.margin)
        if margin is None or not 0 <= margin < 1:
            raise SparseCSEError(f"{prefix}The target's margin must be in [0, 1); got {self.margin!r}.")
        if isinstance(self.probes, bool) or not isinstance(self.probes, int) or not 2 <= self.probes <= 30:
            raise SparseCSEError(f"{prefix}The target's probes must be a whole number in [2, 30]; got {self.probes!r}.")
        if self.depth is not None and (isinstance(self.depth, bool) or not isinstance(self.depth, int)
                                       or self.depth < 0):
            raise SparseCSEError(f"{prefix}The target's depth (the most whole layers a candidate removes) must be a "
                                 f"whole number of at least 0; got {self.depth!r}.")
        if self.loader is not None and self.loader not in LOADERS:
            raise SparseCSEError(f"{prefix}Unknown loader {self.loader!r} to time through; choose one of "
                                 f"{', '.join(LOADERS)}.")
        if self.loader == st_encoder.NAME and self.engine != DEFAULT_ENGINE:
            raise SparseCSEError(f"{prefix}The {st_encoder.NAME} loader times the torch model on the CPU "
                                 f"({DEFAULT_ENGINE}); the engine {self.engine} times its own runtime, so leave the "
                                 "loader out.")
        if self.minutes is not None:
            minutes = _number(self.minutes)
            if minutes is None or not math.isfinite(minutes) or minutes <= 0:
                raise SparseCSEError(f"{prefix}The target's time limit (minutes) must be a number of minutes above 0 "
                                     f"(or none: no limit); got {self.minutes!r}.")
        if self.depth and self.speedup is None:
            raise SparseCSEError(f"{prefix}Removing whole layers (depth) is searched for a speed-up target; give "
                                 "--speedup.")
        return self

    def _check_relative(self, prefix: str) -> "Target":
        """A target of another model's speed-up: a model named and no drop beside it, the rest checked as a speed-up
        target's. Its ``speedup`` is the named model's once measured (:func:`sparsecse.targets.relative.resolve`);
        until then 1.5 stands in for it. (Where a user gives both, the recipe and the command line refuse it.)"""
        if not isinstance(self.speedup_of, str) or not self.speedup_of.strip():
            raise SparseCSEError(f"{prefix}speedup_of names a model (a name or a directory) whose speed-up is the "
                                 f"target; got {self.speedup_of!r}.")
        if self.max_drop is not None:
            raise SparseCSEError(f"{prefix}Give another model's speed-up (--speedup-of) or a largest dev drop "
                                 "(--max-drop), not both.")
        replace(self, speedup=1.5 if self.speedup is None else self.speedup, speedup_of=None).check(prefix.rstrip(": "))
        return self

    @property
    def batch(self) -> int:
        """The batch (or request) size timed, ``batch_size`` or else the metric's default."""
        if self.batch_size is not None:
            return int(self.batch_size)
        return DEFAULT_BATCH_SIZE if self.metric == "throughput" else LATENCY_BATCH_SIZE

    def shape(self, default_threads: int) -> Shape:
        """The serving shape this target is timed at, ``default_threads`` standing in for unnamed threads (the
        engine's default on this machine: :func:`sparsecse.targets.timing.engine_threads`)."""
        return Shape(self.metric, self.batch, int(self.threads or default_threads), self.timing_sentences or "dev",
                     self.engine, self.threads is None, self.resolved_loader)

    @property
    def resolved_loader(self) -> str:
        """``loader``, or where it is None: sentence-transformers for ``torch-fp32`` when it is installed, else
        sparsecse (the only one for the other engines, which time their own runtime)."""
        return self.loader if self.loader is not None else default_loader(self.engine)

    def resolved_depth(self, layers: int, layout: str = "custom") -> int:
        """The most whole layers a candidate may remove from a model of ``layers`` layers: ``depth`` where given,
        else (``auto``) half the layers, rounded down, for a speed-up at a latency metric, whose requests are small
        enough that each layer's fixed cost (norms, softmax, small kernels, dispatch) weighs, or in the ``stock``
        layout at any metric (a stock BERT-like model keeps every head, so width alone cannot cut attention's
        FLOPs: all-MiniLM-L6-v2 at batch 128 stops near 2.3x); 0 otherwise (a throughput at a large batch is
        bound by FLOPs, which width cuts as well)."""
        if self.depth is not None:
            return int(self.depth)
        if self.speedup is None and self.speedup_of is None:
            return 0
        return int(layers) // 2 if self.metric != "throughput" or layout == "stock" else 0

    @property
    def aim(self) -> float | None:
        """The speed-up the probes aim at (``speedup x (1 + margin)``)."""
        return None if self.speedup is None else float(self.speedup) * (1 + float(self.margin))

    def describe(self) -> str:
        """One line, e.g. ``2x on torch-fp32 (throughput, batch 128)`` or ``a dev drop of at most 0.3``."""
        parts = []
        threads = f", {self.threads} threads" if self.threads else ""
        if self.speedup is not None or self.speedup_of is not None:
            depth = f", up to {self.depth} layers removed" if self.depth else ""
            if self.depth is None and self.metric != "throughput":
                depth = ", up to half the layers removed"
            goal = f"{float(self.speedup):g}x" if self.speedup is not None else ""
            if self.speedup_of is not None:
                goal = f"{self.speedup_of}'s speed-up" + (f" ({goal})" if goal else "")
            parts.append(f"{goal} on {self.engine} ({self.metric}, batch {self.batch}{threads}{depth})")
        if self.max_drop is not None:
            parts.append(f"a dev drop of at most {float(self.max_drop):g}")
        if self.speedup is None and self.speedup_of is None:
            return parts[0] + f" (speed on {self.engine})"
        return " with ".join(parts)


def parse_speedups(value: Any) -> list[float]:
    """The speed-up targets of ``--speedup``: one number, or several separated by commas (a curve), each checked
    as a :class:`Target`'s; one sentence for an empty list, a value that is not a number, or one given twice.

    >>> parse_speedups("1.5, 2,3")
    [1.5, 2.0, 3.0]
    >>> parse_speedups("2,2")
    Traceback (most recent call last):
    ...
    sparsecse.errors.SparseCSEError: --speedup gives 2 twice; give each target once (e.g. 1.5,2,3).
    """
    items = [str(v).strip() for v in value] if isinstance(value, (list, tuple)) else str(value).split(",")
    items = [item.strip() for item in items]
    if not any(items) or any(not item for item in items):
        raise SparseCSEError(f"--speedup needs one speed-up or a comma-separated list of them (e.g. 1.5,2,3); got "
                             f"{str(value)!r}.")
    found: list[float] = []
    for item in items:
        number = _number(item)
        if number is None:
            raise SparseCSEError(f"--speedup {item!r} is not a number; give speed-ups such as 1.5,2,3.")
        Target(speedup=number).check()
        if number in found:
            raise SparseCSEError(f"--speedup gives {number:g} twice; give each target once (e.g. 1.5,2,3).")
        found.append(number)
    return found
