"""Encoder models whose layers keep different numbers of attention heads and FFN neurons: the one place
that builds a shrunk model's layers, for every architecture.

This file is copied into every shrunk model directory (``auto_map`` in config.json points at it), so
``AutoModel.from_pretrained(dir, trust_remote_code=True)`` and sentence-transformers load it without
sparsecse installed; it imports only torch and transformers. Each model class subclasses the base
architecture's own model; :class:`ShrunkLayersMixin` lets the base build its full-size layers, then gives
every layer the sizes in its config (:func:`build_shrunk_layers`) by reading the config's ``unit_layout``:
the module paths of the family's query, key/value and output projections and FFN projections, written
by sparsecse's architecture adapter (:mod:`sparsecse.modeling.adapters`). No weights are cut here (they
load afterwards): sparsecse's shrinking (:mod:`sparsecse.shrinking.surgery`) removes the units with
torch-pruning, and a strict state-dict load checks that both agree on every shape.

How a family's attention runs with fewer heads, or none, is its ``attention_form``, one entry of
:data:`ATTENTION_FORMS`: ``head-count`` only records the new count (an attention that handles any number
of heads, none included); ``self-attention`` (BERT-like) swaps in :class:`HeadlessSelfAttention` when no
head is left; ``relative-bias`` (MPNet) keeps each head's slice of the shared position bias. The forms of
today's encoders live in :mod:`sparsecse.modeling.modeling_sparsecse_modern`.
"""

from __future__ import annotations

import math
from functools import reduce
from typing import Callable, Sequence

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


def resolve(root: nn.Module, path: str):
    """The attribute at dotted ``path`` below ``root`` (a submodule, or a plain attribute such as an activation)."""
    return reduce(getattr, path.split("."), root) if path else root


def replace_module(root: nn.Module, path: str, module: nn.Module) -> None:
    """Put ``module`` at dotted ``path`` below ``root``."""
    parent, _, name = path.rpartition(".")
    setattr(resolve(root, parent), name, module)


def head_feature_index(heads: Sequence[int], head_dim: int) -> torch.Tensor:
    """Feature indices of the given heads in a [.., heads * head_dim] projection (heads contiguous)."""
    heads = torch.as_tensor(list(heads), dtype=torch.long)
    return (heads[:, None] * head_dim + torch.arange(head_dim)).flatten()


def _leading(param: nn.Parameter, sizes: Sequence[int]) -> nn.Parameter:
    kept = param.detach()[tuple(slice(0, n) for n in sizes)].clone()
    return nn.Parameter(kept, requires_grad=param.requires_grad)


def resize_linear(linear: nn.Linear, out_features: int | None = None, in_features: int | None = None) -> None:
    """Give ``linear`` the shape [out_features, in_features] (None: unchanged), in place.

    Its leading rows and columns stay: only the shape matters, since the weights load afterwards.
    """
    out_features = linear.out_features if out_features is None else int(out_features)
    in_features = linear.in_features if in_features is None else int(in_features)
    linear.weight = _leading(linear.weight, (out_features, in_features))
    if linear.bias is not None:
        linear.bias = _leading(linear.bias, (out_features,))
    linear.out_features, linear.in_features = out_features, in_features


def layer_sizes(layout: dict, heads: int, kv_heads: int, width: int, head_dim: int) -> dict[str, tuple]:
    """(output features, input features) of every projection ``layout`` names, for a layer with ``heads``
    query heads, ``kv_heads`` key/value heads and ``width`` FFN neurons; None leaves a size as it is."""
    q, kv = heads * head_dim, kv_heads * head_dim
    sizes = {path: ((q + 2 * kv) if layout["fused_qkv"] else q, None) for path in layout["query"]}
    sizes.update({path: (kv, None) for path in layout["key_value"]})
    sizes[layout["attn_out"]] = (None, q)
    sizes.update({path: (width * layout["ffn_halves"], None) for path in layout["ffn_in"]})
    sizes[layout["ffn_out"]] = (None, width)
    return sizes


def build_shrunk_layers(model: nn.Module, config, layout: dict) -> None:
    """Give each of ``model``'s full-size layers the kept heads and FFN width in ``config``, in place."""
    group = config.query_heads_per_kv_head
    layers = resolve(model, layout["layers"])
    for layer, heads, kv_heads, width in zip(layers, config.kept_heads, config.kept_kv_heads,
                                             config.intermediate_sizes):
        head_dim = getattr(resolve(layer, layout["attention"]), layout["head_dim"])
        for path, (out_features, in_features) in layer_sizes(layout, len(heads), len(kv_heads), width,
                                                             head_dim).items():
            resize_linear(resolve(layer, path), out_features, in_features)
        ATTENTION_FORMS[layout["attention_form"]](layer, layout, heads, group)


