"""Intervals for the transfer tasks: fold spread, bootstrap over test items, paired differences."""

import numpy as np
import pytest

from sparsecse.errors import SparseCSEError
from sparsecse.evaluation import evaluate
from sparsecse.evaluation.transfer_intervals import (accuracy_interval, fold_spread,
                                                     paired_accuracy_difference)
from sparsecse.evaluation.config import EvaluationConfig


def test_fold_spread_exact():
    out = fold_spread([80.0, 82.0, 84.0])
    assert out == {"acc": 82.0, "fold_std": 2.0, "fold_range": [80.0, 84.0]}
    with pytest.raises(SparseCSEError, match="two folds"):
        fold_spread([80.0])


def test_accuracy_interval_known_cases():
    assert accuracy_interval([1] * 50)["ci"] == [100.0, 100.0]
    out = accuracy_interval([1, 0] * 200, replicates=2000, seed=3)
    assert out["acc"] == 50.0
    lo, hi = out["ci"]
    assert lo < 50 < hi
    # independent path: the normal approximation of a proportion's 95% interval, 1.96 * sqrt(p(1-p)/n)
    half = 100 * 1.96 * np.sqrt(0.25 / 400)
    assert hi - lo == pytest.approx(2 * half, rel=0.15)
    assert accuracy_interval([1, 0] * 200, replicates=2000, seed=3) == out  # seeded


def test_paired_difference():
    same = paired_accuracy_difference([1, 0, 1, 1] * 30, [1, 0, 1, 1] * 30)
    assert same["diff"] == 0.0 and same["ci"] == [0.0, 0.0]
    better = paired_accuracy_difference([1, 0] * 100, [1, 1] * 100, seed=1)
    assert better["diff"] == 50.0 and better["ci"][0] > 0 and better["p"] < 0.01
    # B wrong where A was right, and right where A was wrong: same accuracy, no difference
    swap = paired_accuracy_difference([1, 0] * 100, [0, 1] * 100, seed=1)
    assert swap["diff"] == 0.0 and swap["ci"][0] < 0 < swap["ci"][1]


def test_bad_input_refused():
    with pytest.raises(SparseCSEError, match="different test sets"):
        paired_accuracy_difference([1, 0], [1, 0, 1])
    with pytest.raises(SparseCSEError, match="0/1"):
        accuracy_interval([1, 2])
    with pytest.raises(SparseCSEError, match="0/1"):
        accuracy_interval([])
    with pytest.raises(SparseCSEError, match="positive"):
        accuracy_interval([1, 0], replicates=0)


def test_evaluate_records_intervals(tiny_bert_dir, fake_senteval):
    result = evaluate(tiny_bert_dir, config=EvaluationConfig(tasks="transfer", data_dir=fake_senteval, pooling="mean",
        fasttest=True, device="cpu", transfer_protocol="fast"))
    for task in ("SST2", "TREC", "MRPC"):
        d = result["details"][task]
        assert len(d["correct"]) == d["n_test"]
        assert 100 * np.mean(d["correct"]) == pytest.approx(result["scores"][task])
        assert d["ci"][0] <= result["scores"][task] <= d["ci"][1]
    for task in ("MR", "CR", "SUBJ", "MPQA"):
        d = result["details"][task]
        assert d["fold_std"] == pytest.approx(np.std(d["fold_acc"], ddof=1))
        assert d["fold_range"] == [min(d["fold_acc"]), max(d["fold_acc"])]
    assert "predictions" not in result["details"]["TREC"]
