"""The frozen config each stage takes: built once (by the CLI from its options, or by the API's caller) and
recorded in manifests as it was used. A stage takes its config whole, never its fields as loose keywords
(``evaluate(model, config=EvaluationConfig(tasks="sts"))``)::

    config = stage_config(EvaluationConfig, None, "evaluate()'s config")  # None: every default
    record(config)  # {"tasks": "sts", "data_dir": None, ...}, JSON-ready
"""

from __future__ import annotations

import dataclasses
import os
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

C = TypeVar("C")


def field_names(cls) -> tuple[str, ...]:
    """The names of a dataclass's fields."""
    return tuple(f.name for f in dataclasses.fields(cls))


def stage_config(cls: type[C], config: C | None, argument: str) -> C:
    """The config a stage runs with.

    Args:
        cls: the stage's config class.
        config: the caller's config (None: ``cls()``, every default).
        argument: the parameter it came in, for the error.

    Returns:
        ``config``, or ``cls()``.

    Raises:
        TypeError: ``config`` is not a ``cls``.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Demo:
    ...     size: int = 3
    >>> stage_config(Demo, None, "config")
    Demo(size=3)
    >>> stage_config(Demo, "big", "config")
    Traceback (most recent call last):
    TypeError: config must be a Demo, not a str
    """
    if config is None:
        return cls()
    if not isinstance(config, cls):
        raise TypeError(f"{argument} must be {_a(cls.__name__)}, not {_a(type(config).__name__)}")
    return config


def _a(name: str) -> str:
    return f"{'an' if name[0] in 'AEIOU' else 'a'} {name}"


def record(config) -> dict[str, Any]:
    """A config as JSON-ready values (``dataclasses.asdict``; paths and enums as strings, callables by name)."""
    return {k: _plain(v) for k, v in dataclasses.asdict(config).items()}


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (os.PathLike, Path)):
        return os.fspath(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if callable(value):
        return getattr(value, "__qualname__", type(value).__name__)
    return repr(value)
