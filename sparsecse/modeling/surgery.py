"""Physical removal of pruned heads and FFN neurons from ModernBERT, Qwen3 and Gemma-3 text models,
through torch-pruning.

- **FFN** (GeGLU / SwiGLU): torch-pruning's dependency graph, traced through each layer's MLP, couples
  the input channels of the output projection (``down_proj`` / ``mlp.Wo``) with the output channels of
  both the gate and value projections (``gate_proj`` and ``up_proj``; ModernBERT's fused ``Wi``, whose
  ``chunk`` it follows, so both halves lose row i). One group per layer removes them together.
- **Attention**: the dependency graph does not model heads (it cannot trace ``view(.., heads,
  head_dim)`` + rotary + SDPA into head-sized channel groups; asked for ``o_proj``'s input channels on a
  2-layer Qwen3 it did not finish in 5 minutes), so the channels of each removed head are computed
  here and removed with torch-pruning's own channel pruners (``prune_linear_out_channels`` /
  ``prune_linear_in_channels``): a query head's rows of ``q_proj`` (ModernBERT: its rows in each of the
  q, k and v blocks of ``Wqkv``) and columns of the output projection; a key/value head's rows of
  ``k_proj`` and ``v_proj`` only when every query head of its group is gone. Rotary embeddings and q/k
  norms act within a head (size ``head_dim``), which stays whole, so they need no change.
- The attention modules then get their new head counts (and, under grouped-query attention, the
  query-to-key/value map): :func:`~sparsecse.modeling.modeling_sparsecse_modern.finish_grouped_attention`.

The result's state dict loads strictly into the ``sparsecse-<base>`` model built from the shrunk
config (:mod:`sparsecse.modeling.modeling_sparsecse_modern`), which is how a saved model is rebuilt
without torch-pruning.
"""

from __future__ import annotations

import warnings
from typing import Sequence

import torch
from torch import nn

from sparsecse.errors import SparseCSEError
from sparsecse.modeling.adapters import get_adapter, layer_modules, layer_parts
from sparsecse.modeling.kv_groups import kv_group_size
from sparsecse.modeling.modeling_sparsecse import head_feature_index
from sparsecse.modeling.modeling_sparsecse_modern import finish_grouped_attention, finish_modernbert_attention

MISSING_TORCH_PRUNING = ("Shrinking ModernBERT, Qwen3 and Gemma-3 models needs torch-pruning "
                         "(pip install torch-pruning).")


def _torch_pruning():
    try:
        import torch_pruning
    except ImportError:
        raise SparseCSEError(MISSING_TORCH_PRUNING) from None
    return torch_pruning


def _indices(index) -> list[int]:
    return [int(i) for i in torch.as_tensor(index).flatten().tolist()]


