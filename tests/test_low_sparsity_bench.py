"""benchmarks/low_sparsity_dev.py: the dev grid's table (the figure docs/results/archive.md includes)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from low_sparsity_dev import table  # noqa: E402


def test_the_dev_grid_table_has_a_row_per_sparsity_and_names_the_chosen_point():
    rows = [{"sparsity": 0.0, "lambda": None, "dev": 86.0}]
    rows += [{"sparsity": s, "lambda": lam, "dev": 85.0 + s + lam, "kept_flops": 1 - s}
             for s in (0.1, 0.05) for lam in (0.25, 0.75)]
    text = table({"model": "m", "dense_dev": 86.0, "rows": rows, "chosen": rows[2]})
    lines = text.splitlines()
    assert "Dense: **86.00**. Chosen (best dev): sparsity 0.1, λ 0.75." in lines
    assert lines[-3:] == ["|---:|---:|---:|---:|", "| 0.05 | 85.30 | 85.80 | 0.950 |", "| 0.1 | 85.35 | 85.85 | 0.900 |"]
