"""What an exported directory holds, read from its ``sparsecse_config.json`` (no torch, no runtime).

``sparsecse export`` records the graphs it wrote under the key of their format (a name of
:mod:`~sparsecse.artifacts.export_formats`: ``onnx``, ``openvino``, ...):
``{"file": graph sparsecse runs, "files": {graph: "fp32" | "int8" | "int8_static"}, ...}``.

    >>> exported_format("runs/minilm-openvino")  # doctest: +SKIP
    'openvino'
"""

from __future__ import annotations

import os

from sparsecse.artifacts.export_formats import format_names
from sparsecse.artifacts.model_dir import SPARSECSE_CONFIG, read_model_config  # noqa: F401


def export_settings(path: str | os.PathLike, format: str) -> dict | None:
    """The ``format`` entry of an exported directory's config, or None for any other path.

    Args:
        path: a directory.
        format: a registered format's name.

    Returns:
        The entry (``file``, ``files``, ``pooling``, ``dim``, ...), or None.
    """
    settings = read_model_config(path).get(format)
    return settings if isinstance(settings, dict) and settings.get("file") else None


def exported_format(path: str | os.PathLike) -> str | None:
    """The registered format of a directory written by ``sparsecse export`` (``onnx``, ``openvino``, ...), else
    None."""
    config = read_model_config(path)
    for format in format_names():
        settings = config.get(format)
        if isinstance(settings, dict) and settings.get("file"):
            return format
    return None


EXPORT_MANIFEST = "sparsecse_export.json"  # a backend folder's record inside a stock model directory


def backend_records(model_dir: str | os.PathLike) -> list[dict]:
    """The record of each backend folder that ``sparsecse export`` wrote into a stock model directory (its
    ``EXPORT_MANIFEST``: ``format``, ``files`` (graph to kind), ``manifest``, and ``speed`` where timed), in the
    order the formats are registered.

    Args:
        model_dir: a model directory.

    Returns:
        The records; none for a directory without backend folders.
    """
    import json
    from pathlib import Path

    records = []
    for path in sorted(Path(model_dir).glob(f"*/{EXPORT_MANIFEST}")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("format") in format_names():
            records.append(record)
    return sorted(records, key=lambda r: format_names().index(r["format"]))
