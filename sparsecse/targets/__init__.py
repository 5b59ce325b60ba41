"""Compression aimed at a user's target instead of a FLOPs fraction.

A target is a speed-up measured on an engine (``Target.speedup`` on ``torch-fp32``, ``onnx``, ``openvino`` or
``openvino-int8``) or a bound on the dev score's drop (``Target.max_drop``), not both. The budget search
(:mod:`sparsecse.targets.search`) tries candidate budgets with cheap shrink-and-time probes, measured side by side
against the input model on the same engine and sentences, and keeps a table and a plot of them
(:mod:`sparsecse.targets.candidates`); the recipe's prune stage then spends the budget it found.
"""
