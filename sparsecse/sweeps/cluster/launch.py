"""Run a sweep's points as cluster tasks (SLURM job arrays through submitit) or as several local processes.

The sweep directory stays the single source of truth. The submitting process checks the arguments and
scores once (:func:`sparsecse.sweeps.prepared.prepare_sweep`); every point whose file is not complete becomes one
task of a job array (dense, masked, budget and reconstructed points), and the rewound points (with their
seeds) a second array that SLURM starts after the first one ended (``--dependency=afterany``): a rewind at
the best λ decides that λ from the masked points on disk. A task writes its point as a one-process sweep
does, so a task that died, timed out or was cancelled is simply submitted again by the next run, and a
finished point is never recomputed. Tasks still pending or running from an earlier ``--detach`` run are
waited for, not submitted twice (``DIR/cluster/jobs.json`` records the submissions).

Example::

    >>> spec = sweep_spec(model, "0.1,0.2", out="sw", rewind=RewindConfig(corpus="wiki.txt"))  # doctest: +SKIP
    >>> result = launch_sweep(spec, "slurm", load_resources("cluster.toml"))  # doctest: +SKIP
    >>> [t.point.label for t in result.failed]  # doctest: +SKIP
"""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from sparsecse.errors import SparseCSEError
from sparsecse.artifacts.files import write_json
from sparsecse.sweeps.cluster.backends import LocalBackend, SlurmBackend
from sparsecse.sweeps.cluster.config import Resources
from sparsecse.sweeps.cluster.tasks import PointTask
from sparsecse.sweeps.config import SweepSpec, sweep_spec
from sparsecse.sweeps.prepared import Point, PreparedSweep, prepare_sweep, remove_empty_rewinds
from sparsecse.artifacts.sweep_layout import REWOUND_DIR

LAUNCHERS = ("slurm", "local")
ARRAYS = ("evaluate", "rewind")
SUBMISSIONS = Path("cluster") / "jobs.json"
UNKNOWN_GRACE_S = 300  # a job neither squeue/sacct nor its result file knows of this long has gone
ACTIVE = {"PENDING", "RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING", "SUSPENDED", "RESIZING", "REQUEUE_HOLD",
          "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "PREEMPTED", "READY", "UNKNOWN"}


@dataclass
class Task:
    """One point of the sweep as a cluster task: its array (evaluate or rewind), job, status and, when it failed, why
    and its log."""
    point: Point
    array: str
    job: Any = None
    status: str = "pending"  # pending, running, done, failed, busy (another process computes the point)
    reason: str = ""
    log: Path | None = None
    unknown_since: float | None = None


@dataclass
class LaunchResult:
    """What a launch did: the tasks submitted (and their outcome), the points finished before, the job ids;
    ``detached`` when it returned after submitting."""
    out: Path
    tasks: list[Task] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)  # points finished before this run
    detached: bool = False
    job_ids: list[str] = field(default_factory=list)

    def count(self, status: str) -> int:
        """How many tasks have ``status``."""
        return sum(t.status == status for t in self.tasks)

    @property
    def failed(self) -> list[Task]:
        """The tasks that failed."""
        return [t for t in self.tasks if t.status == "failed"]


def check_launcher(launcher: str, detach: bool = False) -> None:
    """Refuse a launcher that cannot run here, before any work."""
    if launcher not in LAUNCHERS:
        raise SparseCSEError(f"Unknown launcher {launcher!r}; choose slurm or local.")
    if launcher == "slurm" and shutil.which("sbatch") is None:
        raise SparseCSEError("--launcher slurm needs SLURM's sbatch on PATH (run this on a cluster's login node, "
                             "or use --launcher local); nothing was submitted.")
    if detach and launcher == "local":
        raise SparseCSEError("--detach needs --launcher slurm: local tasks are child processes of this command.")


