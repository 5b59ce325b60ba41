"""Encoder models whose layers keep different numbers of attention heads and FFN neurons.

This file is copied into every shrunk model directory (``auto_map`` in config.json points at it), so
``AutoModel.from_pretrained(dir, trust_remote_code=True)`` and sentence-transformers load it without
sparsecse installed; it imports only torch and transformers. Each model class subclasses the base
architecture's own model and, once the base has built its full-size layers, cuts every layer down to
the shapes in its config. :func:`shrink_layer` is the one place that removes heads and neurons; sparsecse's
physical pruning calls it too, so a saved model and its reloaded copy are cut by the same code.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn
from transformers import BertModel, CamembertModel, ElectraModel, MPNetModel, RobertaModel, XLMRobertaModel

from .configuration_sparsecse import (
    SparseCSEBertConfig,
    SparseCSECamembertConfig,
    SparseCSEElectraConfig,
    SparseCSEMPNetConfig,
    SparseCSERobertaConfig,
    SparseCSEXLMRobertaConfig,
)


def _keep(param: nn.Parameter, index: torch.Tensor, dim: int) -> nn.Parameter:
    kept = param.detach().index_select(dim, index.to(param.device)).clone()
    return nn.Parameter(kept, requires_grad=param.requires_grad)


def keep_outputs(linear: nn.Linear, index: torch.Tensor) -> None:
    """Keep only the output features ``index`` (weight rows and bias entries), in place."""
    linear.weight = _keep(linear.weight, index, 0)
    if linear.bias is not None:
        linear.bias = _keep(linear.bias, index, 0)
    linear.out_features = int(index.numel())


def keep_inputs(linear: nn.Linear, index: torch.Tensor) -> None:
    """Keep only the input features ``index`` (weight columns; the bias stays whole), in place."""
    linear.weight = _keep(linear.weight, index, 1)
    linear.in_features = int(index.numel())


def head_feature_index(heads: Sequence[int], head_dim: int) -> torch.Tensor:
    """Feature indices of the given heads in a [.., heads * head_dim] projection (heads contiguous)."""
    heads = torch.as_tensor(list(heads), dtype=torch.long)
    return (heads[:, None] * head_dim + torch.arange(head_dim)).flatten()


def _zero_width_linear(in_features: int, device=None, dtype=None) -> nn.Linear:
    """nn.Linear(in_features, 0), made by cutting a 1-wide one (initialising 0 elements warns)."""
    linear = nn.Linear(in_features, 1, device=device, dtype=dtype)
    keep_outputs(linear, torch.empty(0, dtype=torch.long))
    return linear


class HeadlessSelfAttention(nn.Module):
    """Self-attention of a layer whose heads were all removed.

    It contributes an empty context, so the attention output projection adds only its bias before the
    residual LayerNorm: exactly what the full layer computes with every head gate at 0. The zero-width
    query/key/value projections stay so the layer keeps the usual module paths.
    """

    def __init__(self, hidden_size: int, head_dim: int, device=None, dtype=None):
        super().__init__()
        self.num_attention_heads = 0
        self.attention_head_size = head_dim
        self.all_head_size = 0
        self.query, self.key, self.value = (_zero_width_linear(hidden_size, device, dtype) for _ in range(3))

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        return hidden_states.new_zeros(*hidden_states.shape[:-1], 0), None


class ShrunkMPNetSelfAttention(nn.Module):
    """MPNet self-attention that keeps a subset of the source model's heads.

    MPNet's encoder computes one relative position bias [batch, source heads, q, k] from a table
    shared by all layers; this layer adds only the slices of the heads it kept (``bias_heads``, indices
    into the source model's heads), so the table itself stays whole. With no heads left it returns the
    output projection's bias, as the full layer does with all its head gates at 0. Otherwise the
    arithmetic is MPNet's own (transformers' MPNetSelfAttention).
    """

    def __init__(self, source: nn.Module, bias_heads: Sequence[int]):
        super().__init__()
        self.q, self.k, self.v, self.o, self.dropout = source.q, source.k, source.v, source.o, source.dropout
        self.attention_head_size = source.attention_head_size
        # a plain list, not a buffer: models may be built on the meta device before their weights load
        self.bias_heads = [int(h) for h in bias_heads]
        self._bias_index: torch.Tensor | None = None
        self.num_attention_heads = len(self.bias_heads)
        self.all_head_size = self.num_attention_heads * self.attention_head_size

    def forward(self, hidden_states, attention_mask=None, position_bias=None, output_attentions=False, **kwargs):
        if self.num_attention_heads == 0:
            out = self.o(hidden_states.new_zeros(*hidden_states.shape[:-1], 0))
            return (out, None) if output_attentions else (out,)
        shape = (*hidden_states.shape[:-1], -1, self.attention_head_size)
        q = self.q(hidden_states).view(shape).transpose(1, 2)
        k = self.k(hidden_states).view(shape).transpose(1, 2)
        v = self.v(hidden_states).view(shape).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.attention_head_size)
        if position_bias is not None:
            scores = scores + position_bias.index_select(1, self._index_on(position_bias.device))
        if attention_mask is not None:
            scores = scores + attention_mask
        probs = self.dropout(nn.functional.softmax(scores, dim=-1))
        context = torch.matmul(probs, v).transpose(1, 2).reshape(*hidden_states.shape[:-1], self.all_head_size)
        out = self.o(context)
        return (out, probs) if output_attentions else (out,)

    def _index_on(self, device: torch.device) -> torch.Tensor:
        if self._bias_index is None or self._bias_index.device != device:
            self._bias_index = torch.tensor(self.bias_heads, dtype=torch.long, device=device)
        return self._bias_index


def _shrink_mpnet_attention(layer: nn.Module, heads: Sequence[int]) -> None:
    attention = layer.attention.attn
    current = getattr(attention, "bias_heads", None)
    if current is None:  # transformers' MPNetSelfAttention: every source head, in order
        current = list(range(attention.q.out_features // attention.attention_head_size))
    features = head_feature_index(heads, attention.attention_head_size)
    for linear in (attention.q, attention.k, attention.v):
        keep_outputs(linear, features)
    keep_inputs(attention.o, features)
    layer.attention.attn = ShrunkMPNetSelfAttention(attention, [current[h] for h in heads])


def shrink_layer(layer: nn.Module, heads: Sequence[int], neurons: Sequence[int] | torch.Tensor) -> None:
    """Keep only ``heads`` (indices into the layer's current heads) and FFN ``neurons``, in place.

    Removes the heads' query/key/value rows and attention-output columns, and the neurons' FFN-input
    rows + bias and FFN-output columns. With no heads left, the self-attention becomes
    :class:`HeadlessSelfAttention` (MPNet: :class:`~sparsecse.modeling.modeling_sparsecse.ShrunkMPNetSelfAttention` with no heads).
    """
    heads = list(heads)
    if hasattr(layer.attention, "attn"):  # MPNet: q, k, v and o in one module, plus a position bias
        _shrink_mpnet_attention(layer, heads)
        _shrink_ffn(layer, neurons)
        return
    attention = layer.attention.self
    head_dim = attention.attention_head_size
    attn_out = layer.attention.output.dense
    features = head_feature_index(heads, head_dim)
    if len(heads) == 0:
        weight = attention.query.weight
        layer.attention.self = HeadlessSelfAttention(attn_out.out_features, head_dim,
                                                     device=weight.device, dtype=weight.dtype)
    else:
        for linear in (attention.query, attention.key, attention.value):
            keep_outputs(linear, features)
        attention.num_attention_heads = len(heads)
        attention.all_head_size = len(heads) * head_dim
    keep_inputs(attn_out, features)
    _shrink_ffn(layer, neurons)


def _shrink_ffn(layer: nn.Module, neurons: Sequence[int] | torch.Tensor) -> None:
    neurons = torch.as_tensor(neurons, dtype=torch.long).flatten()
    keep_outputs(layer.intermediate.dense, neurons)
    keep_inputs(layer.output.dense, neurons)


class ShrunkLayersMixin:
    """Builds the base model at full size, then cuts each layer to the config's kept heads / FFN width."""

    _auto_class = "AutoModel"  # save_pretrained copies this code into the directory and sets auto_map
    _takes_pooling_flag = True  # the base model's __init__ accepts add_pooling_layer

    def __init__(self, config, *args, **kwargs):
        if self._takes_pooling_flag:
            kwargs.setdefault("add_pooling_layer", config.has_pooler)
        super().__init__(config, *args, **kwargs)
        # The full-size layers hold every source head, so the kept source indices cut them to shape
        # (and give MPNet layers their position-bias slices); the weights are loaded afterwards.
        for layer, kept, width in zip(self.encoder.layer, config.kept_heads, config.intermediate_sizes):
            shrink_layer(layer, kept, range(width))


class SparseCSEBertModel(ShrunkLayersMixin, BertModel):
    config_class = SparseCSEBertConfig


class SparseCSERobertaModel(ShrunkLayersMixin, RobertaModel):
    config_class = SparseCSERobertaConfig


class SparseCSEXLMRobertaModel(ShrunkLayersMixin, XLMRobertaModel):
    config_class = SparseCSEXLMRobertaConfig


class SparseCSECamembertModel(ShrunkLayersMixin, CamembertModel):
    config_class = SparseCSECamembertConfig


class SparseCSEElectraModel(ShrunkLayersMixin, ElectraModel):
    config_class = SparseCSEElectraConfig
    _takes_pooling_flag = False


class SparseCSEMPNetModel(ShrunkLayersMixin, MPNetModel):
    config_class = SparseCSEMPNetConfig


SHRUNK_MODELS = {
    cls.config_class.base_model_type: cls
    for cls in (SparseCSEBertModel, SparseCSERobertaModel, SparseCSEXLMRobertaModel,
                SparseCSECamembertModel, SparseCSEElectraModel, SparseCSEMPNetModel)
}
