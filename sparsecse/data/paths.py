"""Where the SentEval-layout data lives: --data-dir, then $SPARSECSE_DATA, then a per-user cache (or, when it
is not there, the repository's ``../shared/data/senteval``)."""

from __future__ import annotations

import os
from pathlib import Path

from sparsecse.errors import SparseCSEError

ENV_VAR = "SPARSECSE_DATA"


def user_cache_dir() -> Path:
    """Where downloaded SentEval data is kept by default (``$XDG_CACHE_HOME/sparsecse/senteval``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sparsecse" / "senteval"


DOWNLOAD_COMMAND = "sparsecse data download"


def repository_data_dir() -> Path | None:
    """``../shared/data/senteval`` beside the source checkout sparsecse is imported from (the repository's
    layout, which the README's commands use), when it holds the STS data; None otherwise (an installed
    wheel, or a checkout without it)."""
    checkout = Path(__file__).resolve().parents[2]
    if not (checkout / "setup.cfg").is_file() and not (checkout / "pyproject.toml").is_file():
        return None
    candidate = checkout.parent / "shared" / "data" / "senteval"
    return candidate if (candidate / "STS").is_dir() else None


def download_dir() -> tuple[str, Path]:
    """Where ``sparsecse data download`` puts the data without ``--to``: $SPARSECSE_DATA, else the
    per-user cache (``~/.cache/sparsecse/senteval``)."""
    if os.environ.get(ENV_VAR):
        return f"${ENV_VAR}", Path(os.environ[ENV_VAR]).expanduser()
    return "the user cache directory", user_cache_dir()


def default_data_dir() -> tuple[str, Path]:
    """Where commands look without --data-dir, and what chose it, in this order: $SPARSECSE_DATA; the
    per-user cache (``~/.cache/sparsecse/senteval``) if it exists; the repository's
    ``../shared/data/senteval`` if sparsecse runs from a checkout that has it; else the per-user cache
    (where ``sparsecse data download`` puts the data).

    >>> default_data_dir()[0] in ("$SPARSECSE_DATA", "the user cache directory", "the repository's shared data")
    True
    """
    where, path = download_dir()
    if where == f"${ENV_VAR}" or path.is_dir():
        return where, path
    shared = repository_data_dir()
    if shared is not None:
        return "the repository's shared data", shared
    return where, path


def download_hint(path: Path, default: bool) -> str:
    """The command that fills ``path`` with the SentEval data (``--to`` only if it is not the default)."""
    return f"`{DOWNLOAD_COMMAND}`" if default else f"`{DOWNLOAD_COMMAND} --to {path}`"


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The data directory to use, checked to exist; the error says where we looked and how to get the data."""
    if data_dir:
        where, path = "--data-dir", Path(data_dir).expanduser()
    else:
        where, path = default_data_dir()
    if not path.is_dir():
        raise SparseCSEError(
            f"The data directory {path} (from {where}) does not exist; {download_hint(path, where != '--data-dir')} "
            f"fetches the SentEval data there, or pass --data-dir / set ${ENV_VAR} to a SentEval-layout folder."
        )
    return path


def task_path(data_dir: str | os.PathLike | None, *parts: str, task: str) -> Path:
    """A file or folder inside the data directory, with an error naming the task if it is missing."""
    root = resolve_data_dir(data_dir)
    path = root.joinpath(*parts)
    if not path.exists():
        raise SparseCSEError(f"The {task} data is missing: {path} does not exist; `{DOWNLOAD_COMMAND} --force "
                             f"--to {root}` replaces {root} with the complete SentEval set.")
    return path
