"""The names of a sweep's points and seeds (the file names under ``points/``, ``masks/`` and ``rewound/``)."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Sequence

from sparsecse.errors import SparseCSEError, exact_number


# ---------------------------------------------------------------------------- tasks
def task_average(scores: dict[str, float], group: Sequence[str]) -> float | None:
    """Mean over the group's tasks that were evaluated (all 7 in a full sweep), None if none were."""
    values = [scores[t] for t in group if t in scores]
    return float(sum(values) / len(values)) if values else None


# ---------------------------------------------------------------------------- naming
# Names keep every digit where :g would round, so 0.1 and 0.1000001 never share a point file.
def point_name(sparsity: float, lam: float) -> str:
    """'s0.02-l0.5': a masked point's name (every digit kept)."""
    return f"s{exact_number(sparsity)}-l{exact_number(lam)}"


def budget_point_name(keep_flops: float, lam: float) -> str:
    """'f0.5-l0.5': a kept-FLOPs budget point's name."""
    return f"f{exact_number(keep_flops)}-l{exact_number(lam)}"


def seeded_name(name: str, seed: int) -> str:
    """'<name>-seed<k>': one seed of a rewound point."""
    return f"{name}-seed{seed}"


MAX_SEED = 2**32 - 1  # numpy's RandomState limit


def parse_seeds(seeds: str | int | Iterable[int] | None, default: int) -> list[int]:
    """``"0,1,2"`` (or a list) -> distinct integer seeds in the given order; None -> ``[default]``."""
    if seeds is None:
        return [int(default)]
    items = seeds.split(",") if isinstance(seeds, str) else [seeds] if isinstance(seeds, int) else list(seeds)
    try:
        values = [int(str(x).strip()) for x in items if str(x).strip()]
    except ValueError:
        raise SparseCSEError(f"Seeds must be comma-separated integers, not {seeds!r}.") from None
    if not values:
        raise SparseCSEError("No seed given; pass --seeds as comma-separated integers, e.g. 0,1,2.")
    if len(set(values)) != len(values):
        raise SparseCSEError(f"The seeds {seeds!r} repeat a value; each seed is rewound once.")
    outside = [v for v in values if not 0 <= v <= MAX_SEED]
    if outside:
        raise SparseCSEError(f"Seed {outside[0]} is outside what numpy accepts (0 to {MAX_SEED}).")
    return values


def rewind_id(objective: str, settings: dict[str, Any]) -> str:
    """'<objective>-<8 hex>' naming one set of rewinding settings (objective, corpus, init, hyperparameters)."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return f"{objective}-{digest}"
