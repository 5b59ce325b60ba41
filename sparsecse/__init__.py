"""sparsecse: structured sparsification of contrastive sentence encoders (SparseCSE).

The Python API mirrors the command line::

    import sparsecse
    scores = sparsecse.score()                       # default model, STS-B train
    mask = sparsecse.prune(scores, sparsity=0.02, lam=0.5)
    results = sparsecse.evaluate(mask=mask, tasks="sts")
"""

__version__ = "0.1.0"

_API = {
    "SentenceEncoder": "sparsecse.modeling.encoder",
    "Gates": "sparsecse.compress.gates",
    "Mask": "sparsecse.compress.masks",
    "GateScores": "sparsecse.compress.scoring",
    "score": "sparsecse.compress.scoring",
    "prune": "sparsecse.compress.pruning",
    "prune_grid": "sparsecse.compress.pruning",
    "evaluate": "sparsecse.evaluation",
    "compare": "sparsecse.evaluation.compare",
    "shrink": "sparsecse.compress.shrinking",
    "export": "sparsecse.deploy.onnx_export",
    "OnnxEncoder": "sparsecse.deploy.onnx_encoder",
    "OpenVinoEncoder": "sparsecse.deploy.openvino_encoder",
    "Encoder": "sparsecse.deploy.runtime",
    "load_encoder": "sparsecse.deploy.loading",
    "train": "sparsecse.training",
    "rewind": "sparsecse.training",
    "sweep": "sparsecse.sweeps.run",
    "SparseCSEError": "sparsecse.errors",
    # one frozen config per stage (sparsecse.stage_config)
    "ScoringConfig": "sparsecse.compress.scoring",
    "PruningRule": "sparsecse.compress.pruning",
    "ShrinkConfig": "sparsecse.compress.shrinking",
    "ReconstructionPlan": "sparsecse.compress.reconstruction",
    "EvaluationConfig": "sparsecse.evaluation.config",
    "ComparisonConfig": "sparsecse.evaluation.compare",
    "TrainingConfig": "sparsecse.training.config",
    "PruningConfig": "sparsecse.sweeps.config",
    "RewindConfig": "sparsecse.sweeps.config",
    "SweepOptions": "sparsecse.sweeps.config",
    "SweepSpec": "sparsecse.sweeps.config",
    "ExportConfig": "sparsecse.deploy.export_config",
}


def __getattr__(name):  # lazy, so importing sparsecse does not import torch
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'sparsecse' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_API))
