"""No command loses a file: inputs never overwritten, one writer per output, stale temporaries
cleaned, late OS errors as one sentence, outputs with the user's umask, masks tied to their model."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import threading
from pathlib import Path

import pytest
import torch

from sparsecse.errors import SparseCSEError
from sparsecse.artifacts.files import atomic_dir, atomic_file, save_tensors
from sparsecse.pruning.masks import Mask, model_for_mask
from tests.tiny import make_tiny_model_dir
from tests.helpers import cli


@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
def test_export_refuses_to_write_over_its_model(tmp_path, fmt):
    pytest.importorskip(fmt)
    model = make_tiny_model_dir(tmp_path / "m", "bert")
    before = sorted(p.name for p in model.iterdir())
    for out in (model, model / "onnx", tmp_path):
        result = cli("export", "--format", fmt, "--model", model, "--out", out, "--overwrite")
        assert result.exit_code == 1 and "would overwrite the model it reads" in result.output, result.output
    assert sorted(p.name for p in model.iterdir()) == before


def test_second_concurrent_writer_is_refused_and_the_first_survives(tmp_path):
    out = tmp_path / "out"
    inside, release, outcome = threading.Event(), threading.Event(), {}

    def first():
        with atomic_dir(out) as tmp:
            (tmp / "who").write_text("first")
            inside.set()
            release.wait(10)
        outcome["first"] = "done"

    thread = threading.Thread(target=first)
    thread.start()
    assert inside.wait(10)
    with pytest.raises(SparseCSEError, match="being written by another process"):
        with atomic_dir(out, overwrite=True) as tmp:
            (tmp / "who").write_text("second")
    release.set()
    thread.join()
    assert outcome == {"first": "done"} and (out / "who").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no lock, no temporary left


def test_finished_writer_then_second_without_overwrite_is_refused(tmp_path):
    out = tmp_path / "f.json"
    with atomic_file(out) as tmp:
        tmp.write_text("1")
    with pytest.raises(SparseCSEError, match="already exists"):
        with atomic_file(out) as tmp:
            tmp.write_text("2")
    assert out.read_text() == "1"


def test_stale_temporaries_of_dead_runs_are_cleaned(tmp_path):
    out = tmp_path / "model"
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    stale = tmp_path / f".model.{dead}.abcd.tmp"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"x" * 100)
    live = tmp_path / f".model.{os.getppid()}.efgh.tmp"  # a process that still runs keeps its temporary
    live.mkdir()
    with atomic_dir(out) as tmp:
        (tmp / "a").write_text("a")
    assert not stale.exists() and live.exists() and (out / "a").read_text() == "a"


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_full_disk_is_one_sentence_and_leaves_nothing(tmp_path, monkeypatch):
    mask = Mask.full(2, 4, 48)
    monkeypatch.setattr("safetensors.torch.save_file", _enospc)
    with pytest.raises(SparseCSEError, match=r"Cannot write .*No space left on device.*nothing was written"):
        mask.save(tmp_path / "m.safetensors")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SparseCSEError, match="No space left"):
        with atomic_dir(tmp_path / "d") as tmp:
            _enospc()
    assert list(tmp_path.iterdir()) == []


def test_full_disk_through_the_cli(tmp_path, tiny_bert_dir, monkeypatch):
    mask = Mask.full(2, 4, 48)
    mask.manifest = {"kind": "mask", "model": str(tiny_bert_dir)}
    mask_path = mask.save(tmp_path / "m.safetensors")
    monkeypatch.setattr("transformers.modeling_utils.safe_save_file", _enospc)  # the weights writer
    result = cli("shrink", "--model", tiny_bert_dir, "--mask", mask_path, "--out", tmp_path / "small")
    assert result.exit_code == 1 and "No space left on device" in result.output, result.output
    last = result.output.strip().splitlines()[-1]  # after the progress bars: one sentence, no traceback
    assert last.startswith("Error: Cannot write") and last.endswith("nothing was written.")
    assert isinstance(result.exception, SystemExit)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "m.safetensors"]


def test_prune_out_existing_directory_is_one_sentence_without_leftovers(tmp_path, tiny_bert_dir, tiny_stsb_dir):
    scores = tmp_path / "s.safetensors"
    assert cli("score", "--model", tiny_bert_dir, "--data-dir", tiny_stsb_dir, "--out", scores).exit_code == 0
    target = tmp_path / "dir"
    target.mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    result = cli("prune", "--scores", scores, "--sparsity", "0.1", "--out", target, "--overwrite")
    assert result.exit_code == 1 and "is a directory" in result.output and result.output.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before and list(target.iterdir()) == []


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_outputs_follow_the_umask(tmp_path, tiny_bert_dir, umask):
    from sparsecse.shrinking.shrink import shrink

    heads = torch.tensor([[True, False, True, True], [True, True, True, True]])
    mask = Mask(heads, torch.ones(2, 48, dtype=torch.bool))
    mask.manifest = {"kind": "mask", "model": str(tiny_bert_dir)}
    old = os.umask(umask)
    try:
        mask_path = mask.save(tmp_path / "m.safetensors")
        out = shrink(model=tiny_bert_dir, mask=mask_path, out=tmp_path / "small").out
    finally:
        os.umask(old)
    files = [mask_path, out / "model.safetensors", out / "config.json"]
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~umask, f
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~umask


def test_mask_records_absolute_model_and_checks_its_digest(tmp_path, tiny_stsb_dir, monkeypatch):
    model = make_tiny_model_dir(tmp_path / "tiny", "bert")
    monkeypatch.chdir(tmp_path)
    assert cli("score", "--model", "tiny", "--data-dir", tiny_stsb_dir, "--out", "s.safetensors").exit_code == 0
    assert cli("prune", "--scores", "s.safetensors", "--sparsity", "0.1", "--out", "m.safetensors").exit_code == 0
    mask = Mask.load(tmp_path / "m.safetensors")
    assert mask.manifest["model"] == str(model.resolve()) and len(mask.manifest["model_sha256"]) == 64
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    make_tiny_model_dir(other / "tiny", "bert", seed=1)  # same name, same shape, other weights
    assert model_for_mask(mask) == str(model.resolve())
    shutil.rmtree(model)
    make_tiny_model_dir(model, "bert", seed=2)  # replaced in place
    with pytest.raises(SparseCSEError, match="not the one the mask was made for"):
        model_for_mask(mask)
    result = cli("shrink", "--mask", tmp_path / "m.safetensors", "--out", other / "small")
    assert result.exit_code == 1 and "not the one the mask was made for" in result.output


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_pseudo_file_system_destination_is_refused_before_work(tmp_path, tiny_bert_dir):
    from sparsecse.artifacts.destinations import check_destination

    with pytest.raises(SparseCSEError, match="files cannot be created in /proc"):
        check_destination("/proc/sparsecse-out")
    result = cli("export", "--model", tiny_bert_dir, "--out", "/proc/sparsecse-out")
    assert result.exit_code == 1 and "Cannot write --out /proc/sparsecse-out" in result.output
    assert check_destination(tmp_path / "fine") == tmp_path / "fine" and list(tmp_path.iterdir()) == []


def test_concurrent_file_writers_without_overwrite_one_refused_with_overwrite_in_turn(tmp_path):
    out = tmp_path / "state.json"
    inside, release, errors = threading.Event(), threading.Event(), []

    def first():
        with atomic_file(out) as tmp:
            tmp.write_text("first")
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=first)
    thread.start()
    assert inside.wait(10)
    with pytest.raises(SparseCSEError, match="being written by another process"):
        with atomic_file(out) as tmp:
            tmp.write_text("second")

    def second_overwriting():
        try:
            with atomic_file(out, overwrite=True) as tmp:
                tmp.write_text("second")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    waiter = threading.Thread(target=second_overwriting)
    waiter.start()
    release.set()
    thread.join()
    waiter.join()
    assert errors == [] and out.read_text() == "second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
