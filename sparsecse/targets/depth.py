"""Depth in the target search: candidates that remove whole layers as well as heads and neurons.

A candidate is a pair (layers removed, ``keep_flops`` of the remaining layers). Its layers are removed
first, in the order of their importance (:func:`sparsecse.scoring.layer_criteria.removal_order` on the dev
sentences: by default the layers whose removal moves the sentence embeddings least, one at a time, so removing
k+1 layers removes the k of the smaller candidate and one more), leaving a model with fewer layers of the full
shape; that model is then pruned in width like any other, to ``keep_flops`` of its own layer FLOPs. The whole candidate keeps :func:`overall_keep_flops` of the
input model's layer FLOPs.

Layer FLOPs are not all of a model's time: each layer also costs its LayerNorms, softmax, small kernels and
dispatch, which no width cut removes. Removing a layer removes them too, so at one speed-up a depth-and-width
candidate keeps more FLOPs than a width-only one; which of them is better is measured (the dev score, see
the targets guide), not assumed.
"""

from __future__ import annotations

import os
from typing import Sequence

from sparsecse.errors import SparseCSEError
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.pruning.masks import Mask
from sparsecse.pruning.prune import PruningConfig
from sparsecse.pruning.prune import prune as prune_scores
from sparsecse.scoring.layer_criteria import check_removable
from sparsecse.scoring.scores import GateScores
from sparsecse.shrinking.layers import model_layers, scores_without_layers, without_layers
from sparsecse.shrinking.shrink import ShrinkConfig, remove_units, shrink_lineage
from sparsecse.targets.spec import Target


def layers_removed(order: Sequence[int], k: int) -> list[int]:
    """The first ``k`` layers of a removal ``order``, sorted by index (0 <= k < number of layers)."""
    if int(k) == 0:  # width only, whatever the order (none is measured for a width-only search)
        return []
    check_removable(len(order), k)
    return sorted(int(i) for i in order[:int(k)])


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
