"""The frozen config each stage takes: built once (by the CLI from its options, or from an API call's
keywords) and recorded in manifests as it was used.

A stage function takes its config and, for the scripts written before configs existed, the config's fields
as keywords (``evaluate(model, tasks="sts")`` is ``evaluate(model, config=EvaluationConfig(tasks="sts"))``)::

    config = configure(EvaluationConfig, None, {"tasks": "sts"}, "evaluate")
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
    return tuple(f.name for f in dataclasses.fields(cls))


def configure(cls: type[C], config: C | None, options: dict[str, Any], caller: str) -> C:
    """``config`` (default: ``cls()``) with the fields named in ``options`` replaced; a name that is not a
    field of ``cls`` is refused as Python refuses an unknown keyword."""
    if config is not None and not isinstance(config, cls):
        raise TypeError(f"{caller}() takes a {cls.__name__} as its config, not a {type(config).__name__}")
    unknown = sorted(set(options) - set(field_names(cls)))
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
    return dataclasses.replace(config if config is not None else cls(), **options)


def configure_all(*pairs: tuple[type, Any], options: dict[str, Any], caller: str) -> list:
    """One config per ``(cls, config)`` pair, each with the ``options`` that name its fields (a name that
    several configs have, e.g. ``seed``, sets it in each); a name no config has is refused."""
    known = {name for cls, _ in pairs for name in field_names(cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
    return [configure(cls, config, {k: v for k, v in options.items() if k in field_names(cls)}, caller)
            for cls, config in pairs]


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
        raise TypeError(f"{argument} must be a {cls.__name__}, not a {type(config).__name__}")
    return config


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
