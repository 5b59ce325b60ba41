"""Configuration of a shrunk ModernBERT, Qwen3 or Gemma-3 text encoder: the base config plus each layer's
kept query heads and FFN width.

Copied into every such shrunk model directory (``auto_map`` in config.json points at it), so it imports
only transformers, huggingface_hub and its sibling :mod:`sparsecse.modeling.configuration_sparsecse` (copied alongside).
``num_attention_heads``, ``num_key_value_heads`` and ``intermediate_size`` keep the source model's
values (they fix the head size and the query-head-to-key/value-head map); ``kept_heads[i]`` lists the
source query heads layer i kept; a key/value head stays exactly when one of its query heads does.
"""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers import Gemma3TextConfig, ModernBertConfig, Qwen3Config

from .configuration_sparsecse import ShrunkConfigMixin


@strict
class SparseCSEModernBertConfig(ShrunkConfigMixin, ModernBertConfig):
    """The config of a shrunk ModernBERT model (``sparsecse-modernbert``)."""
    model_type = "sparsecse-modernbert"
    base_model_type = "modernbert"
    kept_heads: list[list[int]] | None = None
    intermediate_sizes: list[int] | None = None
    kept_layers: list[int] | None = None
    source_layers: int | None = None
    unit_layout: dict | None = None
    has_pooler: bool = False


@strict
class SparseCSEQwen3Config(ShrunkConfigMixin, Qwen3Config):
    """The config of a shrunk Qwen3 model (``sparsecse-qwen3``)."""
    model_type = "sparsecse-qwen3"
    base_model_type = "qwen3"
    kept_heads: list[list[int]] | None = None
    intermediate_sizes: list[int] | None = None
    kept_layers: list[int] | None = None
    source_layers: int | None = None
    unit_layout: dict | None = None
    has_pooler: bool = False


@strict
class SparseCSEGemma3TextConfig(ShrunkConfigMixin, Gemma3TextConfig):
    """The config of a shrunk Gemma-3 text model (``sparsecse-gemma3_text``)."""
    model_type = "sparsecse-gemma3_text"
    base_model_type = "gemma3_text"
    kept_heads: list[list[int]] | None = None
    intermediate_sizes: list[int] | None = None
    kept_layers: list[int] | None = None
    source_layers: int | None = None
    unit_layout: dict | None = None
    has_pooler: bool = False


MODERN_SHRUNK_CONFIGS = {
    cls.base_model_type: cls for cls in (SparseCSEModernBertConfig, SparseCSEQwen3Config, SparseCSEGemma3TextConfig)
}

for _cls in MODERN_SHRUNK_CONFIGS.values():
    _cls.register_for_auto_class("AutoConfig")
