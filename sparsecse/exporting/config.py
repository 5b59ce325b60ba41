"""How a model is exported: the one config of :func:`sparsecse.exporting.export.export`, checked against the
format's declaration (:mod:`sparsecse.artifacts.export_formats`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from sparsecse.artifacts.export_formats import get_format
from sparsecse.errors import SparseCSEError

CALIBRATION_SIZE = 300  # what sentence-transformers' static-quantization examples use
CALIBRATION_SEED = 0
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
    """How to export a model.

    Args:
        format: a registered format (onnx, openvino, ...).
        quantize: None or a quantization the format accepts (int8: ONNX dynamic, or static with a
            ``calibration`` corpus; OpenVINO NNCF, which needs one).
        pooling: overrides the model's own.
        opset: the ONNX opset.
        calibration: a corpus, one sentence per line, to calibrate int8 activations on.
        calibration_size: sentences drawn from it.
        calibration_seed: the seed of the draw.

    >>> ExportConfig(format="openvino", quantize="int8", calibration="corpus.txt").check().format
    'openvino'
    """

    format: str = "onnx"
    quantize: str | None = None
    pooling: str | None = None
    opset: int = OPSET
    calibration: str | os.PathLike | None = None
    calibration_size: int = CALIBRATION_SIZE
    calibration_seed: int = CALIBRATION_SEED

    def check(self) -> "ExportConfig":
        """The config itself once its format accepts it (one sentence otherwise)."""
        fmt = get_format(self.format)
        quantization = fmt.quantization(self.quantize) if self.quantize is not None else None
        if self.calibration is not None and quantization is None:
            offered = " or ".join(q.name for q in fmt.quantizations)
            raise SparseCSEError(f"--calibration only serves --quantize {offered}; add it or leave the corpus out."
                                 if offered else f"{fmt.title} export has no quantization to calibrate; leave "
                                 "--calibration out.")
        if quantization is not None and quantization.calibration == "required" and self.calibration is None:
            raise SparseCSEError(f"{fmt.title} {quantization.name} is calibrated on sample sentences: pass "
                                 "--calibration CORPUS (one sentence per line).")
        if not isinstance(self.opset, int) or not MIN_OPSET <= self.opset <= max_opset():
            raise SparseCSEError(f"--opset must be between {MIN_OPSET} and {max_opset()} (what this torch exports), "
                                 f"not {self.opset}.")
        if not isinstance(self.calibration_seed, int) or not 0 <= self.calibration_seed < 2**32:
            raise SparseCSEError(f"--calibration-seed must be between 0 and 2**32 - 1, like every seed, not "
                                 f"{self.calibration_seed}.")
        return self
