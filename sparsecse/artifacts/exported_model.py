"""What an exported directory holds, read from its ``sparsecse_config.json`` (no torch, no runtime).

``sparsecse export`` records the graphs it wrote under the key of their format (``onnx`` or
``openvino``): ``{"file": graph sparsecse runs, "files": {graph: "fp32" | "int8" | "int8_static"}, ...}``.

    >>> exported_format("runs/minilm-openvino")
    'openvino'
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SPARSECSE_CONFIG = "sparsecse_config.json"
EXPORT_FORMATS = ("onnx", "openvino")
MISSING_OPENVINO = ("OpenVINO export and inference need the openvino and nncf packages: "
                    "pip install 'sparsecse[openvino]'.")


def _config(path: str | os.PathLike) -> dict:
    try:
        config = json.loads((Path(path) / SPARSECSE_CONFIG).read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def export_settings(path: str | os.PathLike, format: str) -> dict | None:
    """The ``format`` entry of an exported directory's config, or None for any other path."""
    settings = _config(path).get(format)
    return settings if isinstance(settings, dict) and settings.get("file") else None


def exported_format(path: str | os.PathLike) -> str | None:
    """``onnx`` or ``openvino`` for a directory written by ``sparsecse export``, else None."""
    config = _config(path)
    for format in EXPORT_FORMATS:
        settings = config.get(format)
        if isinstance(settings, dict) and settings.get("file"):
            return format
    return None
