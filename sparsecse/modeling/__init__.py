"""Modeling + configuration code that every shrunk model directory ships (copied in with ``auto_map``).

The two modules are self-contained (torch + transformers only) so a shrunk directory loads with
``trust_remote_code=True`` where sparsecse is not installed.
"""

from sparsecse.modeling import adapters_modern  # noqa: F401  (adds ModernBERT, Qwen3, Gemma-3 to the adapters)
from sparsecse.modeling.adapters import SHRUNK_MODEL_TYPES  # the BERT-like and MPNet shrunk types (gates)
from sparsecse.modeling.configuration_sparsecse import SHRUNK_CONFIGS as _BERT_LIKE_CONFIGS
from sparsecse.modeling.configuration_sparsecse import ShrunkConfigMixin
from sparsecse.modeling.configuration_sparsecse_modern import MODERN_SHRUNK_CONFIGS
from sparsecse.modeling.modeling_sparsecse import SHRUNK_MODELS as _BERT_LIKE_MODELS
from sparsecse.modeling.modeling_sparsecse import HeadlessSelfAttention, shrink_layer
from sparsecse.modeling.modeling_sparsecse_modern import MODERN_SHRUNK_MODELS

# every architecture that shrinks: BERT-like + MPNet (hand-written cut, modeling_sparsecse) and ModernBERT,
# Qwen3, Gemma-3 text (cut by torch-pruning, modeling_sparsecse_modern)
SHRUNK_CONFIGS = {**_BERT_LIKE_CONFIGS, **MODERN_SHRUNK_CONFIGS}
SHRUNK_MODELS = {**_BERT_LIKE_MODELS, **MODERN_SHRUNK_MODELS}


__all__ = ["MODERN_SHRUNK_CONFIGS", "SHRUNK_CONFIGS", "SHRUNK_MODELS", "SHRUNK_MODEL_TYPES", "HeadlessSelfAttention",
           "ShrunkConfigMixin", "shrink_layer"]


def register_auto_classes() -> None:
    """Make transformers' AutoConfig/AutoModel load shrunk directories with these installed classes,
    so no code from the directory runs (``trust_remote_code`` stays off)."""
    from transformers import AutoConfig, AutoModel

    for base, config_class in SHRUNK_CONFIGS.items():
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        AutoModel.register(config_class, SHRUNK_MODELS[base], exist_ok=True)


register_auto_classes()
