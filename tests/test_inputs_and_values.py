"""What every command counts as its inputs (it never writes over one: the implicit default model, a teacher, the
teacher from a model's lineage, a mask's model, a calibration corpus, a symlinked output), model values that name
nothing, and option values compared and quoted as given (bounded, never rounded)."""

from __future__ import annotations

import json
import shutil
import time

import pytest
import torch

from sparsecse.pruning.masks import Mask
from sparsecse.errors import SparseCSEError
from tests.cli_checks import assert_refused, file_tree, run_cli
from tests.helpers import random_sentences
from tests.tiny import make_tiny_model_dir


@pytest.fixture
def default_model(tmp_path, monkeypatch):
    """The embedded default model, replaced by a tiny copy (every default-model lookup resolves to it)."""
    from sparsecse.artifacts import model_names

    path = make_tiny_model_dir(tmp_path / "default-model", "bert")
    monkeypatch.setattr(model_names, "default_model_path", lambda: str(path))
    return path


@pytest.fixture
def small_corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(random_sentences(40)) + "\n")
    return path


@pytest.mark.parametrize("model_args", [[], ["--model", "all-MiniLM-L6-v2"], ["--model", "default"]])
def test_the_implicit_default_model_is_an_input_of_every_command(default_model, tiny_stsb_dir, small_corpus,
                                                                   model_args):
    before = file_tree(default_model)
    cases = [
        ["score", "--data-dir", tiny_stsb_dir, "--out", default_model / "model.safetensors"],
        ["eval", "--data-dir", tiny_stsb_dir, "--tasks", "STSBenchmark", "--out", default_model / "config.json"],
        ["train", "--corpus", small_corpus, "--out", default_model, "--max-steps", "1", "--eval-steps", "0"],
        ["compress", "--keep-flops", "0.5", "--reconstruct", small_corpus, "--data-dir", tiny_stsb_dir,
         "--out", default_model],
        ["export", "--out", default_model / "onnx-here"],
    ]
    for args in cases:
        result = run_cli(*args[:1], *model_args, *args[1:], "--overwrite")
        assert_refused(result, "would overwrite the model it reads")
    assert file_tree(default_model) == before


def test_a_teacher_is_an_input(tmp_path, tiny_bert_dir, small_corpus):
    teacher = make_tiny_model_dir(tmp_path / "teacher", "bert", seed=3)
    other = make_tiny_model_dir(tmp_path / "other", "bert", seed=4)
    link = tmp_path / "teacher-link"
    link.symlink_to(teacher)
    before = file_tree(teacher)
    common = ["train", "--model", tiny_bert_dir, "--corpus", small_corpus, "--objective", "distill",
              "--max-steps", "1", "--eval-steps", "0", "--overwrite"]
    for spec, out in ((teacher, teacher), (f"{other}+{teacher}", teacher), (link, teacher / "student"),
                      (teacher, link)):
        result = run_cli(*common, "--objective-args", f"teacher={spec}", "--out", out)
        assert_refused(result, "would overwrite the teacher it reads")
    assert file_tree(teacher) == before


def test_the_teacher_from_the_lineage_is_an_input(tmp_path, tiny_bert_dir, small_corpus):
    from sparsecse.shrinking.shrink import shrink

    dense = tmp_path / "dense"
    shutil.copytree(tiny_bert_dir, dense)
    heads = torch.ones(2, 4, dtype=torch.bool)
    heads[0, 1] = False
    mask = Mask(heads, torch.ones(2, 48, dtype=torch.bool), {"kind": "mask", "model": str(dense)})
    small = shrink(model=dense, mask=mask, out=tmp_path / "small").out
    result = run_cli("train", "--model", small, "--corpus", small_corpus, "--objective", "distill", "--max-steps", "1",
                     "--eval-steps", "0", "--out", dense, "--overwrite")
    assert_refused(result, "would overwrite the teacher it reads")


def test_a_masks_model_calibration_and_symlinked_outputs_are_inputs(tmp_path, tiny_bert_dir, tiny_stsb_dir,
                                                                     small_corpus):
    scored = tmp_path / "scored"
    shutil.copytree(tiny_bert_dir, scored)
    other = make_tiny_model_dir(tmp_path / "other", "bert", seed=5)
    mask_path = Mask(torch.ones(2, 4, dtype=torch.bool), torch.ones(2, 48, dtype=torch.bool),
                     {"kind": "mask", "model": str(scored)}).save(tmp_path / "mask.safetensors")
    link = tmp_path / "out-link"
    link.symlink_to(scored)
    before = file_tree(scored)
    assert_refused(run_cli("shrink", "--model", other, "--mask", mask_path, "--out", scored, "--overwrite"),
                   "would overwrite the mask's model it reads")
    assert_refused(run_cli("eval", "--mask", mask_path, "--data-dir", tiny_stsb_dir, "--tasks", "STSBenchmark",
                           "--out", link / "r.json"), "would overwrite the mask's model it reads")
    assert_refused(run_cli("rewind", "--mask", mask_path, "--corpus", small_corpus, "--out", link, "--overwrite"),
                   "would overwrite")
    assert_refused(run_cli("export", "--model", other, "--quantize", "int8", "--calibration", small_corpus,
                           "--out", small_corpus, "--overwrite"), "would overwrite the calibration corpus it reads")
    assert file_tree(scored) == before


