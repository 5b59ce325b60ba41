"""Where each architecture keeps its attention heads, key/value heads and FFN neurons: one adapter per family.

An :class:`ArchitectureAdapter` describes a family once, by a :class:`UnitLayout` (module paths inside a
layer), a :class:`FamilyCost` (what its units are made of: grouped key/value heads, gated FFN) and whether
a query may see no key (what a converted graph's attention must handle); everything else reads that
description:

- the gates (:mod:`sparsecse.scoring.gates`), scoring, reconstruction and FLOPs counts reach a layer's
  projections through :func:`layer_parts`; the FLOPs and parameter counts (:mod:`sparsecse.modeling.flops`)
  and the budgets (:mod:`sparsecse.pruning.budget`) cost its units by its :class:`FamilyCost`;
- the one shrinking routine (:mod:`sparsecse.shrinking.surgery`) computes from it the channels to remove
  and hands them to torch-pruning's channel pruners;
- the one modeling file (:mod:`sparsecse.modeling.modeling_sparsecse`) builds the layers of a shrunk
  model at their sizes from the same layout, which the shrunk config.json records.

:func:`get_adapter` also tells whether an architecture is supported at all (checked before weights
load). A new family is one :func:`register_adapter` call (see docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Mapping

from torch import nn

from sparsecse.errors import SparseCSEError
from sparsecse.modeling.modeling_sparsecse import (
    SparseCSEBertModel,
    SparseCSECamembertModel,
    SparseCSEElectraModel,
    SparseCSEMPNetModel,
    SparseCSERobertaModel,
    SparseCSEXLMRobertaModel,
    resolve,
)


@dataclass(frozen=True)
class UnitLayout:
    """Where one family keeps its units, as dotted module paths relative to one transformer layer.

    Args:
        layers: the list of transformer layers, relative to the bare encoder (``"encoder.layer"``).
        attention: the self-attention module (holds the head size and count).
        query: projections with ``head_dim`` output rows per query head (with ``fused_qkv``: one
            projection holding the q, k and v blocks, in that order).
        key_value: projections with ``head_dim`` output rows per key/value head (empty when fused).
        attn_out: the projection reading the per-head context (``head_dim`` input columns per query head).
        ffn_in: projections with one output row per FFN neuron: the value projection first, then the
            gate projection of a gated FFN.
        ffn_out: the projection reading the FFN's intermediate activations (one input column per neuron).
        head_dim: the attention module's attribute holding the head size.
        head_count: the attention module's attribute holding its query-head count.
        attention_form: how the attention runs with fewer heads or none: a key of
            :data:`sparsecse.modeling.modeling_sparsecse.ATTENTION_FORMS` (``head-count`` records the new
            count only, for an attention that handles any number of heads).
        fused_qkv: ``query`` is one projection with q, k and v blocks.
        ffn_halves: each ``ffn_in`` projection stacks this many halves (GeGLU's fused value and gate: 2).
        ffn_activation: the FFN's activation, relative to the layer (a zero neuron is inert only where it
            maps 0 to 0); None for a gated FFN, where act(gate) * 0 = 0 always.
    """

    layers: str
    attention: str
    query: tuple[str, ...]
    key_value: tuple[str, ...]
    attn_out: str
    ffn_in: tuple[str, ...]
    ffn_out: str
    head_dim: str = "attention_head_size"
    head_count: str = "num_attention_heads"
    attention_form: str = "head-count"
    fused_qkv: bool = False
    ffn_halves: int = 1
    ffn_activation: str | None = None

    def to_dict(self) -> dict:
        """The layout as JSON-ready data, as a shrunk config.json records it (``unit_layout``)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


@dataclass(frozen=True)
class FamilyCost:
    """What a family's heads and FFN neurons are made of, which its FLOPs and parameter counts follow
    (:mod:`sparsecse.modeling.flops` and :mod:`sparsecse.pruning.budget` read it; neither knows a family).

    Biases and norms are not stated here: a family's config may switch them (ModernBERT's
    ``attention_bias``/``norm_bias``, Qwen3's ``attention_bias``), so the counts read them off each model's
    modules (a projection's bias counts with its rows; norms and output biases are what no unit owns).

    Args:
        grouped_kv: key/value heads may serve several query heads (``num_key_value_heads``): a key/value head
            (its k and v rows) is a unit of its own, paid once while any query head of its group stays;
            without it each head holds its own key and value rows.
        gated_ffn: GeGLU / SwiGLU: a neuron spans three matrices (its gate row, value row and output
            column), not two (input row, output column).
    """

    grouped_kv: bool = False
    gated_ffn: bool = False

    @property
    def ffn_matrices(self) -> int:
        """How many matrices one FFN neuron has a row or column in (3 in a gated FFN, else 2)."""
        return 3 if self.gated_ffn else 2


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
    # ``query is key is value`` for a fused Wqkv; ``kv_heads`` key/value heads each serve a group of query
    # heads (None: one per query head); ``ffn_gate`` is the gate half of a GeGLU/SwiGLU FFN (the same
    # Linear as ffn_in where fused).
    kv_heads: int | None = None
    ffn_gate: nn.Linear | None = None

    @property
    def num_heads(self) -> int:
        # the attention output projection reads heads * head_dim features in every architecture
        """Its query heads (the attention output projection reads heads x head_dim features in every family)."""
        return self.attn_out.in_features // self.head_dim

    @property
    def ffn_size(self) -> int:
        """Its FFN neurons (the output projection's input features)."""
        return self.ffn_out.in_features

    @property
    def num_kv_heads(self) -> int:
        """Its key/value heads (one per query head without grouped key/value heads)."""
        return self.num_heads if self.kv_heads is None else self.kv_heads


