"""The working directory of a run in progress (``OUT.partial``): fingerprint, checkpoints, best model, log.

Layout::

    OUT.partial/run.json                  the run's fingerprint (what must match to resume)
    OUT.partial/log.jsonl                 one line per step / evaluation
    OUT.partial/checkpoints/step-000250/  model, objective, optimizer, scheduler, RNG, trainer state
    OUT.partial/best-step-000250/         the best model so far (STS-B dev), a normal model directory
    OUT.partial/tensorboard/              optional

Each checkpoint and best model is written atomically; the last checkpoint is kept. OUT.partial itself
appears atomically, with its run.json (built in a temporary directory, then renamed). The finished
run is assembled into OUT atomically and the partial directory removed, so a killed run leaves
either a resumable OUT.partial or a complete OUT, never a half-written OUT. A partial directory without
a checkpoint holds nothing worth resuming: the next run replaces it (with or without ``--resume``).

One process runs in OUT.partial at a time: ``.OUT.run.lock`` beside it names the process that does
(:meth:`RunDir.locked`); a second run of the same OUT is refused, even with ``--overwrite``, while
that process lives.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import contextlib
from typing import Iterator

from sparsecse.errors import SparseCSEError
from sparsecse.artifacts.files import atomic_dir, dumps_json
from sparsecse.artifacts.locks import FileLock

CHECKPOINTS = "checkpoints"
LOG = "log.jsonl"
RUN = "run.json"


def _step_name(prefix: str, step: int) -> str:
    return f"{prefix}-{step:06d}"


def _step_of(path: Path) -> int:
    return int(path.name.rsplit("-", 1)[1])


def _is_step(path: Path) -> bool:
    """A finished checkpoint directory ``step-NNNNNN`` (never a writer's hidden temporary)."""
    return path.is_dir() and path.name.startswith("step-") and path.name.rsplit("-", 1)[1].isdigit()


class RunDir:
    """The directory of a training run in progress (``OUT.partial``): its checkpoints, best models, log and lock."""

    def __init__(self, out: str | os.PathLike):
        self.out = Path(out)
        self.path = self.out.with_name(self.out.name + ".partial")
        self.lock = FileLock(self.out.with_name(f".{self.out.name}.run.lock"))

    # ------------------------------------------------------------------ one run at a time
    def check_free(self) -> None:
        """Refuse (before any work) when another live process runs in this directory."""
        if self.lock.path.exists() and not self.lock.is_stale():
            self._refuse_busy()

    @contextlib.contextmanager
    def locked(self, take: bool = True) -> Iterator["RunDir"]:
        """Hold the run's lock for the block (``take``: on the main process only; the others share it)."""
        if take:
            try:
                self.out.parent.mkdir(parents=True, exist_ok=True)  # a recipe's stages/ appears with its first run
                taken = self.lock.acquire()
            except OSError as exc:
                raise SparseCSEError(f"Cannot write {self.out} ({exc.strerror or exc}); nothing was written.") from None
            if not taken:
                self._refuse_busy()
        try:
            yield self
        finally:
            if take:
                self.lock.release()

    def _refuse_busy(self) -> None:
        holder = self.lock.holder() or {}
        raise SparseCSEError(f"{self.out} is being written by another process (pid {holder.get('pid', '?')} on "
                             f"{holder.get('host', 'this host')}); wait for it to finish or choose another --out.")

    # ------------------------------------------------------------------ start / resume
    def inspect(self, fingerprint: dict[str, Any] | None, resume: bool, overwrite: bool) -> bool:
        """Check (read-only, on every process) that the run may start; True to continue the partial run."""
        if self.out.exists() and not overwrite:
            hint = " (that run is finished)" if resume else ""
            raise SparseCSEError(f"{self.out} already exists{hint}; choose another --out or pass --overwrite.")
        if not self.path.exists() or self.latest_checkpoint() is None:
            return False  # nothing to resume: a partial directory without a checkpoint is replaced
        if resume:
            if fingerprint is not None:
                self._check_fingerprint(fingerprint)
            return True
        if not overwrite:
            raise SparseCSEError(
                f"An unfinished run is in {self.path} (checkpoint at step {_step_of(self.latest_checkpoint())}); "
                f"pass --resume to continue it or --overwrite to start over."
            )
        return False

    def start(self, fingerprint: dict[str, Any], continuing: bool) -> None:
        """Create the run directory (main process only), replacing a stale one unless continuing: it
        appears whole, run.json included, or not at all."""
        if continuing:
            return
        if self.path.exists() or self.path.is_symlink():
            self.remove()
        with atomic_dir(self.path, overwrite=True) as tmp:
            (tmp / RUN).write_text(dumps_json({"fingerprint": fingerprint}, indent=2) + "\n")

    def _check_fingerprint(self, fingerprint: dict[str, Any]) -> None:
        try:
            stored = json.loads((self.path / RUN).read_text())["fingerprint"]
            if not isinstance(stored, dict):
                raise ValueError
        except (OSError, ValueError, KeyError, TypeError):
            raise SparseCSEError(f"{self.path} holds checkpoints but no readable {RUN}, so its settings are unknown; "
                                 "pass --overwrite to start over.") from None
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
        """The newest complete checkpoint, or None."""
        found = sorted((p for p in (self.path / CHECKPOINTS).glob("step-*") if _is_step(p)), key=_step_of)
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
        """The best-so-far model directories, oldest first."""
        return sorted(self.path.glob("best-step-*"), key=_step_of)

    def best_dir(self, step: int) -> Path:
        """The directory of the best model at ``step``."""
        return self.path / _step_name("best-step", step)

    def write_best(self, step: int, write, keep_step: int | None) -> Path:
        """Save a new best model; drop older ones except ``keep_step`` (the one the last checkpoint names)."""
        target = self.best_dir(step)
        with atomic_dir(target, overwrite=True) as tmp:
            write(tmp)
        self.prune_best(keep={step, keep_step})
        return target

    def prune_best(self, keep: set[int | None]) -> None:
        """Remove the best-model directories of steps not in ``keep``."""
        for path in self.best_dirs():
            if _step_of(path) not in keep:
                shutil.rmtree(path, ignore_errors=True)

    # ------------------------------------------------------------------ log
    @property
    def log_path(self) -> Path:
        """The run's training log."""
        return self.path / LOG

    def truncate_log(self, step: int) -> None:
        """Forget log lines past ``step`` (they are redone after resuming from that checkpoint)."""
        if not self.log_path.exists():
            return
        kept = [line for line in self.log_path.read_text().splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= step]
        self.log_path.write_text("".join(line + "\n" for line in kept))

    def remove(self) -> None:
        """Remove the run directory (or the link to it)."""
        if self.path.is_symlink():
            self.path.unlink()
        else:
            shutil.rmtree(self.path, ignore_errors=True)


def _short(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."
