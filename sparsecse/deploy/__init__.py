"""Serving exported models: the :class:`~sparsecse.deploy.runtime.Encoder` interface every backend
(torch, ONNX Runtime, OpenVINO) offers, :func:`~sparsecse.deploy.loading.load_encoder`, OpenVINO
export and int8 post-training quantization with a calibration sample."""