def _set_head_count(layer: nn.Module, layout: dict, heads: Sequence[int], group: int) -> None:
    attention = resolve(layer, layout["attention"])
    setattr(attention, layout["head_count"], len(heads))
    if hasattr(attention, "all_head_size"):
        attention.all_head_size = len(heads) * getattr(attention, layout["head_dim"])


class HeadlessSelfAttention(nn.Module):
    """Self-attention of a layer whose heads were all removed.

    It contributes an empty context, so the attention output projection adds only its bias before the
    residual LayerNorm: exactly what the full layer computes with every head gate at 0. The zero-width
    query/key/value projections stay so the layer keeps the usual module paths.
    """

    def __init__(self, source: nn.Module):
        super().__init__()
        self.num_attention_heads = 0
        self.attention_head_size = source.attention_head_size
        self.all_head_size = 0
        self.query, self.key, self.value = source.query, source.key, source.value

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        """An empty context (no head), so the output projection adds only its bias."""
        return hidden_states.new_zeros(*hidden_states.shape[:-1], 0), None


def _self_attention(layer: nn.Module, layout: dict, heads: Sequence[int], group: int) -> None:
    if len(heads) == 0:
        replace_module(layer, layout["attention"], HeadlessSelfAttention(resolve(layer, layout["attention"])))
    else:
        _set_head_count(layer, layout, heads, group)


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
        """MPNet's attention over the kept heads, each with its slice of the relative position bias."""
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


def _relative_bias(layer: nn.Module, layout: dict, heads: Sequence[int], group: int) -> None:
    replace_module(layer, layout["attention"], ShrunkMPNetSelfAttention(resolve(layer, layout["attention"]), heads))


#: The attention forms by name (a family's ``UnitLayout.attention_form`` names one). Each is called as
#: ``finish(layer, layout, kept source query heads, query heads per key/value head)`` once the layer's
#: projections have their sizes, and makes its attention run with that many heads (or none);
#: modeling_sparsecse_modern adds the forms of today's encoders.
ATTENTION_FORMS: dict[str, Callable[[nn.Module, dict, Sequence[int], int], None]] = {
    "head-count": _set_head_count,
    "self-attention": _self_attention,
    "relative-bias": _relative_bias,
}


class ShrunkLayersMixin:
    """Builds the base model at full size, then gives each layer the config's kept heads and FFN width.

    ``unit_layout`` (class attribute) is the family's layout for configs written before config.json
    recorded it; sparsecse sets it when it registers the family's adapter.
    """

    _auto_class = "AutoModel"  # save_pretrained copies this code into the directory and sets auto_map
    _takes_pooling_flag = True  # the base model's __init__ accepts add_pooling_layer
    unit_layout: dict | None = None

    def __init__(self, config, *args, **kwargs):
        if self._takes_pooling_flag:
            kwargs.setdefault("add_pooling_layer", config.has_pooler)
        super().__init__(config, *args, **kwargs)
        layout = config.unit_layout or self.unit_layout
        if layout is None:
            raise ValueError(f"{type(self).__name__} needs a unit_layout in its config (the module paths of its "
                             "heads and FFN neurons); install sparsecse to load a directory written without one.")
        build_shrunk_layers(self, config, layout)


class SparseCSEBertModel(ShrunkLayersMixin, BertModel):
    """A shrunk BERT model: each layer built at its kept sizes."""
    config_class = SparseCSEBertConfig


class SparseCSERobertaModel(ShrunkLayersMixin, RobertaModel):
    """A shrunk RoBERTa model: each layer built at its kept sizes."""
    config_class = SparseCSERobertaConfig


class SparseCSEXLMRobertaModel(ShrunkLayersMixin, XLMRobertaModel):
    """A shrunk XLM-RoBERTa model: each layer built at its kept sizes."""
    config_class = SparseCSEXLMRobertaConfig


class SparseCSECamembertModel(ShrunkLayersMixin, CamembertModel):
    """A shrunk CamemBERT model: each layer built at its kept sizes."""
    config_class = SparseCSECamembertConfig


class SparseCSEElectraModel(ShrunkLayersMixin, ElectraModel):
    """A shrunk ELECTRA model: each layer built at its kept sizes."""
    config_class = SparseCSEElectraConfig
    _takes_pooling_flag = False


class SparseCSEMPNetModel(ShrunkLayersMixin, MPNetModel):
    """A shrunk MPNet model: each layer built at its kept sizes."""
    config_class = SparseCSEMPNetConfig
