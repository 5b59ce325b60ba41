"""``sparsecse export``: a dense or shrunk model directory as an ONNX graph, optionally int8-quantized.

The graph maps token ids (and attention mask, token types where the tokenizer makes them) to
``last_hidden_state`` and ``sentence_embedding`` (the model's pooling, then L2 normalisation where its
sentence-transformers config has a Normalize module), with dynamic batch and sequence axes. It is
traced with torch's TorchScript-based ONNX exporter, which follows uneven layers and head-less layers
as they run and needs no package beyond onnx; the torch.export-based exporter (``dynamo=True``) gives
the same graph but needs onnxscript and takes about 15 times longer.

int8 is ONNX Runtime's own dynamic quantization (``quantize_dynamic``): int8 weights per output
channel, activations quantized per batch at run time; with a ``calibration`` corpus it is static
quantization instead (:mod:`sparsecse.deploy.onnx_static`: QDQ, activation ranges from a seeded
sample of the corpus, recorded in the manifest). :func:`sparsecse.deploy.export.export` chooses between this
and :func:`sparsecse.deploy.openvino_export.export_openvino`. The directory follows sentence-transformers'
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
from pathlib import Path

import torch

from sparsecse.artifacts.files import atomic_dir, hash_path, make_manifest
from sparsecse.artifacts.model_dir import write_model_config
from sparsecse.deploy.calibration import calibration_sample
from sparsecse.deploy.export_config import OPSET, ExportConfig
from sparsecse.deploy.graph import (CHECK_SENTENCES, FP32_MIN_COSINE, INPUTS, EmbeddingGraph, ExportResult,
                                    base_architecture_config, load_source)
from sparsecse.deploy.onnx_encoder import (EMBEDDING_OUTPUT, FP32_FILE, INT8_FILE, MISSING_PACKAGES, STATIC_INT8_FILE,
                                           OnnxEncoder, require_onnxruntime)
from sparsecse.deploy.onnx_static import QUANTIZATION_SETTINGS, empty_weight_matmuls, quantize_static_int8
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.sts import cosine_rows
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.modeling.st_dense import write_sentence_transformers_config


def check_onnx_packages(quantize: str | None) -> None:
    """Refuse (one sentence) when onnx / onnxruntime (and its quantization tools for int8) are missing."""
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
    graph = EmbeddingGraph(encoder, names, normalize).eval()
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
    """ONNX Runtime dynamic quantization: int8 weights (per output channel) of every MatMul but the
    empty ones of headless layers (whose int8 output would be uninitialised memory, not zero)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet_root_logger():
        quantize_dynamic(str(fp32_path), str(int8_path), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul"], nodes_to_exclude=empty_weight_matmuls(fp32_path))


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


def onnx_versions() -> dict[str, str]:
    """The onnx and onnxruntime versions, for the manifest."""
    import onnx
    import onnxruntime

    return {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}


def export_onnx(model: str | os.PathLike | None = None, out: str | os.PathLike | None = None,
                config: ExportConfig | None = None, overwrite: bool = False) -> ExportResult:
    """Export ``model`` (a dense or shrunk directory, or the default model) as ONNX to the directory ``out``.

    Always writes the fp32 graph ``onnx/model.onnx``; ``quantize="int8"`` (``config``, an
    :class:`~sparsecse.deploy.export_config.ExportConfig`) adds ``onnx/model_qint8.onnx`` (dynamic), or with a
    ``calibration`` corpus ``onnx/model_qint8_static.onnx`` (static, calibrated on ``calibration_size``
    sentences drawn with ``calibration_seed``), and makes it the graph sparsecse runs. Both are checked against
    the torch model on a few sentences (minimum cosine recorded in the manifest); the fp32 graph must match
    (cosine >= 0.9999).
    """
    start = time.perf_counter()
    c = (config or ExportConfig()).check()
    quantize, calibration, pooling, opset = c.quantize, c.calibration, c.pooling, c.opset
    calibration_size, calibration_seed = c.calibration_size, c.calibration_seed
    if out is None:
        raise SparseCSEError("export needs an output directory (--out).")
    check_onnx_packages(quantize)
    if calibration is not None:
        sentences, sample = calibration_sample(calibration, calibration_size, calibration_seed)
    source, encoder, normalize, reference = load_source(model, out, overwrite, pooling)
    with atomic_dir(out, overwrite=overwrite) as tmp:
        names = export_graph(encoder, tmp / FP32_FILE, normalize, opset)
        kinds = {FP32_FILE: "fp32"}
        if quantize == "int8" and calibration is not None:
            with _quiet_root_logger():
                quantize_static_int8(tmp / FP32_FILE, tmp / STATIC_INT8_FILE, encoder.tokenizer, sentences, names,
                                     encoder.max_length)
            kinds[STATIC_INT8_FILE] = "int8_static"
        elif quantize == "int8":
            quantize_int8(tmp / FP32_FILE, tmp / INT8_FILE)
            kinds[INT8_FILE] = "int8"
        files = list(kinds)
        encoder.tokenizer.save_pretrained(tmp)
        (tmp / "config.json").write_text(json.dumps(base_architecture_config(encoder), indent=2) + "\n")
        write_sentence_transformers_config(tmp, encoder.pooling, encoder.dim, encoder.max_length, normalize)
        settings = {"file": files[-1], "files": kinds,
                    "pooling": encoder.pooling, "normalize": normalize, "dim": encoder.dim, "inputs": names,
                    "outputs": ["last_hidden_state", EMBEDDING_OUTPUT], "opset": opset}
        config = {"pooling": encoder.pooling, "max_length": encoder.max_length, "onnx": settings}
        write_model_config(tmp, config)
        verification = {}
        for file in files:
            exported = OnnxEncoder.load(tmp, file=file).encode(CHECK_SENTENCES)
            cosine = float(cosine_rows(exported, reference).min())
            verification[f"{settings['files'][file]}_min_cosine"] = round(cosine, 6)
        if verification["fp32_min_cosine"] < FP32_MIN_COSINE:
            raise SparseCSEError(f"The exported graph does not reproduce the torch model (minimum cosine "
                                 f"{verification['fp32_min_cosine']:.6f}); nothing was written.")
        sizes = {f: (tmp / f).stat().st_size for f in files}
        params = {"format": c.format, "quantize": quantize, "pooling": encoder.pooling, "normalize": normalize,
                  "opset": opset, "exporter": "torchscript",
                  "quantization": (quantize and ("static" if calibration is not None else "dynamic"))}
        if calibration is not None:
            params.update(calibration=sample, static_quantization=QUANTIZATION_SETTINGS)
        lineage = {**encoder.extra_config.get("lineage", {}), "exported_from": str(source),
                   "exported_from_sha256": hash_path(source) if os.path.exists(source) else None}
        config.update(
            shape=encoder.extra_config.get("shape"), lineage=lineage,
            manifest=make_manifest("onnx_export", inputs={"model": source, "calibration": calibration},
                                   params=params, seed=calibration_seed if calibration is not None else None,
                                   files=sizes, verification=verification, onnx_versions=onnx_versions()),
        )
        write_model_config(tmp, config)
    return ExportResult(Path(out), sizes, files[-1], encoder.pooling, normalize, verification,
                        time.perf_counter() - start, kinds=kinds)
