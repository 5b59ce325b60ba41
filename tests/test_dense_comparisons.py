"""A sweep's points that were not retrained, against the dense model, with paired intervals."""

import numpy as np
import pandas as pd
import pytest

from sparsecse.evaluation.results_file import save_pairs
from sparsecse.evaluation.sts import spearman100
from sparsecse.reporting.dense_comparisons import (dense_comparison_lines, dense_comparison_table,
                                                dense_comparisons, verdict)


def test_verdict_reads_the_interval():
    assert verdict([0.1, 0.5]) == "higher than dense"
    assert verdict([-0.5, -0.1]) == "lower than dense"
    assert verdict([-0.1, 0.2]) == "no difference measured"


def _pairs(similarity, gold):
    return {"STS12": {"similarity": similarity, "gold": gold, "subsets": {"a": 100, "b": 100}}}


def _point(name, variant, similarity, gold):
    score = spearman100(similarity, gold)  # the sweeps' 'all' aggregation: one correlation over every pair
    return {"point": name, "variant": variant, "sparsity": 0.1, "lambda": 0.5, "scores": {"STS12": score}}


def test_points_against_dense_exact_cases(tmp_path):
    rng = np.random.default_rng(0)
    gold = rng.uniform(0, 5, 200)
    dense_sim = gold + rng.normal(0, 2.0, 200)  # a noisy model
    better_sim = gold + rng.normal(0, 0.1, 200)  # nearly the gold order
    (tmp_path / "pairs" / "masked").mkdir(parents=True)
    save_pairs(tmp_path / "pairs" / "dense.safetensors", _pairs(dense_sim, gold))
    save_pairs(tmp_path / "pairs" / "masked" / "same.safetensors", _pairs(dense_sim, gold))
    save_pairs(tmp_path / "pairs" / "masked" / "better.safetensors", _pairs(better_sim, gold))
    points = [{**_point("dense", "dense", dense_sim, gold), "sparsity": 0.0, "lambda": None},
              _point("masked/same", "masked", dense_sim, gold), _point("masked/better", "masked", better_sim, gold),
              {**_point("rewound/x/s0.1-l0.5-seed0", "rewound", better_sim, gold)}]  # retrained: not compared
    rows = {r["point"]: r for r in dense_comparisons(tmp_path, points, replicates=300, seed=1)}
    assert sorted(rows) == ["masked/better", "masked/same"]
    same = rows["masked/same"]["avg"]
    assert same["diff"] == 0.0 and same["ci"] == [0.0, 0.0] and rows["masked/same"]["verdict"] == "no difference measured"
    better = rows["masked/better"]
    expected = points[2]["scores"]["STS12"] - points[0]["scores"]["STS12"]
    assert better["avg"]["diff"] == pytest.approx(expected) and better["avg"]["ci"][0] > 0
    assert better["verdict"] == "higher than dense" and better["avg"]["p"] < 0.01
    table = dense_comparison_table(list(rows.values()))
    assert set(table["task"]) == {"STS12", "avg_sts"} and len(table) == 4
    lines = dense_comparison_lines(list(rows.values()))
    assert lines[0].startswith("### Pruned without retraining vs dense")
    assert lines[6].startswith("| masked/better |")  # largest difference first


def test_no_dense_pairs_no_rows(tmp_path):
    assert dense_comparisons(tmp_path, [{"point": "dense", "variant": "dense", "scores": {"STS12": 1.0}}]) == []
    assert dense_comparison_lines([]) == []
