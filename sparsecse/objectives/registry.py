"""Objectives by name: the built-ins plus anything registered under the entry-point group
``sparsecse.objectives`` (``name = package.module:ObjectiveClass``)."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from sparsecse.errors import SparseCSEError
from sparsecse.objectives.base import Objective

ENTRY_POINT_GROUP = "sparsecse.objectives"
BUILTIN = {
    "simcse": "sparsecse.objectives.simcse:SimCSE",
    "diffcse": "sparsecse.objectives.diffcse:DiffCSE",
    "infocse": "sparsecse.objectives.infocse:InfoCSE",
    "noise_negatives": "sparsecse.objectives.noise_negatives:NoiseNegatives",
    "input_noise": "sparsecse.objectives.input_noise:InputNoise",
    "weight_perturbation": "sparsecse.objectives.weight_perturbation:WeightPerturbation",
    "distill": "sparsecse.objectives.distill:Distill",
}
_registered: dict[str, type[Objective]] = {}


def register_objective(cls: type[Objective], name: str | None = None) -> type[Objective]:
    """Register an Objective subclass in this process (usable as a class decorator)."""
    _registered[name or cls.name] = cls
    return cls


def _load(target: str) -> type[Objective] | None:
    module, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return None


def available_objectives() -> dict[str, type[Objective]]:
    found: dict[str, type[Objective]] = {}
    for name, target in BUILTIN.items():
        cls = _load(target)
        if cls is not None:
            found[name] = cls
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            found[ep.name] = ep.load()
        except Exception:  # a broken third-party plugin must not break the built-ins
            continue
    found.update(_registered)
    return found


def get_objective(name: str) -> type[Objective]:
    objectives = available_objectives()
    if name not in objectives:
        raise SparseCSEError(f"Unknown objective {name!r}; known objectives: {', '.join(sorted(objectives))}.")
    return objectives[name]


def build_objective(name: str, encoder, **params: Any) -> Objective:
    return get_objective(name)(encoder, **params)


def parse_objective_args(text: str | None) -> dict[str, Any]:
    """'a=1,b=0.5,c=true,d=name' -> {'a': 1, 'b': 0.5, 'c': True, 'd': 'name'}."""
    params: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in (text or "").split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SparseCSEError(f"Objective argument {item!r} is not of the form key=value.")
        if key.strip() in params:
            raise SparseCSEError(f"Objective argument {key.strip()!r} is given twice; give each key once.")
        params[key.strip()] = _parse_value(value.strip())
    return params


def _parse_value(value: str) -> Any:
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value
