"""Adapters for today's encoders: ModernBERT, and the decoder embedders Qwen3 and Gemma-3 (text).

The same :class:`~sparsecse.modeling.adapters.LayerParts` as the BERT-era adapters, so gates, scoring,
pruning and the FLOPs counts reach them unchanged:

- the head gates ξ multiply the per-head context (input of ``o_proj`` / ModernBERT's ``attn.Wo``, one
  slice per **query** head);
- the neuron gates ν multiply the FFN's intermediate activation ``act(gate) * value`` (input of
  ``down_proj`` / ``mlp.Wo``): neuron i is the pair row i of the gate half and row i of the value half,
  plus column i of the output projection.

Grouped-query attention (Qwen3, Gemma-3): ``num_key_value_heads`` key/value heads each serve
``num_attention_heads / num_key_value_heads`` consecutive query heads. A query head may go alone; its
key/value head goes only with its whole group (:mod:`sparsecse.modeling.kv_groups`).
"""

from __future__ import annotations

from torch import nn

from sparsecse.modeling import adapters
from sparsecse.modeling.adapters import ArchitectureAdapter, LayerParts, _backbone


def _layers(model: nn.Module) -> nn.ModuleList:
    return _backbone(model).layers


def _modernbert_layers(model: nn.Module) -> list[LayerParts]:
    parts = []
    for layer in _layers(model):
        att, mlp = layer.attn, layer.mlp
        parts.append(LayerParts(att.Wqkv, att.Wqkv, att.Wqkv, att.Wo, mlp.Wi, mlp.Wo, att.head_dim, att,
                                kv_heads=None, ffn_gate=mlp.Wi))
    return parts


def _decoder_layers(model: nn.Module) -> list[LayerParts]:
    parts = []
    for layer in _layers(model):
        att, mlp = layer.self_attn, layer.mlp
        parts.append(LayerParts(att.q_proj, att.k_proj, att.v_proj, att.o_proj, mlp.up_proj, mlp.down_proj,
                                att.head_dim, att, kv_heads=att.k_proj.out_features // att.head_dim,
                                ffn_gate=mlp.gate_proj))
    return parts


MODERN_ADAPTERS = (
    ArchitectureAdapter("modernbert", ("modernbert", "sparsecse-modernbert"), _modernbert_layers, "num_heads",
                        layer_modules=_layers, gated_ffn=True),
    ArchitectureAdapter("grouped-query decoder", ("qwen3", "gemma3_text", "sparsecse-qwen3", "sparsecse-gemma3_text"),
                        _decoder_layers, "num_heads", layer_modules=_layers, grouped_kv=True, gated_ffn=True),
)
adapters.ADAPTERS = adapters.ADAPTERS + MODERN_ADAPTERS  # registered once, when this module is first imported
