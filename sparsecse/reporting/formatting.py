"""Cell formatting shared by the sweep report's tables: signed differences, mean ± std, where a best was found."""

from __future__ import annotations

import pandas as pd

SHORT_NAMES = {"STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R"}
AVG_STS, AVG_TRANSFER = "avg_sts", "avg_transfer"


def seed_std(row, column: str) -> float | None:
    """The standard deviation over seeds of ``column`` in a point_frame row (None: one seed)."""
    value = row.get(f"{column}_std")
    return None if value is None or pd.isna(value) else float(value)


# ---------------------------------------------------------------------------- markdown
def signed(x: float | None) -> str:
    """``x`` with its sign, two decimals, a typographic minus ("" for None)."""
    return "" if x is None else f"{x:+.2f}".replace("-", "−")


def format_cell(value, delta=None, where: str = "", std: float | None = None) -> str:
    """A table cell: the value (± std), its difference in brackets, where it was found."""
    if value is None:
        return "–"
    text = f"{value:.2f}" + ("" if std is None else f" ± {std:.2f}")
    if delta is not None:
        text += f" ({signed(delta)})"
    return text + (f" {where}" if where else "")


def where_found(sparsity: float, lam: float | None) -> str:
    """Where a best value was found: '@5%, λ=0.5'."""
    return f"@{100 * sparsity:.3g}%" + (f", λ={lam:g}" if lam is not None else "")
