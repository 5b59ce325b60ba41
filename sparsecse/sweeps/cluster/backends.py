"""Where a launched sweep's tasks run: SLURM job arrays through submitit, or processes on this machine.

:func:`~sparsecse.sweeps.cluster.launch.launch_sweep` calls the same four methods of either backend
(:class:`SlurmBackend`, :class:`LocalBackend`): ``submit``, ``refresh``, ``state`` and ``cancel``."""

from __future__ import annotations

import subprocess

import submitit

from sparsecse.errors import SparseCSEError
from sparsecse.sweeps.cluster.config import Resources
from sparsecse.sweeps.cluster.local_controller import LocalExecutor
from sparsecse.sweeps.cluster.slurm_status import slurm_job_class
from sparsecse.sweeps.cluster.tasks import PointTask
from sparsecse.sweeps.prepared import Point, PreparedSweep

DEFAULT_MINUTES = {"evaluate": 60, "rewind": 12 * 60}  # override with time = ... (config) or --time-limit
MAX_REQUEUES = {"evaluate": 3, "rewind": 20}  # a rewind requeued at its time limit resumes from its checkpoint


class SlurmBackend:
    """Job arrays on SLURM; the rewinding array waits for the evaluation jobs (afterany).

    A launcher backend is four methods that :func:`~sparsecse.sweeps.cluster.launch.launch_sweep` calls: :meth:`submit` (points as jobs),
    :meth:`refresh` (once per poll), :meth:`state` (a job's state) and :meth:`cancel`; :class:`LocalBackend` is
    the other one.

    Args:
        prep: the prepared sweep (its directory holds the logs, ``cluster/logs/JOB``).
        resources: the launcher settings (:func:`~sparsecse.sweeps.cluster.config.load_resources`).
    """

    def __init__(self, prep: PreparedSweep, resources: Resources):
        self.folder = prep.out / "cluster" / "logs" / "%j"
        self.resources = resources
        self.job_class = slurm_job_class()

    def submit(self, task: PointTask, points: list[Point], array: str, after: list[str]) -> list:
        """Submit ``points`` as one job array.

        Args:
            task: what each job runs (one point, written as a one-process sweep writes it).
            points: the points, one job each.
            array: ``"evaluate"`` or ``"rewind"`` (its resources and time limit).
            after: job ids the array waits for (``--dependency=afterany``).

        Returns:
            The submitit jobs, in the order of ``points``.

        Raises:
            SparseCSEError: a bad launcher setting, or sbatch refusing the array.
        """
        ex = submitit.SlurmExecutor(folder=self.folder, max_num_timeout=MAX_REQUEUES[array])
        ex.job_class = self.job_class
        params = {"time": DEFAULT_MINUTES[array], "job_name": f"sparsecse-{array}",
                  **self.resources.slurm_parameters(array)}
        parents = sorted({a.split("_")[0] for a in after})
        if parents:
            params["dependency"] = "afterany:" + ":".join(parents)
        try:
            ex.update_parameters(**params)
        except ValueError as exc:
            raise SparseCSEError(f"Bad launcher setting: {str(exc).splitlines()[0]}") from None
        try:
            return ex.map_array(task, points)
        except Exception as exc:  # sbatch refused (unknown partition, too much memory, ...)
            raise SparseCSEError(f"sbatch refused the {array} array: {str(exc).strip().splitlines()[-1]}") from None

    def attach(self, job_id: str):
        """The job ``job_id`` submitted by an earlier run (``--detach``), to wait for it."""
        return self.job_class(folder=self.folder, job_id=job_id)

    def refresh(self) -> None:
        """Ask SLURM for the states of every job watched (once per poll)."""
        self.job_class.watcher.update()

    def state(self, job) -> str:
        """A job's state, from the last :meth:`refresh`.

        Args:
            job: a job :meth:`submit` or :meth:`attach` returned.

        Returns:
            Its SLURM state in capitals (PENDING, RUNNING, COMPLETED, FAILED, ...).
        """
        return job.watcher.get_state(job.job_id, mode="cache").split()[0].upper()

    def cancel(self, jobs: list) -> list[str]:
        """``scancel`` the arrays of ``jobs``.

        Args:
            jobs: jobs :meth:`submit` returned.

        Returns:
            The array ids cancelled.
        """
        ids = sorted({j.job_id.split("_")[0] for j in jobs})
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True)
        return ids


class LocalBackend:
    """Processes on this machine (submitit's LocalExecutor), ``workers`` at a time; the same four methods as
    :class:`SlurmBackend`.

    Args:
        prep: the prepared sweep.
        resources: the launcher settings (only the rewind array's ``time`` applies: each process's time limit).
        workers: processes at once.
    """

    def __init__(self, prep: PreparedSweep, resources: Resources, workers: int):
        self.folder = prep.out / "cluster" / "logs" / "local-%j"
        self.minutes = resources.for_array("rewind").get("time", 7 * 24 * 60)
        self.workers = workers

    def submit(self, task: PointTask, points: list[Point], array: str, after: list[str]) -> list:
        """Start ``task`` on each of ``points`` as a local process.

        Args:
            task: what each process runs.
            points: the points, one process each.
            array: ``"evaluate"`` or ``"rewind"``.
            after: ignored: the rewinds are submitted once the evaluations ended.

        Returns:
            The submitit jobs, in the order of ``points``.
        """
        ex = LocalExecutor(folder=self.folder, max_num_timeout=MAX_REQUEUES[array])  # quiet, dies with the sweep
        ex.update_parameters(timeout_min=self.minutes)
        return [ex.submit(task, p) for p in points]

    def refresh(self) -> None:
        """Nothing to ask: local jobs know their state."""
        pass

    def state(self, job) -> str:
        """A process's state.

        Args:
            job: a job :meth:`submit` returned.

        Returns:
            ``"RUNNING"`` or ``"FINISHED"``.
        """
        return "RUNNING" if job.state == "RUNNING" else "FINISHED"

    def cancel(self, jobs: list) -> list[str]:
        """Stop the processes of ``jobs``.

        Args:
            jobs: jobs :meth:`submit` returned.

        Returns:
            An empty list (local processes have no array id).
        """
        for job in jobs:
            job.cancel(check=False)
        return []
