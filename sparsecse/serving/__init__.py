"""Serving: what runs a model behind one :class:`~sparsecse.serving.runtime.Encoder` interface. The torch
encoder, exported graphs (ONNX Runtime, OpenVINO, or any format registered in
:mod:`sparsecse.artifacts.export_formats`) and :func:`~sparsecse.serving.loading.load_encoder`, which picks
one by what a directory holds. Below evaluation, which measures any of them; exporting is
:mod:`sparsecse.exporting`, above it."""
