"""Results files whose per-pair similarities and scores disagree, and hand-edited masks: refused, or the
assumption said."""

from __future__ import annotations

import json

import pytest
import torch

from tests.cli_checks import assert_refused, run_cli


@pytest.fixture(scope="module")
def result_file(tmp_path_factory, tiny_bert_dir, tiny_stsb_dir):
    out = tmp_path_factory.mktemp("results") / "dense.json"
    result = run_cli("eval", "--model", tiny_bert_dir, "--data-dir", tiny_stsb_dir, "--tasks", "STSBenchmark",
                     "--out", out)
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("edit,phrase", [
    ("nan", "not finite numbers"), ("negate", "is not what its per-pair similarities"),
    ("reorder gold", "is not what its per-pair similarities"), ("score", "is not what its per-pair similarities"),
])
def test_compare_refuses_results_whose_pairs_and_scores_disagree(result_file, tmp_path, edit, phrase):
    data = json.loads(result_file.read_text())
    pairs = data["pairs"]["STSBenchmark"]
    if edit == "nan":
        pairs["similarity"][3] = None  # how a NaN is written
    elif edit == "negate":
        pairs["similarity"] = [-v for v in pairs["similarity"]]
    elif edit == "reorder gold":
        pairs["gold"] = pairs["gold"][::-1]
    else:
        data["scores"]["STSBenchmark"] += 160
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    assert_refused(run_cli("compare", result_file, edited, "--bootstrap", "50"), str(edited), "STSBenchmark", phrase)
    assert run_cli("compare", result_file, result_file, "--bootstrap", "50").exit_code == 0


def test_hand_edited_masks_are_refused_or_the_assumption_said(tmp_path, tiny_bert_dir, tiny_stsb_dir):
    from safetensors.torch import save_file

    manifest = {"sparsecse_manifest": json.dumps({"kind": "mask", "model": str(tiny_bert_dir)})}
    cases = {"two.safetensors": (torch.full((2, 4), 2, dtype=torch.uint8), "holds 2 in head_mask"),
             "float.safetensors": (torch.full((2, 4), 0.5), "holds float32 values")}
    for name, (heads, phrase) in cases.items():
        save_file({"head_mask": heads, "neuron_mask": torch.ones(2, 48, dtype=torch.uint8)}, str(tmp_path / name),
                  metadata=manifest)
        assert_refused(run_cli("eval", "--mask", tmp_path / name, "--data-dir", tiny_stsb_dir, "--tasks",
                               "STSBenchmark"), phrase)
    bare = tmp_path / "bare.safetensors"
    save_file({"head_mask": torch.ones(2, 4, dtype=torch.uint8), "neuron_mask": torch.ones(2, 48, dtype=torch.uint8)},
              str(bare))
    assert_refused(run_cli("shrink", "--mask", bare, "--out", tmp_path / "s"), "does not record which model")
    result = run_cli("eval", "--model", tiny_bert_dir, "--mask", bare, "--data-dir", tiny_stsb_dir,
                     "--tasks", "STSBenchmark")
    assert result.exit_code == 0 and "records no model; it is applied to" in result.output
