"""A sweep directory's fingerprint: what a resumed sweep must share with the one that made the directory."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from sparsecse.errors import SparseCSEError
from sparsecse.artifacts.files import hash_path, write_json
from sparsecse.artifacts.sweep_layout import SWEEP_FILE, read_sweep_state
from sparsecse.artifacts.locks import FileLock
from sparsecse.scoring.criteria import check_criterion, default_criterion
from sparsecse.scoring.score import ScoringConfig
from sparsecse.data.paths import resolve_data_dir, task_path


# ---------------------------------------------------------------------------- fingerprint
def fingerprint(encoder, scoring: ScoringConfig, scope: str, keep_one_head: bool) -> dict[str, Any]:
    """What must match for a sweep directory to be resumed: the model and the scoring/pruning settings."""

    source, sc = encoder.source, scoring
    stsb = task_path(sc.data_dir, "STS", "STSBenchmark", f"sts-{sc.split}.csv", task="STSBenchmark")
    return {
        "model": str(source),
        "model_sha256": hash_path(source) if source and os.path.exists(source) else None,
        "pooling": encoder.pooling,
        "max_length": encoder.max_length,
        "scoring": {"split": sc.split, "batch_size": sc.batch_size, "seed": sc.seed, "max_batches": sc.max_batches,
                    "positive_threshold": sc.positive_threshold, "stsb_sha256": hash_path(stsb)},
        "pruning": {"scope": scope, "keep_one_head": keep_one_head},
        "data_dir": str(resolve_data_dir(sc.data_dir).resolve()),
    }


# how points are pruned where neither the call nor the directory says: abs_grad and one head kept per layer for
# sparsity points; fisher (heads and neurons on one scale) and no such rule for budget points
DEFAULT_PRUNING = {"criterion": default_criterion("sparsity"), "budget_criterion": default_criterion("budget"),
                   "keep_one_head": True, "budget_keep_one_head": False}
# what a directory written before the criteria were recorded (its fingerprint's "pruning" holds only the scope
# and keep_one_head) pruned every point with
_BEFORE_CRITERIA = {"criterion": "abs_grad", "budget_criterion": "abs_grad", "budget_keep_one_head": False}


def recorded_fingerprint(out: Path) -> dict[str, Any] | None:
    """The fingerprint of the sweep in ``out``, in the current layout.

    The one converter of older sweep directories: a fingerprint written before the pruning criteria were
    recorded gets the criteria those sweeps used (abs_grad everywhere, no keep-one-head rule for budgets), so it
    resumes as it was made.

    Args:
        out: a sweep directory (it may not exist yet).

    Returns:
        The fingerprint, or None where ``out`` holds no sweep yet.
    """
    if not (out / SWEEP_FILE).is_file():
        return None
    recorded = dict(read_sweep_state(out).get("fingerprint", {}))
    if "pruning" in recorded and "criterion" not in recorded["pruning"]:
        recorded["pruning"] = {**_BEFORE_CRITERIA, **recorded["pruning"]}
    return recorded


def pruning_settings(out: Path, criterion: str | None, keep_one_head: bool | None) -> dict[str, Any]:
    """The criterion and keep-one-head rule of sparsity points and of budget points.

    Args:
        out: the sweep directory.
        criterion: the criterion of every point; None: the one the sweep in ``out`` recorded, else
            ``DEFAULT_PRUNING``'s.
        keep_one_head: whether every point keeps a head per layer; None: as recorded, else the default.

    Returns:
        ``{"criterion", "budget_criterion", "keep_one_head", "budget_keep_one_head"}``.
    """
    if criterion is not None:
        check_criterion(criterion)
    recorded = (recorded_fingerprint(out) or {}).get("pruning", {})
    settings = {**DEFAULT_PRUNING, **{k: v for k, v in recorded.items() if k in DEFAULT_PRUNING}}
    if criterion is not None:
        settings.update(criterion=criterion, budget_criterion=criterion)
    if keep_one_head is not None:
        settings.update(keep_one_head=keep_one_head, budget_keep_one_head=keep_one_head)
    return settings


def _differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    diffs = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            diffs.append(f"{prefix}{key} {_short(a)} vs {_short(b)}")
    return diffs


def _short(value, width: int = 48) -> str:
    text = repr(value)
    return text if len(text) <= width else "..." + text[-(width - 3):]


def open_sweep_dir(out: Path, print_: dict[str, Any], overwrite: bool = False) -> dict[str, Any]:
    """Create ``out`` or reopen it; refuses a directory from another model or other scoring settings
    (``overwrite``: deletes that sweep and starts afresh). Safe when several processes open it at once.

    Args:
        out: the sweep directory.
        print_: this sweep's fingerprint (``fingerprint``).
        overwrite: whether a sweep with another fingerprint in ``out`` is replaced.

    Returns:
        The sweep's state, ``{"fingerprint", "runs"}``.
    """
    if out.exists() and not out.is_dir():
        raise SparseCSEError(f"{out} exists and is not a sweep directory; choose another --out.")
    out.mkdir(parents=True, exist_ok=True)
    lock = out / (SWEEP_FILE + ".lock")
    # every check under the lock: another process may be writing the sweep file (and its temporary) right now
    with FileLock(lock):
        state_path = out / SWEEP_FILE
        if state_path.is_file():
            diffs = _differences(recorded_fingerprint(out), print_)
            if not diffs:
                return read_sweep_state(out)
            if not overwrite:
                raise SparseCSEError(
                    f"{out} holds a sweep with different model or scoring settings ({'; '.join(diffs[:3])}); "
                    "choose another --out to start a new sweep, or pass --overwrite to replace it.")
            _empty_but(out, lock)
        elif any(not p.name.endswith(".lock") for p in out.iterdir()):
            raise SparseCSEError(f"{out} exists and is not a sweep directory; choose another --out.")
        state = {"fingerprint": print_, "runs": []}
        write_json(state_path, state)
    return state


def _empty_but(directory: Path, kept: Path) -> None:
    for path in directory.iterdir():
        if path != kept:
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
