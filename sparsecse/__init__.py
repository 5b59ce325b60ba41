"""sparsecse: structured sparsification of contrastive sentence encoders (SparseCSE).

The Python API mirrors the command line::

    import sparsecse
    scores = sparsecse.score()                       # default model, STS-B train
    mask = sparsecse.prune(scores, sparsity=0.02, lam=0.5)
    results = sparsecse.evaluate(mask=mask, config=sparsecse.EvaluationConfig(tasks="sts"))
"""

__version__ = "0.1.0"

_API = {
    "SentenceEncoder": "sparsecse.modeling.encoder",
    "Gates": "sparsecse.scoring.gates",
    "Mask": "sparsecse.pruning.masks",
    "GateScores": "sparsecse.scoring.scores",
    # the commands, under the same names
    "score": "sparsecse.scoring.score",
    "prune": "sparsecse.pruning.prune",
    "prune_grid": "sparsecse.pruning.prune",
    "evaluate": "sparsecse.evaluation",
    "compare": "sparsecse.evaluation.compare",
    "shrink": "sparsecse.shrinking.shrink",
    "compress": "sparsecse.compression",
    "export": "sparsecse.exporting.export",
    "train": "sparsecse.training",
    "rewind": "sparsecse.training",
    "sweep": "sparsecse.sweeps.run",
    "report": "sparsecse.reporting.report",
    "OnnxEncoder": "sparsecse.serving.onnx_encoder",
    "OpenVinoEncoder": "sparsecse.serving.openvino_encoder",
    "Encoder": "sparsecse.serving.runtime",
    "load_encoder": "sparsecse.serving.loading",
    "SparseCSEError": "sparsecse.errors",
    # one frozen config per stage (sparsecse.stage_config)
    "ScoringConfig": "sparsecse.scoring.score",
    "PruningConfig": "sparsecse.pruning.prune",
    "ShrinkConfig": "sparsecse.shrinking.shrink",
    "ReconstructionPlan": "sparsecse.shrinking.reconstruction",
    "EvaluationConfig": "sparsecse.evaluation.config",
    "ComparisonConfig": "sparsecse.evaluation.compare",
    "TrainingConfig": "sparsecse.training.config",
    "RewindConfig": "sparsecse.sweeps.config",
    "SweepOptions": "sparsecse.sweeps.config",
    "SweepSpec": "sparsecse.sweeps.config",
    "ExportConfig": "sparsecse.exporting.config",
    # the export formats every command offers (sparsecse.artifacts.export_formats)
    "ExportFormat": "sparsecse.artifacts.export_formats",
    "register_format": "sparsecse.artifacts.export_formats",
}


def __getattr__(name):  # lazy, so importing sparsecse does not import torch
    """The public name ``name``, imported from its module on first use."""
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'sparsecse' has no attribute {name!r}")


def __dir__():
    """The module's names and every public name of the API."""
    return sorted(list(globals()) + list(_API))
