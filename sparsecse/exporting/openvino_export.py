"""``sparsecse export --format openvino``: the writer of the OpenVINO format's files.

The IR is the model converted by OpenVINO's own converter
(:func:`~sparsecse.serving.openvino_convert.convert`, from the same function the ONNX export traces), saved
in fp32 (no fp16 compression); int8 is NNCF's post-training static quantization of it
(:func:`~sparsecse.serving.openvino_convert.quantize_nncf`) calibrated on a seeded sample of a corpus, whose
seed, size and hashes go into the manifest. Everything around the IR files is written by the steps every
format shares (:func:`sparsecse.exporting.export.write_export`).

    >>> export("runs/minilm-f50", "runs/minilm-f50-ov", format="openvino", quantize="int8",
    ...        calibration="wiki1m_sample.txt")  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

from sparsecse.artifacts.export_formats import get_format
from sparsecse.exporting.config import ExportConfig
from sparsecse.exporting.result import WrittenGraphs
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.serving.graph import OUTPUTS
from sparsecse.serving.openvino_convert import convert, quantize_nncf, require_openvino

OPENVINO = get_format("openvino")


def write_openvino(encoder: SentenceEncoder, directory: Path, normalize: bool, config: ExportConfig,
                   calibration: list[str] | None) -> WrittenGraphs:
    """Write the OpenVINO IRs of ``encoder`` into ``directory`` (the OpenVINO format's writer).

    Args:
        encoder: the CPU fp32 encoder (changed in place by the conversion).
        directory: the directory being assembled.
        normalize: whether the embedding is L2-normalised in the IR.
        config: the export config (``quantize``).
        calibration: the sentences NNCF calibrates int8 on (required with ``quantize="int8"``).

    Returns:
        The IRs written, always the fp32 one and, with ``quantize="int8"``, the NNCF int8 one, last (the IR
        sparsecse runs).
    """
    ov = require_openvino()
    model, names = convert(encoder, normalize)
    fp32 = directory / OPENVINO.files["fp32"]
    fp32.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(model, fp32, compress_to_fp16=False)
    kinds, params = ["fp32"], {"converter": "openvino.convert_model", "quantization": None}
    if config.quantize:
        quantized = quantize_nncf(model, encoder, calibration, names)
        ov.save_model(quantized, directory / OPENVINO.files["int8_static"], compress_to_fp16=False)
        kinds.append("int8_static")
        params.update(quantization="nncf_static", nncf={"model_type": "transformer", "subset_size": len(calibration)})
    return WrittenGraphs(kinds, settings={"inputs": names, "outputs": list(OUTPUTS)}, params=params)


OPENVINO.provide(writer=write_openvino)
