"""``sparsecse export``: a dense or shrunk model directory as an ONNX graph, optionally int8-quantized.

The graph maps token ids (and attention mask, token types where the tokenizer makes them) to
``last_hidden_state`` and ``sentence_embedding`` (the model's pooling, then L2 normalisation where its
sentence-transformers config has a Normalize module), with dynamic batch and sequence axes. It is
traced with torch's TorchScript-based ONNX exporter, which follows uneven layers and head-less layers
as they run and needs no package beyond onnx; the torch.export-based exporter (``dynamo=True``) gives
the same graph but needs onnxscript and takes about 15 times longer.

int8 is ONNX Runtime's own dynamic quantization (``quantize_dynamic``): int8 weights per output
channel, activations quantized per batch at run time. The directory follows sentence-transformers'
ONNX layout (``onnx/model.onnx``, the tokenizer, a base-architecture ``config.json`` and the
modules.json/pooling files), and its ``sparsecse_config.json`` names the graph that sparsecse runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from sparsecse.encoder import SPARSECSE_CONFIG, SentenceEncoder, resolve_model, write_sentence_transformers_config
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.sts import cosine_rows
from sparsecse.io import atomic_dir, hash_path, make_manifest, refuse_existing
from sparsecse.onnx_encoder import (
    EMBEDDING_OUTPUT,
    FP32_FILE,
    INT8_FILE,
    MISSING_PACKAGES,
    OnnxEncoder,
    is_exported_dir,
    require_onnxruntime,
)

FORMATS = ("onnx",)
QUANTIZATIONS = ("int8",)
OPSET = 17
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
    out: Path
    files: dict[str, int]  # graph file -> bytes
    file: str  # the graph sparsecse runs
    pooling: str
    normalize: bool
    verification: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "files": self.files, "file": self.file, "pooling": self.pooling,
                "normalize": self.normalize, "verification": self.verification, "seconds": round(self.seconds, 2)}


class _EmbeddingGraph(nn.Module):
    """The encoder's backbone + pooling (+ L2 normalisation) as one function of its token inputs."""

    def __init__(self, encoder: SentenceEncoder, input_names: list[str], normalize: bool):
        super().__init__()
        self.encoder = encoder
        self.input_names = input_names
        self.normalize = normalize

    def forward(self, *inputs):
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


def check_onnx_packages(quantize: str | None) -> None:
    require_onnxruntime()
    try:
        import onnx  # noqa: F401  (the exporter writes through it)

        if quantize:
            import onnxruntime.quantization  # noqa: F401
    except ImportError:
        raise SparseCSEError(MISSING_PACKAGES) from None


def export_graph(encoder: SentenceEncoder, path: Path, normalize: bool, opset: int = OPSET) -> list[str]:
    """Trace ``encoder`` (CPU, fp32) into an ONNX file at ``path``; returns the graph's input names."""
    batch = encoder.tokenizer(CHECK_SENTENCES[:2], padding=True, return_tensors="pt")
    names = [n for n in INPUTS if n in batch]
    graph = _EmbeddingGraph(encoder, names, normalize).eval()
    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]}
    axes[EMBEDDING_OUTPUT] = {0: "batch"}
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python-constant branches that never vary here
        torch.onnx.export(graph, tuple(batch[n] for n in names), str(path), input_names=names,
                          output_names=["last_hidden_state", EMBEDDING_OUTPUT], dynamic_axes=axes,
                          opset_version=opset, do_constant_folding=True, dynamo=False)
    return names


