"""ModernBERT, Qwen3 and Gemma-3 text encoders whose layers keep different query heads and FFN widths.

Copied into every such shrunk model directory (``auto_map`` in config.json points at it) with its
siblings :mod:`sparsecse.modeling.modeling_sparsecse` and :mod:`sparsecse.modeling.configuration_sparsecse_modern`; it imports only torch and
transformers. Each model class builds its base at full size and cuts every layer to the config's shapes
(:func:`cut_layer`, plain slicing: the weights are loaded afterwards); the cut at pruning time is made
by torch-pruning in sparsecse (:mod:`sparsecse.modeling.surgery`), and a strict state-dict load checks
that both agree.

- **Grouped-query attention** (Qwen3, Gemma-3): a layer keeps any subset of query heads and the
  key/value heads that serve at least one of them. When the kept query heads no longer split evenly
  over the kept key/value heads, :class:`GroupedQueryAttention` maps each query head to its key/value
  head with an index instead of the base model's uniform ``repeat_kv`` grouping.
- **ModernBERT**: the fused ``Wqkv`` keeps the kept heads' rows in each of its q, k and v blocks;
  ``Wi`` keeps the rows of the kept neurons in both its value and gate halves.
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
from .modeling_sparsecse import head_feature_index, keep_inputs, keep_outputs


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
        return self.out_drop(self.Wo(hidden_states.new_zeros(*hidden_states.shape[:-1], 0))), None


def _range(n: int) -> torch.Tensor:
    return torch.arange(int(n), dtype=torch.long)


def finish_grouped_attention(layer: nn.Module, query_heads: Sequence[int], group: int) -> None:
    """Wrap a Qwen3/Gemma-3 layer's attention whose projections already hold ``query_heads`` (source
    indices) and their key/value heads, so it maps each query head to its key/value head."""
    _, index = kv_positions(query_heads, group)
    layer.self_attn = GroupedQueryAttention(layer.self_attn, index)


def finish_modernbert_attention(layer: nn.Module, query_heads: Sequence[int]) -> None:
    if len(query_heads) == 0:
        layer.attn = HeadlessModernBertAttention(layer.attn)
    else:
        layer.attn.num_heads = len(query_heads)


def cut_layer(layer: nn.Module, arch: str, query_heads: Sequence[int], width: int, group: int = 1) -> None:
    """Cut a full-size layer to ``query_heads`` (source indices) and an FFN of ``width`` neurons (the
    first ones: only the shapes matter, the weights are loaded afterwards)."""
    if arch == "modernbert":
        attn, mlp = layer.attn, layer.mlp
        d, features = attn.Wo.in_features, head_feature_index(query_heads, attn.head_dim)
        keep_outputs(attn.Wqkv, torch.cat([features, features + d, features + 2 * d]))
        keep_inputs(attn.Wo, features)
        finish_modernbert_attention(layer, query_heads)
        ffn = mlp.Wo.in_features
        keep_outputs(mlp.Wi, torch.cat([_range(width), _range(width) + ffn]))
        keep_inputs(mlp.Wo, _range(width))
        return
    attn, mlp = layer.self_attn, layer.mlp
    kv_heads, _ = kv_positions(query_heads, group)
    keep_outputs(attn.q_proj, head_feature_index(query_heads, attn.head_dim))
    for linear in (attn.k_proj, attn.v_proj):
        keep_outputs(linear, head_feature_index(kv_heads, attn.head_dim))
    keep_inputs(attn.o_proj, head_feature_index(query_heads, attn.head_dim))
    finish_grouped_attention(layer, query_heads, group)
    for linear in (mlp.gate_proj, mlp.up_proj):
        keep_outputs(linear, _range(width))
    keep_inputs(mlp.down_proj, _range(width))
    mlp.intermediate_size = int(width)


class ShrunkModernLayersMixin:
    """Builds the base model at full size, then cuts each layer to the config's kept heads / FFN width."""

    _auto_class = "AutoModel"  # save_pretrained copies this code into the directory and sets auto_map

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        group = config.query_heads_per_kv_head
        for layer, kept, width in zip(self.layers, config.kept_heads, config.intermediate_sizes):
            cut_layer(layer, config.base_model_type, kept, width, group)


class SparseCSEModernBertModel(ShrunkModernLayersMixin, ModernBertModel):
    config_class = SparseCSEModernBertConfig


class SparseCSEQwen3Model(ShrunkModernLayersMixin, Qwen3Model):
    config_class = SparseCSEQwen3Config


class SparseCSEGemma3TextModel(ShrunkModernLayersMixin, Gemma3TextModel):
    config_class = SparseCSEGemma3TextConfig


MODERN_SHRUNK_MODELS = {
    cls.config_class.base_model_type: cls
    for cls in (SparseCSEModernBertModel, SparseCSEQwen3Model, SparseCSEGemma3TextModel)
}
