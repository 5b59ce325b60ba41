"""Start and stop a real single-node SLURM cluster on this machine (for tests and trying the launcher out;
run from the repository root: it is part of the tests, not of the package).

It runs Debian's ``slurm-wlm`` and ``munge`` daemons as root, with every file they write under one
directory, and no systemd::

    apt-get install -y slurm-wlm munge
    python -m tests.support.local_slurm start /tmp/slurm     # prints: export SLURM_CONF=...
    export SLURM_CONF=/tmp/slurm/slurm.conf; sbatch --wrap hostname
    python -m tests.support.local_slurm stop /tmp/slurm      # kills the daemons, deletes the dir

The cluster has one node, this host, with ``CPUs=2`` (``--cpus N``) and a memory below the machine's; a
partition ``debug``; no accounting database (so no ``sacct``: the launcher reads job states from
``squeue``, which keeps finished jobs for ``MinJobAge`` = 1 h here). Ports are chosen free, so two clusters
(e.g. two pytest workers) can run side by side. munged needs a key in ``/etc/munge`` owned by munge
(the package creates one; :func:`start` makes one if it is missing) and runs as root with ``--force``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from sparsecse.artifacts.locks import process_alive
from sparsecse.errors import SparseCSEError

MUNGE_KEY = Path("/etc/munge/munge.key")
DAEMONS = ("slurmd", "slurmctld", "munged")  # stopped in this order
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo", "scontrol")


def missing_programs() -> list[str]:
    """The SLURM/munge programs not found on PATH (or in /usr/sbin); empty when a cluster can start."""
    return [p for p in PROGRAMS if _which(p) is None]


def _which(program: str) -> str | None:
    return shutil.which(program) or shutil.which(program, path="/usr/sbin:/sbin")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _memory_mb() -> int:
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return int(pages / 2**20)


def slurm_conf(root: Path, host: str, cpus: int, memory_mb: int) -> str:
    """The slurm.conf text of a one-node cluster whose state, spool and logs live under ``root``."""
    return "\n".join([
        "ClusterName=sparsecse-local",
        f"SlurmctldHost={host}",
        "SlurmUser=root", "SlurmdUser=root",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={root / 'munge.socket'}",
        f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory",
        f"DefMemPerCPU={memory_mb // cpus}",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none", "MpiDefault=none", "SwitchType=switch/none", "MailProg=/bin/true",
        "ReturnToService=2", "MinJobAge=3600", "SchedulerType=sched/backfill", "JobRequeue=1",
        "SlurmctldTimeout=30", "SlurmdTimeout=60", "InactiveLimit=0", "KillWait=5",
        f"NodeName={host} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ""])


def _ensure_munge_key() -> None:
    if MUNGE_KEY.is_file():
        return
    import pwd

    try:
        user = pwd.getpwnam("munge")
    except KeyError:
        raise SparseCSEError(f"{MUNGE_KEY} is missing and there is no munge user to own a new one; reinstall "
                             "munge.") from None
    MUNGE_KEY.parent.mkdir(parents=True, exist_ok=True)
    MUNGE_KEY.write_bytes(os.urandom(1024))
    MUNGE_KEY.chmod(0o400)
    os.chown(MUNGE_KEY, user.pw_uid, user.pw_gid)
    os.chown(MUNGE_KEY.parent, user.pw_uid, user.pw_gid)


def environment(root: str | os.PathLike) -> dict[str, str]:
    """The environment variables that point SLURM's commands at the cluster under ``root``."""
    return {"SLURM_CONF": str(Path(root) / "slurm.conf")}


def start(root: str | os.PathLike, cpus: int = 2, memory_mb: int | None = None, timeout: float = 60.0) -> dict:
    """Start munged, slurmctld and slurmd with everything under ``root`` (created; must not hold a cluster);
    returns :func:`environment`. Waits until the node is idle; stops what it started if that fails."""
    missing = missing_programs()
    if missing:
        raise SparseCSEError(f"Cannot start a local SLURM cluster: {', '.join(missing)} not found "
                             "(apt-get install -y slurm-wlm munge).")
    if os.geteuid() != 0:
        raise SparseCSEError("A local SLURM cluster runs its daemons as root; run this as root.")
    root = Path(root).resolve()
    if (root / "slurm.conf").exists():
        raise SparseCSEError(f"{root} already holds a cluster; stop it first.")
    for sub in ("state", "spool", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    host = socket.gethostname().split(".")[0]
    memory_mb = memory_mb or max(512, int(_memory_mb() * 0.8))
    (root / "slurm.conf").write_text(slurm_conf(root, host, cpus, memory_mb))
    env = {**os.environ, **environment(root)}
    try:
        _ensure_munge_key()
        _run([_which("munged"), "--force", f"--socket={root / 'munge.socket'}", f"--pid-file={root / 'munged.pid'}",
              f"--log-file={root / 'log' / 'munged.log'}", f"--seed-file={root / 'munged.seed'}",
              f"--key-file={MUNGE_KEY}"], env)
        _run([_which("slurmctld"), "-f", str(root / "slurm.conf")], env)
        _run([_which("slurmd"), "-f", str(root / "slurm.conf")], env)
        _wait_idle(root, env, timeout)
    except BaseException:
        stop(root)
        raise
    return environment(root)


def _run(cmd: list, env: dict) -> None:
    done = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True)
    if done.returncode:
        raise SparseCSEError(f"{Path(cmd[0]).name} did not start: {(done.stderr or done.stdout).strip()[-300:]}")


def _wait_idle(root: Path, env: dict, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        done = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True)
        state = done.stdout.strip()
        if done.returncode == 0 and state.startswith("idle"):
            return
        time.sleep(0.5)
    logs = "; ".join(p.read_text()[-300:] for p in sorted((root / "log").glob("*.log")))
    raise SparseCSEError(f"The local SLURM node did not become idle in {timeout:.0f} s (state {state!r}); logs: {logs}")


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def stop(root: str | os.PathLike, timeout: float = 30.0) -> None:
    """Cancel the cluster's jobs, kill its daemons by their pid files (SIGTERM, then SIGKILL) and delete
    ``root``."""
    root = Path(root).resolve()
    env = {**os.environ, **environment(root)}
    if (root / "slurmctld.pid").is_file() and shutil.which("scancel"):
        subprocess.run(["scancel", "--full", "--user", "root"], env=env, capture_output=True, timeout=30)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:  # let the job steps end before their slurmd goes
            done = subprocess.run(["squeue", "-h", "-t", "RUNNING,COMPLETING"], env=env, capture_output=True,
                                  text=True, timeout=30)
            if done.returncode or not done.stdout.strip():
                break
            time.sleep(0.5)
    for daemon in DAEMONS:
        pid = _pid(root / f"{daemon}.pid")
        if pid is None or not process_alive(pid):
            continue
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while process_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if process_alive(pid):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.support.local_slurm start|stop DIR``; the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python -m tests.support.local_slurm start|stop DIR", file=sys.stderr)
        return 2
    try:
        if argv[0] == "start":
            env = start(argv[1])
            print(" ".join(f"export {k}={v}" for k, v in env.items()))
        else:
            stop(argv[1])
    except SparseCSEError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
