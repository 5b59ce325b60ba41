"""benchmarks/targets.py: target specs parsed, the recipe read from a recipe run's manifest, and the targets
file merged (a benchmark replaces only the targets and engine it measured)."""

import json

import pytest

from tests.helpers import load_benchmark


@pytest.fixture(scope="module")
def targets():
    yield from load_benchmark("targets")


def test_target_specs(targets):
    assert targets.parse_target_specs(["2x=L6 f0.45 (a:b):L3 dense"]) == [("2x", "L6 f0.45 (a:b)", "L3 dense")]
    for bad in ("2x", "2x=L6", "=L6:L3", "2x=:L3"):
        with pytest.raises(SystemExit):
            targets.parse_target_specs([bad])


def test_a_target_naming_a_row_the_benchmark_lacks_is_one_sentence(targets):
    labels = {"L6 dense", "L3 dense", "f2x OpenVINO int8"}
    assert targets.unknown_target_row([("6x-int8", "f2x OpenVINO int8", "L3 dense")], labels) is None
    assert targets.unknown_target_row([("2x", "f2x OpenVINO int8", "L3 dense"), ("3.5x", "f2x", "L3 dense")],
                                      labels) == "--target 3.5x: no row called 'f2x' (rows: L3 dense, L6 dense, f2x OpenVINO int8)"
    assert targets.unknown_target_row([("2x", "L6 dense", "L3")], labels).startswith("--target 2x: no row called 'L3'")


def test_recipe_is_read_from_a_recipe_runs_manifest(targets, tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"kind": "recipe_model", "params": {"name": "frontier-2x"}}))
    assert targets.recipe_of(str(tmp_path)) == "frontier-2x"
    (tmp_path / "manifest.json").write_text(json.dumps({"kind": "train_model"}))
    assert targets.recipe_of(str(tmp_path)) is None
    assert targets.recipe_of(str(tmp_path / "missing")) is None and targets.recipe_of(None) is None


def test_a_benchmark_replaces_only_the_targets_it_measured(targets, tmp_path):
    path = tmp_path / "targets.json"
    row = {"model": "m", "speedup": 2.0, "sts_avg": 79.0, "ci": [78, 80], "versus": "L3", "paired_ci": [0.1, 0.9]}
    targets.write_targets([{**row, "target": "2x", "engine": "torch fp32"},
                           {**row, "target": "3.5x", "engine": "torch fp32", "speedup": 3.5}], path)
    targets.write_targets([{**row, "target": "6x-int8", "engine": "openvino int8", "speedup": 6.1}], path)
    targets.write_targets([{**row, "target": "2x", "engine": "torch fp32", "sts_avg": 80.0}], path)
    saved = json.loads(path.read_text())
    assert sorted((r["target"], r["engine"]) for r in saved) == [("2x", "torch fp32"), ("3.5x", "torch fp32"),
                                                                 ("6x-int8", "openvino int8")]
    assert next(r for r in saved if r["target"] == "2x")["sts_avg"] == 80.0
    assert set(saved[0]) == set(targets.FIELDS)


def _record(label: str, similarity: dict, gold: dict) -> dict:
    from scipy.stats import spearmanr

    scores = {t: 100 * spearmanr(similarity[t], gold[t])[0] for t in gold}
    return {"label": label, "model_dir": None, "avg_sts": sum(scores.values()) / len(scores), "ci": [0.0, 100.0],
            "scores": scores, "pairs": {t: {"similarity": similarity[t], "gold": gold[t], "subsets": {t: len(gold[t])}}
                                        for t in gold}}


def test_a_target_record_holds_the_paired_difference_of_the_two_rows(targets):
    rng = __import__("numpy").random.default_rng(0)
    gold = {t: list(rng.uniform(0, 5, 60)) for t in ("STS12", "STS13")}
    good = {t: [g + rng.normal(0, 0.5) for g in gold[t]] for t in gold}
    worse = {t: [g + rng.normal(0, 2.0) for g in gold[t]] for t in gold}
    row, versus = _record("pruned int8", good, gold), _record("L3 int8", worse, gold)
    record = targets.target_record("6x-int8", row, versus, engine="OpenVINO int8", speedup=6.25,
                                   measured_by="test", replicates=200)
    assert set(record) == set(targets.FIELDS)
    assert record["diff"] == round(row["avg_sts"] - versus["avg_sts"], 4)  # observed B - A, not a bootstrap mean
    assert record["paired_ci"][0] < record["diff"] < record["paired_ci"][1]
    assert record["paired_ci"][0] > 0  # far less noise: the paired interval sits above 0
    assert (record["versus"], record["engine"], record["speedup"]) == ("L3 int8", "OpenVINO int8", 6.25)
    flipped = targets.target_record("x", versus, row, engine="e", speedup=1.0, measured_by="test", replicates=200)
    assert flipped["diff"] == -record["diff"] and flipped["paired_ci"][1] < 0
