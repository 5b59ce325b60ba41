"""A model directory's own file, ``sparsecse_config.json``: the one module that reads and writes it.

Next to the Hugging Face and sentence-transformers files, it records what sparsecse needs to load the
model as it was saved and to say where it came from::

    {"pooling": "mean", "max_length": 256,
     "lineage": {"stage": "rewind", "init": ..., "mask_digest": ..., "parent": {...}},
     "training": {...}, "onnx": {"file": ..., "files": {...}}}

``lineage`` chains back through every stage that made the model (``parent``); ``onnx``/``openvino`` are
written by ``sparsecse export`` (:mod:`sparsecse.artifacts.exported_model`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SPARSECSE_CONFIG = "sparsecse_config.json"
CARD = "README.md"  # a model directory's model card


def read_model_config(model_dir: str | os.PathLike | None) -> dict[str, Any]:
    """The directory's sparsecse config; {} for a directory without one (any other model), a hub name or
    an unreadable file."""
    if model_dir is None:
        return {}
    try:
        config = json.loads((Path(model_dir) / SPARSECSE_CONFIG).read_text())
    except (OSError, TypeError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def write_model_config(model_dir: str | os.PathLike, config: dict[str, Any]) -> Path:
    """Write the config into a directory being assembled (callers make the directory appear atomically)."""
    path = Path(model_dir) / SPARSECSE_CONFIG
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def model_lineage(model_dir: str | os.PathLike | None) -> dict[str, Any] | None:
    """How the model was made (its ``lineage``), or None for a model sparsecse did not write."""
    lineage = read_model_config(model_dir).get("lineage")
    return lineage if isinstance(lineage, dict) else None
