"""Damaged or hostile files and values that once ended in a traceback: each is refused in one sentence, exit 1
(an out-of-range opset, a symlink loop, pickled weights, a damaged OpenVINO directory, launcher configs, a directory
that becomes unwritable)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from sparsecse.errors import SparseCSEError
from tests.cli_checks import assert_refused, run_cli
from tests.tiny import make_tiny_model_dir


def test_export_opset_out_of_range_and_symlink_loop_out(tiny_bert_dir, tmp_path):
    result = run_cli("export", "--model", tiny_bert_dir, "--opset", "99", "--out", tmp_path / "e")
    assert_refused(result, "--opset must be between 14 and")
    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(loop)
    for command in (["export", "--model", tiny_bert_dir], ["shrink", "--model", tiny_bert_dir, "--mask", "x"]):
        assert_refused(run_cli(*command, "--out", loop), "is a symbolic link that loops")


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
    result = run_cli("eval", "--model", model, "--data-dir", tiny_stsb_dir, "--tasks", "STSBenchmark")
    assert_refused(result, "cannot be loaded safely")
    (dense / "pytorch_model.bin").unlink()
    (dense / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{\"a\":")  # truncated
    assert_refused(run_cli("eval", "--model", model, "--data-dir", tiny_stsb_dir, "--tasks", "STSBenchmark"),
                   "not a readable safetensors file")


@pytest.fixture(scope="module")
def openvino_dir(tmp_path_factory):
    pytest.importorskip("openvino")
    from sparsecse.exporting.export import export

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
    result = run_cli("eval", "--model", copy, "--data-dir", tiny_stsb_dir, "--tasks", "STSBenchmark")
    assert_refused(result, "The OpenVINO")


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
