"""Adapters for today's encoders: ModernBERT, and the decoder embedders Qwen3 and Gemma-3 (text).

The same :class:`~sparsecse.modeling.adapters.UnitLayout` as the BERT-era families, so gates, scoring,
pruning, shrinking and the FLOPs counts reach them unchanged:

- the head gates ξ multiply the per-head context (input of ``o_proj`` / ModernBERT's ``attn.Wo``, one
  slice per **query** head);
- the neuron gates ν multiply the FFN's intermediate activation ``act(gate) * value`` (input of
  ``down_proj`` / ``mlp.Wo``): neuron i is the pair row i of the gate half and row i of the value half,
  plus column i of the output projection (ModernBERT's ``Wi`` stacks both halves: ``ffn_halves=2``).

Grouped-query attention (Qwen3, Gemma-3): ``num_key_value_heads`` key/value heads each serve
``num_attention_heads / num_key_value_heads`` consecutive query heads. A query head may go alone; its
key/value head goes only with its whole group (:mod:`sparsecse.modeling.kv_groups`).

A query may see no key in all three (ModernBERT's local windows, the decoders' left padding):
``query_may_see_no_key`` makes the OpenVINO conversion trace their eager attention.
"""

from __future__ import annotations

from sparsecse.modeling.adapters import ArchitectureAdapter, FamilyCost, UnitLayout, register_adapter
from sparsecse.modeling.modeling_sparsecse_modern import (
    SparseCSEGemma3TextModel,
    SparseCSEModernBertModel,
    SparseCSEQwen3Model,
)

MODERNBERT = register_adapter(ArchitectureAdapter(
    "modernbert", ("modernbert",),
    UnitLayout(layers="layers", attention="attn", query=("attn.Wqkv",), key_value=(), attn_out="attn.Wo",
               ffn_in=("mlp.Wi",), ffn_out="mlp.Wo", head_dim="head_dim", head_count="num_heads",
               attention_form="fused-qkv", fused_qkv=True, ffn_halves=2),
    {"modernbert": SparseCSEModernBertModel}, cost=FamilyCost(gated_ffn=True), query_may_see_no_key=True))

GROUPED_QUERY_DECODERS = register_adapter(ArchitectureAdapter(
    "grouped-query decoder", ("qwen3", "gemma3_text"),
    UnitLayout(layers="layers", attention="self_attn", query=("self_attn.q_proj",),
               key_value=("self_attn.k_proj", "self_attn.v_proj"), attn_out="self_attn.o_proj",
               ffn_in=("mlp.up_proj", "mlp.gate_proj"), ffn_out="mlp.down_proj", head_dim="head_dim",
               head_count="num_heads", attention_form="grouped-query"),
    {"qwen3": SparseCSEQwen3Model, "gemma3_text": SparseCSEGemma3TextModel},
    cost=FamilyCost(grouped_kv=True, gated_ffn=True), query_may_see_no_key=True))
