"""evaluate's typed result: fields, the dictionary it reads like, and what a result file holds."""

import dataclasses
import json

import pytest

from sparsecse.evaluation import evaluate
from sparsecse.evaluation.result import EvaluationResult
from sparsecse.evaluation.results_file import load_results, save_results
from sparsecse.evaluation.config import EvaluationConfig


def _result(**extra):
    return EvaluationResult(model="m", mask=None, pooling="mean", tasks=["STS12"], scores={"STS12": 70.0},
                            settings={"seed": 0}, timing={"total_s": 1.0}, **extra)


def test_reads_like_the_dictionary_it_replaces():
    r = _result(avg_sts=70.0)
    assert r["scores"] == {"STS12": 70.0} and r.avg_sts == 70.0 and r.get("bootstrap") is None
    assert "avg_sts" in r and "bootstrap" not in r and "nonsense" not in r
    assert list(r) == ["model", "mask", "pooling", "tasks", "scores", "avg_sts", "settings", "timing"]
    assert r.to_dict() == dict(r) and len(r) == 8
    with pytest.raises(KeyError):
        r["bootstrap"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.avg_sts = 1.0


def test_evaluate_returns_it_and_a_result_file_round_trips(tiny_bert_dir, fake_senteval, tmp_path):
    result = evaluate(tiny_bert_dir, config=EvaluationConfig(tasks="STS12,STSBenchmark", data_dir=fake_senteval,
        pooling="mean", device="cpu", keep_pairs=True))
    assert isinstance(result, EvaluationResult)
    assert result.avg_sts == pytest.approx(sum(result.scores.values()) / 2)
    assert result.alignment is not None and result.avg_transfer is None and "avg_transfer" not in result
    path = save_results(tmp_path / "r.json", result, {"kind": "eval"})
    loaded = load_results(path)
    assert loaded["scores"] == result.scores and loaded["manifest"] == {"kind": "eval"}
    assert json.loads(path.read_text())["pairs"]["STS12"]["gold"] == list(result.pairs["STS12"]["gold"])
