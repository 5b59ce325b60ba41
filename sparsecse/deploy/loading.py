"""One loader for every kind of model directory: torch, exported ONNX or exported OpenVINO.

    >>> load_encoder("runs/minilm-f50")            # a torch directory -> SentenceEncoder
    >>> load_encoder("runs/minilm-f50-openvino")   # sparsecse export --format openvino -> OpenVinoEncoder
"""

from __future__ import annotations

import os

import torch

from sparsecse.artifacts.exported_model import exported_format
from sparsecse.deploy.openvino_encoder import OpenVinoEncoder
from sparsecse.deploy.runtime import Encoder
from sparsecse.modeling.encoder import SentenceEncoder, resolve_model
from sparsecse.deploy.onnx_encoder import OnnxEncoder

RUNTIMES = {"onnx": OnnxEncoder, "openvino": OpenVinoEncoder}


def load_encoder(name_or_path: str | os.PathLike | None = None, pooling: str | None = None,
                 max_length: int | None = None, device: str | torch.device | None = None,
                 file: str | None = None, threads: int | None = None) -> Encoder:
    """The encoder a directory holds, picked by its content: an exported ONNX or OpenVINO graph
    (``file`` picks one of its graphs, ``threads`` the runtime's threads), else the torch model
    (``SentenceEncoder.load``; None = the embedded default, or a hub name)."""
    path = resolve_model(name_or_path)
    format = exported_format(path) if os.path.isdir(path) else None
    if format is not None:
        return RUNTIMES[format].load(path, pooling=pooling, max_length=max_length, device=device, file=file,
                                     threads=threads)
    return SentenceEncoder.load(path, pooling=pooling, max_length=max_length, device=device)
