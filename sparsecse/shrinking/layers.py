"""Whole layers out: a model without some of its layers, its gate scores cut to the layers that stay, and the one
count of a model's layers.

Removing a layer is surgery like removing a head: :func:`without_layers` removes the layers from a copy of the
model through the same mask and :func:`~sparsecse.shrinking.shrink.remove_units` as any shrink, so what stays keeps
its full shape and is scored, pruned and shrunk like a dense model. :func:`scores_without_layers` cuts the gate
scores and their shape record (``layers`` and the fixed parameters a budget counts) to the layers that stay.
Depth candidates (:mod:`sparsecse.targets.depth`) and a recipe's prune stage after a depth search use both.
"""

from __future__ import annotations

import copy
import os
from typing import Sequence

from sparsecse.artifacts.model_names import resolve_model
from sparsecse.artifacts.remote_code import allow_code
from sparsecse.errors import SparseCSEError
from sparsecse.modeling import register_auto_classes
from sparsecse.modeling.adapters import layer_modules
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.pruning.masks import Mask
from sparsecse.scoring.scores import TENSORS, GateScores
from sparsecse.shrinking.shrink import ShrinkConfig, remove_units, shrink_lineage


def encoder_layers(encoder: SentenceEncoder) -> int:
    """The number of transformer layers of a loaded ``encoder`` (its adapter's layer list)."""
    return len(layer_modules(encoder.model))


def model_layers(model: str | os.PathLike) -> int:
    """The number of transformer layers of ``model`` (a name or a directory), read from its config alone (nothing
    loaded): what :func:`encoder_layers` gives once it is loaded."""
    from transformers import AutoConfig

    register_auto_classes()  # sparsecse's own shrunk model types
    path = resolve_model(model)
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=allow_code(path))
    except Exception as exc:  # OSError, ValueError from transformers
        raise SparseCSEError(f"Cannot load a model config from {path} ({str(exc).strip()[:160]}).") from None
    return int(config.get_text_config().num_hidden_layers)


def without_layers(encoder: SentenceEncoder, layers: Sequence[int]) -> SentenceEncoder:
    """A copy of ``encoder`` with the whole ``layers`` removed (the others unchanged, at their full shape, so
    it is scored, pruned and shrunk like any dense model); ``encoder`` itself is left as it is."""
    smaller = copy.deepcopy(encoder)
    if not layers:
        return smaller
    mask = Mask.for_model(smaller.model).without_layers(layers)
    remove_units(smaller, mask, ShrinkConfig(align_ffn=1), shrink_lineage(encoder.source, mask))
    return smaller


def scores_without_layers(scores: GateScores, layers: Sequence[int]) -> GateScores:
    """``scores`` of the layers that stay (their units ranked as the input model ranked them), with the shape
    record of the model without ``layers``, so a budget is spent over the remaining layers only."""
    total = scores.head_grad_align.shape[1]
    kept = [i for i in range(total) if i not in set(layers)]
    manifest = dict(scores.manifest)
    shape = dict(manifest.get("shape") or {})
    shape["layers"] = len(kept)
    if isinstance(shape.get("layer_fixed_params"), list):
        shape["layer_fixed_params"] = [shape["layer_fixed_params"][i] for i in kept]
    if "fixed_params" in shape and "layer_fixed_params" not in shape:
        shape["fixed_params"] = int(shape["fixed_params"]) // total * len(kept)
    elif "layer_fixed_params" in shape:
        shape["fixed_params"] = sum(shape["layer_fixed_params"])
    manifest["shape"] = shape
    sliced = [getattr(scores, name)[:, kept] for name in TENSORS]
    return GateScores(*sliced, manifest=manifest, batch_sizes=scores.batch_sizes)
