"""One loader for every kind of model directory: torch, or exported in any registered format (ONNX,
OpenVINO, ...: :mod:`sparsecse.artifacts.export_formats`).

    >>> load_encoder("runs/minilm-f50")            # a torch directory -> SentenceEncoder  # doctest: +SKIP
    >>> load_encoder("runs/minilm-f50-openvino")   # sparsecse export --format openvino -> OpenVinoEncoder  # doctest: +SKIP
"""

from __future__ import annotations

import os

import torch

from sparsecse.artifacts.export_formats import get_format
from sparsecse.artifacts.exported_model import exported_format
from sparsecse.modeling.encoder import SentenceEncoder, resolve_model
from sparsecse.serving import onnx_encoder, openvino_encoder  # noqa: F401 (they provide the built-in formats' loaders)
from sparsecse.serving.runtime import Encoder


def load_encoder(name_or_path: str | os.PathLike | None = None, pooling: str | None = None,
                 max_length: int | None = None, device: str | torch.device | None = None,
                 file: str | None = None, threads: int | None = None) -> Encoder:
    """The encoder a directory holds, picked by its content.

    Args:
        name_or_path: a directory or hub name (None: the embedded default model).
        pooling: the pooling (an exported graph has its own and refuses another).
        max_length: the tokenizer's truncation (default: the model's).
        device: where a torch model runs (exported ones run on the CPU).
        file: one of an exported directory's graphs (default: the one its export chose).
        threads: an exported graph's runtime threads (default: torch's).

    Returns:
        The loader of the directory's export format's encoder (:class:`~sparsecse.serving.runtime.RuntimeEncoder`
        subclasses), else the torch :class:`~sparsecse.modeling.encoder.SentenceEncoder`.
    """
    path = resolve_model(name_or_path)
    format = exported_format(path) if os.path.isdir(path) else None
    if format is not None:
        return get_format(format).load(path, pooling=pooling, max_length=max_length, device=device, file=file,
                                       threads=threads)
    return SentenceEncoder.load(path, pooling=pooling, max_length=max_length, device=device)