def remove_ffn_neurons(mlp: nn.Module, ffn_out: nn.Linear, removed: Sequence[int]) -> None:
    """Remove FFN neurons ``removed`` of one layer through torch-pruning's dependency graph of ``mlp``
    (the output projection's input channels and, coupled, the gate and value rows)."""
    removed = sorted(int(i) for i in removed)
    if not removed:
        return
    tp = _torch_pruning()
    param = ffn_out.weight
    example = torch.zeros(1, 2, ffn_out.out_features, dtype=param.dtype, device=param.device)
    flags = [(p, p.requires_grad) for p in mlp.parameters()]
    try:
        for p, _ in flags:
            p.requires_grad_(True)  # the graph is traced through autograd
        with torch.enable_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # notes on parameters it does not wrap (none here)
            graph = tp.DependencyGraph().build_dependency(mlp, example_inputs=example)
            group = graph.get_pruning_group(ffn_out, tp.prune_linear_in_channels, idxs=removed)
            group.prune()
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def append_zero_ffn_neurons(mlp: nn.Module, count: int, arch: str) -> None:
    """Add ``count`` inert neurons (zero gate row, value row and output column): act(0) * 0 = 0 whatever
    the activation, and their gradients are 0 too; they only round the width up for fast kernels."""
    if count == 0:
        return
    if arch == "modernbert":
        width = mlp.Wo.in_features
        weight = mlp.Wi.weight.detach()
        zeros = weight.new_zeros(count, weight.shape[1])
        mlp.Wi.weight = nn.Parameter(torch.cat([weight[:width], zeros, weight[width:], zeros]),
                                     requires_grad=mlp.Wi.weight.requires_grad)
        if mlp.Wi.bias is not None:
            b = mlp.Wi.bias.detach()
            mlp.Wi.bias = nn.Parameter(torch.cat([b[:width], b.new_zeros(count), b[width:], b.new_zeros(count)]),
                                       requires_grad=mlp.Wi.bias.requires_grad)
        mlp.Wi.out_features += 2 * count
        linears = [(mlp.Wo, 1)]
    else:
        linears = [(mlp.gate_proj, 0), (mlp.up_proj, 0), (mlp.down_proj, 1)]
    for linear, dim in linears:
        param = linear.weight
        shape = list(param.shape)
        shape[dim] = count
        linear.weight = nn.Parameter(torch.cat([param.detach(), param.new_zeros(shape)], dim),
                                     requires_grad=param.requires_grad)
        if dim == 0:
            if linear.bias is not None:
                linear.bias = nn.Parameter(torch.cat([linear.bias.detach(), linear.bias.new_zeros(count)]),
                                           requires_grad=linear.bias.requires_grad)
            linear.out_features += count
        else:
            linear.in_features += count
    if hasattr(mlp, "intermediate_size"):
        mlp.intermediate_size = mlp.down_proj.in_features


def remove_heads(layer: nn.Module, arch: str, keep: Sequence[bool], group: int) -> list[int]:
    """Remove the query heads ``keep`` marks False (and every key/value head none of whose query heads
    stays) with torch-pruning's channel pruners; returns the kept query heads (current indices)."""
    tp = _torch_pruning()
    keep = [bool(k) for k in keep]
    kept = [h for h, k in enumerate(keep) if k]
    gone = [h for h, k in enumerate(keep) if not k]
    if arch == "modernbert":
        attn = layer.attn
        if gone:
            d, features = attn.Wo.in_features, _indices(head_feature_index(gone, attn.head_dim))
            tp.prune_linear_out_channels(attn.Wqkv, features + [f + d for f in features] + [f + 2 * d for f in features])
            tp.prune_linear_in_channels(attn.Wo, features)
        finish_modernbert_attention(layer, kept)
        return kept
    attn = layer.self_attn
    if gone:
        features = _indices(head_feature_index(gone, attn.head_dim))
        tp.prune_linear_out_channels(attn.q_proj, features)
        tp.prune_linear_in_channels(attn.o_proj, features)
        empty_groups = [g for g in range(len(keep) // group) if not any(keep[g * group:(g + 1) * group])]
        if empty_groups:
            kv_features = _indices(head_feature_index(empty_groups, attn.head_dim))
            for linear in (attn.k_proj, attn.v_proj):
                tp.prune_linear_out_channels(linear, kv_features)
    finish_grouped_attention(layer, kept, group)
    return kept


def shrink_modern_layers(model: nn.Module, head_keep: torch.Tensor, neuron_keep: torch.Tensor,
                         padding: Sequence[int] | None = None) -> None:
    """Cut ``model``'s layers in place to the kept heads and neurons (a dense ModernBERT / Qwen3 /
    Gemma-3 text model whose layers all have their full shape), padding FFN i with ``padding[i]``
    inert neurons."""
    adapter = get_adapter(model)
    if not adapter.gated_ffn:
        raise SparseCSEError(f"The torch-pruning path serves ModernBERT, Qwen3 and Gemma-3 text, not {adapter.name}.")
    arch = "modernbert" if adapter.name == "modernbert" else "decoder"
    group = kv_group_size(model)
    padding = list(padding or [0] * len(head_keep))
    for layer, part, heads, neurons, pad in zip(layer_modules(model), layer_parts(model), head_keep, neuron_keep,
                                                padding):
        remove_ffn_neurons(layer.mlp, part.ffn_out, _indices((~neurons.bool()).nonzero()))
        append_zero_ffn_neurons(layer.mlp, pad, arch)
        remove_heads(layer, arch, heads.tolist(), group)
