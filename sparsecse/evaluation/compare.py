"""``compare``: B - A on the STS tasks with paired-bootstrap intervals and p-values.

A and B are models (each optionally gated by a mask) or result files written by ``sparsecse eval
--out``. Both must have scored the same pairs (checked by the data fingerprint); each replicate
resamples the pairs once and scores both on that resample.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.config import EvaluationConfig
from sparsecse.evaluation.bootstrap import LEVEL, P_VALUE_TEST, check_replicates, paired_comparison
from sparsecse.evaluation.eval_sets import paired_difference, same_set
from sparsecse.evaluation.mteb_items import compare_items, has_items_only
from sparsecse.evaluation.results_file import load_results
from sparsecse.evaluation.tasks import STS_TASKS, resolve_tasks
from sparsecse.artifacts.remote_code import with_trust_option
from sparsecse.evaluation.runner import evaluate
from sparsecse.evaluation.runner import task_pairs
from sparsecse.stage_config import stage_config

SIDES = ("A", "B")


def is_result_file(source) -> bool:
    """A result file is an existing file; a model is a directory or a Hugging Face name."""
    return isinstance(source, (str, os.PathLike)) and Path(source).is_file()


def _sts_only(tasks) -> list[str] | None:
    if tasks is None:
        return None
    names = resolve_tasks(tasks)
    other = [t for t in names if t not in STS_TASKS]
    if other:
        raise SparseCSEError(f"compare works on STS tasks (per-pair similarities), not on {', '.join(other)}.")
    return names


def _restrict(results: dict, tasks: list[str] | None, name: str) -> dict:
    """The result file's scores, pairs and fingerprint limited to ``tasks``."""
    if tasks is None:
        return results
    missing = [t for t in tasks if t not in results["pairs"]]
    if missing:
        raise SparseCSEError(f"The result file {name} has no per-pair similarities for {', '.join(missing)}.")
    data = results["data"]
    keep = {**data, "tasks": tasks, "pairs": {t: data["pairs"][t] for t in tasks},
            "sha256": {t: data["sha256"][t] for t in tasks}}
    return {**results, "data": keep, "pairs": {t: results["pairs"][t] for t in tasks},
            "scores": {t: results["scores"][t] for t in tasks}}


def data_difference(a: dict, b: dict) -> str | None:
    """The first way two data fingerprints differ, in words; None when they match."""
    if list(a["tasks"]) != list(b["tasks"]):
        return f"tasks {','.join(a['tasks'])} vs {','.join(b['tasks'])}"
    for key in ("split", "aggregation"):
        if a.get(key) != b.get(key):
            return f"STS {key} {a.get(key)} vs {b.get(key)}"
    for task in a["tasks"]:
        if a["pairs"][task] != b["pairs"][task]:
            return f"{task} with {a['pairs'][task]} vs {b['pairs'][task]} pairs"
        if a["sha256"][task] != b["sha256"][task]:
            return f"different {task} sentences or gold scores"
    return None


@dataclass(frozen=True)
class ComparisonConfig:
    """How two sides are compared: ``tasks`` (STS only; default: the result file's, else the 7 STS tasks),
    ``replicates`` of the paired bootstrap drawn with ``seed``, the interval ``level``; the rest is how a
    model side is evaluated (a result file's own split and aggregation win)."""

    tasks: str | list[str] | None = None
    data_dir: str | os.PathLike | None = None
    replicates: int = 1000
    seed: int = 0
    level: float = LEVEL
    sts_split: str = "test"
    sts_aggregation: str = "all"
    pooling: str | None = None
    batch_size: int | None = None
    device: str | None = None
    show_progress: bool = False