@dataclass(frozen=True)
class ArchitectureAdapter:
    """One family of encoders.

    Args:
        name: what messages call the family.
        model_types: the ``model_type`` values of its dense models.
        layout: where its units live (:class:`UnitLayout`).
        shrunk_models: base model type -> the model class of a shrunk model of that type (a
            :class:`~sparsecse.modeling.modeling_sparsecse.ShrunkLayersMixin` subclass of the base model whose
            ``config_class`` has ``model_type`` ``sparsecse-<base>``); a family without one is gated,
            scored and pruned but not shrunk.
        cost: what its units are made of (:class:`FamilyCost`).
        query_may_see_no_key: a query position may see no key at all (a padding position left of a
            left-padded sentence, or one outside a local attention window), so its attention row is fully
            masked; a converter that turns such a row into NaN must trace the family's eager attention
            (:func:`sparsecse.serving.openvino_convert.convert` does).
    """

    name: str
    model_types: tuple[str, ...]
    layout: UnitLayout
    shrunk_models: Mapping[str, type] = field(default_factory=dict)
    cost: FamilyCost = FamilyCost()
    query_may_see_no_key: bool = False

    @property
    def all_model_types(self) -> tuple[str, ...]:
        """Its dense model types and those of its shrunk models."""
        return self.model_types + tuple(cls.config_class.model_type for cls in self.shrunk_models.values())

    def layer_modules(self, model: nn.Module) -> list[nn.Module]:
        """The transformer layers of ``model`` as modules."""
        return list(resolve(backbone(model), self.layout.layers))

    def parts(self, layer: nn.Module) -> LayerParts:
        """The projections of one ``layer`` of this family."""
        lay = self.layout
        attention = resolve(layer, lay.attention)
        head_dim = getattr(attention, lay.head_dim)
        query = resolve(layer, lay.query[0])
        key, value = (query, query) if lay.fused_qkv else (resolve(layer, p) for p in lay.key_value)
        ffn = [resolve(layer, p) for p in lay.ffn_in]
        gate = ffn[1] if len(ffn) > 1 else (ffn[0] if lay.ffn_halves == 2 else None)
        kv_heads = key.out_features // head_dim if self.cost.grouped_kv else None
        return LayerParts(query, key, value, resolve(layer, lay.attn_out), ffn[0], resolve(layer, lay.ffn_out),
                          head_dim, attention, kv_heads=kv_heads, ffn_gate=gate)


def backbone(model: nn.Module) -> nn.Module:
    """The bare encoder inside a task model (BertForMaskedLM.bert, ...), or the model itself."""
    base = getattr(model, "base_model", model)
    return base if isinstance(base, nn.Module) else model



BERT_LIKE_LAYOUT = UnitLayout(
    layers="encoder.layer", attention="attention.self",
    query=("attention.self.query",), key_value=("attention.self.key", "attention.self.value"),
    attn_out="attention.output.dense", ffn_in=("intermediate.dense",), ffn_out="output.dense",
    attention_form="self-attention", ffn_activation="intermediate.intermediate_act_fn")
# MPNet keeps q, k, v and o in one module; the relative position bias (one slice per head) is computed
# once in the encoder and only shifts that head's scores, so gating the head's context (the input of o)
# removes the head with its bias slice.
MPNET_LAYOUT = UnitLayout(
    layers="encoder.layer", attention="attention.attn",
    query=("attention.attn.q",), key_value=("attention.attn.k", "attention.attn.v"), attn_out="attention.attn.o",
    ffn_in=("intermediate.dense",), ffn_out="output.dense", attention_form="relative-bias",
    ffn_activation="intermediate.intermediate_act_fn")
DISTILBERT_LAYOUT = UnitLayout(
    layers="transformer.layer", attention="attention",
    query=("attention.q_lin",), key_value=("attention.k_lin", "attention.v_lin"), attn_out="attention.out_lin",
    ffn_in=("ffn.lin1",), ffn_out="ffn.lin2", head_count="n_heads", ffn_activation="ffn.activation")

_BERT_LIKE_MODELS = (SparseCSEBertModel, SparseCSERobertaModel, SparseCSEXLMRobertaModel, SparseCSECamembertModel,
                     SparseCSEElectraModel)