def test_model_values_that_name_nothing_fail_at_once(tmp_path, monkeypatch, tiny_stsb_dir):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    cases = {"": "--model is empty", "runs/l6-ensemble": "No such model directory: runs/l6-ensemble",
             "loop-a": "leads nowhere", "dangling": "leads nowhere"}
    for value, phrase in cases.items():
        started = time.monotonic()
        result = run_cli("eval", "--model", value, "--data-dir", tiny_stsb_dir, "--tasks", "STSBenchmark")
        assert_refused(result, phrase)
        assert (value == "" or "hub" not in result.output.lower()) and time.monotonic() - started < 10


def test_values_are_compared_and_quoted_as_given(tmp_path, tiny_bert_dir, tiny_stsb_dir):
    from sparsecse.pruning.grid import check_sparsity, parse_grid

    scores = tmp_path / "s.safetensors"
    assert run_cli("score", "--model", tiny_bert_dir, "--data-dir", tiny_stsb_dir, "--out", scores).exit_code == 0
    assert_refused(run_cli("prune", "--scores", scores, "--sparsity", "0.25", "--lambda", "1.00000000001",
                           "--out", tmp_path / "m.safetensors"), "got 1.00000000001")
    assert_refused(run_cli("prune", "--scores", scores, "--keep-flops", "1e-11", "--out", tmp_path / "m.safetensors"),
                   "budget of 1e-11")
    assert parse_grid("0.99999999999") == [0.99999999999] and check_sparsity(0.99999999999) == 0.99999999999
    assert parse_grid("0.1:0.3:0.1") == [0.1, 0.2, 0.3]  # ranges still land on round values
    assert parse_grid("0.99999999999:0.99999999999:0.1") == [0.99999999999]
    assert not (tmp_path / "m.safetensors").exists()


def test_a_key_given_twice_and_a_nul_byte_are_refused(tmp_path, tiny_bert_dir):
    from sparsecse.data.corpus import read_corpus
    from sparsecse.objectives.registry import parse_objective_args

    with pytest.raises(SparseCSEError, match="'temperature' is given twice"):
        parse_objective_args("temperature=0.05,temperature=0.1")
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"a fine line\nanother one\nthird \x00 line\n")
    with pytest.raises(SparseCSEError, match="NUL byte on line 3"):
        read_corpus(corpus)
    result = run_cli("train", "--model", tiny_bert_dir, "--corpus", corpus, "--out", tmp_path / "o",
                     "--objective-args", "temperature=0.05,temperature=0.1")
    assert_refused(result, "given twice")


def test_bootstrap_is_bounded_and_sets_every_interval(tiny_bert_dir, fake_senteval):
    from sparsecse.evaluation.bootstrap import MAX_REPLICATES

    result = run_cli("eval", "--model", tiny_bert_dir, "--bootstrap", "99999999999999999999999")
    assert result.exit_code == 2 and f"{MAX_REPLICATES}" in result.output
    result = run_cli("eval", "--model", tiny_bert_dir, "--data-dir", fake_senteval, "--tasks", "TREC",
                     "--bootstrap", "20", "--transfer-protocol", "fast", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["bootstrap"]["replicates"] == 20 and "TREC" in payload["bootstrap"]["tasks"]
    assert payload["details"]["TREC"]["ci_replicates"] == 20
    assert_refused(run_cli("eval", "--model", tiny_bert_dir, "--data-dir", fake_senteval, "--tasks", "MR",
                           "--bootstrap", "20"), "spread of their folds")


@pytest.mark.parametrize("args", [["--calibration-seed", "-1"], ["--calibration-seed", str(2**64)]])
def test_calibration_seed_is_a_seed_like_every_other(args, tiny_bert_dir, tmp_path):
    result = run_cli("export", "--model", tiny_bert_dir, "--out", tmp_path / "e", *args)
    assert result.exit_code == 2 and "is not in the range" in result.output


def test_compress_refuses_an_impossible_budget_before_scoring(tiny_bert_dir, tiny_stsb_dir, small_corpus,
                                                              tmp_path, monkeypatch):
    from sparsecse.shrinking import iterative

    def never(*args, **kwargs):
        raise AssertionError("scored before the budget was checked")

    monkeypatch.setattr(iterative, "score_model", never)
    result = run_cli("compress", "--model", tiny_bert_dir, "--keep-flops", "1e-9", "--reconstruct", small_corpus,
                     "--data-dir", tiny_stsb_dir, "--out", tmp_path / "c")
    assert_refused(result, "budget of 1e-09 keeps no head and no neuron")


def test_sweep_asks_for_consent_before_any_work(tmp_path, tiny_bert_dir, tiny_stsb_dir, small_corpus):
    evil = tmp_path / "evil"
    shutil.copytree(tiny_bert_dir, evil)
    (evil / "modeling_evil.py").write_text("raise SystemExit('never imported')\n")
    config = json.loads((evil / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "modeling_evil.EvilModel"}
    (evil / "config.json").write_text(json.dumps(config))
    out = tmp_path / "sweep"
    result = run_cli("sweep", "--model", tiny_bert_dir, "--data-dir", tiny_stsb_dir, "--sparsities", "0.25",
                     "--lambdas", "0.5", "--tasks", "STSBenchmark", "--rewind", "--corpus", small_corpus, "--init",
                     evil, "--out", out, "--quiet")
    assert_refused(result, "ships its own Python code", "--trust-remote-code")
    assert not list(out.rglob("*.safetensors"))  # nothing scored, pruned or evaluated
