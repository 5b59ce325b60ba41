"""Put a model directory on the engine a target is measured on: the torch model in fp32, or an ONNX or OpenVINO
copy exported into a work directory (int8 calibrated on the corpus)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from sparsecse.exporting.config import ExportConfig
from sparsecse.exporting.export import export
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.serving.loading import load_encoder
from sparsecse.targets.spec import engines


def on_engine(model_dir: str | os.PathLike, engine: str, work: str | os.PathLike | None = None,
              calibration: str | os.PathLike | None = None, seed: int = 0):
    """An encoder (``.encode(sentences, batch_size=...)``) running ``model_dir`` on ``engine``.

    Args:
        model_dir: a dense or shrunk model directory (or a model name).
        engine: a key of :func:`~sparsecse.targets.spec.engines`.
        work: where an exported copy is written (required for every engine but ``torch-fp32``); replaced if present.
        calibration: the corpus int8 engines calibrate on.
        seed: the calibration sample's seed.

    Returns:
        The torch :class:`~sparsecse.modeling.encoder.SentenceEncoder` (fp32, CPU) or the exported graph's runtime
        encoder.
    """
    spec = engines()[engine]
    if spec is None:
        return SentenceEncoder.load(model_dir, device="cpu")
    if work is None:
        raise ValueError(f"The engine {engine} needs a work directory for its exported copy.")
    work = Path(work)
    if work.exists():
        shutil.rmtree(work)
    fmt, quantize = spec
    config = ExportConfig(format=fmt, quantize=quantize, calibration=str(calibration) if quantize else None,
                          calibration_seed=seed)
    export(str(model_dir), str(work), config=config)
    return load_encoder(work)
