"""Advisory lock files, so several processes (or machines sharing a file system) can split a sweep.

A lock is a file created with O_CREAT|O_EXCL (atomic on local file systems and on NFSv3+) that
records who holds it: ``{"pid", "host", "started"}``. A lock is *stale*, and is taken over, when its
holder is on this host and that process no longer runs, or when it is older than ``stale_after``
seconds (default 24 h; a holder on another host cannot be asked whether it still runs), or when it
cannot be read at all (a crash between creating and writing it). A lock taken inside a SLURM job also
records the job id, so that the job's requeued run, or any process once SLURM says the job is no longer
running, takes it over at once (a task killed on another node would otherwise block its point for a day).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any
from sparsecse.errors import SparseCSEError

STALE_AFTER_S = 24 * 3600


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (the one check every pid file and lock of the package
    uses): one owned by someone else, which we may not signal, exists too."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _slurm_job_alive(job: str) -> bool:
    """Whether SLURM still runs ``job`` (True when squeue cannot tell)."""
    if job == os.environ.get("SLURM_JOB_ID"):
        return False  # this process is the job's requeued run: the run that took the lock is gone
    try:
        done = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return True
    if done.returncode and "Invalid job id" not in done.stderr:
        return True
    return done.stdout.strip() in ("RUNNING", "COMPLETING", "SUSPENDED", "STOPPED")


class FileLock:
    """A lock file that one process holds at a time (its holder's host, process and SLURM job recorded in it); a
    holder that died leaves a stale lock, which is taken over."""

    def __init__(self, path: str | os.PathLike, stale_after: float = STALE_AFTER_S):
        self.path = Path(path)
        self.stale_after = stale_after
        self.held = False

    def holder(self) -> dict[str, Any] | None:
        """What the lock file records of its holder, or None if it cannot be read."""
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None

    def is_stale(self) -> bool:
        """Whether the lock's holder is gone: its SLURM job ended, its process on this host died, or (held from
        another host) it is older than ``stale_after``; an unreadable lock a minute old too."""
        info = self.holder()
        if not isinstance(info, dict):
            try:  # half-written by a process that died; give a live writer a moment
                return time.time() - self.path.stat().st_mtime > 60
            except OSError:
                return True
        if info.get("slurm_job") and not _slurm_job_alive(str(info["slurm_job"])):
            return True
        if info.get("host") == socket.gethostname():
            return not process_alive(int(info.get("pid", -1)))
        return time.time() - float(info.get("started", 0)) > self.stale_after

    def acquire(self) -> bool:
        """Take the lock if it is free or stale; False if another live process holds it."""
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if not self.is_stale():
                    return False
                self.path.unlink(missing_ok=True)  # take over a stale lock, then try once more
                continue
            with os.fdopen(fd, "w") as f:
                info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
                if os.environ.get("SLURM_JOB_ID"):
                    info["slurm_job"] = os.environ["SLURM_JOB_ID"]
                json.dump(info, f)
            self.held = True
            return True
        return False

    def wait(self, timeout: float = 600.0, poll: float = 0.5) -> None:
        """Block until the lock is taken (for short critical sections such as a file update)."""
        deadline = time.monotonic() + timeout
        while not self.acquire():
            if time.monotonic() > deadline:

                raise SparseCSEError(f"{self.path} has been locked by {self.holder()} for over {timeout:.0f} s; "
                                     "delete it if that process is gone.")
            time.sleep(poll)

    def release(self) -> None:
        """Drop the lock; if its directory became unwritable meanwhile, the file stays behind and the next
        taker finds it stale (its holder no longer runs) instead of this process ending in a traceback."""
        if self.held:
            self.held = False
            try:
                self.path.unlink(missing_ok=True)
            except OSError:
                pass

    def __enter__(self) -> "FileLock":
        self.wait()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
