"""Run a directory written by ``sparsecse export --format onnx`` behind the :class:`~sparsecse.serving.runtime.Encoder` interface.

:func:`~sparsecse.serving.loading.load_encoder` hands such a directory here, so ``evaluate`` and
``sparsecse eval --model DIR`` measure the ONNX graph through the same tokenizer, length-sorted
batching and evaluator as the torch model. The graph already pools (and normalises, where the source
model did), so its ``sentence_embedding`` output is the embedding.

    >>> OnnxEncoder.load("runs/minilm-onnx", threads=2).encode(["A man plays a guitar."]).shape  # doctest: +SKIP
    (1, 384)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sparsecse.artifacts.export_formats import get_format
from sparsecse.artifacts.exported_model import SPARSECSE_CONFIG, export_settings
from sparsecse.errors import SparseCSEError
from sparsecse.serving.graph import EMBEDDING_OUTPUT
from sparsecse.serving.runtime import RuntimeEncoder

ONNX = get_format("onnx")
FP32_FILE = ONNX.files["fp32"]
INT8_FILE = ONNX.files["int8"]  # dynamic int8
STATIC_INT8_FILE = ONNX.files["int8_static"]  # static int8, QDQ, calibrated on a corpus sample


def require_onnxruntime():
    """The onnxruntime module, or a one-sentence error naming the extra that installs it."""
    ONNX.require()
    import onnxruntime

    return onnxruntime


def onnx_settings(path: str | os.PathLike) -> dict | None:
    """The ``onnx`` entry of an exported directory's sparsecse_config.json, or None for any other path."""
    return export_settings(path, ONNX.name)


def inference_session(model_file: str | os.PathLike, threads: int | None = None):
    """An ONNX Runtime CPU session with all graph optimisations, on ``threads`` threads (default: torch's)."""
    ort = require_onnxruntime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(threads or torch.get_num_threads())
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # warnings about unused initializers etc. are noise here
    return ort.InferenceSession(str(model_file), sess_options=options, providers=["CPUExecutionProvider"])


def check_graph_matches(session, settings: dict, path: str) -> None:
    """The graph has the embedding output, the width and the inputs its directory's config promises."""
    outputs = {o.name: o.shape for o in session.get_outputs()}
    inputs = {i.name for i in session.get_inputs()}
    width = outputs.get(EMBEDDING_OUTPUT, [None])[-1] if EMBEDDING_OUTPUT in outputs else None
    problem = (f"has no {EMBEDDING_OUTPUT} output" if EMBEDDING_OUTPUT not in outputs
               else f"gives {width}-wide embeddings, not {settings.get('dim')!r}"
               if isinstance(width, int) and width != settings.get("dim")
               else f"takes the inputs {sorted(inputs)}, not {settings.get('inputs')!r}"
               if settings.get("inputs") and not inputs <= set(settings["inputs"]) else None)
    if problem:
        raise SparseCSEError(f"The ONNX graph in {path} {problem} as its {SPARSECSE_CONFIG} says; export the model "
                             "again.")


class OnnxEncoder(RuntimeEncoder):
    """An exported ONNX graph with its tokenizer, run by ONNX Runtime on the CPU (``OnnxEncoder.load(DIR)``)."""

    format = ONNX.name

    @classmethod
    def open_graph(cls, path: Path, file: str, settings: dict[str, Any], threads: int | None):
        """An ONNX Runtime session of the graph ``file`` of ``path``, checked against the directory's config."""
        try:
            session = inference_session(path / file, threads)
        except SparseCSEError:
            raise
        except Exception as exc:  # onnxruntime raises its own types for damaged graphs
            raise SparseCSEError(f"The ONNX file {path / file} cannot be loaded ({str(exc).splitlines()[0]}); "
                                 "export the model again.") from None
        check_graph_matches(session, settings, str(path))
        return session

    @property
    def session(self):
        """The ONNX Runtime inference session."""
        return self.graph

    def graph_inputs(self, graph) -> list[str]:
        """The session's input names."""
        return [i.name for i in graph.get_inputs()]

    def run_batch(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The graph's sentence embeddings of one tokenized batch."""
        return self.session.run([EMBEDDING_OUTPUT], feeds)[0]


ONNX.provide(loader=OnnxEncoder.load)
