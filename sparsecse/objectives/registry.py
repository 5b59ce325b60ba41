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
    """Register an Objective subclass in this process (usable as a class decorator).

    Args:
        cls: the objective class.
        name: the name it is found by (default: ``cls.name``); it replaces a built-in of that name.

    Returns:
        ``cls`` itself.
    """
    _registered[name or cls.name] = cls
    return cls


def _load_builtin(name: str, target: str) -> type[Objective]:
    """The built-in objective ``name`` from ``module:Class``; one that does not import is a broken
    installation, said in one sentence with the import's own error."""
    module, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise SparseCSEError(f"The built-in objective {name!r} ({target}) failed to import: "
                             f"{type(exc).__name__}: {exc}.") from exc


def available_objectives() -> dict[str, type[Objective]]:
    """Every objective by name.

    Returns:
        ``{name: class}``: the built-ins, then the entry points of group ``sparsecse.objectives`` (a plugin that
        fails to load is left out, so a broken third-party package cannot break the built-ins), then those
        registered in this process, each later one replacing an earlier one of the same name.

    Raises:
        SparseCSEError: a built-in objective fails to import (it names the objective and the import error).
    """
    found: dict[str, type[Objective]] = {name: _load_builtin(name, target) for name, target in BUILTIN.items()}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            found[ep.name] = ep.load()
        except Exception:  # a broken third-party plugin must not break the built-ins
            continue
    found.update(_registered)
    return found


def get_objective(name: str) -> type[Objective]:
    """The objective class called ``name``.

    Args:
        name: a built-in (``simcse``, ``diffcse``, ``distill``, ...), entry-point or registered name.

    Returns:
        The :class:`~sparsecse.objectives.base.Objective` subclass.

    Raises:
        SparseCSEError: an unknown name (the known ones listed), or a built-in that fails to import.

    >>> get_objective("simcse").__name__
    'SimCSE'
    """
    objectives = available_objectives()
    if name not in objectives:
        raise SparseCSEError(f"Unknown objective {name!r}; known objectives: {', '.join(sorted(objectives))}.")
    return objectives[name]


def build_objective(name: str, encoder, **params: Any) -> Objective:
    """The objective ``name`` built on ``encoder``.

    Args:
        name: as in :func:`get_objective`.
        encoder: the :class:`~sparsecse.modeling.encoder.SentenceEncoder` it trains.
        **params: its parameters (checked against the class's ``defaults``).

    Returns:
        The objective instance.
    """
    return get_objective(name)(encoder, **params)


def parse_objective_args(text: str | None) -> dict[str, Any]:
    """The parameters of ``--objective-args``.

    Args:
        text: ``key=value`` items separated by commas; values read as bool, None, int, float, else text.

    Returns:
        ``{key: value}``.

    Raises:
        SparseCSEError: an item that is not ``key=value``, or a key given twice.

    >>> parse_objective_args("a=1,b=0.5,c=true,d=name")
    {'a': 1, 'b': 0.5, 'c': True, 'd': 'name'}
    """
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
