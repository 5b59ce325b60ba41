"""Scores + sparsity + λ -> masks. Heads and neurons are ranked separately; the lowest-scored
round(s·#units) of each kind are removed, across all layers (``scope="global"``) or within each
layer (``scope="layer"``). By default no layer loses its last head."""

from __future__ import annotations

import math
import os
from typing import Any, Iterable

import torch

from sparsecse.errors import SparseCSEError
from sparsecse.grid import check_sparsity, parse_grid
from sparsecse.masks import Mask
from sparsecse.scoring import GateScores, check_lambda

SCOPES = ("global", "layer")


def round_half_up(x: float) -> int:
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
    keep = torch.ones(scores.numel(), dtype=torch.bool)
    keep[_lowest(scores, count)] = False
    return keep.view_as(scores)


def masks_from_scores(head_scores: torch.Tensor, neuron_scores: torch.Tensor, sparsity: float,
                      scope: str = "global", keep_one_head: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
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


def encoder_param_counts(shape: dict[str, int], mask: Mask) -> dict[str, Any]:
    """Parameters of the transformer layers (no embeddings) before and after removing the masked units."""
    d, dh, f = shape["hidden"], shape["head_dim"], shape["ffn"]
    layers, heads = shape["layers"], shape["heads"]
    per_head = 4 * d * dh + 3 * dh  # Q, K, V rows + biases, output-projection columns
    per_neuron = 2 * d + 1  # FFN first-layer row + bias, second-layer column
    per_layer_fixed = d + 2 * d + d + 2 * d  # output-projection bias, LayerNorm, FFN output bias, LayerNorm
    total = layers * (heads * per_head + f * per_neuron + per_layer_fixed)
    removed = mask.heads_pruned * per_head + mask.neurons_pruned * per_neuron
    return {"encoder_params": total, "encoder_params_removed": removed,
            "encoder_param_sparsity": removed / total}


def prune(scores: GateScores | str | os.PathLike, sparsity: float, lam: float, scope: str = "global",
          keep_one_head: bool = True) -> Mask:
    """The mask that removes the lowest-scored fraction ``sparsity`` of heads and of FFN neurons."""
    if not isinstance(scores, GateScores):
        scores = GateScores.load(scores)
    check_lambda(lam)
    return _mask(scores, scores.head_scores(lam), scores.neuron_scores(lam), sparsity, lam, scope, keep_one_head)


def prune_grid(scores: GateScores | str | os.PathLike, sparsities: Iterable[float] | str,
               lambdas: Iterable[float] | str, scope: str = "global",
               keep_one_head: bool = True) -> dict[tuple[float, float], Mask]:
    """{(sparsity, λ): mask} for every grid point, from one score file and no model run."""
    if not isinstance(scores, GateScores):
        scores = GateScores.load(scores)
    sparsities = [check_sparsity(s) for s in parse_grid(sparsities, "sparsity")]
    lambdas = [check_lambda(v) for v in parse_grid(lambdas, "lambda")]
    masks = {}
    for lam in lambdas:
        head_scores, neuron_scores = scores.head_scores(lam), scores.neuron_scores(lam)
        for s in sparsities:
            masks[(s, lam)] = _mask(scores, head_scores, neuron_scores, s, lam, scope, keep_one_head)
    return masks


def _mask(scores: GateScores, head_scores: torch.Tensor, neuron_scores: torch.Tensor, sparsity: float,
          lam: float, scope: str, keep_one_head: bool) -> Mask:
    head_keep, neuron_keep = masks_from_scores(head_scores, neuron_scores, sparsity, scope, keep_one_head)
    mask = Mask(head_keep, neuron_keep)
    src = scores.manifest
    mask.manifest = {
        "kind": "mask",
        "sparsity": sparsity,
        "lambda": lam,
        "scope": scope,
        "keep_one_head": keep_one_head,
        "model": src.get("model"),
        "pooling": src.get("pooling"),
        "scores": {"path": str(scores.path) if scores.path else None,
                   "sha256": scores.sha256,
                   "split": src.get("params", {}).get("split"), "seed": src.get("seed")},
        "versions": src.get("versions"),
    }
    if "shape" in src:
        mask.manifest.update(encoder_param_counts(src["shape"], mask))
    mask.manifest.update(mask.summary())
    return mask


def mask_filename(sparsity: float, lam: float) -> str:
    return f"mask-s{sparsity:g}-l{lam:g}.safetensors"
