"""Exporting: a torch model directory as the files of an export format (ONNX, OpenVINO, or any format
registered in :mod:`sparsecse.artifacts.export_formats`), fp32 or quantized, checked against the torch
model (:func:`~sparsecse.exporting.export.export`). Above evaluation; what runs the files is
:mod:`sparsecse.serving`."""
