"""Run a directory written by ``sparsecse export --format openvino`` behind the :class:`~sparsecse.serving.runtime.Encoder` interface.

The OpenVINO IR (``openvino/openvino_model.xml`` + ``.bin``, and the NNCF int8 model beside it) is
compiled for the CPU with ``threads`` inference threads and f32 as the inference precision hint, so
that an "fp32" row is fp32 on every CPU (OpenVINO would otherwise run it in bf16 where the CPU has
native bf16).

    >>> OpenVinoEncoder.load("runs/minilm-openvino", threads=2).encode(["A man plays a guitar."]).shape  # doctest: +SKIP
    (1, 384)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sparsecse.artifacts.export_formats import get_format
from sparsecse.errors import SparseCSEError
from sparsecse.serving.graph import EMBEDDING_OUTPUT
from sparsecse.serving.runtime import RuntimeEncoder

OPENVINO = get_format("openvino")
FP32_XML = OPENVINO.files["fp32"]
INT8_XML = OPENVINO.files["int8_static"]  # NNCF int8, calibrated on a corpus sample


def require_openvino():
    """The openvino module, or a one-sentence error naming the extra that installs it."""
    OPENVINO.require()
    import openvino

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
    """An exported OpenVINO IR with its tokenizer, run by the OpenVINO CPU plugin (``OpenVinoEncoder.load(DIR)``)."""

    format = OPENVINO.name

    def __init__(self, compiled, tokenizer, pooling: str, max_length: int, dim: int, source: str, file: str,
                 settings: dict | None = None):
        super().__init__(compiled, tokenizer, pooling, max_length, dim, source, file, settings)
        self.request = compiled.create_infer_request()

    @classmethod
    def open_graph(cls, path: Path, file: str, settings: dict[str, Any], threads: int | None):
        """The IR ``file`` of ``path`` compiled for the CPU (:func:`load_ir`)."""
        return load_ir(path / file, threads)

    @property
    def compiled(self):
        """The compiled OpenVINO model."""
        return self.graph

    def graph_inputs(self, graph) -> list[str]:
        """The compiled model's input names."""
        return [next(iter(i.get_names())) for i in graph.inputs]

    def run_batch(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The IR's sentence embeddings of one tokenized batch."""
        self.request.infer(feeds)
        return np.array(self.request.get_tensor(EMBEDDING_OUTPUT).data, copy=True)


OPENVINO.provide(loader=OpenVinoEncoder.load)
