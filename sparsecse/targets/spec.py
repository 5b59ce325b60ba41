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
from dataclasses import dataclass
from typing import Any

from sparsecse.artifacts.export_formats import format_names, get_format
from sparsecse.errors import SparseCSEError

DEFAULT_ENGINE = "torch-fp32"  # the torch model itself, in fp32


def engines() -> dict[str, tuple[str, str | None] | None]:
    """{engine name: (export format, quantization)}: ``torch-fp32`` (None), then each registered export format
    (:mod:`sparsecse.artifacts.export_formats`) in fp32 (``onnx``) and each of its quantizations (``openvino-int8``).

    >>> engines()["openvino-int8"]
    ('openvino', 'int8')
    """
    found: dict[str, tuple[str, str | None] | None] = {DEFAULT_ENGINE: None}
    for name in format_names():
        found[name] = (name, None)
        for quantization in get_format(name).quantizations:
            found[f"{name}-{quantization.name}"] = (name, quantization.name)
    return found
DEFAULT_BATCH_SIZE = 128  # the batch size every speed figure of sparsecse is measured at
DEFAULT_PROBES = 6


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
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
        batch_size: sentences per batch when timing.
        margin: probes aim ``speedup x (1 + margin)``, since the final model (pruned in steps, distilled) is timed
            again and its speed-up varies a little around the probe's.
        probes: the most candidate budgets the search tries.
    """

    speedup: float | None = None
    max_drop: float | None = None
    engine: str = DEFAULT_ENGINE
    batch_size: int = DEFAULT_BATCH_SIZE
    margin: float = 0.03
    probes: int = DEFAULT_PROBES

    def check(self, where: str = "") -> "Target":
        """The target itself once every setting is valid (one sentence naming the setting otherwise)."""
        prefix = f"{where}: " if where else ""
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
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise SparseCSEError(f"{prefix}The timing batch size must be a whole number of at least 1; got "
                                 f"{self.batch_size!r}.")
        margin = _number(self.margin)
        if margin is None or not 0 <= margin < 1:
            raise SparseCSEError(f"{prefix}The target's margin must be in [0, 1); got {self.margin!r}.")
        if isinstance(self.probes, bool) or not isinstance(self.probes, int) or not 2 <= self.probes <= 30:
            raise SparseCSEError(f"{prefix}The target's probes must be a whole number in [2, 30]; got {self.probes!r}.")
        return self

    @property
    def aim(self) -> float | None:
        """The speed-up the probes aim at (``speedup x (1 + margin)``)."""
        return None if self.speedup is None else float(self.speedup) * (1 + float(self.margin))

    def describe(self) -> str:
        """One line, e.g. ``2x on torch-fp32 (batch 128)`` or ``a dev drop of at most 0.3``."""
        parts = []
        if self.speedup is not None:
            parts.append(f"{float(self.speedup):g}x on {self.engine} (batch {self.batch_size})")
        if self.max_drop is not None:
            parts.append(f"a dev drop of at most {float(self.max_drop):g}")
        return " with ".join(parts) if self.speedup is not None else (parts[0] + f" (speed on {self.engine})")
