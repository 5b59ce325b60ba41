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
from sparsecse.evaluation.sts import spearman100


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
    """``results`` minus the per-pair arrays and the dev/test sets' per-item values (for printing)."""
    out = {k: v for k, v in results.items() if k != "pairs"}
    if out.get("eval_sets"):
        out["eval_sets"] = {role: {k: v for k, v in figures.items() if k != "items"}
                            for role, figures in out["eval_sets"].items()}
    return out


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
    try:
        for task, pairs in results["pairs"].items():
            n = data["pairs"].get(task)
            if not (len(pairs["similarity"]) == len(pairs["gold"]) == n == sum(pairs["subsets"].values())):
                raise SparseCSEError(f"{path}: the {task} pairs do not match the recorded pair count {n}.")
            for key in ("similarity", "gold"):
                pairs[key] = np.asarray([np.nan if v is None else v for v in pairs[key]], dtype=np.float64)
            check_recorded_score(path, task, pairs, results["scores"].get(task), data.get("aggregation", "all"))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SparseCSEError(f"{path} is not a well-formed result file from `sparsecse eval --out` "
                             f"({type(exc).__name__}: {exc}).") from None
    return results


SCORE_TOLERANCE = 1e-6  # Spearman x 100: the same numbers give the same score to the last few bits


def check_recorded_score(path, task: str, pairs: dict, recorded, aggregation: str) -> None:
    """The ``task`` score a result file records must be the one its per-pair similarities and gold scores
    give (recomputed here); NaN or infinite values, or a score that does not follow from the pairs (edited
    similarities, reordered gold scores), are refused in one sentence naming the file and the task."""
    for key, what in (("similarity", "per-pair similarities"), ("gold", "gold scores")):
        bad = np.flatnonzero(~np.isfinite(pairs[key]))
        if bad.size:
            raise SparseCSEError(f"{path}: the {task} {what} hold {bad.size} value(s) that are not finite numbers "
                                 f"(first at pair {int(bad[0])}), so its pairs cannot be compared.")
    if not isinstance(recorded, (int, float)) or isinstance(recorded, bool) or not np.isfinite(recorded):
        raise SparseCSEError(f"{path}: the recorded {task} score {recorded!r} is not a finite number.")
    sizes = [int(n) for n in pairs["subsets"].values()]
    bounds = np.cumsum([0, *sizes])
    sims, gold = pairs["similarity"], pairs["gold"]
    if aggregation not in ("all", "mean", "wmean"):
        raise SparseCSEError(f"{path}: the recorded STS aggregation {aggregation!r} is not all, mean or wmean.")
    if aggregation == "all":
        recomputed = spearman100(sims, gold)
    else:
        per_subset = [spearman100(sims[a:b], gold[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
        weights = sizes if aggregation == "wmean" else [1] * len(sizes)
        recomputed = float(np.dot(per_subset, weights) / sum(weights))
    if not abs(recomputed - float(recorded)) <= SCORE_TOLERANCE:
        raise SparseCSEError(f"{path}: the recorded {task} score {recorded} is not what its per-pair similarities "
                             f"and gold scores give ({recomputed}); the file was edited or damaged, so it cannot be "
                             "compared.")


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
