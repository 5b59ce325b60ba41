"""Every path a command reads, spelled out for the one check that its ``--out`` is none of them.

:func:`sparsecse.artifacts.destinations.check_destination` compares ``--out`` with each path after resolving
symlinks; this module turns what the user typed into those paths:

- a model value (``--model``, ``--init``, a teacher, left out or a short name included) -> the local
  directory it loads from: the embedded default model, an installed model, a directory
  (:func:`~sparsecse.artifacts.model_names.local_model_dir`);
- a mask -> the mask file, its JSON manifest and the model directory the manifest records;
- a score file -> the file and its JSON manifest;
- any other file (corpus, calibration corpus, result file, recipe, dev and test sets) or directory (data,
  local mteb task) -> itself;
- always: the model store (where ``sparsecse models install`` unpacks models; a new output may go inside
  it, never over an installed model) and the folders of ``$SPARSECSE_MODELS`` (never over one of them).

Example::

    check_destination(out, overwrite, inputs=read_inputs(model=model, mask=mask_path, corpus=corpus))
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

from sparsecse.artifacts.files import MANIFEST_KEY
from sparsecse.artifacts.model_names import MODELS_ENV, local_model_dir
from sparsecse.artifacts.model_store import cache_root

# the keyword arguments of read_inputs that name models, and what the message calls each
MODEL_KINDS = {"model": "model", "init": "initial checkpoint", "teacher": "teacher", "scored_model": "scored model",
               "compare_with": "comparison model"}
FILE_KINDS = {"corpus": "corpus", "calibration": "calibration corpus", "results": "result file",
              "data_dir": "data directory", "scores": "score file", "mask": "mask", "dev": "dev set",
              "test": "test set", "recipe": "recipe", "mteb": "local mteb task"}


def _sidecar(path: str) -> str:
    p = Path(path)
    return str(p.with_suffix(".json") if p.suffix == ".safetensors" else p.with_name(p.name + ".json"))


def recorded_model(mask_or_scores: str | os.PathLike) -> str | None:
    """The ``model`` a mask's or score file's manifest records (embedded, else its JSON sidecar), or None."""
    path = str(mask_or_scores)
    manifest: Any = None
    try:
        from safetensors import safe_open

        with safe_open(path, framework="pt") as f:
            manifest = json.loads((f.metadata() or {}).get(MANIFEST_KEY, "null"))
    except Exception:  # unreadable: the command itself says so in one sentence
        manifest = None
    if not isinstance(manifest, dict):
        try:
            manifest = json.loads(Path(_sidecar(path)).read_text())
        except (OSError, ValueError):
            return None
    model = manifest.get("model") if isinstance(manifest, dict) else None
    return str(model) if isinstance(model, str) and model else None


def _as_list(value) -> list:
    if value is None:
        return []
    if isinstance(value, (list, tuple, set)):
        return [v for v in value if v is not None]
    return [value]


def model_inputs(values: Iterable, explicit_default: bool = True) -> list[str]:
    """The local directories of model values (None = the default model when ``explicit_default``)."""
    found = []
    for value in values:
        if value is None and not explicit_default:
            continue
        path = local_model_dir(value)
        if path is not None:
            found.append(path)
    return found


def model_folders() -> list[str]:
    """The folders ``$SPARSECSE_MODELS`` lists (local copies of models, found by name)."""
    return [p for p in os.environ.get(MODELS_ENV, "").split(os.pathsep) if p.strip()]


def read_inputs(**named) -> dict[str, list[str]]:
    """{what it is: [paths]} for every path a command reads; see the module's docstring.

    Keywords: ``model``, ``init``, ``teacher``, ``scored_model``, ``compare_with`` (model values;
    ``model=None`` is the default model; pass ``default_model=False`` where a left-out ``--model`` means
    another model, as for ``shrink --mask``), ``mask`` and ``scores`` (file plus manifest, and the model a
    mask records), ``corpus``, ``calibration``, ``results``, ``data_dir``, ``dev`` and ``test`` (a pairs
    file; a task name names no path), ``recipe``, ``mteb`` (local task directories); any other keyword is a
    plain path. The model store and the ``$SPARSECSE_MODELS`` folders are always among the inputs."""
    default_model = named.pop("default_model", True)
    inputs: dict[str, list[str]] = {"model store": [str(cache_root() / "models")],
                                    "model folder": model_folders()}

    def add(name: str, paths: Iterable) -> None:
        paths = [os.fspath(p) for p in paths if isinstance(p, (str, os.PathLike)) and str(p) != ""]
        if paths:
            inputs.setdefault(name, []).extend(paths)

    for key, value in named.items():
        if key in MODEL_KINDS:  # a loaded model or a plan object is no path
            values = _as_list(value) if value is not None else ([None] if key == "model" and default_model else [])
            add(MODEL_KINDS[key], model_inputs(values))
        elif key in ("mask", "scores"):
            for path in _as_list(value):
                add(FILE_KINDS[key], [path])
                add(f"{FILE_KINDS[key]}'s manifest", [_sidecar(str(path))])
                if key == "mask":
                    add("mask's model", model_inputs([recorded_model(path)], explicit_default=False))
        else:
            add(FILE_KINDS.get(key, key.replace("_", " ")), _as_list(value))
    return {name: paths for name, paths in inputs.items() if paths}