_ADAPTERS: list[ArchitectureAdapter] = []
SHRUNK_MODELS: dict[str, type] = {}  # base model type -> shrunk model class, over every registered adapter
SHRUNK_CONFIGS: dict[str, type] = {}  # base model type -> shrunk config class


def register_adapter(adapter: ArchitectureAdapter) -> ArchitectureAdapter:
    """Make sparsecse gate, score, prune and shrink ``adapter``'s family, and load its shrunk directories.

    Registers its shrunk classes with transformers' ``AutoConfig`` / ``AutoModel`` (so a shrunk directory
    loads with the installed code, no ``trust_remote_code``) and gives them the layout for configs that
    do not record one. Registering a family again replaces it.

    Args:
        adapter: the family's description.

    Returns:
        ``adapter``.
    """
    _ADAPTERS[:] = [a for a in _ADAPTERS if a.name != adapter.name] + [adapter]
    for base, model_class in adapter.shrunk_models.items():
        model_class.unit_layout = adapter.layout.to_dict()
        SHRUNK_MODELS[base], SHRUNK_CONFIGS[base] = model_class, model_class.config_class
    register_auto_classes(adapter)
    return adapter


def register_auto_classes(*families: ArchitectureAdapter) -> None:
    """Register the shrunk config and model classes of ``families`` (default: every registered adapter)
    with transformers' ``AutoConfig`` / ``AutoModel``; idempotent."""
    from transformers import AutoConfig, AutoModel

    for adapter in families or _ADAPTERS:
        for model_class in adapter.shrunk_models.values():
            AutoConfig.register(model_class.config_class.model_type, model_class.config_class, exist_ok=True)
            AutoModel.register(model_class.config_class, model_class, exist_ok=True)


register_adapter(ArchitectureAdapter("bert-like", tuple(m.config_class.base_model_type for m in _BERT_LIKE_MODELS),
                                     BERT_LIKE_LAYOUT, {m.config_class.base_model_type: m for m in _BERT_LIKE_MODELS}))
register_adapter(ArchitectureAdapter("distilbert", ("distilbert",), DISTILBERT_LAYOUT))
register_adapter(ArchitectureAdapter("mpnet", ("mpnet",), MPNET_LAYOUT, {"mpnet": SparseCSEMPNetModel}))
# Today's encoders register when sparsecse.modeling.adapters_modern is imported (the package's __init__
# does), so this module never imports the one that builds on it.


def adapters() -> tuple[ArchitectureAdapter, ...]:
    """Every registered adapter, in registration order."""
    return tuple(_ADAPTERS)


def supported_model_types() -> list[str]:
    """Every model type some adapter serves, dense and shrunk."""
    return [t for a in _ADAPTERS for t in a.all_model_types]


def get_adapter(model_or_config) -> ArchitectureAdapter:
    """The adapter of a model or config; refuses an unsupported architecture in one sentence."""
    config = getattr(model_or_config, "config", model_or_config)
    model_type = getattr(config, "model_type", None)
    for adapter in _ADAPTERS:
        if model_type in adapter.all_model_types:
            return adapter
    raise SparseCSEError(
        f"Unsupported architecture {model_type!r}; sparsecse supports {', '.join(supported_model_types())}."
    )


def base_model_type(config) -> str:
    """The architecture a (possibly already shrunk) model is built on: bert, roberta, ..."""
    return getattr(config, "base_model_type", None) or config.model_type


def layer_parts(model: nn.Module) -> list[LayerParts]:
    """The :class:`LayerParts` of every transformer layer of ``model``."""
    adapter = get_adapter(model)
    return [adapter.parts(layer) for layer in adapter.layer_modules(model)]


def layer_modules(model: nn.Module) -> list[nn.Module]:
    """The transformer layers of ``model`` as modules (what their parameters are counted over)."""
    return get_adapter(model).layer_modules(model)


def model_shape(model: nn.Module) -> tuple[list[int], list[int]]:
    """(heads per layer, FFN neurons per layer)."""
    parts = layer_parts(model)
    return [p.num_heads for p in parts], [p.ffn_size for p in parts]


def is_uniform(model: nn.Module) -> bool:
    """Whether every layer of ``model`` has the same head count and FFN width (gates, scoring and pruning take it as
    it is)."""
    heads, neurons = model_shape(model)
    return len(set(heads)) == 1 and len(set(neurons)) == 1


def uniform_shape(model: nn.Module) -> tuple[int, int, int]:
    """(layers, heads, FFN size) of a model whose layers all have the same shape."""
    heads, neurons = model_shape(model)
    if not is_uniform(model):
        raise SparseCSEError(f"This model has already been shrunk (heads per layer {heads}, FFN neurons {neurons}); "
                             "gates, scoring and pruning need layers of one shape: prune the dense model it came "
                             "from to the smaller budget instead.")
    return len(heads), heads[0], neurons[0]
