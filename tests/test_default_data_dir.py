"""Where the SentEval data is found when no --data-dir and no SPARSECSE_DATA are given."""

from __future__ import annotations

from pathlib import Path

import pytest


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
