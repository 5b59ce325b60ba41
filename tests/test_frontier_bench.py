"""benchmarks/frontier.py's pure pieces: row caching (resume, recompute when the model changed) and the
nearest-speed pairing; bad rows and targets refused before anything is written."""

import json

import pytest

from tests.helpers import load_benchmark


@pytest.fixture(scope="module")
def frontier():
    yield from load_benchmark("frontier")


def test_nearest_speed_on_a_log_scale(frontier):
    speeds = [1.0, 1.9, 2.0, 4.0, 30.0]
    assert [frontier.nearest_speed(speeds, i) for i in range(5)] == [1, 2, 1, 2, 3]
    assert frontier.nearest_speed([1.0], 0) is None
    assert frontier.nearest_speed([2.0, 1.0, 4.0], 0) == 1  # equal log gaps: the earlier row


def test_rows_are_cached_and_recomputed_when_their_key_changes(frontier, tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return {"avg_sts": 70.0 + len(calls)}

    first = frontier.cached_record(tmp_path, "L6 f0.5 (distill)", {"model_dir": "a", "weights_mtime": 1}, compute)
    again = frontier.cached_record(tmp_path, "L6 f0.5 (distill)", {"model_dir": "a", "weights_mtime": 1}, compute)
    assert first == again and len(calls) == 1 and first["avg_sts"] == 71.0
    assert json.loads((tmp_path / "rows" / "L6-f0.5-distill.json").read_text())["label"] == "L6 f0.5 (distill)"
    changed = frontier.cached_record(tmp_path, "L6 f0.5 (distill)", {"model_dir": "a", "weights_mtime": 2}, compute)
    assert changed["avg_sts"] == 72.0 and len(calls) == 2


def test_model_specs_and_method_time(frontier, tmp_path):
    assert frontier.parse_model_specs(["L6 f0.5=runs/a", "L3=b"]) == [("L6 f0.5", "runs/a"), ("L3", "b")]
    for bad in (["nolabel"], ["=dir"], ["a=x", "a=y"]):
        with pytest.raises(SystemExit):
            frontier.parse_model_specs(bad)
    (tmp_path / "sparsecse_config.json").write_text(json.dumps({"manifest": {"reconstruction": {"seconds": 73.5}}}))
    assert frontier.method_seconds(str(tmp_path)) == 73.5
    (tmp_path / "sparsecse_config.json").write_text(json.dumps({"manifest": {"method_seconds": 600.0,
                                                                             "reconstruction": {"seconds": 1}}}))
    assert frontier.method_seconds(str(tmp_path)) == 600.0
    assert frontier.method_seconds(str(tmp_path / "missing")) is None
    # a trained model: its pruning (carried in sparsecse_config.json) plus its own training
    (tmp_path / "manifest.json").write_text(json.dumps({"kind": "train_model", "result": {"seconds": 1800.0}}))
    assert frontier.method_seconds(str(tmp_path)) == 2400.0
    (tmp_path / "manifest.json").write_text(json.dumps({"kind": "train_model",  # recorded before "seconds"
                                                        "result": {"steps": 1000, "steps_per_second": 2.5}}))
    assert frontier.method_seconds(str(tmp_path)) == 1000.0
    (tmp_path / "manifest.json").write_text(json.dumps({"kind": "shrunk_model", "result": {"seconds": 5.0}}))
    assert frontier.method_seconds(str(tmp_path)) == 600.0
    (tmp_path / "sparsecse_config.json").unlink()
    (tmp_path / "manifest.json").write_text(json.dumps({"kind": "train_model", "result": {"seconds": 90.0}}))
    assert frontier.method_seconds(str(tmp_path)) == 90.0


def test_a_recipes_model_counts_every_stage_but_the_evaluation(frontier, tmp_path):
    (tmp_path / "sparsecse_config.json").write_text(json.dumps({"manifest": {"reconstruction": {"seconds": 73.5}}}))
    (tmp_path / "manifest.json").write_text(json.dumps({"kind": "recipe_model", "seconds": {
        "teacher": 300.0, "prune": 319.5, "student": 551.0, "evaluation": 148.5}}))
    assert frontier.method_seconds(str(tmp_path)) == 1170.5


def test_a_bad_row_or_target_is_refused_before_anything_is_written(frontier, tmp_path, capsys):
    work = tmp_path / "work"
    with pytest.raises(SystemExit) as refused:
        frontier.main(["--work", str(work), "--layer-drop", "", "--no-model2vec", "--l3", "",
                       "--target", "2x=no such row:all-MiniLM-L6-v2 dense"])
    assert refused.value.code == 2 and "no such row" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="is not a model directory"):
        frontier.main(["--work", str(work), "--layer-drop", "", "--no-model2vec", "--l3", "",
                       "--model", f"L6 f0.5={tmp_path / 'missing'}"])
    assert not work.exists()
