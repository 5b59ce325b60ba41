"""What a ``compress`` run aims at, parsed and checked once where the command line (or the Python call) ends and
passed down as one object: the target settings the user gave, one speed-up, several (a curve) or none (a largest
dev drop), and the teacher and comparison model the target's run uses.

    >>> aim = Aim.parse(speedup="1.5,2", metric="latency-p50", depth="auto")
    >>> aim.speedups, aim.curve, aim.target(2.0).batch
    ((1.5, 2.0), True, 1)
    >>> aim.overrides()["target.metric"], "target.speedup" in aim.overrides()
    ('latency-p50', False)
    >>> Aim.parse(engine="onnx")
    Traceback (most recent call last):
    ...
    sparsecse.errors.SparseCSEError: engine goes with a target: add speedup (e.g. 2.0), speedup_of or max_drop.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from sparsecse.errors import SparseCSEError
from sparsecse.targets.engines import check_runnable
from sparsecse.targets.spec import Target, _number, parse_speedups

# the target settings a user names (command line or Python), in the order --help lists them
SETTINGS = ("max_drop", "engine", "batch_size", "threads", "metric", "timing_sentences", "when_busy", "depth",
            "speedup_of", "minutes")
RUN_SETTINGS = ("teacher", "compare_with")  # what the target's run uses besides the target itself
NAMES = ("speedup", *SETTINGS, *RUN_SETTINGS)


def python_name(name: str) -> str:
    """A setting as :func:`sparsecse.compression.compress` takes it (the default way :meth:`Aim.parse` names one)."""
    return name


def option_name(name: str) -> str:
    """A setting as ``sparsecse compress`` takes it, e.g. ``--batch-size``."""
    return "--" + name.replace("_", "-")


def parse_depth(value: Any, named: Callable[[str], str] = python_name) -> int | None:
    """A depth as users give it: a whole number of layers >= 0, or ``auto`` (None, as when it is not given)."""
    if value is None or str(value).strip().lower() == "auto":
        return None
    try:
        depth = int(str(value).strip())
    except ValueError:
        depth = -1
    if depth < 0 or isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise SparseCSEError(f"{named('depth')} must be a whole number of layers (0 or more) or auto; got {value!r}.")
    return depth


def parse_minutes(value: Any, named: Callable[[str], str] = python_name) -> float | str:
    """A time limit as users give it: a number of minutes above 0, or ``none`` (no limit: the recipe's is lifted).

    >>> parse_minutes("20"), parse_minutes("none")
    (20.0, 'none')
    """
    if isinstance(value, str) and value.strip().lower() == "none":
        return "none"
    minutes = _number(value)  # as every target number is read (1_5 is not 15)
    if minutes is None or not math.isfinite(minutes) or minutes <= 0:
        raise SparseCSEError(f"{named('minutes')} must be a number of minutes above 0 (or none: no limit); got "
                             f"{value!r}.")
    return minutes


@dataclass(frozen=True)
class Aim:
    """A checked target request: ``settings`` are the :class:`~sparsecse.targets.spec.Target` settings the user gave
    (``max_drop``, ``engine``, ``batch_size``, ``threads``, ``metric``, ``timing_sentences`` as an absolute path,
    ``when_busy``, ``depth``), ``speedups`` the speed-ups in ascending order (several: a curve, one model each; none:
    a ``max_drop`` target), ``teacher`` and ``compare_with`` the run's teacher and comparison model (None: the
    recipe's). Build one with :meth:`parse` or :meth:`of`; every setting was checked there, and the engine and timing
    sentences against this machine (:func:`~sparsecse.targets.engines.check_runnable`)."""

    settings: dict[str, Any] = field(default_factory=dict)
    speedups: tuple[float, ...] = ()
    teacher: str | None = None
    compare_with: str | None = None

    @classmethod
    def parse(cls, named: Callable[[str], str] = python_name, **given: Any) -> "Aim":
        """The aim of these settings (``speedup``: a number, ``"1.5,2,3"`` or a list; the others as
        :class:`~sparsecse.targets.spec.Target` and ``depth`` ``auto``), None meaning not given. ``named`` names a
        setting in messages (:func:`option_name` on the command line). One sentence for a setting without a goal, an
        unknown name, or any value the target refuses."""
        unknown = sorted(set(given) - set(NAMES))
        if unknown:
            raise TypeError(f"a target has no setting {unknown[0]!r}; its settings are {', '.join(NAMES)}")
        speedup, max_drop, speedup_of = given.get("speedup"), given.get("max_drop"), given.get("speedup_of")
        if speedup is not None and speedup_of is not None:
            raise SparseCSEError(f"Give {named('speedup')} or {named('speedup_of')} (another model's speed-up), not "
                                 "both.")
        if speedup is None and max_drop is None and speedup_of is None:
            first = next((k for k in NAMES if given.get(k) is not None), None)
            if first is not None:
                raise SparseCSEError(f"{named(first)} goes with a target: add {named('speedup')} (e.g. 2.0), "
                                     f"{named('speedup_of')} or {named('max_drop')}.")
        speedups = tuple(sorted(parse_speedups(speedup))) if speedup is not None else ()
        read = {"depth": lambda v: parse_depth(v, named),  # auto: None, as when not given
                "minutes": lambda v: parse_minutes(v, named),  # none: no limit, kept as the setting "none"
                "timing_sentences": lambda v: os.path.abspath(os.fspath(v))}
        settings = {k: read.get(k, lambda v: v)(given[k]) for k in SETTINGS if given.get(k) is not None}
        settings = {k: v for k, v in settings.items() if v is not None}
        aim = cls(settings, speedups, given.get("teacher"), given.get("compare_with"))
        if aim.given:
            check_runnable(aim.target().check())
        return aim

    @classmethod
    def of(cls, value: Any) -> "Aim":
        """``value`` as an aim: an :class:`Aim` as it is; a :class:`~sparsecse.targets.spec.Target` (its settings
        away from the defaults); a speed-up (``2.0``), several (``"1.5,2,3"``, ``[1.5, 2, 3]``) or a mapping of
        settings (:meth:`parse`)."""
        if isinstance(value, Aim):
            return value
        if isinstance(value, Target):
            default = Target()
            given = {k: getattr(value, k) for k in ("speedup", *SETTINGS) if getattr(value, k) != getattr(default, k)}
            return cls.parse(**given)
        if isinstance(value, dict):
            return cls.parse(**value)
        return cls.parse(speedup=value)

    @property
    def given(self) -> bool:
        """Whether there is a goal (a speed-up or a largest drop) at all."""
        return bool(self.speedups) or "max_drop" in self.settings or "speedup_of" in self.settings

    @property
    def curve(self) -> bool:
        """Whether there are several speed-ups (one model each, and the curve of them)."""
        return len(self.speedups) > 1

    def target(self, speedup: float | None = None) -> Target:
        """The :class:`~sparsecse.targets.spec.Target` of one model: at ``speedup`` (None: the first, or none for
        a largest drop), with the other settings given and the rest at their defaults."""
        chosen = speedup if speedup is not None else (self.speedups[0] if self.speedups else None)
        return Target(speedup=chosen, **self._target_settings())

    def _target_settings(self) -> dict[str, Any]:
        """The settings as a :class:`~sparsecse.targets.spec.Target` holds them (``minutes`` none: None)."""
        return {k: None if k == "minutes" and v == "none" else v for k, v in self.settings.items()}

    def overrides(self, speedup: float | None = None) -> dict[str, Any]:
        """The ``{"STAGE.KEY": value}`` settings this aim puts on a recipe: every ``target.*`` given (the two goals
        together, so a drop alone is not added to the recipe's speed-up; a metric without a batch size takes the
        metric's own default batch), ``student.teacher`` and ``evaluation.compare_with``. A curve's speed-up is
        each target's own: it is left out unless ``speedup`` names one."""
        one = speedup if speedup is not None else (self.speedups[0] if len(self.speedups) == 1 else None)
        found: dict[str, Any] = {"target.max_drop": self.settings.get("max_drop"),
                                 "target.speedup_of": self.settings.get("speedup_of")}
        if one is not None or not self.curve:
            found["target.speedup"] = one
        if "metric" in self.settings and "batch_size" not in self.settings:
            found["target.batch_size"] = None
        found.update({f"target.{k}": v for k, v in self._target_settings().items()})
        if self.teacher is not None:
            found["student.teacher"] = self.teacher
        if self.compare_with is not None:
            found["evaluation.compare_with"] = self.compare_with
        return found
