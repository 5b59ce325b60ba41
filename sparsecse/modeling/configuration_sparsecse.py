"""Configuration of a shrunk encoder: the base architecture plus each layer's kept heads and FFN width.

This file is copied into every shrunk model directory (``auto_map`` in config.json points at it), so
it imports only transformers and huggingface_hub, never sparsecse. Each class subclasses the base
architecture's own config, so the base model code reads every usual field unchanged;
``num_attention_heads`` and ``intermediate_size`` keep the source model's values (they fix the head
size), while ``kept_heads`` and ``intermediate_sizes`` give the real per-layer shapes, ``num_hidden_layers``
the layers kept (``kept_layers``: their indices among the source model's ``source_layers``; a model whose
whole layers were removed has fewer, and per-layer fields such as ``layer_types`` list the kept ones), and
``unit_layout`` (written by sparsecse's architecture adapter) says where in a layer those heads and neurons
live, so one modeling file (:mod:`sparsecse.modeling.modeling_sparsecse`) builds every family's layers at those sizes.
"""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers import BertConfig, CamembertConfig, ElectraConfig, MPNetConfig, RobertaConfig, XLMRobertaConfig


class ShrunkConfigMixin:
    """Per-layer shapes: ``kept_heads[i]`` lists the source-model head indices layer i kept (their
    number is the layer's head count) and ``intermediate_sizes[i]`` is its FFN width; ``kept_layers[i]`` is
    the index of layer i in the source model, which had ``source_layers`` layers (both default to every
    layer kept, as in directories written before whole layers could be removed); ``unit_layout`` (None
    in directories written before it was recorded) holds the module paths of the family's units."""

    base_model_type: str

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        layers = self.num_hidden_layers
        if self.kept_heads is None:
            self.kept_heads = [list(range(self.num_attention_heads)) for _ in range(layers)]
        if self.intermediate_sizes is None:
            self.intermediate_sizes = [self.intermediate_size] * layers
        self.kept_heads = [[int(h) for h in row] for row in self.kept_heads]
        self.intermediate_sizes = [int(n) for n in self.intermediate_sizes]
        self.kept_layers = list(range(layers)) if self.kept_layers is None else [int(i) for i in self.kept_layers]
        self.source_layers = layers if self.source_layers is None else int(self.source_layers)
        if len(self.kept_heads) != layers or len(self.intermediate_sizes) != layers or len(self.kept_layers) != layers:
            raise ValueError(f"kept_heads, intermediate_sizes and kept_layers need one entry per layer ({layers}).")
        if self.kept_layers != sorted(set(self.kept_layers)) or not all(0 <= i < self.source_layers
                                                                        for i in self.kept_layers):
            raise ValueError(f"kept_layers must be increasing indices below source_layers ({self.source_layers}).")

    @property
    def heads_per_layer(self) -> list[int]:
        """How many heads each layer keeps."""
        return [len(row) for row in self.kept_heads]

    @property
    def query_heads_per_kv_head(self) -> int:
        """Query heads per key/value head (1 without grouped-query attention)."""
        kv = getattr(self, "num_key_value_heads", None) or self.num_attention_heads
        return self.num_attention_heads // kv

    @property
    def kept_kv_heads(self) -> list[list[int]]:
        """The source key/value heads each layer keeps (those serving at least one kept query head)."""
        group = self.query_heads_per_kv_head
        return [sorted({h // group for h in row}) for row in self.kept_heads]


@strict
class SparseCSEBertConfig(ShrunkConfigMixin, BertConfig):
    """The config of a shrunk BERT model (``sparsecse-bert``)."""
    model_type = "sparsecse-bert"
    base_model_type = "bert"
    kept_heads: list[list[int]] | None = None
    intermediate_sizes: list[int] | None = None
    kept_layers: list[int] | None = None
    source_layers: int | None = None
    unit_layout: dict | None = None
    has_pooler: bool = True


@strict
class SparseCSERobertaConfig(ShrunkConfigMixin, RobertaConfig):
    """The config of a shrunk RoBERTa model (``sparsecse-roberta``)."""
    model_type = "sparsecse-roberta"
    base_model_type = "roberta"
    kept_heads: list[list[int]] | None = None
    intermediate_sizes: list[int] | None = None
    kept_layers: list[int] | None = None
    source_layers: int | None = None
    unit_layout: dict | None = None
    has_pooler: bool = True


@strict
class SparseCSEXLMRobertaConfig(ShrunkConfigMixin, XLMRobertaConfig):
    """The config of a shrunk XLM-RoBERTa model (``sparsecse-xlm-roberta``)."""
    model_type = "sparsecse-xlm-roberta"
    base_model_type = "xlm-roberta"
    kept_heads: list[list[int]] | None = None
    intermediate_sizes: list[int] | None = None
    kept_layers: list[int] | None = None
    source_layers: int | None = None
    unit_layout: dict | None = None
    has_pooler: bool = True


@strict
class SparseCSECamembertConfig(ShrunkConfigMixin, CamembertConfig):
    """The config of a shrunk CamemBERT model (``sparsecse-camembert``)."""
    model_type = "sparsecse-camembert"
    base_model_type = "camembert"
    kept_heads: list[list[int]] | None = None
    intermediate_sizes: list[int] | None = None
    kept_layers: list[int] | None = None
    source_layers: int | None = None
    unit_layout: dict | None = None
    has_pooler: bool = True


@strict
class SparseCSEElectraConfig(ShrunkConfigMixin, ElectraConfig):
    """The config of a shrunk ELECTRA model (``sparsecse-electra``)."""
    model_type = "sparsecse-electra"
    base_model_type = "electra"
    kept_heads: list[list[int]] | None = None
    intermediate_sizes: list[int] | None = None
    kept_layers: list[int] | None = None
    source_layers: int | None = None
    unit_layout: dict | None = None
    has_pooler: bool = False  # ElectraModel has no pooler


@strict
class SparseCSEMPNetConfig(ShrunkConfigMixin, MPNetConfig):
    """MPNet: ``kept_heads`` also picks each layer's columns of the shared relative position bias table."""

    model_type = "sparsecse-mpnet"
    base_model_type = "mpnet"
    kept_heads: list[list[int]] | None = None
    intermediate_sizes: list[int] | None = None
    kept_layers: list[int] | None = None
    source_layers: int | None = None
    unit_layout: dict | None = None
    has_pooler: bool = True


SHRUNK_CONFIGS = {
    cls.base_model_type: cls
    for cls in (SparseCSEBertConfig, SparseCSERobertaConfig, SparseCSEXLMRobertaConfig,
                SparseCSECamembertConfig, SparseCSEElectraConfig, SparseCSEMPNetConfig)
}

for _cls in SHRUNK_CONFIGS.values():
    _cls.register_for_auto_class("AutoConfig")
