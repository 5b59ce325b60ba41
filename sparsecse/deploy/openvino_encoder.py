"""Run a directory written by ``sparsecse export --format openvino`` behind the :class:`~sparsecse.deploy.runtime.Encoder` interface.

The OpenVINO IR (``openvino/openvino_model.xml`` + ``.bin``, and the NNCF int8 model beside it) is
compiled for the CPU with ``threads`` inference threads and f32 as the inference precision hint, so
that an "fp32" row is fp32 on every CPU (OpenVINO would otherwise run it in bf16 where the CPU has
native bf16).

    >>> OpenVinoEncoder.load("runs/minilm-openvino", threads=2).encode(["A man plays a guitar."]).shape
    (1, 384)
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from sparsecse.artifacts.exported_model import MISSING_OPENVINO, export_settings
from sparsecse.deploy.runtime import RuntimeEncoder
from sparsecse.modeling.encoder import configured_max_length
from sparsecse.errors import SparseCSEError
from sparsecse.deploy.onnx_encoder import EMBEDDING_OUTPUT, check_exported_load, load_tokenizer

FP32_XML = "openvino/openvino_model.xml"
INT8_XML = "openvino/openvino_model_qint8_quantized.xml"  # sentence-transformers' name for the static int8 IR


def require_openvino():
    """The openvino module, or a one-sentence error naming the extra that installs it."""
    try:
        import openvino
    except ImportError:
        raise SparseCSEError(MISSING_OPENVINO) from None
    return openvino


def compile_ir(xml, threads: int | None = None):
    """The IR (an ``.xml`` path, or an ``openvino.Model`` in memory) compiled for the CPU: ``threads`` inference
    threads (default: torch's), f32 precision."""
    ov = require_openvino()
    config = {"INFERENCE_NUM_THREADS": int(threads or torch.get_num_threads()),
              "INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
    return ov.Core().compile_model(str(xml) if isinstance(xml, (str, os.PathLike)) else xml, "CPU", config)


def _reason(exc: Exception) -> str:
    """The telling line of an OpenVINO error (its first lines only say where in OpenVINO it was raised)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    telling = [line for line in lines if not line.startswith(("Exception from", "Check '"))]
    return (telling or lines or [type(exc).__name__])[-1][:200]


def load_ir(xml: Path, threads: int | None = None):
    """:func:`compile_ir` for a file a user was handed: a missing, truncated or garbled ``.xml``/``.bin``,
    or an IR without the embedding output, is one sentence."""
    require_openvino()
    for part in (xml, xml.with_suffix(".bin")):
        if not part.is_file():
            raise SparseCSEError(f"The OpenVINO file {part} is missing; export the model again.")
    try:
        compiled = compile_ir(xml, threads)
        outputs = {name for output in compiled.outputs for name in output.get_names()}
        inputs = [next(iter(i.get_names())) for i in compiled.inputs]
    except Exception as exc:  # OpenVINO raises RuntimeError (and others) for damaged IRs
        raise SparseCSEError(f"The OpenVINO model {xml} cannot be loaded ({_reason(exc)}); export the model "
                             "again.") from None
    if EMBEDDING_OUTPUT not in outputs or not inputs:
        raise SparseCSEError(f"The OpenVINO model {xml} has no {EMBEDDING_OUTPUT!r} output; it was not written by "
                             "`sparsecse export`; export the model again.")
    return compiled


class OpenVinoEncoder(RuntimeEncoder):
    """An exported OpenVINO IR with its tokenizer, run by the OpenVINO CPU plugin."""

    runtime = "OpenVINO"

    def __init__(self, compiled, tokenizer, pooling: str, max_length: int, dim: int, source: str, file: str,
                 settings: dict | None = None):
        names = [next(iter(i.get_names())) for i in compiled.inputs]
        super().__init__(tokenizer, pooling, max_length, dim, source, file, settings or {}, names)
        self.compiled = compiled
        self.request = compiled.create_infer_request()

    @classmethod
    def load(cls, name_or_path, pooling: str | None = None, max_length: int | None = None,
             device: str | torch.device | None = None, file: str | None = None, threads: int | None = None,
             ) -> "OpenVinoEncoder":
        """Load an exported directory; ``file`` picks an IR in it (default: the one the export chose)."""
        path = str(name_or_path)
        settings = export_settings(path, "openvino")
        file = check_exported_load(path, settings, "OpenVINO", pooling, device, file)
        compiled = load_ir(Path(path) / file, threads)
        return cls(compiled, load_tokenizer(path), settings["pooling"],
                   max_length or configured_max_length(path) or 512, settings["dim"], source=path, file=file,
                   settings=settings)

    def run_batch(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The IR's sentence embeddings of one tokenized batch."""
        self.request.infer(feeds)
        return np.array(self.request.get_tensor(EMBEDDING_OUTPUT).data, copy=True)
