"""ONNX Runtime static int8 quantization of an exported graph, calibrated on sample sentences.

QDQ format (QuantizeLinear/DequantizeLinear pairs around each quantized MatMul, which ONNX Runtime
fuses into integer kernels), int8 weights per output channel, int8 activations whose ranges come
from running the fp32 graph on the calibration sentences (min/max). Only MatMuls with a constant
weight are quantized: the attention's activation x activation products stay fp32, as the dynamic
path leaves them.

    >>> quantize_static_int8(Path("onnx/model.onnx"), Path("onnx/model_qint8_static.onnx"),
    ...                      tokenizer, sentences, ["input_ids", "attention_mask"], max_length=256)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

QUANTIZATION_SETTINGS = {"format": "QDQ", "per_channel": True, "weight_type": "QInt8", "activation_type": "QInt8",
                         "calibrate_method": "MinMax", "op_types": ["MatMul"], "matmul_const_b_only": True}


def calibration_reader(tokenizer, sentences: list[str], input_names: list[str], max_length: int):
    """An onnxruntime ``CalibrationDataReader`` feeding one tokenized sentence at a time."""
    from onnxruntime.quantization import CalibrationDataReader

    class SentenceReader(CalibrationDataReader):
        def __init__(self):
            self.rows = iter(sentences)

        def get_next(self):
            sentence = next(self.rows, None)
            if sentence is None:
                return None
            tokens = tokenizer([sentence], truncation=True, max_length=max_length, return_tensors="np")
            if "token_type_ids" not in tokens:
                tokens["token_type_ids"] = np.zeros_like(tokens["input_ids"])
            return {name: tokens[name].astype(np.int64) for name in input_names}

    return SentenceReader()


def empty_weight_matmuls(path: Path) -> list[str]:
    """Names of the MatMuls whose constant weight has a zero-size dimension (a headless layer's attention
    output): quantized, ONNX Runtime's int8 kernel leaves their output uninitialised instead of zero."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    empty = {t.name for t in graph.initializer if 0 in t.dims}
    return [node.name for node in graph.node if node.op_type == "MatMul" and empty & set(node.input)]


def quantize_static_int8(fp32_path: Path, int8_path: Path, tokenizer, sentences: list[str],
                         input_names: list[str], max_length: int) -> None:
    """Write the static int8 graph of ``fp32_path`` to ``int8_path`` (see the module's settings)."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    quantize_static(str(fp32_path), str(int8_path), calibration_reader(tokenizer, sentences, input_names, max_length),
                    quant_format=QuantFormat.QDQ, per_channel=True, weight_type=QuantType.QInt8,
                    activation_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax,
                    op_types_to_quantize=["MatMul"], nodes_to_exclude=empty_weight_matmuls(fp32_path),
                    extra_options={"MatMulConstBOnly": True})
