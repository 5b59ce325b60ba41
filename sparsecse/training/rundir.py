"""The working directory of a run in progress (``OUT.partial``): fingerprint, checkpoints, best model, log.

Layout::

    OUT.partial/run.json                  the run's fingerprint (what must match to resume)
    OUT.partial/log.jsonl                 one line per step / evaluation
    OUT.partial/checkpoints/step-000250/  model, objective, optimizer, scheduler, RNG, trainer state
    OUT.partial/best-step-000250/         the best model so far (STS-B dev), a normal model directory
    OUT.partial/tensorboard/              optional

Each checkpoint and best model is written atomically; the last checkpoint is kept. The finished
run is assembled into OUT atomically and the partial directory removed, so a killed run leaves
either a resumable OUT.partial or a complete OUT, never a half-written OUT.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from sparsecse.errors import SparseCSEError
from sparsecse.artifacts.files import atomic_dir, write_json

CHECKPOINTS = "checkpoints"
LOG = "log.jsonl"
RUN = "run.json"


def _step_name(prefix: str, step: int) -> str:
    return f"{prefix}-{step:06d}"


def _step_of(path: Path) -> int:
    return int(path.name.rsplit("-", 1)[1])


class RunDir:
    def __init__(self, out: str | os.PathLike):
        self.out = Path(out)
        self.path = self.out.with_name(self.out.name + ".partial")

    # ------------------------------------------------------------------ start / resume
    def inspect(self, fingerprint: dict[str, Any] | None, resume: bool, overwrite: bool) -> bool:
        """Check (read-only, on every process) that the run may start; True to continue the partial run."""
        if self.out.exists() and not overwrite:
            hint = " (that run is finished)" if resume else ""
            raise SparseCSEError(f"{self.out} already exists{hint}; choose another --out or pass --overwrite.")
        if not self.path.exists():
            return False
        if resume:
            if fingerprint is not None:
                self._check_fingerprint(fingerprint)
            return True
        if not overwrite:
            raise SparseCSEError(
                f"An unfinished run is in {self.path}; pass --resume to continue it or --overwrite to start over."
            )
        return False

    def start(self, fingerprint: dict[str, Any], continuing: bool) -> None:
        """Create the run directory (main process only), replacing a stale one unless continuing."""
        if continuing:
            return
        if self.path.exists():
            shutil.rmtree(self.path)
        self.path.mkdir(parents=True)
        write_json(self.path / RUN, {"fingerprint": fingerprint})

    def _check_fingerprint(self, fingerprint: dict[str, Any]) -> None:
        try:
            stored = json.loads((self.path / RUN).read_text())["fingerprint"]
        except (OSError, ValueError, KeyError):
            raise SparseCSEError(f"{self.path} is not a sparsecse run directory (no readable {RUN}).") from None
        current = json.loads(json.dumps(fingerprint, default=str))
        differing = [k for k in sorted(set(stored) | set(current)) if stored.get(k) != current.get(k)]
        if differing:
            details = "; ".join(f"{k}: {_short(stored.get(k))} there, {_short(current.get(k))} now"
                                for k in differing[:4])
            raise SparseCSEError(
                f"The unfinished run in {self.path} was started with different settings ({details}); "
                f"pass the same settings, or --overwrite to start over."
            )

    # ------------------------------------------------------------------ checkpoints
    def latest_checkpoint(self) -> Path | None:
        found = sorted((self.path / CHECKPOINTS).glob("step-*"), key=_step_of)
        return found[-1] if found else None

    def write_checkpoint(self, step: int, write) -> Path:
        """``write(tmp_dir)`` fills a new checkpoint atomically; older checkpoints are then removed."""
        target = self.path / CHECKPOINTS / _step_name("step", step)
        with atomic_dir(target, overwrite=True) as tmp:
            write(tmp)
        for old in (self.path / CHECKPOINTS).glob("step-*"):
            if old != target:
                shutil.rmtree(old, ignore_errors=True)
        return target

    # ------------------------------------------------------------------ best model
    def best_dirs(self) -> list[Path]:
        return sorted(self.path.glob("best-step-*"), key=_step_of)

    def best_dir(self, step: int) -> Path:
        return self.path / _step_name("best-step", step)

    def write_best(self, step: int, write, keep_step: int | None) -> Path:
        """Save a new best model; drop older ones except ``keep_step`` (the one the last checkpoint names)."""
        target = self.best_dir(step)
        with atomic_dir(target, overwrite=True) as tmp:
            write(tmp)
        self.prune_best(keep={step, keep_step})
        return target

    def prune_best(self, keep: set[int | None]) -> None:
        for path in self.best_dirs():
            if _step_of(path) not in keep:
                shutil.rmtree(path, ignore_errors=True)

    # ------------------------------------------------------------------ log
    @property
    def log_path(self) -> Path:
        return self.path / LOG

    def truncate_log(self, step: int) -> None:
        """Forget log lines past ``step`` (they are redone after resuming from that checkpoint)."""
        if not self.log_path.exists():
            return
        kept = [line for line in self.log_path.read_text().splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= step]
        self.log_path.write_text("".join(line + "\n" for line in kept))

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _short(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."
