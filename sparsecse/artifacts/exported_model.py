"""What an exported directory holds, read from its ``sparsecse_config.json`` (no torch, no runtime).

``sparsecse export`` records the graphs it wrote under the key of their format (``onnx`` or
``openvino``): ``{"file": graph sparsecse runs, "files": {graph: "fp32" | "int8" | "int8_static"}, ...}``.

    >>> exported_format("runs/minilm-openvino")
    'openvino'
"""

from __future__ import annotations

import os

from sparsecse.artifacts.model_dir import SPARSECSE_CONFIG, read_model_config  # noqa: F401
EXPORT_FORMATS = ("onnx", "openvino")
MISSING_OPENVINO = ("OpenVINO export and inference need the openvino and nncf packages: "
                    "pip install 'sparsecse[openvino]'.")


def export_settings(path: str | os.PathLike, format: str) -> dict | None:
    """The ``format`` entry of an exported directory's config, or None for any other path."""
    settings = read_model_config(path).get(format)
    return settings if isinstance(settings, dict) and settings.get("file") else None


def exported_format(path: str | os.PathLike) -> str | None:
    """``onnx`` or ``openvino`` for a directory written by ``sparsecse export``, else None."""
    config = read_model_config(path)
    for format in EXPORT_FORMATS:
        settings = config.get(format)
        if isinstance(settings, dict) and settings.get("file"):
            return format
    return None
