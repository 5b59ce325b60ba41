"""Run a directory written by ``sparsecse export`` behind the :class:`SentenceEncoder` interface.

``SentenceEncoder.load`` hands such a directory here, so ``evaluate`` and ``sparsecse eval --model DIR``
measure the ONNX graph through the same tokenizer, length-sorted batching and evaluator as the torch
model. The graph already pools (and normalises, where the source model did), so its
``sentence_embedding`` output is the embedding. An exported model only encodes: it has no torch
modules to gate with a mask, train or shrink.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

import numpy as np
import torch
from torch import nn

from sparsecse.encoder import SPARSECSE_CONFIG, SentenceEncoder, check_tokenizer_files, configured_max_length
from sparsecse.errors import SparseCSEError
from sparsecse.remote_code import allow_code

FP32_FILE = "onnx/model.onnx"
INT8_FILE = "onnx/model_qint8.onnx"
EMBEDDING_OUTPUT = "sentence_embedding"
MISSING_PACKAGES = "ONNX export and inference need the onnx and onnxruntime packages: pip install 'sparsecse[onnx]'."


def require_onnxruntime():
    """The onnxruntime module, or a one-sentence error naming the extra that installs it."""
    try:
        import onnxruntime
    except ImportError:
        raise SparseCSEError(MISSING_PACKAGES) from None
    return onnxruntime


def onnx_settings(path: str | os.PathLike) -> dict | None:
    """The ``onnx`` entry of an exported directory's sparsecse_config.json, or None for any other path."""
    try:
        config = json.loads((Path(path) / SPARSECSE_CONFIG).read_text())
    except (OSError, ValueError):
        return None
    settings = config.get("onnx") if isinstance(config, dict) else None
    return settings if isinstance(settings, dict) and settings.get("file") else None


def is_exported_dir(path: str | os.PathLike) -> bool:
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


class OnnxEncoder(SentenceEncoder):
    """An exported graph with its tokenizer; ``encode`` is :meth:`SentenceEncoder.encode` itself."""

    def __init__(self, session, tokenizer, pooling: str, max_length: int, dim: int, source: str,
                 file: str, settings: dict | None = None, pooling_source: str = SPARSECSE_CONFIG):
        nn.Module.__init__(self)  # no torch modules: SentenceEncoder.__init__ would want one
        self.session = session
        self.tokenizer = tokenizer
        self._pooling = pooling
        self.max_length = int(max_length)
        self._dim = int(dim)
        self.source = source
        self.file = file
        self.settings = dict(settings or {})
        self.pooling_source = pooling_source
        self.extra_config = {}
        self.input_names = [i.name for i in session.get_inputs()]

    @classmethod
    def load(cls, name_or_path, pooling: str | None = None, max_length: int | None = None,
             device: str | torch.device | None = None, file: str | None = None, threads: int | None = None,
             **_ignored) -> "OnnxEncoder":
        """Load an exported directory; ``file`` picks a graph in it (default: the one the export chose)."""
        from transformers import AutoTokenizer

        path = str(name_or_path)
        settings = onnx_settings(path)
        if settings is None:
            raise SparseCSEError(f"{path} is not a directory written by sparsecse export.")
        if device is not None and torch.device(device).type != "cpu":
            raise SparseCSEError(f"Exported ONNX models run on the CPU with onnxruntime, not on {device}.")
        if pooling is not None and pooling != settings["pooling"]:
            raise SparseCSEError(f"{path} was exported with {settings['pooling']} pooling, which is part of its "
                                 f"graph; export the model again with --pooling {pooling}.")
        file = file or settings["file"]
        if not isinstance(file, str) or not (Path(path) / file).resolve().is_relative_to(Path(path).resolve()):
            raise SparseCSEError(f"The config of {path} names the graph file {file!r}, which is not inside the "
                                 "directory; export the model again.")
        if not (Path(path) / file).is_file():
            raise SparseCSEError(f"The ONNX file {Path(path) / file} does not exist.")
        require_onnxruntime()
        check_tokenizer_files(path)
        trust = allow_code(path)
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust)
        except Exception as exc:
            raise SparseCSEError(f"Cannot load the tokenizer from {path} ({exc}).") from None
        try:
            session = inference_session(Path(path) / file, threads)
        except Exception as exc:  # onnxruntime raises its own types for damaged graphs
            raise SparseCSEError(f"The ONNX file {Path(path) / file} cannot be loaded ({str(exc).splitlines()[0]}); "
                                 "export the model again.") from None
        check_graph_matches(session, settings, path)
        return cls(session, tokenizer, settings["pooling"], max_length or configured_max_length(path) or 512,
                   settings["dim"], source=path, file=file, settings=settings)

    # ------------------------------------------------------------------ what differs from torch
    @property
    def pooling(self) -> str:
        return self._pooling

    @pooling.setter
    def pooling(self, value: str) -> None:
        if value != self._pooling:
            raise SparseCSEError(f"{self.source} was exported with {self._pooling} pooling, which is part of its "
                                 f"graph; export the model again with --pooling {value}.")

    def _no_torch_model(self):
        raise SparseCSEError(f"{self.source} is an exported ONNX model, which can only encode; masks, training, "
                             "shrinking and saving need the torch model directory it was exported from.")

    model = property(_no_torch_model)

    @property
    def config(self):
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(self.source, trust_remote_code=allow_code(self.source))

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def dim(self) -> int:
        return self._dim

    def forward(self, input_ids=None, attention_mask=None, **features) -> torch.Tensor:
        if attention_mask is None:
            raise ValueError("attention_mask is required")
        features.update(input_ids=input_ids, attention_mask=attention_mask)
        if features.get("token_type_ids") is None:
            features["token_type_ids"] = torch.zeros_like(input_ids)
        feeds = {name: np.ascontiguousarray(features[name].cpu().numpy(), dtype=np.int64) for name in self.input_names}
        return torch.from_numpy(self.session.run([EMBEDDING_OUTPUT], feeds)[0])

    def encode(self, sentences: Iterable[str], batch_size: int | None = None, show_progress: bool = False,
               normalize: bool = False, convert_to_numpy: bool = True, desc: str = "encoding",
               precision: str = "fp32", max_tokens: int | None = None):
        if precision != "fp32":
            raise SparseCSEError(f"An exported ONNX model runs at the precision it was exported with; "
                                 f"leave the precision at fp32, not {precision}.")
        return super().encode(sentences, batch_size=batch_size, show_progress=show_progress, normalize=normalize,
                              convert_to_numpy=convert_to_numpy, desc=desc, max_tokens=max_tokens)

    def transformer_outputs(self, **features):
        self._no_torch_model()  # the graph returns pooled embeddings only

    def save(self, out_dir, extra_config=None):
        self._no_torch_model()
