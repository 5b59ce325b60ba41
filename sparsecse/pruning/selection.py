"""Which units a sparsity removes: the round(s·#units) lowest-scored heads and, separately, neurons, ranked
across all layers (``scope="global"``) or within each layer (``scope="layer"``); by default no layer loses its
last head. (A kept-FLOPs or kept-parameters budget chooses heads and neurons jointly instead:
:mod:`sparsecse.pruning.budget`.)"""

from __future__ import annotations

import math

import torch

from sparsecse.errors import SparseCSEError
from sparsecse.pruning.grid import check_sparsity

SCOPES = ("global", "layer")


def round_half_up(x: float) -> int:
    """``x`` rounded to the nearest whole number, halves up (0.5 -> 1), as the unit counts are."""
    return int(math.floor(x + 0.5 + 1e-9))


def _lowest(scores: torch.Tensor, count: int) -> torch.Tensor:
    """Flat indices of the ``count`` lowest scores; ties broken by position (stable)."""
    order = torch.sort(scores.flatten(), stable=True).indices
    return order[:count]


def select_heads(scores: torch.Tensor, count: int, keep_one_head: bool) -> torch.Tensor:
    """bool keep-mask [L, H] removing the ``count`` lowest heads, never a layer's last one if asked."""
    layers, heads = scores.shape
    keep = torch.ones(layers, heads, dtype=torch.bool)
    if count <= 0:
        return keep
    limit = heads - 1 if keep_one_head else heads
    if count > layers * limit:
        raise SparseCSEError(f"Cannot prune {count} heads while keeping one head in each of {layers} layers.")
    removed_in_layer = [0] * layers
    removed = 0
    for flat in torch.sort(scores.flatten(), stable=True).indices.tolist():
        layer, head = divmod(flat, heads)
        if removed_in_layer[layer] >= limit:
            continue
        keep[layer, head] = False
        removed_in_layer[layer] += 1
        removed += 1
        if removed == count:
            break
    return keep


def select_neurons(scores: torch.Tensor, count: int) -> torch.Tensor:
    """bool keep-mask shaped like ``scores`` removing the ``count`` lowest-scored neurons."""
    keep = torch.ones(scores.numel(), dtype=torch.bool)
    keep[_lowest(scores, count)] = False
    return keep.view_as(scores)


def masks_from_scores(head_scores: torch.Tensor, neuron_scores: torch.Tensor, sparsity: float,
                      scope: str = "global", keep_one_head: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep-masks ([L, H], [L, F]) removing a ``sparsity`` share of the heads and of the neurons, the
    lowest-scored ones across all layers (``scope="global"``) or within each layer (``"layer"``)."""
    check_sparsity(sparsity)
    if scope not in SCOPES:
        raise SparseCSEError(f"Unknown scope {scope!r}; choose global or layer.")
    if scope == "global":
        return (select_heads(head_scores, round_half_up(sparsity * head_scores.numel()), keep_one_head),
                select_neurons(neuron_scores, round_half_up(sparsity * neuron_scores.numel())))
    per_layer_heads = round_half_up(sparsity * head_scores.shape[1])
    per_layer_neurons = round_half_up(sparsity * neuron_scores.shape[1])
    head_keep = torch.stack([select_heads(row[None], per_layer_heads, keep_one_head)[0] for row in head_scores])
    neuron_keep = torch.stack([select_neurons(row, per_layer_neurons) for row in neuron_scores])
    return head_keep, neuron_keep
