"""``sparsecse export``: a dense or shrunk model directory as an ONNX graph (:mod:`~sparsecse.deploy.onnx_export`)
or an OpenVINO IR (:mod:`~sparsecse.deploy.openvino_export`), fp32 or int8, under one
:class:`~sparsecse.deploy.export_config.ExportConfig`."""

from __future__ import annotations

import os

from sparsecse.artifacts.remote_code import with_trust_option
from sparsecse.deploy.export_config import ExportConfig
from sparsecse.deploy.graph import ExportResult
from sparsecse.deploy.onnx_export import export_onnx
from sparsecse.deploy.openvino_export import export_openvino
from sparsecse.stage_config import configure


@with_trust_option
def export(model: str | os.PathLike | None = None, out: str | os.PathLike | None = None, format: str | None = None,
           *, overwrite: bool = False, config: ExportConfig | None = None, **options) -> ExportResult:
    """Export ``model`` (a dense or shrunk directory, or the default model) to the directory ``out``.

    ``config`` (an :class:`~sparsecse.deploy.export_config.ExportConfig`, or its fields by name in ``options``;
    ``format``, when given, replaces its own): ONNX (:func:`~sparsecse.deploy.onnx_export.export_onnx`: fp32,
    or int8 dynamic or, with a ``calibration`` corpus, static) or OpenVINO
    (:func:`~sparsecse.deploy.openvino_export.export_openvino`: fp32, or NNCF int8 on a ``calibration``
    corpus). Every graph is checked against the torch model on a few sentences (minimum cosine in the
    manifest); the fp32 one must match it (cosine >= 0.9999).

    Example::

        export("small", "small-onnx", quantize="int8", calibration="corpus.txt").files
    """
    c = configure(ExportConfig, config, {**options, **({"format": format} if format else {})}, "export").check()
    exporter = export_openvino if c.format == "openvino" else export_onnx
    return exporter(model, out, c, overwrite)
