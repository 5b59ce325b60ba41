"""Job states on a SLURM cluster without accounting: submitit asks ``sacct``, which needs slurmdbd; where
the cluster has none (``AccountingStorageType=accounting_storage/none``, e.g. the local test cluster),
the jobs' states come from ``squeue --states=all`` instead, which lists finished jobs for ``MinJobAge``
seconds after they end. Without this, submitit warns "Bypassing sacct error" on every poll and reports
every job as UNKNOWN.

Example::

    >>> job_class = slurm_job_class()     # SlurmJob with sacct, SqueueSlurmJob without
    >>> executor.job_class = job_class  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import subprocess
import typing as tp

from submitit.slurm.slurm import SlurmInfoWatcher, SlurmJob


class SqueueWatcher(SlurmInfoWatcher):
    """submitit's SLURM watcher, reading ``squeue`` instead of ``sacct``."""

    def _make_command(self) -> tp.Optional[tp.List[str]]:
        to_check = {x.split("_")[0] for x in self._registered - self._finished}
        if not to_check:
            return None
        return ["squeue", "--noheader", "--array", "--states=all", "--format=%i|%T|%N", "--jobs",
                ",".join(sorted(to_check))]

    def read_info(self, string: tp.Union[bytes, str]) -> tp.Dict[str, tp.Dict[str, str]]:
        """{job id: state and node list} from ``squeue``'s output."""
        if not isinstance(string, str):
            string = string.decode()
        info = {}
        for line in string.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 3:
                info[parts[0]] = {"JobID": parts[0], "State": parts[1], "NodeList": parts[2]}
        return info


class SqueueSlurmJob(SlurmJob):
    """A submitit SLURM job whose states come from ``squeue`` (for clusters without accounting)."""
    watcher = SqueueWatcher(delay_s=60)


@functools.lru_cache(maxsize=None)
def has_accounting() -> bool:
    """Whether the cluster stores accounting (so that ``sacct`` answers)."""
    try:
        done = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return True
    for line in done.stdout.splitlines():
        if line.strip().startswith("AccountingStorageType"):
            return not line.rstrip().endswith("accounting_storage/none")
    return True


def slurm_job_class() -> type:
    """The submitit job class that can read this cluster's job states (sacct, else squeue)."""
    return SlurmJob if has_accounting() else SqueueSlurmJob
