"""Where each architecture keeps its attention heads and FFN neurons: one small adapter per model type.

The gates (:mod:`sparsecse.compress.gates`), the scoring, reconstruction, shrinking and FLOPs counts all
reach a layer's projections through :func:`layer_parts`; :func:`get_adapter` also tells whether an
architecture is supported at all (checked before weights load).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from sparsecse.errors import SparseCSEError


@dataclass
class LayerParts:
    """The modules of one transformer layer that head and neuron pruning touch."""

    query: nn.Linear
    key: nn.Linear
    value: nn.Linear
    attn_out: nn.Linear  # input: per-head context, heads contiguous
    ffn_in: nn.Linear
    ffn_out: nn.Linear  # input: intermediate activations
    head_dim: int
    attention: nn.Module  # the self-attention module (holds the head count)
    # Today's encoders (sparsecse.modeling.adapters_modern): ``query is key is value`` for a fused Wqkv;
    # ``kv_heads`` key/value heads each serve a group of query heads (None: one per query head);
    # ``ffn_gate`` is the gate half of a GeGLU/SwiGLU FFN (the same Linear as ffn_in where fused).
    kv_heads: int | None = None
    ffn_gate: nn.Linear | None = None

    @property
    def num_heads(self) -> int:
        # the attention output projection reads heads * head_dim features in every architecture
        # (query may be a fused q/k/v projection); equal to query.out_features // head_dim for BERT-like ones
        return self.attn_out.in_features // self.head_dim

    @property
    def ffn_size(self) -> int:
        return self.ffn_out.in_features

    @property
    def num_kv_heads(self) -> int:
        return self.num_heads if self.kv_heads is None else self.kv_heads


@dataclass(frozen=True)
class ArchitectureAdapter:
    name: str
    model_types: tuple[str, ...]
    layers: Callable[[nn.Module], list[LayerParts]]
    head_count_attr: str  # attribute on the attention module that stores its head count
    # the transformer layers as modules (parameter counts); None: ``model.encoder.layer``
    layer_modules: Callable[[nn.Module], list[nn.Module]] | None = None
    grouped_kv: bool = False  # key/value heads may serve several query heads (num_key_value_heads)
    gated_ffn: bool = False  # GeGLU / SwiGLU: each neuron is a gate row, a value row and an output column


def _backbone(model: nn.Module) -> nn.Module:
    """The bare encoder inside a task model (BertForMaskedLM.bert, ...), or the model itself."""
    base = getattr(model, "base_model", model)
    return base if isinstance(base, nn.Module) else model


def _bert_layers(model: nn.Module) -> list[LayerParts]:
    parts = []
    for layer in _backbone(model).encoder.layer:
        att = layer.attention.self
        parts.append(LayerParts(att.query, att.key, att.value, layer.attention.output.dense,
                                layer.intermediate.dense, layer.output.dense,
                                att.attention_head_size, att))
    return parts


def _distilbert_layers(model: nn.Module) -> list[LayerParts]:
    parts = []
    for layer in _backbone(model).transformer.layer:
        att = layer.attention
        parts.append(LayerParts(att.q_lin, att.k_lin, att.v_lin, att.out_lin, layer.ffn.lin1, layer.ffn.lin2,
                                att.attention_head_size, att))
    return parts


def _mpnet_layers(model: nn.Module) -> list[LayerParts]:
    # MPNet keeps q, k, v and the output projection o in one module; the relative position bias
    # (one slice per head) is computed once in the encoder and only shifts that head's attention
    # scores, so gating the head's context (the input of o) removes the head with its bias slice.
    parts = []
    for layer in _backbone(model).encoder.layer:
        att = layer.attention.attn
        parts.append(LayerParts(att.q, att.k, att.v, att.o, layer.intermediate.dense, layer.output.dense,
                                att.attention_head_size, att))
    return parts


# Shrunk models (sparsecse.compress.shrinking) keep their base's module paths; their model_types are "sparsecse-<base>".
SHRUNK_MODEL_TYPES = ("sparsecse-bert", "sparsecse-roberta", "sparsecse-xlm-roberta", "sparsecse-camembert",
                      "sparsecse-electra")
SHRUNK_MPNET_TYPES = ("sparsecse-mpnet",)  # the shrunk MPNet keeps layer.attention.attn.{q,k,v,o}

ADAPTERS = (
    ArchitectureAdapter("bert-like", ("bert", "roberta", "xlm-roberta", "camembert", "electra") + SHRUNK_MODEL_TYPES,
                        _bert_layers, "num_attention_heads"),
    ArchitectureAdapter("distilbert", ("distilbert",), _distilbert_layers, "n_heads"),
    ArchitectureAdapter("mpnet", ("mpnet",) + SHRUNK_MPNET_TYPES, _mpnet_layers, "num_attention_heads"),
)


def supported_model_types() -> list[str]:
    return [t for a in ADAPTERS for t in a.model_types]


def get_adapter(model_or_config) -> ArchitectureAdapter:
    config = getattr(model_or_config, "config", model_or_config)
    model_type = getattr(config, "model_type", None)
    for adapter in ADAPTERS:
        if model_type in adapter.model_types:
            return adapter
    raise SparseCSEError(
        f"Unsupported architecture {model_type!r}; sparsecse supports {', '.join(supported_model_types())}."
    )


def layer_parts(model: nn.Module) -> list[LayerParts]:
    return get_adapter(model).layers(model)


def layer_modules(model: nn.Module) -> list[nn.Module]:
    """The transformer layers of ``model`` as modules (what their parameters are counted over)."""
    adapter = get_adapter(model)
    return list(adapter.layer_modules(model)) if adapter.layer_modules else list(_backbone(model).encoder.layer)


def model_shape(model: nn.Module) -> tuple[list[int], list[int]]:
    """(heads per layer, FFN neurons per layer)."""
    parts = layer_parts(model)
    return [p.num_heads for p in parts], [p.ffn_size for p in parts]


def uniform_shape(model: nn.Module) -> tuple[int, int, int]:
    """(layers, heads, FFN size) of a model whose layers all have the same shape."""
    heads, neurons = model_shape(model)
    if len(set(heads)) != 1 or len(set(neurons)) != 1:
        raise SparseCSEError(f"This model has already been shrunk (heads per layer {heads}, FFN neurons {neurons}); "
                             "gates, scoring and pruning need layers of one shape: prune the dense model it came "
                             "from to the smaller budget instead.")
    return len(heads), heads[0], neurons[0]


# ModernBERT, Qwen3, Gemma-3 text: their adapters build on LayerParts and ArchitectureAdapter above
from sparsecse.modeling.adapters_modern import MODERN_ADAPTERS  # noqa: E402

ADAPTERS = ADAPTERS + MODERN_ADAPTERS
