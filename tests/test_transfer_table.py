"""benchmarks/transfer_table.py: Table 2 with intervals and paired differences, from result files."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import transfer_table  # noqa: E402


def _write(folder, label, task, acc, details):
    record = {"scores": {task: acc}, "details": {task: {"acc": acc, **details}}, "timing": {"total_s": 1.0},
              "settings": {"device": "cpu", "transfer_protocol": "senteval"}, "model": "m", "mask": None}
    (folder / f"{label}-{task}.json").write_text(json.dumps(record))


def test_table_from_result_files(tmp_path):
    for label, shift in (("a", 0), ("b", 1)):
        for task in transfer_table.TASKS:
            if task in ("MR", "CR", "SUBJ", "MPQA"):
                folds = [80.0 + shift, 82.0 + shift, 84.0 + shift]
                _write(tmp_path, label, task, 82.0 + shift, {"fold_acc": folds, "fold_std": 2.0})
            else:
                correct = [1] * (50 + 25 * shift) + [0] * (50 - 25 * shift)
                _write(tmp_path, label, task, 100 * sum(correct) / 100, {"correct": correct, "ci": [40.0, 60.0]})
    lines, record = transfer_table.build(tmp_path, ["a", "b"], {"b": "model B"}, "a")
    assert lines[2].startswith("| a | 82.00 ± 2.00 |") and "50.00 [40.0, 60.0]" in lines[2]
    vs = record["rows"]["b"]["vs_baseline"]
    assert vs["MR"]["diff"] == pytest.approx(1.0) and vs["MR"]["folds_agree"] == "3/3" and vs["MR"]["fold_std"] == 0
    assert vs["TREC"]["diff"] == pytest.approx(25.0) and vs["TREC"]["ci"][0] > 0
    assert any(line.startswith("| model B |") and "✓" in line for line in lines)
    assert record["rows"]["b"]["avg"] - record["rows"]["a"]["avg"] == pytest.approx((4 * 1 + 3 * 25) / 7)
