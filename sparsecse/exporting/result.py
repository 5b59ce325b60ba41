"""What an export returns (:class:`~sparsecse.exporting.result.ExportResult`) and what a format's writer hands
back to the steps every format shares (:class:`~sparsecse.exporting.result.WrittenGraphs`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class WrittenGraphs:
    """What a format's writer wrote into the directory being assembled.

    Args:
        kinds: the kinds of graph written (keys of the format's ``files``: ``fp32`` first, then the quantized
            one, which becomes the graph sparsecse runs).
        settings: the format's own entries of its settings in ``sparsecse_config.json`` (``inputs``,
            ``outputs``, ``opset``, ...).
        params: the format's own export parameters for the manifest (exporter, quantization method, ...).
    """

    kinds: list[str]
    settings: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExportResult:
    """An exported directory: its graph files and their sizes, the graph sparsecse runs, the pooling, the
    check against the torch model (minimum cosines), the time it took and, for graphs written into a stock model
    and timed there, their speed (:func:`sparsecse.exporting.backends.export_into_model`'s ``measure``)."""

    out: Path
    files: dict[str, int]  # graph file -> bytes
    file: str  # the graph sparsecse runs
    pooling: str
    normalize: bool
    verification: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    kinds: dict[str, str] = field(default_factory=dict)  # graph file -> fp32 | int8 | int8_static
    speed: dict[str, Any] = field(default_factory=dict)  # the graphs timed beside torch, where an export timed them

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: what ``sparsecse export --json`` prints."""
        return {"out": str(self.out), "files": self.files, "file": self.file, "pooling": self.pooling,
                "normalize": self.normalize, "verification": self.verification, "seconds": round(self.seconds, 2),
                "kinds": self.kinds, **({"speed": self.speed} if self.speed else {})}
