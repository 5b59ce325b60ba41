"""A run's progress lines and the wall time of every stage attempt (``OUT/times.jsonl``), which the card's minutes,
a resumed run and a time limit read."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TIMES = "times.jsonl"


def log(message: str, quiet: bool) -> None:
    """One progress line on stderr, unless ``quiet``."""
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def minutes_text(seconds: float) -> str:
    """``12.3 min``, or ``40 s`` under a minute."""
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def record_time(out: Path, entry: dict[str, Any]) -> None:
    """Add one attempt's ``{"stage", "seconds", "finished"}`` to the run's times."""
    with open(out / TIMES, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def stage_times(out: Path) -> dict[str, float]:
    """Seconds per stage (and ``evaluation``) over every attempt of the run in ``out``."""
    totals: dict[str, float] = {}
    try:
        lines = (out / TIMES).read_text().splitlines()
    except OSError:
        return totals
    for line in lines:
        try:
            entry = json.loads(line)
            totals[entry["stage"]] = totals.get(entry["stage"], 0.0) + float(entry["seconds"])
        except (ValueError, KeyError, TypeError):
            continue
    return totals
