"""ModernBERT, Qwen3 and Gemma-3 text encoders whose layers keep different query heads and FFN widths.

Copied into every such shrunk model directory (``auto_map`` in config.json points at it) with its
siblings :mod:`sparsecse.modeling.modeling_sparsecse` and :mod:`sparsecse.modeling.configuration_sparsecse_modern`;
it imports only torch and transformers. The layers get their sizes as every family's do
(:class:`~sparsecse.modeling.modeling_sparsecse.ShrunkLayersMixin`, from the config's ``unit_layout``); this
file adds the two attention forms these models need (``grouped-query`` and ``fused-qkv`` in
:data:`~sparsecse.modeling.modeling_sparsecse.ATTENTION_FORMS`) and their model classes.

- **Grouped-query attention** (Qwen3, Gemma-3): a layer keeps any subset of query heads and the
  key/value heads that serve at least one of them. When the kept query heads no longer split evenly
  over the kept key/value heads, :class:`GroupedQueryAttention` maps each query head to its key/value
  head with an index instead of the base model's uniform ``repeat_kv`` grouping.
- **ModernBERT**: the fused ``Wqkv`` keeps the kept heads' rows in each of its q, k and v blocks;
  ``Wi`` keeps the rows of the kept neurons in both its value and gate halves.
- A model whose first ModernBERT layer was removed gives its new first layer the attention LayerNorm
  that layer had (:class:`SparseCSEModernBertModel`).
- A layer with no heads left adds only the output projection's bias (none in these models), which is
  what the full layer computes with all its head gates at 0.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn
from transformers import Gemma3TextModel, ModernBertModel, Qwen3Model
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb, eager_attention_forward

from .configuration_sparsecse_modern import SparseCSEGemma3TextConfig, SparseCSEModernBertConfig, SparseCSEQwen3Config
from .modeling_sparsecse import ATTENTION_FORMS, ShrunkLayersMixin, replace_module, resolve


def kv_positions(query_heads: Sequence[int], group: int) -> tuple[list[int], list[int]]:
    """(kept key/value heads, for each kept query head the position of its key/value head among them)."""
    kv_heads = sorted({int(h) // group for h in query_heads})
    where = {kv: i for i, kv in enumerate(kv_heads)}
    return kv_heads, [where[int(h) // group] for h in query_heads]


class GroupedQueryAttention(nn.Module):
    """Qwen3 / Gemma-3 self-attention over a subset of query heads, each reading its own key/value head.

    It borrows the source attention's projections, q/k norms and settings; the arithmetic is the base
    model's (``Qwen3Attention.forward``, which Gemma-3's equals), except that key/value heads are
    gathered per query head (``kv_index``) when the kept groups are uneven.
    """

    def __init__(self, source: nn.Module, kv_index: Sequence[int]):
        super().__init__()
        for name in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm"):
            setattr(self, name, getattr(source, name))
        for name in ("config", "layer_idx", "layer_type", "head_dim", "scaling", "attention_dropout", "is_causal",
                     "sliding_window", "attn_logit_softcapping", "is_sliding"):
            if hasattr(source, name):
                setattr(self, name, getattr(source, name))
        self.kv_index = [int(i) for i in kv_index]
        self.num_heads = len(self.kv_index)
        kv_heads = len(set(self.kv_index))
        even = kv_heads > 0 and self.kv_index == [i // (self.num_heads // kv_heads) for i in range(self.num_heads)] \
            and self.num_heads % kv_heads == 0
        self.num_key_value_groups = self.num_heads // kv_heads if even else 1
        self._gather = not even and self.num_heads > 0
        self._index: torch.Tensor | None = None

    def _index_on(self, device) -> torch.Tensor:
        if self._index is None or self._index.device != device:
            self._index = torch.tensor(self.kv_index, dtype=torch.long, device=device)
        return self._index

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, cache=None, **kwargs):
        """Attention over the kept query heads, each reading its key/value head."""
        input_shape = hidden_states.shape[:-1]
        if self.num_heads == 0:
            return self.o_proj(hidden_states.new_zeros(*input_shape, 0)), None
        hidden_shape = (*input_shape, -1, self.head_dim)
        query = self.q_norm(self.q_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
        key = self.k_norm(self.k_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
        value = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query, key = apply_rotary_pos_emb(query, key, cos, sin)
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx, kwargs=kwargs)
        if self._gather:
            index = self._index_on(key.device)
            key, value = key.index_select(1, index), value.index_select(1, index)
        interface = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)
        output, weights = interface(self, query, key, value, attention_mask,
                                    dropout=self.attention_dropout if self.training else 0.0, scaling=self.scaling,
                                    sliding_window=self.sliding_window, **kwargs)
        return self.o_proj(output.reshape(*input_shape, -1).contiguous()), weights


class HeadlessModernBertAttention(nn.Module):
    """ModernBERT attention of a layer whose heads were all removed: the output projection of an empty
    context (its bias, or 0). The zero-width ``Wqkv`` stays so the layer keeps its module paths."""

    def __init__(self, source: nn.Module):
        super().__init__()
        self.Wqkv, self.Wo, self.out_drop = source.Wqkv, source.Wo, source.out_drop
        self.head_dim = source.head_dim
        self.num_heads = 0

    def forward(self, hidden_states, *args, **kwargs):
        """An empty context (no head): the output projection of nothing."""
        return self.out_drop(self.Wo(hidden_states.new_zeros(*hidden_states.shape[:-1], 0))), None


def _grouped_query(layer: nn.Module, layout: dict, query_heads: Sequence[int], group: int) -> None:
    """Wrap a Qwen3/Gemma-3 layer's attention whose projections hold ``query_heads`` (source indices) and
    their key/value heads, so it maps each query head to its key/value head."""
    _, index = kv_positions(query_heads, group)
    replace_module(layer, layout["attention"], GroupedQueryAttention(resolve(layer, layout["attention"]), index))


def _fused_qkv(layer: nn.Module, layout: dict, query_heads: Sequence[int], group: int) -> None:
    """ModernBERT: the head count, or :class:`HeadlessModernBertAttention` when no head is left."""
    if len(query_heads) == 0:
        replace_module(layer, layout["attention"], HeadlessModernBertAttention(resolve(layer, layout["attention"])))
    else:
        setattr(resolve(layer, layout["attention"]), layout["head_count"], len(query_heads))


ATTENTION_FORMS.update({"grouped-query": _grouped_query, "fused-qkv": _fused_qkv})


class SparseCSEModernBertModel(ShrunkLayersMixin, ModernBertModel):
    """ModernBERT's first layer has no attention LayerNorm (the embeddings end with one); when the source
    model's first layer was removed, the layer now first is a later one and keeps its LayerNorm."""

    config_class = SparseCSEModernBertConfig
    _takes_pooling_flag = False

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        if self.layers and config.kept_layers[0] != 0:
            self.layers[0].attn_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)


class SparseCSEQwen3Model(ShrunkLayersMixin, Qwen3Model):
    """A shrunk Qwen3 model: each layer built at its kept sizes."""
    config_class = SparseCSEQwen3Config
    _takes_pooling_flag = False


class SparseCSEGemma3TextModel(ShrunkLayersMixin, Gemma3TextModel):
    """A shrunk Gemma-3 text model: each layer built at its kept sizes."""
    config_class = SparseCSEGemma3TextConfig
    _takes_pooling_flag = False
