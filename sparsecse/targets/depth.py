"""Depth in the target search: candidates that remove whole layers as well as heads and neurons.

A candidate is a pair (layers removed, ``keep_flops`` of the remaining layers). Its layers are removed
first, in the order of their importance (:mod:`sparsecse.scoring.layer_criteria`: ShortGPT's Block Influence
on the dev sentences, lowest first, so removing k+1 layers removes the k of the smaller candidate and one
more), leaving a model with fewer layers of the full shape; that model is then pruned in width like any
other, to ``keep_flops`` of its own layer FLOPs. The whole candidate keeps :func:`overall_keep_flops` of the
input model's layer FLOPs.

Layer FLOPs are not all of a model's time: each layer also costs its LayerNorms, softmax, small kernels and
dispatch, which no width cut removes. Removing a layer removes them too, so at one speed-up a depth-and-width
candidate keeps more FLOPs than a width-only one; which of them is better is measured (the dev score, see
the targets guide), not assumed.
"""

from __future__ import annotations

import copy
import os
from typing import Sequence

from sparsecse.artifacts.model_names import resolve_model
from sparsecse.artifacts.remote_code import allow_code
from sparsecse.errors import SparseCSEError
from sparsecse.modeling import register_auto_classes
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.pruning.masks import Mask
from sparsecse.pruning.prune import PruningConfig
from sparsecse.pruning.prune import prune as prune_scores
from sparsecse.scoring.layer_criteria import check_removable, layer_scores, removal_ranking
from sparsecse.scoring.scores import TENSORS, GateScores
from sparsecse.shrinking.shrink import ShrinkConfig, remove_units, shrink_lineage
from sparsecse.targets.spec import Target

def removal_order(encoder: SentenceEncoder, sentences: Sequence[str], criterion: str | None = None,
                  batch_size: int = 32) -> list[int]:
    """Every layer of ``encoder``, least important first (the order depth candidates remove them in).

    Args:
        encoder: the input model.
        sentences: the sentences the layer criterion averages over (the dev sentences).
        criterion: a layer criterion (:mod:`sparsecse.scoring.criteria`, unit ``layer``); None: the default.
        batch_size: sentences per forward pass.

    Returns:
        Layer indices; the first k are the k layers a candidate that removes k layers removes.
    """
    return removal_ranking(layer_scores(encoder, list(sentences), criterion, batch_size))


def layers_removed(order: Sequence[int], k: int) -> list[int]:
    """The first ``k`` layers of a removal ``order``, sorted by index (0 <= k < number of layers)."""
    if int(k) == 0:  # width only, whatever the order (none is measured for a width-only search)
        return []
    check_removable(len(order), k)
    return sorted(int(i) for i in order[:int(k)])


def model_layers(model: str | os.PathLike) -> int:
    """The number of transformer layers of ``model`` (a name or a directory), read from its config alone."""
    from transformers import AutoConfig

    register_auto_classes()  # sparsecse's own shrunk model types
    path = resolve_model(model)
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=allow_code(path))
    except Exception as exc:  # OSError, ValueError from transformers
        raise SparseCSEError(f"Cannot load a model config from {path} ({str(exc).strip()[:160]}).") from None
    return int(config.get_text_config().num_hidden_layers)


def check_depth(target: Target | None, model: str | os.PathLike) -> None:
    """Refuse (one sentence, before anything is written) a target whose ``depth`` ``model`` cannot lose: a depth
    must leave at least one layer."""
    if target is not None and target.depth:
        layers = model_layers(model)
        if target.depth >= layers:
            raise SparseCSEError(f"--depth {target.depth} would remove every layer of {model}, which has {layers}; "
                                 f"give 0 to {layers - 1} (or auto).")


def overall_keep_flops(keep_flops: float, removed: int, layers: int) -> float:
    """The kept fraction of all the input model's layer FLOPs of a candidate that removes ``removed`` of its
    ``layers`` layers and keeps ``keep_flops`` of the remaining layers' FLOPs (every layer of the input model
    costs the same)."""
    return float(keep_flops) * (layers - removed) / layers


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


def depth_width_probe(dense: SentenceEncoder, scores: GateScores, pruning: PruningConfig, removed: Sequence[int],
                      keep_flops: float) -> tuple[SentenceEncoder, Mask]:
    """One candidate, pruned one-shot: ``dense`` without the ``removed`` layers, then pruned to ``keep_flops`` of
    the remaining layers' FLOPs from the dense model's ``scores`` (no refit) and shrunk.

    Args:
        dense: the input model (left unchanged).
        scores: its gate scores.
        pruning: the pruning rule (λ, criterion).
        removed: the layers removed whole.
        keep_flops: the kept fraction of the remaining layers' FLOPs.

    Returns:
        The shrunk candidate and the width mask applied to the model without the removed layers.
    """
    encoder = without_layers(dense, removed)
    mask = prune_scores(scores_without_layers(scores, removed), keep_flops=keep_flops, config=pruning)
    remove_units(encoder, mask, ShrinkConfig(layout=pruning.layout), shrink_lineage(dense.source, mask))
    return encoder, mask
