"""How a model is exported: the one config of :func:`sparsecse.deploy.export.export`."""

from __future__ import annotations

import os
from dataclasses import dataclass

from sparsecse.deploy.calibration import DEFAULT_SEED, DEFAULT_SIZE
from sparsecse.errors import SparseCSEError

FORMATS = ("onnx", "openvino")
QUANTIZATIONS = ("int8",)
OPSET = 17
MIN_OPSET = 14  # scaled_dot_product_attention and LayerNormalization need it


def max_opset() -> int:
    """The newest opset torch's TorchScript exporter (the one export uses) writes."""
    try:
        from torch.onnx import _constants

        return int(getattr(_constants, "ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET", _constants.ONNX_MAX_OPSET))
    except (ImportError, AttributeError):
        return 20


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
        if not isinstance(self.opset, int) or not MIN_OPSET <= self.opset <= max_opset():
            raise SparseCSEError(f"--opset must be between {MIN_OPSET} and {max_opset()} (what this torch exports), "
                                 f"not {self.opset}.")
        if not isinstance(self.calibration_seed, int) or not 0 <= self.calibration_seed < 2**32:
            raise SparseCSEError(f"--calibration-seed must be between 0 and 2**32 - 1, like every seed, not "
                                 f"{self.calibration_seed}.")
        return self