# ---------------------------------------------------------------------------- the launch
def launch_sweep(spec: SweepSpec, launcher: str, resources: Resources, workers: int = 2, detach: bool = False,
                 poll: float | None = None, echo: Callable[[str], None] | None = None,
                 confirm: Callable[[str], bool] | None = None) -> LaunchResult:
    """Check, score once, submit every unfinished point as a task, then wait and show progress (or, with
    ``detach``, return after submitting).

    Args:
        spec: the sweep (:func:`~sparsecse.sweeps.config.sweep_spec`, as :func:`~sparsecse.sweeps.run.sweep`
            builds it).
        launcher: ``"slurm"`` (job arrays through submitit) or ``"local"`` (processes on this machine).
        resources: the launcher settings (:func:`~sparsecse.sweeps.cluster.config.load_resources`).
        workers: ``local``: processes at once.
        detach: ``slurm``: return once submitted; the same call later waits for the jobs and collects them.
        poll: seconds between state queries (default 30 on SLURM, 2 locally).
        echo: where progress lines go (default: stderr).
        confirm: answers the Ctrl-C question, whether to cancel the jobs (default: leave them running).

    Returns:
        A :class:`LaunchResult`: every task with its outcome, the points finished before, the job ids.

    Raises:
        SparseCSEError: a launcher that cannot run here, a bad setting, or sbatch refusing an array.
    """
    echo = echo or (lambda msg: print(msg, file=sys.stderr, flush=True))
    check_launcher(launcher, detach)
    if workers < 1:
        raise SparseCSEError("--workers must be at least 1.")
    prep = prepare_sweep(spec)
    backend = SlurmBackend(prep, resources) if launcher == "slurm" else LocalBackend(prep, resources, workers)
    task_fn = PointTask(spec)
    points = prep.points() + prep.rewind_points()
    todo = [p for p in points if not prep.done(p)]
    result = LaunchResult(prep.out, [Task(p, "rewind" if p.kind == "rewound" else "evaluate") for p in todo],
                          reused=[p.label for p in points if p not in todo], detached=detach)
    if not todo:
        echo(f"All {len(points)} points of {prep.out} are computed; nothing to submit.")
        _finish(prep, result, points)
        return result
    if prep.plan and any(t.array == "rewind" for t in result.tasks):
        prep.start_rewinds()
    poll = poll if poll is not None else (30.0 if launcher == "slurm" else 2.0)  # sacct/squeue per poll
    if launcher == "slurm":
        _submit_slurm(prep, backend, task_fn, result, echo)
        if detach:
            echo(f"Submitted {len(result.tasks)} tasks (jobs {', '.join(result.job_ids)}); logs in "
                 f"{prep.out / 'cluster' / 'logs'}. Run the same sweep command again to wait for them and collect "
                 f"the results (it resubmits what failed), `sparsecse report {prep.out}` to tabulate what is done, "
                 f"or `scancel {' '.join(result.job_ids)}` to cancel.")
            return result
    try:
        _wait(prep, backend, task_fn, result, poll, echo, launcher)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(_interrupted(backend, result, launcher, confirm)) from None
    _finish(prep, result, points)
    return result


def _submit_slurm(prep: PreparedSweep, backend: SlurmBackend, task_fn: PointTask, result: LaunchResult,
                  echo) -> None:
    """Submit both arrays at once (rewinds after the evaluations), waiting for tasks an earlier run left
    pending or running instead of submitting their points again."""
    records = _read_submissions(prep.out)
    for task in result.tasks:
        old = records.get(task.point.label)
        if old:
            task.job = backend.attach(old["job_id"])  # registered with the status watcher
    if any(t.job for t in result.tasks):
        backend.refresh()
        for task in result.tasks:
            if task.job is not None and backend.state(task.job) not in ACTIVE - {"UNKNOWN"}:
                task.job = None  # ended (or forgotten by SLURM) without finishing the point: submit it again
    if any(t.array == "evaluate" and t.job is None for t in result.tasks):
        # evaluations are submitted again, so rewinds of the old array start too early (a rewind at the best λ
        # needs every masked point of its sparsity): cancel and resubmit them, those already started too (the old
        # array's afterany is met the moment its last pending task is cancelled, so SLURM may have started one)
        waiting = [t for t in result.tasks if t.array == "rewind" and t.job is not None
                   and backend.state(t.job) in ACTIVE - {"UNKNOWN"}]
        if waiting:
            subprocess.run(["scancel", *[t.job.job_id for t in waiting]], capture_output=True)
            for task in waiting:
                task.job = None
    attached = [t for t in result.tasks if t.job is not None]
    if attached:
        echo(f"{len(attached)} points are still pending or running from an earlier submission; waiting for them.")
    for array in ARRAYS:
        new = [t for t in result.tasks if t.array == array and t.job is None]
        if not new:
            continue
        after = [t.job.job_id for t in result.tasks if t.array == "evaluate" and t.job is not None] \
            if array == "rewind" else []
        jobs = backend.submit(task_fn, [t.point for t in new], array, after)
        for task, job in zip(new, jobs):
            task.job = job
            records[task.point.label] = {"job_id": job.job_id, "array": array,
                                         "submitted": time.strftime("%Y-%m-%dT%H:%M:%S")}
        echo(f"Submitted {len(new)} {array} tasks as SLURM job {jobs[0].job_id.split('_')[0]}"
             + (f" (starts after job {', '.join(sorted({a.split('_')[0] for a in after}))})" if after else ""))
    result.job_ids = sorted({t.job.job_id.split("_")[0] for t in result.tasks}, key=int)
    write_json(prep.out / SUBMISSIONS, records)


def _read_submissions(out: Path) -> dict[str, Any]:
    path = out / SUBMISSIONS
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except ValueError:
        return {}


def _outcome(job) -> tuple[str, Any] | None:
    """The task's pickled result: ("success", value) or ("error", traceback), None if it wrote none."""
    try:
        with open(job.paths.result_pickle, "rb") as f:
            return pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError):
        return None


