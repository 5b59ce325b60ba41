"""The grid parser: inclusive ranges, lists, and one clear error for every bad grid."""

import pytest

from sparsecse.errors import SparseCSEError
from sparsecse.pruning.grid import check_sparsity, parse_grid


def test_the_papers_grid():
    values = parse_grid("0.01:0.10:0.01,0.2:0.5:0.1")
    assert values == [0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1, 0.2, 0.3, 0.4, 0.5]
    assert len(values) == 14  # the stop is included despite float steps (0.1 + 0.1 + 0.1 != 0.3)


@pytest.mark.parametrize("text, expected", [
    ("0.5", [0.5]),
    ("0.75,0.25, 0.5", [0.25, 0.5, 0.75]),  # sorted, spaces tolerated
    ("0.1,0.1,0.1:0.2:0.1", [0.1, 0.2]),  # duplicates merged
    ("0.3:0.3:0.1", [0.3]),  # a one-value range
    ("0.1:0.35:0.1", [0.1, 0.2, 0.3]),  # a stop between steps is not reached
    ("1e-2:3e-2:1e-2", [0.01, 0.02, 0.03]),
])
def test_ranges_and_lists(text, expected):
    assert parse_grid(text) == expected


def test_python_values():
    assert parse_grid(0.5) == [0.5]
    assert parse_grid([0.5, 0.25, 0.5]) == [0.25, 0.5]


@pytest.mark.parametrize("text, message", [
    ("", "grid is empty"),
    (" , ", "grid is empty"),
    ([], "grid is empty"),
    ("abc", "'abc' is not a number"),
    ("0.1,,0.2", "'' is not a number"),
    ("0.1:0.2", "not a number or start:stop:step"),
    ("0.1:0.2:0.05:1", "not a number or start:stop:step"),
    ("0.5:0.1:0.1", "start <= stop and a positive step"),
    ("0.1:0.5:0", "start <= stop and a positive step"),
    ("0.1:0.5:-0.1", "start <= stop and a positive step"),
    ("nan", "not a finite number"),
    ("0:inf:0.1", "not a finite number"),
    ("0:1:1e-9", "the limit is"),
])
def test_bad_grids_are_rejected(text, message):
    with pytest.raises(SparseCSEError, match=message):
        parse_grid(text, "sparsity")


def test_error_names_what_the_grid_is_for():
    with pytest.raises(SparseCSEError, match="^The lambda grid item"):
        parse_grid("x", "lambda")


@pytest.mark.parametrize("value", [0.0, 1.0, -0.1, 1.5, float("nan")])
def test_sparsity_outside_the_open_interval_is_rejected(value):
    with pytest.raises(SparseCSEError, match="strictly between 0 and 1"):
        check_sparsity(value)