@with_trust_option
def compare(a=None, b=None, mask_a=None, mask_b=None, config: ComparisonConfig | None = None) -> dict[str, Any]:
    """B - A per STS task and for the average, with paired-bootstrap intervals and p-values.

    ``a`` and ``b``: a model (None = the embedded default, a name or directory; ``mask_a``/``mask_b``
    gate it) or a result file from ``sparsecse eval --out``. ``config`` (a :class:`ComparisonConfig`; None:
    its defaults) gives the tasks, the bootstrap and how models are evaluated; models
    are evaluated on the result file's split and aggregation when the other side is a file. Returns
    ``{"tasks": {task: {"a", "b", "diff", "ci", "p", "ci_unpaired"}}, "avg_sts": {...}, "a", "b",
    "replicates", "seed", "level", "test", "data"}``. Two result files of ``eval --mteb --out`` also give
    ``"mteb"``: B - A per mteb task both hold per-item values for, paired over its queries, pairs or test
    items (:func:`~sparsecse.evaluation.mteb_items.compare_items`); files of mteb tasks alone give only that.

    Example::

        compare("dense.json", "pruned.json", config=ComparisonConfig(replicates=1000))["avg_sts"]["ci"]
    """
    c = stage_config(ComparisonConfig, config, "compare()'s config")
    tasks, data_dir, replicates, seed, level = c.tasks, c.data_dir, c.replicates, c.seed, c.level
    names = _sts_only(tasks)
    check_replicates(replicates)
    if not 0 < level < 1:
        raise SparseCSEError(f"The interval level must be in (0, 1), not {level}.")
    sources, masks = {"A": a, "B": b}, {"A": mask_a, "B": mask_b}
    mteb_only = _mteb_only_files(sources)
    if mteb_only:
        return _compare_mteb_only(mteb_only, sources, masks, replicates, seed, level)
    loaded: dict[str, dict] = {}
    for side in SIDES:  # files first: they are cheap to check
        if is_result_file(sources[side]):
            if masks[side] is not None:
                raise SparseCSEError(f"--mask-{side.lower()} gates a model, but {side} is the result file "
                                     f"{sources[side]}.")
            loaded[side] = _restrict(load_results(sources[side]), names, str(sources[side]))
    if len(loaded) == 2:
        _check_same_data(loaded["A"], loaded["B"], sources)
    for side in SIDES:
        mask = masks[side]
        if isinstance(mask, (str, os.PathLike)) and not Path(mask).is_file():
            raise SparseCSEError(f"The mask file {mask} does not exist.")
    reference = next(iter(loaded.values()), None)
    for side in SIDES:
        if side in loaded:
            continue

        data = reference["data"] if reference else None
        loaded[side] = evaluate(model=sources[side], mask=masks[side], config=EvaluationConfig(
            tasks=data["tasks"] if data else names or "sts", data_dir=data_dir, pooling=c.pooling,
            batch_size=c.batch_size, device=c.device,
            sts_aggregation=data["aggregation"] if data else c.sts_aggregation,
            sts_split=data["split"] if data else c.sts_split, show_progress=c.show_progress, align_uniform=False,
            keep_pairs=True, **(eval_set_specs(reference) if reference else {})))
        reference = reference or loaded[side]
    _check_same_data(loaded["A"], loaded["B"], sources)


    data = loaded["A"]["data"]
    result = paired_comparison({t: p["similarity"] for t, p in loaded["A"]["pairs"].items()},
                               {t: p["similarity"] for t, p in loaded["B"]["pairs"].items()},
                               task_pairs(loaded["A"]["pairs"]), loaded["A"]["scores"], loaded["B"]["scores"],
                               replicates, seed, data["aggregation"], level)
    sets = _compare_eval_sets(loaded["A"], loaded["B"], sources, replicates, seed, level)
    return {
        "a": _describe(sources["A"], loaded["A"]), "b": _describe(sources["B"], loaded["B"]),
        "tasks": result["tasks"], "avg_sts": result["avg"], "replicates": replicates, "seed": seed, "level": level,
        "interval": "percentile of the paired replicates of B - A", "test": P_VALUE_TEST, "data": data,
        **({"eval_sets": sets} if sets else {}),
        **_mteb_rows(loaded, sources, replicates, seed, level),
    }


