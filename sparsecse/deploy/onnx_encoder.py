"""Run a directory written by ``sparsecse export --format onnx`` behind the :class:`~sparsecse.deploy.runtime.Encoder` interface.

:func:`~sparsecse.deploy.loading.load_encoder` hands such a directory here, so ``evaluate`` and
``sparsecse eval --model DIR`` measure the ONNX graph through the same tokenizer, length-sorted
batching and evaluator as the torch model. The graph already pools (and normalises, where the source
model did), so its ``sentence_embedding`` output is the embedding.

    >>> OnnxEncoder.load("runs/minilm-onnx", threads=2).encode(["A man plays a guitar."]).shape
    (1, 384)
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from sparsecse.artifacts.exported_model import SPARSECSE_CONFIG, export_settings
from sparsecse.deploy.runtime import RuntimeEncoder
from sparsecse.modeling.encoder import check_tokenizer_files, configured_max_length
from sparsecse.errors import SparseCSEError
from sparsecse.artifacts.remote_code import allow_code

FP32_FILE = "onnx/model.onnx"
INT8_FILE = "onnx/model_qint8.onnx"  # dynamic int8 (sentence-transformers' name)
STATIC_INT8_FILE = "onnx/model_qint8_static.onnx"  # static int8, QDQ, calibrated on a corpus sample
EMBEDDING_OUTPUT = "sentence_embedding"
MISSING_PACKAGES = "ONNX export and inference need the onnx and onnxruntime packages: pip install 'sparsecse[onnx]'."

__all__ = ["FP32_FILE", "INT8_FILE", "STATIC_INT8_FILE", "EMBEDDING_OUTPUT", "MISSING_PACKAGES", "SPARSECSE_CONFIG",
           "OnnxEncoder", "inference_session", "is_exported_dir", "onnx_settings", "require_onnxruntime"]


def require_onnxruntime():
    """The onnxruntime module, or a one-sentence error naming the extra that installs it."""
    try:
        import onnxruntime
    except ImportError:
        raise SparseCSEError(MISSING_PACKAGES) from None
    return onnxruntime


def onnx_settings(path: str | os.PathLike) -> dict | None:
    """The ``onnx`` entry of an exported directory's sparsecse_config.json, or None for any other path."""
    return export_settings(path, "onnx")


def is_exported_dir(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory ``sparsecse export`` wrote as ONNX."""
    return onnx_settings(path) is not None


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


def check_exported_load(path: str, settings: dict | None, what: str, pooling: str | None,
                        device, file: str | None) -> str:
    """Refusals shared by the exported-model loaders; returns the graph file to load."""
    if settings is None:
        raise SparseCSEError(f"{path} is not a directory written by sparsecse export --format {what}.")
    if device is not None and torch.device(device).type != "cpu":
        raise SparseCSEError(f"Exported {what} models run on the CPU, not on {device}.")
    if pooling is not None and pooling != settings["pooling"]:
        raise SparseCSEError(f"{path} was exported with {settings['pooling']} pooling, which is part of its "
                             f"graph; export the model again with --pooling {pooling}.")
    file = file or settings["file"]
    if not isinstance(file, str) or not (Path(path) / file).resolve().is_relative_to(Path(path).resolve()):
        raise SparseCSEError(f"The config of {path} names the {what} file {file!r}, which is not inside the "
                             "directory; export the model again.")
    if not (Path(path) / file).is_file():
        raise SparseCSEError(f"The {what} file {Path(path) / file} does not exist.")
    return file


def load_tokenizer(path: str):
    """The tokenizer saved in an exported directory."""
    from transformers import AutoTokenizer

    check_tokenizer_files(path)
    try:
        return AutoTokenizer.from_pretrained(path, trust_remote_code=allow_code(path))
    except Exception as exc:
        raise SparseCSEError(f"Cannot load the tokenizer from {path} ({exc}).") from None


class OnnxEncoder(RuntimeEncoder):
    """An exported ONNX graph with its tokenizer, run by ONNX Runtime on the CPU."""

    runtime = "ONNX"

    def __init__(self, session, tokenizer, pooling: str, max_length: int, dim: int, source: str,
                 file: str, settings: dict | None = None):
        super().__init__(tokenizer, pooling, max_length, dim, source, file, settings or {},
                         [i.name for i in session.get_inputs()])
        self.session = session

    @classmethod
    def load(cls, name_or_path, pooling: str | None = None, max_length: int | None = None,
             device: str | torch.device | None = None, file: str | None = None, threads: int | None = None,
             ) -> "OnnxEncoder":
        """Load an exported directory; ``file`` picks a graph in it (default: the one the export chose)."""
        path = str(name_or_path)
        settings = onnx_settings(path)
        file = check_exported_load(path, settings, "ONNX", pooling, device, file)
        require_onnxruntime()
        tokenizer = load_tokenizer(path)
        try:
            session = inference_session(Path(path) / file, threads)
        except Exception as exc:  # onnxruntime raises its own types for damaged graphs
            raise SparseCSEError(f"The ONNX file {Path(path) / file} cannot be loaded ({str(exc).splitlines()[0]}); "
                                 "export the model again.") from None
        check_graph_matches(session, settings, path)
        return cls(session, tokenizer, settings["pooling"], max_length or configured_max_length(path) or 512,
                   settings["dim"], source=path, file=file, settings=settings)

    def run_batch(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The graph's sentence embeddings of one tokenized batch."""
        return self.session.run([EMBEDDING_OUTPUT], feeds)[0]
