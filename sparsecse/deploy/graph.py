"""What both exporters share (:mod:`~sparsecse.deploy.onnx_export`, :mod:`~sparsecse.deploy.openvino_export`):
the torch module they trace (backbone + pooling + L2 normalisation where the model has it), the sentences
they check the exported model on, the source model checked and loaded, and the result they return."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from sparsecse.artifacts.exported_model import exported_format
from sparsecse.artifacts.files import check_destination
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.encoder import SentenceEncoder, resolve_model
from sparsecse.modeling.adapters import base_model_type

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# Traced with padding (two lengths) so the attention-mask path is in the graph; also checked after export.
CHECK_SENTENCES = [
    "A man is playing a guitar.",
    "Two dogs run across a wide field of tall grass while their owner watches from the road.",
    "Stocks fell.",
    "A woman is slicing an onion in the kitchen.",
]
FP32_MIN_COSINE = 0.9999  # below this the graph does not compute the model: a bug, not rounding


@dataclass
class ExportResult:
    """An exported directory: its graph files and their sizes, the graph sparsecse runs, the pooling, the
    check against the torch model (minimum cosines) and the time it took."""

    out: Path
    files: dict[str, int]  # graph file -> bytes
    file: str  # the graph sparsecse runs
    pooling: str
    normalize: bool
    verification: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    kinds: dict[str, str] = field(default_factory=dict)  # graph file -> fp32 | int8 | int8_static

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: what ``sparsecse export --json`` prints."""
        return {"out": str(self.out), "files": self.files, "file": self.file, "pooling": self.pooling,
                "normalize": self.normalize, "verification": self.verification, "seconds": round(self.seconds, 2),
                "kinds": self.kinds}


class EmbeddingGraph(nn.Module):
    """The encoder's backbone + pooling (+ L2 normalisation) as one function of its token inputs."""

    def __init__(self, encoder: SentenceEncoder, input_names: list[str], normalize: bool):
        super().__init__()
        self.encoder = encoder
        self.input_names = input_names
        self.normalize = normalize

    def forward(self, *inputs):
        """(last hidden state, sentence embedding) of the token inputs, in ``input_names`` order."""
        features = dict(zip(self.input_names, inputs))
        outputs = self.encoder.transformer_outputs(**features)
        embedding = self.encoder.pool(outputs, features["attention_mask"])
        if self.normalize:
            embedding = nn.functional.normalize(embedding, dim=-1)
        return outputs.last_hidden_state, embedding


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
    itself, the model is not already exported and has no Dense projection (not carried into a graph
    yet). Returns (source path, fp32 encoder in eval mode, whether it normalises, reference embeddings
    of ``CHECK_SENTENCES``)."""
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



