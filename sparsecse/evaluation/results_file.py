"""Result files of ``sparsecse eval --out``: scores, manifest and, per STS task, the per-pair similarities
and gold scores with a fingerprint of the data, so that ``compare`` can pair two evaluations later."""

from __future__ import annotations

import json
from collections.abc import Mapping
import os
from pathlib import Path
from typing import Any

import numpy as np

from sparsecse.errors import SparseCSEError
from sparsecse.artifacts.files import atomic_file, dumps_json
from sparsecse.artifacts.files import load_tensors
from sparsecse.artifacts.files import save_tensors


def _plain(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Mapping):  # a dict, or an EvaluationResult
        return {k: _plain(v) for k, v in value.items()}
    return value


def save_results(path: str | os.PathLike, results: dict[str, Any], manifest: dict[str, Any],
                 overwrite: bool = False) -> Path:
    """Write ``results`` (with its ``pairs``) and ``manifest`` as one JSON file, atomically."""
    with atomic_file(path, overwrite=overwrite) as tmp:
        tmp.write_text(dumps_json({**_plain(results), "manifest": manifest}, indent=1) + "\n")
    return Path(path)


def without_pairs(results: dict[str, Any]) -> dict[str, Any]:
    """``results`` minus the per-pair arrays (for printing)."""
    return {k: v for k, v in results.items() if k != "pairs"}


def load_results(path: str | os.PathLike) -> dict[str, Any]:
    """A result file with per-pair similarities, checked to be one that ``eval --out`` wrote."""
    path = Path(path)
    if not path.is_file():
        raise SparseCSEError(f"The result file {path} does not exist.")
    try:
        results = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise SparseCSEError(f"{path} is not a JSON result file from `sparsecse eval --out`.") from None
    if not isinstance(results, dict) or "scores" not in results:
        raise SparseCSEError(f"{path} is not a result file from `sparsecse eval --out`.")
    if not results.get("pairs") or not results.get("data"):
        raise SparseCSEError(f"{path} holds no per-pair STS similarities; evaluate STS tasks with "
                             "`sparsecse eval --out` to write them.")
    data = results["data"]
    for task, pairs in results["pairs"].items():
        n = data["pairs"].get(task)
        if not (len(pairs["similarity"]) == len(pairs["gold"]) == n == sum(pairs["subsets"].values())):
            raise SparseCSEError(f"{path}: the {task} pairs do not match the recorded pair count {n}.")
        pairs["similarity"] = np.asarray(pairs["similarity"], dtype=np.float64)
        pairs["gold"] = np.asarray(pairs["gold"], dtype=np.float64)
    return results


def save_pairs(path: str | os.PathLike, pairs: dict[str, dict]) -> Path:
    """Per-task similarities and gold scores as a safetensors file (subset sizes in its manifest)."""
    import torch


    tensors = {f"{task}/{key}": torch.as_tensor(np.asarray(p[key], dtype=np.float64))
               for task, p in pairs.items() for key in ("similarity", "gold")}
    return save_tensors(path, tensors, {"kind": "sts_pairs", "subsets": {t: dict(p["subsets"]) for t, p in pairs.items()}},
                        overwrite=True)


def load_pairs(path: str | os.PathLike) -> dict[str, dict]:
    """What :func:`save_pairs` wrote: {task: {"similarity", "gold", "subsets"}}."""

    tensors, manifest = load_tensors(path, what="pair similarity file")
    return {task: {"similarity": tensors[f"{task}/similarity"].numpy(), "gold": tensors[f"{task}/gold"].numpy(),
                   "subsets": sizes} for task, sizes in manifest.get("subsets", {}).items()}
