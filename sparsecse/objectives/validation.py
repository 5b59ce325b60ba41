"""Checks for objective parameters: each bad value ends in one clear SparseCSEError sentence."""

from __future__ import annotations

import math
import os
from typing import Any, Callable, Iterable

from sparsecse.errors import SparseCSEError

Check = Callable[[str, Any], Any]


def fraction(name: str, value: Any) -> float:
    """A number strictly between 0 and 1 (a masking ratio)."""
    number = _number(name, value)
    if not 0.0 < number < 1.0:
        raise SparseCSEError(f"{name} must be between 0 and 1 (exclusive), not {value}.")
    return number


def non_negative(name: str, value: Any) -> float:
    """``value`` as a number once it is zero or positive (one sentence otherwise).

    Args:
        name: the setting's name.
        value: its value.

    Returns:
        The number.
    """
    number = _number(name, value)
    if number < 0:
        raise SparseCSEError(f"{name} must be zero or positive, not {value}.")
    return number


def positive(name: str, value: Any) -> float:
    """``value`` as a number once it is positive (one sentence otherwise).

    Args:
        name: the setting's name.
        value: its value.

    Returns:
        The number.
    """
    number = _number(name, value)
    if number <= 0:
        raise SparseCSEError(f"{name} must be positive, not {value}.")
    return number


def count(name: str, value: Any, minimum: int = 0) -> int:
    """``value`` as a whole number of at least ``minimum`` (one sentence otherwise).

    Args:
        name: the setting's name.
        value: its value.
        minimum: the least allowed.

    Returns:
        The number.
    """
    if isinstance(value, bool) or not isinstance(value, int) and not (isinstance(value, float) and value.is_integer()):
        raise SparseCSEError(f"{name} must be a whole number, not {value!r}.")
    if int(value) < minimum:
        raise SparseCSEError(f"{name} must be at least {minimum}, not {value}.")
    return int(value)


def choice(name: str, value: Any, options: Iterable[str]) -> str:
    """``value`` once it is one of ``options`` (one sentence otherwise).

    Args:
        name: the setting's name.
        value: its value.
        options: the allowed values.

    Returns:
        The value.
    """
    options = list(options)
    if value not in options:
        raise SparseCSEError(f"{name} must be one of {', '.join(options)}, not {value!r}.")
    return value


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or isinstance(value, str):
        raise SparseCSEError(f"{name} must be a number, not {value!r}.")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SparseCSEError(f"{name} must be a number, not {value!r}.") from None
    if not math.isfinite(number):
        raise SparseCSEError(f"{name} must be a finite number, not {value!r}.")
    return number


def text(name: str, value: Any) -> str:
    """A non-empty string (a model name or path)."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise SparseCSEError(f"{name} must be a name or path, not {value!r}.")
    return value


def optional(check: Check) -> Check:
    """``check``, but None (the parameter's "not set" default) passes."""
    return lambda name, value: None if value is None else check(name, value)


def one_of(*options: str) -> Check:
    """A check that a setting is one of ``options``."""
    return lambda name, value: choice(name, value, options)


def at_least(minimum: int) -> Check:
    """A check that a setting is a whole number of at least ``minimum``."""
    return lambda name, value: count(name, value, minimum)


def flag(name: str, value: Any) -> bool:
    """``value`` once it is true or false (one sentence otherwise).

    Args:
        name: the setting's name.
        value: its value.

    Returns:
        The value.
    """
    if not isinstance(value, bool):
        raise SparseCSEError(f"{name} must be true or false, not {value!r}.")
    return value
