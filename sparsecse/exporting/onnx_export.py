"""``sparsecse export --format onnx``: the writer of the ONNX format's graph files.

The graph (:class:`~sparsecse.serving.graph.EmbeddingGraph`: token inputs to ``last_hidden_state`` and
``sentence_embedding``, with dynamic batch and sequence axes) is traced with torch's TorchScript-based ONNX
exporter, which follows uneven layers and head-less layers as they run and needs no package beyond onnx; the
torch.export-based exporter (``dynamo=True``) gives the same graph but needs onnxscript and takes about 15
times longer.

int8 is ONNX Runtime's own dynamic quantization (``quantize_dynamic``): int8 weights per output channel,
activations quantized per batch at run time; with a ``calibration`` corpus it is static quantization instead
(:mod:`sparsecse.exporting.onnx_static`: QDQ, activation ranges from a seeded sample of the corpus, recorded
in the manifest). The directory follows sentence-transformers' ONNX layout (``onnx/model.onnx``, the
tokenizer, a base-architecture ``config.json`` and the modules.json/pooling files), written by the steps
every format shares (:func:`sparsecse.exporting.export.write_export`).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from pathlib import Path

import torch

from sparsecse.artifacts.export_formats import get_format
from sparsecse.exporting.config import OPSET, ExportConfig
from sparsecse.exporting.onnx_static import QUANTIZATION_SETTINGS, empty_weight_matmuls, quantize_static_int8
from sparsecse.exporting.result import WrittenGraphs
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.serving.graph import EMBEDDING_OUTPUT, OUTPUTS, EmbeddingGraph, example_inputs

ONNX = get_format("onnx")


def export_graph(encoder: SentenceEncoder, path: Path, normalize: bool, opset: int = OPSET) -> list[str]:
    """Trace ``encoder`` (CPU, fp32) into an ONNX file at ``path``; returns the graph's input names."""
    names, inputs = example_inputs(encoder)
    graph = EmbeddingGraph(encoder, names, normalize).eval()
    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]}
    axes[EMBEDDING_OUTPUT] = {0: "batch"}
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python-constant branches that never vary here
        torch.onnx.export(graph, inputs, str(path), input_names=names, output_names=list(OUTPUTS),
                          dynamic_axes=axes, opset_version=opset, do_constant_folding=True, dynamo=False)
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


def write_onnx(encoder: SentenceEncoder, directory: Path, normalize: bool, config: ExportConfig,
               calibration: list[str] | None) -> WrittenGraphs:
    """Write the ONNX graphs of ``encoder`` into ``directory`` (the ONNX format's writer).

    Args:
        encoder: the CPU fp32 encoder.
        directory: the directory being assembled.
        normalize: whether the embedding is L2-normalised in the graph.
        config: the export config (``quantize``, ``opset``).
        calibration: sentences for static int8 (None: dynamic int8, when ``quantize`` is int8).

    Returns:
        The graphs written, always the fp32 graph and, with ``quantize="int8"``, the dynamic int8 graph, or with
        ``calibration`` the static one, last (the graph sparsecse runs).
    """
    fp32 = directory / ONNX.files["fp32"]
    names = export_graph(encoder, fp32, normalize, config.opset)
    kinds, params = ["fp32"], {"opset": config.opset, "exporter": "torchscript", "quantization": None}
    if config.quantize == "int8" and calibration is not None:
        with _quiet_root_logger():
            quantize_static_int8(fp32, directory / ONNX.files["int8_static"], encoder.tokenizer, calibration, names,
                                 encoder.max_length)
        kinds.append("int8_static")
        params.update(quantization="static", static_quantization=QUANTIZATION_SETTINGS)
    elif config.quantize == "int8":
        quantize_int8(fp32, directory / ONNX.files["int8"])
        kinds.append("int8")
        params["quantization"] = "dynamic"
    return WrittenGraphs(kinds, settings={"inputs": names, "outputs": list(OUTPUTS), "opset": config.opset},
                         params=params)


ONNX.provide(writer=write_onnx)
