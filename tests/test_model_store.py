"""The model store on its own: names and aliases, resolving, installing from part wheels, refusing damaged or
unsafe archives, listing and removing. A small stand-in directory replaces the 420 MB model."""

import json
import zipfile

import pytest

from sparsecse.artifacts import model_store
from sparsecse.errors import SparseCSEError
from tests.helpers import fake_part_wheels

MODEL = model_store.KNOWN_MODELS["all-mpnet-base-v2"]


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSECSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "cache"


@pytest.fixture()
def source(tmp_path):
    """A directory with every file the store requires (stand-in contents)."""
    root = tmp_path / "source"
    for name in MODEL.required_files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(json.dumps({"file": name}))
    return root


def test_names_and_aliases_find_the_model():
    assert model_store.lookup("all-mpnet-base-v2") is MODEL
    assert model_store.lookup("sentence-transformers/all-mpnet-base-v2") is MODEL
    assert model_store.lookup("bert-base-uncased") is None
    assert model_store.resolve("bert-base-uncased") is None


def test_a_missing_model_names_the_install_command_offline(cache, monkeypatch):
    with pytest.raises(SparseCSEError, match="sparsecse models install all-mpnet-base-v2"):
        model_store.resolve("all-mpnet-base-v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # online, a hub name goes to the hub unchanged
    assert model_store.resolve("sentence-transformers/all-mpnet-base-v2") == "sentence-transformers/all-mpnet-base-v2"


def test_install_unpacks_records_lists_and_removes(cache, source, tmp_path):
    record = model_store.install("all-mpnet-base-v2", wheels=fake_part_wheels(source, tmp_path / "wheels"))
    path = cache / "models" / "all-mpnet-base-v2"
    assert record["path"] == str(path) and not record["already_installed"]
    assert record["packages"] == list(MODEL.packages)
    assert sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()) == sorted(
        list(MODEL.required_files) + [model_store.INSTALL_RECORD])  # desktop.ini left out
    assert json.loads((path / "config.json").read_text()) == {"file": "config.json"}
    assert model_store.resolve("sentence-transformers/all-mpnet-base-v2") == str(path)
    assert model_store.listing()[0]["installed"]
    assert model_store.install("all-mpnet-base-v2", wheels=[])["already_installed"]
    assert model_store.remove("all-mpnet-base-v2")
    assert model_store.installed_path("all-mpnet-base-v2") is None
    assert not model_store.remove("all-mpnet-base-v2")


def test_wrong_part_count_leaves_nothing_in_the_cache(cache, source, tmp_path):
    wheels = fake_part_wheels(source, tmp_path / "wheels")
    with pytest.raises(SparseCSEError, match="needs 5 part wheels, got 4"):
        model_store.install("all-mpnet-base-v2", wheels=wheels[:4])
    assert model_store.installed_path("all-mpnet-base-v2") is None
    assert not (cache / "models" / "all-mpnet-base-v2").exists()


def test_archives_with_unsafe_paths_or_missing_files_are_refused(tmp_path):
    unsafe = tmp_path / "unsafe.zip"
    with zipfile.ZipFile(unsafe, "w") as z:
        z.writestr("../evil.txt", "x")
    with zipfile.ZipFile(unsafe) as z, pytest.raises(SparseCSEError, match="unsafe path"):
        model_store.check_archive(MODEL, z)
    partial = tmp_path / "partial.zip"
    with zipfile.ZipFile(partial, "w") as z:
        z.writestr("all-mpnet-base-v2/config.json", "{}")
    with zipfile.ZipFile(partial) as z, pytest.raises(SparseCSEError, match="lacks model.safetensors"):
        model_store.check_archive(MODEL, z)