def _mteb_only_files(sources: dict) -> dict[str, dict] | None:
    """Both sides read, when either is a result file of mteb tasks alone (no STS pairs); else None."""
    files = {side: _read_json(s) if is_result_file(s) else None for side, s in sources.items()}
    if not any(isinstance(r, dict) and has_items_only(r) for r in files.values()):
        return None
    for side, r in files.items():
        if r is None:
            raise SparseCSEError(f"{side} ({_name(sources[side])}) is a model, but the other side holds mteb figures "
                                 "only; compare two result files of `sparsecse eval --mteb ... --out`.")
    return files


def _read_json(path) -> Any:
    """A file's JSON, or None when it is not JSON (``load_results`` then says so in its own words)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _mteb_rows(loaded: dict, sources: dict, replicates: int, seed: int, level: float) -> dict:
    rows = compare_items(loaded["A"], loaded["B"], (str(sources["A"]), str(sources["B"])), replicates, seed, level)
    return {"mteb": rows} if rows else {}


def _compare_mteb_only(files: dict, sources: dict, masks: dict, replicates: int, seed: int, level: float) -> dict:
    """B - A on the mteb tasks of two result files that hold no STS pairs."""
    for side in SIDES:
        if masks[side] is not None:
            raise SparseCSEError(f"--mask-{side.lower()} gates a model, but {side} is the result file {sources[side]}.")
    rows = _mteb_rows(files, sources, replicates, seed, level)
    if not rows:
        raise SparseCSEError(f"{sources['A']} and {sources['B']} share no mteb task with per-item values (queries, "
                             "pairs or test items), so nothing can be paired.")
    return {"a": _describe(sources["A"], files["A"]), "b": _describe(sources["B"], files["B"]), "tasks": {},
            "replicates": replicates, "seed": seed, "level": level,
            "interval": "percentile of the paired replicates of B - A", "test": P_VALUE_TEST, **rows}


def eval_set_specs(results: dict) -> dict[str, str]:
    """{"dev"/"test": the file or task} of the user's sets a result file scored (so a model side scores them too)."""
    return {role: f["set"].get("path") or f["set"]["task"] for role, f in (results.get("eval_sets") or {}).items()}


def _compare_eval_sets(a: dict, b: dict, sources: dict, replicates: int, seed: int, level: float) -> dict:
    """B - A on the user's dev/test sets both sides scored with per-item values (paired over pairs or queries)."""
    sets_a, sets_b = a.get("eval_sets") or {}, b.get("eval_sets") or {}
    out = {}
    for role in [r for r in sets_a if r in sets_b]:
        fa, fb = sets_a[role], sets_b[role]
        if "items" not in fa or "items" not in fb:
            continue
        if not same_set(fa, fb):
            raise SparseCSEError(f"A ({_name(sources['A'])}) and B ({_name(sources['B'])}) scored different {role} "
                                 f"sets ({fa['name']} vs {fb['name']}), so their {role} figures cannot be paired.")
        out[role] = paired_difference(fa, fb, replicates, seed, level)
    return out


def _check_same_data(a: dict, b: dict, sources: dict) -> None:
    why = data_difference(a["data"], b["data"])
    if why:
        raise SparseCSEError(f"A ({_name(sources['A'])}) and B ({_name(sources['B'])}) were evaluated on "
                             f"different data or tasks ({why}), so their pairs cannot be compared.")


def _name(source) -> str:
    return "the default model" if source is None else str(source)


def _describe(source, results: dict) -> dict[str, Any]:
    mask = results.get("mask")
    return {"source": _name(source), "kind": "result file" if is_result_file(source) else "model",
            "model": results.get("model"), "mask": mask.get("path") if isinstance(mask, dict) else None}
