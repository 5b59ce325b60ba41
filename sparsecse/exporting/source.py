"""The torch model an export reads, checked and loaded before any work, and what the exported directory's
``config.json`` says about its architecture.

    >>> source, encoder, normalize, reference = load_source("runs/minilm-f50", "runs/minilm-f50-onnx",
    ...                                                     overwrite=False, pooling=None)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from sparsecse.artifacts.exported_model import exported_format
from sparsecse.artifacts.destinations import check_destination
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.encoder import SentenceEncoder, resolve_model
from sparsecse.serving.graph import CHECK_SENTENCES
from sparsecse.modeling.adapters import base_model_type


def has_normalize_module(model_dir: str | os.PathLike) -> bool:
    """Whether the directory's sentence-transformers modules.json ends the pipeline with Normalize."""
    try:
        modules = json.loads((Path(model_dir) / "modules.json").read_text())
    except (OSError, ValueError):
        return False
    return any(str(m.get("type", "")).endswith("Normalize") for m in modules if isinstance(m, dict))


def base_architecture_config(encoder: SentenceEncoder) -> dict[str, Any]:
    """config.json for the exported directory: the base architecture's type, so that tools reading it
    (sentence-transformers' ONNX backend, optimum) need no custom code; a shrunk model's per-layer
    shape stays in it as extra fields (the graph itself holds the real shapes)."""
    config = encoder.model.config.to_dict()
    config.pop("auto_map", None)
    config["model_type"] = base_model_type(encoder.model.config)
    base = next(c for c in type(encoder.model).__mro__ if c.__module__.startswith("transformers."))
    config["architectures"] = [base.__name__]
    return config


def load_source(model, out, overwrite: bool, pooling: str | None):
    """The torch model an export reads, checked before any work: ``out`` is writable and not the model
    itself, the model is not already exported and has no Dense projection (not carried into a graph yet).

    Args:
        model: a model directory or name (None: the default model).
        out: the directory the export will write.
        overwrite: whether ``out`` may be replaced.
        pooling: a pooling to use instead of the model's own.

    Returns:
        (source path, fp32 encoder in eval mode on the CPU, whether it normalises, reference embeddings of
        ``CHECK_SENTENCES``).
    """
    source = resolve_model(model)
    check_destination(out, overwrite, inputs={"model": source})  # never over the model it reads
    if os.path.isdir(source) and exported_format(source):
        raise SparseCSEError(f"{source} is already an exported {exported_format(source)} model; export the torch "
                             "model directory instead.")
    encoder = SentenceEncoder.load(source, pooling=pooling, device="cpu")
    if encoder.dense is not None:
        raise SparseCSEError(f"{source} ends in a Dense projection, which export does not carry into a graph yet.")
    encoder.model.float().eval()
    with torch.inference_mode():
        reference = encoder.encode(CHECK_SENTENCES)
    return source, encoder, has_normalize_module(source), reference
