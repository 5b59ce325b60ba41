"""Training hyperparameters: SimCSE's published unsupervised settings per backbone, then overrides.

Gao et al. (2021), Table D.1 / run_unsup_example.sh: batch 64 and lr 3e-5 for BERT-base, 64 / 1e-5
for BERT-large, 512 / 1e-5 for RoBERTa-base, 512 / 3e-5 for RoBERTa-large; max length 32, one epoch
and temperature 0.05 for all. Any other backbone (MiniLM, DistilBERT, ELECTRA, ...) falls back to
the BERT-base settings. A shrunk model keeps its source's settings: the backbone is
:func:`~sparsecse.objectives.backbones.backbone_of` (base model type, hidden size and depth).
An objective may shift the defaults with its ``training_defaults`` and, per backbone, its
``backbone_training_defaults`` (e.g. DiffCSE's RoBERTa-base settings); explicit arguments win over all.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sparsecse.errors import SparseCSEError
from sparsecse.objectives.backbones import backbone_of


@dataclass(frozen=True)
class PublishedHyperparameters:
    """One backbone's published SimCSE settings; ``name`` is recorded as the run's ``recipe``."""

    name: str
    batch_size: int
    lr: float
    max_length: int = 32
    epochs: int = 1


SIMCSE_HYPERPARAMETERS = {
    ("bert", 768): PublishedHyperparameters("simcse-bert-base", 64, 3e-5),
    ("bert", 1024): PublishedHyperparameters("simcse-bert-large", 64, 1e-5),
    ("roberta", 768): PublishedHyperparameters("simcse-roberta-base", 512, 1e-5),
    ("roberta", 1024): PublishedHyperparameters("simcse-roberta-large", 512, 3e-5),
}
FALLBACK = SIMCSE_HYPERPARAMETERS[("bert", 768)]


def published_hyperparameters(config) -> PublishedHyperparameters:
    """SimCSE's published settings for a model.

    Args:
        config: the model's transformers config (shrunk or not).

    Returns:
        The settings of its backbone (:func:`~sparsecse.objectives.backbones.backbone_of`), else BERT-base's.

    >>> from transformers import BertConfig
    >>> published_hyperparameters(BertConfig(hidden_size=1024, num_hidden_layers=24)).name
    'simcse-bert-large'
    """
    backbone = backbone_of(config)
    if backbone is None:
        return FALLBACK
    family, size = backbone.split("-")
    return SIMCSE_HYPERPARAMETERS[(family, 768 if size == "base" else 1024)]


def resolve_hyperparameters(config, objective_cls=None, **explicit: Any) -> dict[str, Any]:
    """The batch size, learning rate, maximum length and epochs a run trains with.

    Args:
        config: the model's transformers config.
        objective_cls: the objective class, whose ``training_defaults`` (and, per backbone,
            ``backbone_training_defaults``) shift the published settings; None: SimCSE's.
        **explicit: ``batch_size``, ``lr``, ``max_length``, ``epochs`` given by the user (None: not given);
            they win over everything.

    Returns:
        ``{"batch_size", "lr", "max_length", "epochs", "recipe"}``: ``recipe`` names the published settings
        started from.

    Raises:
        SparseCSEError: an objective default that is none of those four, or a value out of range.
    """
    published = published_hyperparameters(config)
    resolved: dict[str, Any] = {k: v for k, v in asdict(published).items() if k != "name"}
    shifted = {**(getattr(objective_cls, "training_defaults", None) or {}),
               **(getattr(objective_cls, "backbone_training_defaults", None) or {}).get(backbone_of(config), {})}
    unknown = sorted(set(shifted) - set(resolved))
    if unknown:
        raise SparseCSEError(f"Objective {objective_cls.name!r} sets unknown training defaults {', '.join(unknown)}; "
                             f"allowed: {', '.join(sorted(resolved))}.")
    resolved.update(shifted)
    resolved.update({k: v for k, v in explicit.items() if v is not None})
    for key in ("batch_size", "max_length", "epochs"):
        if int(resolved[key]) != resolved[key] or resolved[key] < 1:
            raise SparseCSEError(f"--{key.replace('_', '-')} must be a positive integer, not {resolved[key]!r}.")
        resolved[key] = int(resolved[key])
    if not float(resolved["lr"]) > 0:
        raise SparseCSEError(f"--lr must be positive, not {resolved['lr']!r}.")
    resolved["lr"] = float(resolved["lr"])
    resolved["recipe"] = published.name
    return resolved
