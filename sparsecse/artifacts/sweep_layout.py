"""File names inside a sweep directory, shared by the sweep (which writes them) and the report (which
reads them) so that neither module imports the other, and their readers."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any

from sparsecse.errors import SparseCSEError

SWEEP_FILE = "sweep.json"
SCORES_FILE = "scores.safetensors"
POINTS_DIR = "points"  # points/<variant>/[<id>/]<name>.json
PAIRS_DIR = "pairs"  # pairs/<point>.safetensors: per-pair STS similarities of a point
MASKS_DIR = "masks"  # masks/mask-s0.02-l0.5.safetensors
REWOUND_DIR = "rewound"  # rewound/<objective>-<id>/<point>-seed<k>/: rewound model directories
REWIND_SETTINGS = "settings.json"  # rewound/<objective>-<id>/settings.json
FIGURES_DIR = "figures"
MANIFEST_FILE = "manifest.json"
RESULTS_CSV, RESULTS_JSON, SUMMARY_FILE = "results.csv", "results.json", "summary.md"


class Variant(str, Enum):
    """The kinds of sweep point: a point file's ``variant`` field and its folder under ``points/``.

    >>> Variant("masked") is Variant.MASKED, f"{Variant.MASKED}/s0.1-l0.5"
    (True, 'masked/s0.1-l0.5')
    """

    DENSE = "dense"
    MASKED = "masked"
    BUDGET = "budget"
    RECONSTRUCTED = "reconstructed"
    REWOUND = "rewound"

    __str__ = str.__str__  # the plain value in paths, f-strings and JSON, as the strings were before
    __format__ = str.__format__


def read_sweep_state(out: Path) -> dict[str, Any]:
    """The sweep file of the sweep directory ``out`` (one sentence if it cannot be read)."""
    try:
        state = json.loads((out / SWEEP_FILE).read_text())
        if not isinstance(state, dict) or not isinstance(state.get("runs", []), list):
            raise ValueError
        return state
    except (OSError, ValueError):
        raise SparseCSEError(f"{out / SWEEP_FILE} is not a readable sweep file; restore it or start the sweep "
                             "in a new directory.") from None


def read_point(path: Path) -> dict[str, Any] | None:
    """A sweep point's result file, or None where the point has not finished (one sentence if it is corrupt)."""
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
