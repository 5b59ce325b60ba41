"""Training hyperparameters: SimCSE's published unsupervised recipe per backbone, then overrides.

Gao et al. (2021), Table D.1 / run_unsup_example.sh: batch 64 and lr 3e-5 for BERT-base, 64 / 1e-5
for BERT-large, 512 / 1e-5 for RoBERTa-base, 512 / 3e-5 for RoBERTa-large; max length 32, one epoch
and temperature 0.05 for all. Any other backbone (MiniLM, DistilBERT, ELECTRA, ...) falls back to
the BERT-base recipe. A shrunk model keeps its source's recipe: the backbone is read from the base
model type (``sparsecse-roberta`` is RoBERTa) and the hidden size and depth, which shrinking keeps.
An objective may shift the defaults with its ``training_defaults`` and, per backbone, its
``backbone_training_defaults`` (e.g. DiffCSE's RoBERTa-base settings); explicit arguments win over all.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sparsecse.errors import SparseCSEError
from sparsecse.shrinking.surgery import base_model_type

_ROBERTA_FAMILY = ("roberta", "xlm-roberta", "camembert")


@dataclass(frozen=True)
class Recipe:
    name: str
    batch_size: int
    lr: float
    max_length: int = 32
    epochs: int = 1


RECIPES = {
    ("bert", 768): Recipe("simcse-bert-base", 64, 3e-5),
    ("bert", 1024): Recipe("simcse-bert-large", 64, 1e-5),
    ("roberta", 768): Recipe("simcse-roberta-base", 512, 1e-5),
    ("roberta", 1024): Recipe("simcse-roberta-large", 512, 3e-5),
}
FALLBACK = RECIPES[("bert", 768)]


def backbone_of(config) -> str | None:
    """``bert-base``, ``bert-large``, ``roberta-base`` or ``roberta-large`` (shrunk or not), else None."""

    model_type = base_model_type(config) if config is not None else ""
    family = "roberta" if model_type in _ROBERTA_FAMILY else "bert" if model_type == "bert" else None
    shape = (getattr(config, "hidden_size", None), getattr(config, "num_hidden_layers", None))
    # base = 12 layers x 768, large = 24 x 1024; a 6-layer 768 model is not BERT-base
    size = {(768, 12): "base", (1024, 24): "large"}.get(shape)
    return f"{family}-{size}" if family and size else None


def recipe_for(config) -> Recipe:
    """SimCSE's recipe for this model config (by family and hidden size), else BERT-base's."""
    backbone = backbone_of(config)
    if backbone is None:
        return FALLBACK
    family, size = backbone.split("-")
    return RECIPES[(family, 768 if size == "base" else 1024)]


def with_backbone_defaults(objective_cls, config, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with the objective's ``backbone_defaults`` for this backbone filled in where not given."""
    per_backbone = (getattr(objective_cls, "backbone_defaults", None) or {}).get(backbone_of(config), {})
    return {**per_backbone, **params}


def resolve_hyperparameters(config, objective_cls=None, **explicit: Any) -> dict[str, Any]:
    """batch_size, lr, max_length, epochs: explicit value, else objective default, else the recipe."""
    recipe = recipe_for(config)
    resolved: dict[str, Any] = {k: v for k, v in asdict(recipe).items() if k != "name"}
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
    resolved["recipe"] = recipe.name
    return resolved
