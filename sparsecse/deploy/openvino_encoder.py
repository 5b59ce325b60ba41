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


def compile_ir(xml: str | os.PathLike, threads: int | None = None):
    """The IR compiled for the CPU: ``threads`` inference threads (default: torch's), f32 precision."""
    ov = require_openvino()
    config = {"INFERENCE_NUM_THREADS": int(threads or torch.get_num_threads()),
              "INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
    return ov.Core().compile_model(str(xml), "CPU", config)


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
        compiled = compile_ir(Path(path) / file, threads)
        return cls(compiled, load_tokenizer(path), settings["pooling"],
                   max_length or configured_max_length(path) or 512, settings["dim"], source=path, file=file,
                   settings=settings)

    def run_batch(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The IR's sentence embeddings of one tokenized batch."""
        self.request.infer(feeds)
        return np.array(self.request.get_tensor(EMBEDDING_OUTPUT).data, copy=True)