def quantize_int8(fp32_path: Path, int8_path: Path) -> None:
    """ONNX Runtime dynamic quantization: int8 weights (per output channel) of every MatMul."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet_root_logger():
        quantize_dynamic(str(fp32_path), str(int8_path), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul"])


@contextlib.contextmanager
def _quiet_root_logger():
    """onnxruntime.quantization logs advice through the root logger, which would also install a stderr
    handler for good (logging.basicConfig); a temporary null handler at ERROR level keeps both away."""
    root, handler = logging.getLogger(), logging.NullHandler()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def base_architecture_config(encoder: SentenceEncoder) -> dict[str, Any]:
    """config.json for the exported directory: the base architecture's type, so that tools reading it
    (sentence-transformers' ONNX backend, optimum) need no custom code; a shrunk model's per-layer
    shape stays in it as extra fields (the graph itself holds the real shapes)."""
    from sparsecse.shrinking import base_model_type

    config = encoder.model.config.to_dict()
    config.pop("auto_map", None)
    config["model_type"] = base_model_type(encoder.model.config)
    base = next(c for c in type(encoder.model).__mro__ if c.__module__.startswith("transformers."))
    config["architectures"] = [base.__name__]
    return config


def onnx_versions() -> dict[str, str]:
    import onnx
    import onnxruntime

    return {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}


def export(
    model: str | os.PathLike | None = None,
    out: str | os.PathLike | None = None,
    format: str = "onnx",
    quantize: str | None = None,
    pooling: str | None = None,
    overwrite: bool = False,
    opset: int = OPSET,
) -> ExportResult:
    """Export ``model`` (a dense or shrunk directory, or the default model) to the directory ``out``.

    Always writes the fp32 graph ``onnx/model.onnx``; ``quantize="int8"`` adds ``onnx/model_qint8.onnx``
    and makes it the graph sparsecse runs. Both are checked against the torch model on a few sentences
    (minimum cosine recorded in the manifest); the fp32 graph must match (cosine >= 0.9999).
    """
    start = time.perf_counter()
    if format not in FORMATS:
        raise SparseCSEError(f"Unknown export format {format!r}; choose one of {', '.join(FORMATS)}.")
    if quantize not in (None, *QUANTIZATIONS):
        raise SparseCSEError(f"Unknown quantization {quantize!r}; choose {', '.join(QUANTIZATIONS)} or none.")
    if out is None:
        raise SparseCSEError("export needs an output directory (--out).")
    refuse_existing(Path(out), overwrite)
    check_onnx_packages(quantize)
    source = resolve_model(model)
    if is_exported_dir(source):
        raise SparseCSEError(f"{source} is already an exported ONNX model; export the torch model directory instead.")
    encoder = SentenceEncoder.load(source, pooling=pooling, device="cpu")
    if encoder.dense is not None:
        raise SparseCSEError(f"{source} ends in a Dense projection, which export does not carry into ONNX yet.")
    encoder.model.float().eval()
    normalize = has_normalize_module(source)
    with torch.inference_mode():
        reference = encoder.encode(CHECK_SENTENCES)
    with atomic_dir(out, overwrite=overwrite) as tmp:
        names = export_graph(encoder, tmp / FP32_FILE, normalize, opset)
        files = [FP32_FILE]
        if quantize == "int8":
            quantize_int8(tmp / FP32_FILE, tmp / INT8_FILE)
            files.append(INT8_FILE)
        encoder.tokenizer.save_pretrained(tmp)
        (tmp / "config.json").write_text(json.dumps(base_architecture_config(encoder), indent=2) + "\n")
        write_sentence_transformers_config(tmp, encoder.pooling, encoder.dim, encoder.max_length, normalize)
        settings = {"file": files[-1], "files": {f: ("int8" if f == INT8_FILE else "fp32") for f in files},
                    "pooling": encoder.pooling, "normalize": normalize, "dim": encoder.dim, "inputs": names,
                    "outputs": ["last_hidden_state", EMBEDDING_OUTPUT], "opset": opset}
        config = {"pooling": encoder.pooling, "max_length": encoder.max_length, "onnx": settings}
        (tmp / SPARSECSE_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
        verification = {}
        for file in files:
            exported = OnnxEncoder.load(tmp, file=file).encode(CHECK_SENTENCES)
            cosine = float(cosine_rows(exported, reference).min())
            verification[f"{settings['files'][file]}_min_cosine"] = round(cosine, 6)
        if verification["fp32_min_cosine"] < FP32_MIN_COSINE:
            raise SparseCSEError(f"The exported graph does not reproduce the torch model (minimum cosine "
                                 f"{verification['fp32_min_cosine']:.6f}); nothing was written.")
        sizes = {f: (tmp / f).stat().st_size for f in files}
        lineage = {**encoder.extra_config.get("lineage", {}), "exported_from": str(source),
                   "exported_from_sha256": hash_path(source) if os.path.exists(source) else None}
        config.update(
            shape=encoder.extra_config.get("shape"), lineage=lineage,
            manifest=make_manifest("onnx_export", inputs={"model": source},
                                   params={"format": format, "quantize": quantize, "pooling": encoder.pooling,
                                           "normalize": normalize, "opset": opset, "exporter": "torchscript"},
                                   files=sizes, verification=verification, onnx_versions=onnx_versions()),
        )
        (tmp / SPARSECSE_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    return ExportResult(Path(out), sizes, files[-1], encoder.pooling, normalize, verification,
                        time.perf_counter() - start)
