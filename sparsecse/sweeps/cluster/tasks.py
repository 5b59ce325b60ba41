"""What one cluster task runs: one point of a sweep, written to the sweep directory exactly as a
one-process sweep writes it (same functions, same locks).

``PointTask(spec)(point)`` reopens the sweep (its scores are read back, not recomputed), computes the
point unless its file is complete, and appends a line to ``DIR/cluster/computed.jsonl`` for each point it
computed (which job, where, how long), so a run can show that no point was computed twice. The task is
submitit-checkpointable: when a rewinding task reaches its time limit, submitit requeues it and the rewind
resumes from its last training checkpoint (``rewind(resume=True)``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from submitit.helpers import Checkpointable

from sparsecse.artifacts.remote_code import trusting_remote_code, remote_code_trusted
from sparsecse.sweeps.config import SweepSpec
from sparsecse.sweeps.prepared import Point, prepare_sweep

LEDGER = Path("cluster") / "computed.jsonl"


class PointTask(Checkpointable):
    """Compute one sweep point in a cluster task, of the sweep ``spec`` (a
    :class:`~sparsecse.sweeps.config.SweepSpec`): never replacing the directory, no progress bars, messages
    printed to the task's log."""

    def __init__(self, spec: SweepSpec):
        self.spec = dataclasses.replace(spec, run=dataclasses.replace(spec.run, overwrite=False, show_progress=False,
                                                                      log=print))
        self.trust_remote_code = remote_code_trusted()  # the submitter's consent travels with the task

    def __call__(self, point: Point) -> dict[str, Any]:
        """Compute ``point`` unless its file is complete; returns what happened to it."""
        t0 = time.time()
        with trusting_remote_code(self.trust_remote_code):
            prep = prepare_sweep(self.spec)
            prep.compute(point)
        result = prep.run.result
        if result.computed:
            record_computed(prep.out, point, result.computed, time.time() - t0)
        status = "busy" if result.busy else "computed" if result.computed else "reused"
        return {"point": point.label, "status": status, "seconds": round(time.time() - t0, 1)}


def record_computed(out: Path, point: Point, names: list[str], seconds: float) -> None:
    """One JSON line per computed point, appended atomically (O_APPEND, one write)."""
    line = json.dumps({"point": point.label, "files": names, "job": os.environ.get("SLURM_JOB_ID"),
                       "pid": os.getpid(), "host": socket.gethostname(), "seconds": round(seconds, 1),
                       "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}) + "\n"
    path = out / LEDGER
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_computed(out: str | os.PathLike) -> list[dict[str, Any]]:
    """The ledger's records (empty when no task has computed anything)."""
    path = Path(out) / LEDGER
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
