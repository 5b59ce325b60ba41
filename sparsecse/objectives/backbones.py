"""Which published backbone a model is (BERT or RoBERTa, base or large, shrunk or not), and an objective's
parameters for that backbone.

A shrunk model keeps its source's backbone: the family is read from the base model type (``sparsecse-roberta``
is RoBERTa) and the size from the hidden size and depth, which shrinking keeps. An objective may set
per-backbone parameters in its ``backbone_defaults`` (e.g. DiffCSE's masking ratio for RoBERTa-base); the
training hyperparameters per backbone are :mod:`sparsecse.training.hyperparameters`'.
"""

from __future__ import annotations

from typing import Any

from sparsecse.modeling.adapters import base_model_type

_ROBERTA_FAMILY = ("roberta", "xlm-roberta", "camembert")


def backbone_of(config) -> str | None:
    """The published backbone a model config is.

    Args:
        config: a transformers model config (of a shrunk model or not), or None.

    Returns:
        ``"bert-base"``, ``"bert-large"``, ``"roberta-base"`` or ``"roberta-large"``; None for any other
        family or shape (a 6-layer 768-wide model is not BERT-base).

    >>> from transformers import BertConfig
    >>> backbone_of(BertConfig(hidden_size=1024, num_hidden_layers=24))
    'bert-large'
    >>> backbone_of(BertConfig(hidden_size=768, num_hidden_layers=6)) is None
    True
    """
    model_type = base_model_type(config) if config is not None else ""
    family = "roberta" if model_type in _ROBERTA_FAMILY else "bert" if model_type == "bert" else None
    shape = (getattr(config, "hidden_size", None), getattr(config, "num_hidden_layers", None))
    # base = 12 layers x 768, large = 24 x 1024
    size = {(768, 12): "base", (1024, 24): "large"}.get(shape)
    return f"{family}-{size}" if family and size else None


def with_backbone_defaults(objective_cls, config, params: dict[str, Any]) -> dict[str, Any]:
    """An objective's parameters with its defaults for this backbone filled in.

    Args:
        objective_cls: the objective class; its ``backbone_defaults`` maps a backbone (:func:`backbone_of`)
            to parameter defaults.
        config: the model config the objective trains.
        params: the parameters given; they win over the backbone's defaults.

    Returns:
        The backbone's defaults updated with ``params`` (a new dict).
    """
    per_backbone = (getattr(objective_cls, "backbone_defaults", None) or {}).get(backbone_of(config), {})
    return {**per_backbone, **params}
