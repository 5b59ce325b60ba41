"""File names inside a sweep directory, shared by the sweep (which writes them) and the report (which
reads them) so that neither module imports the other, and their readers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparsecse.errors import SparseCSEError

SWEEP_FILE = "sweep.json"
SCORES_FILE = "scores.safetensors"


def read_sweep_state(out: Path) -> dict[str, Any]:
    try:
        state = json.loads((out / SWEEP_FILE).read_text())
        if not isinstance(state, dict) or not isinstance(state.get("runs", []), list):
            raise ValueError
        return state
    except (OSError, ValueError):
        raise SparseCSEError(f"{out / SWEEP_FILE} is not a readable sweep file; restore it or start the sweep "
                             "in a new directory.") from None


def read_point(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        point = json.loads(path.read_text())
        if not isinstance(point, dict) or not isinstance(point.get("scores", {}), dict):
            raise ValueError
        return point
    except (UnicodeDecodeError, ValueError):  # written atomically, so only a damaged or hand-edited file gets here
        raise SparseCSEError(f"The sweep point {path} is not a valid point file; delete it to recompute the "
                             "point.") from None