def _update(prep: PreparedSweep, backend, task: Task) -> None:
    if task.status in ("done", "failed", "busy"):
        return
    if task.job is None:
        task.status = "pending"
        return
    if prep.done(task.point):  # a point file is written last, once everything else of it is on disk
        task.status, task.log = "done", Path(task.job.paths.stderr)
        return
    state = backend.state(task.job)
    if state in ACTIVE and state != "UNKNOWN":
        task.status = "running" if state in ("RUNNING", "COMPLETING") else "pending"
        return
    outcome = _outcome(task.job)
    if state == "UNKNOWN" and outcome is None:
        task.unknown_since = task.unknown_since or time.monotonic()
        if time.monotonic() - task.unknown_since < UNKNOWN_GRACE_S:
            return  # not yet (or no longer) listed by squeue/sacct; asked again at the next poll
    task.log = Path(task.job.paths.stderr)
    if outcome and outcome[0] == "success" and outcome[1].get("status") == "busy":
        task.status, task.reason = "busy", "another process was computing it"
        return
    if outcome is None and prep.done(task.point):
        task.status = "done"
        return
    task.status = "failed"
    if outcome and outcome[0] == "error":
        task.reason = str(outcome[1]).strip().splitlines()[-1]
    else:
        task.reason = f"ended as {state}" if state not in ("UNKNOWN", "FINISHED") else "ended without a result"


def _wait(prep, backend, task_fn, result: LaunchResult, poll: float, echo, launcher: str) -> None:
    from tqdm.auto import tqdm

    show = prep.spec.run.show_progress
    bar = tqdm(total=len(result.tasks), desc="sweep tasks", unit="point", disable=not show)
    last, told = None, set()
    try:
        while True:
            if launcher == "local":
                _start_local(backend, task_fn, result)
            backend.refresh()
            for task in result.tasks:
                _update(prep, backend, task)
            counts = {s: result.count(s) for s in ("done", "running", "pending", "failed", "busy")}
            if counts != last:
                bar.n = counts["done"] + counts["failed"] + counts["busy"]
                bar.set_postfix_str(", ".join(f"{v} {k}" for k, v in counts.items() if v or k != "busy"))
                bar.refresh()
                if not show:
                    echo(", ".join(f"{v} {k}" for k, v in counts.items()))
                for task in result.tasks:
                    if task.status == "failed" and task.point.label not in told:
                        told.add(task.point.label)
                        echo(f"  {task.point.label} failed ({task.reason}); log: {task.log}")
                last = counts
            if counts["running"] + counts["pending"] == 0:
                return
            time.sleep(poll)
    finally:
        bar.close()


def _start_local(backend: LocalBackend, task_fn: PointTask, result: LaunchResult) -> None:
    """Keep ``workers`` local processes busy; the rewinds start once every evaluation task has ended."""
    running = sum(t.job is not None and t.status in ("pending", "running") for t in result.tasks)
    evaluations_open = any(t.array == "evaluate" and t.status in ("pending", "running") for t in result.tasks)
    for task in result.tasks:
        if running >= backend.workers:
            return
        if task.job is None and (task.array == "evaluate" or not evaluations_open):
            task.job = backend.submit(task_fn, [task.point], task.array, [])[0]
            task.status = "running"
            running += 1


def _interrupted(backend, result: LaunchResult, launcher: str, confirm) -> str:
    """Cancel the open tasks if the user says so (local ones always stop); what to tell the user."""
    open_jobs = [t.job for t in result.tasks if t.job is not None and t.status in ("pending", "running")]
    if launcher == "local":
        backend.cancel(open_jobs)
        return "Interrupted; the local tasks were stopped. Run the same sweep again to finish it (finished points " \
               "are kept)."
    ids = sorted({j.job_id.split("_")[0] for j in open_jobs}, key=int)
    if not ids:
        return "Interrupted; no task was still open."
    if confirm is not None and confirm(f"Cancel the sweep's {len(open_jobs)} unfinished SLURM tasks "
                                       f"(jobs {', '.join(ids)})?"):
        backend.cancel(open_jobs)
        return f"Cancelled jobs {', '.join(ids)}. Run the same sweep again to resubmit what is not finished."
    return (f"Interrupted; the jobs keep running (`scancel {' '.join(ids)}` cancels them). Run the same sweep "
            "again to wait for them and collect the results.")


def _finish(prep: PreparedSweep, result: LaunchResult, points: list[Point]) -> None:
    """Record the run in sweep.json (computed, reused, busy) and drop an empty rewinding directory."""
    run = prep.run.result
    run.reused = [p.label for p in points if p not in {t.point for t in result.tasks}]
    run.computed = [t.point.label for t in result.tasks if t.status == "done"]
    run.busy = [t.point.label for t in result.tasks if t.status == "busy"]
    if prep.plan:
        remove_empty_rewinds(prep.out / REWOUND_DIR / prep.rewind_id)
    prep.record()
