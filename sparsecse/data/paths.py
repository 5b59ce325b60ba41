"""Where the SentEval-layout data lives: --data-dir, then $SPARSECSE_DATA, then a per-user cache."""

from __future__ import annotations

import os
from pathlib import Path

from sparsecse.errors import SparseCSEError

ENV_VAR = "SPARSECSE_DATA"


def user_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sparsecse" / "senteval"


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The data directory to use, checked to exist; the error says where we looked."""
    if data_dir:
        where, path = "--data-dir", Path(data_dir)
    elif os.environ.get(ENV_VAR):
        where, path = f"${ENV_VAR}", Path(os.environ[ENV_VAR])
    else:
        where, path = "the user cache directory", user_cache_dir()
    path = path.expanduser()
    if not path.is_dir():
        raise SparseCSEError(
            f"The data directory {path} (from {where}) does not exist; pass --data-dir or set ${ENV_VAR} "
            f"to a SentEval-layout folder."
        )
    return path


def task_path(data_dir: str | os.PathLike | None, *parts: str, task: str) -> Path:
    """A file or folder inside the data directory, with an error naming the task if it is missing."""
    path = resolve_data_dir(data_dir).joinpath(*parts)
    if not path.exists():
        raise SparseCSEError(f"The {task} data is missing: {path} does not exist.")
    return path
