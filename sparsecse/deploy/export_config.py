"""How a model is exported: the one config of :func:`sparsecse.deploy.export.export`."""

from __future__ import annotations

import os
from dataclasses import dataclass

from sparsecse.deploy.calibration import DEFAULT_SEED, DEFAULT_SIZE
from sparsecse.errors import SparseCSEError

FORMATS = ("onnx", "openvino")
QUANTIZATIONS = ("int8",)
OPSET = 17


@dataclass(frozen=True)
class ExportConfig:
    """``format``: onnx or openvino; ``quantize``: None or int8 (ONNX: dynamic, or static with a
    ``calibration`` corpus; OpenVINO: NNCF, which needs one); ``calibration_size`` sentences of it are drawn
    with ``calibration_seed``; ``pooling`` overrides the model's own; ``opset``: the ONNX opset.

    >>> ExportConfig(format="openvino", quantize="int8", calibration="corpus.txt").check().format
    'openvino'
    """

    format: str = "onnx"
    quantize: str | None = None
    pooling: str | None = None
    opset: int = OPSET
    calibration: str | os.PathLike | None = None
    calibration_size: int = DEFAULT_SIZE
    calibration_seed: int = DEFAULT_SEED

    def check(self) -> "ExportConfig":
        """The config itself once its format and quantization are known (one sentence otherwise)."""
        if self.format not in FORMATS:
            raise SparseCSEError(f"Unknown export format {self.format!r}; choose one of {', '.join(FORMATS)}.")
        if self.quantize not in (None, *QUANTIZATIONS):
            raise SparseCSEError(f"Unknown quantization {self.quantize!r}; choose {', '.join(QUANTIZATIONS)} or "
                                 "none.")
        if self.calibration is not None and not self.quantize:
            raise SparseCSEError("--calibration only serves --quantize int8; add it or leave the corpus out.")
        return self
