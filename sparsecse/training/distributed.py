"""Starting and stopping a data-parallel run: which processes there are, and one sentence when that fails.

The launchers set the environment that says who a process is (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``): ``accelerate launch --multi_gpu --num_processes N`` and ``torchrun
--nproc_per_node N`` do; a task of ``srun`` with several tasks gets it here from SLURM's own variables
(:func:`slurm_environment`), so ``srun sparsecse train ...`` trains in ``SLURM_STEP_NUM_TASKS`` processes.

What goes wrong is said in one sentence instead of a hang or one traceback per process:

- ``accelerate launch --cpu --num_processes N`` starts one process whatever N is (Accelerate runs several
  CPU processes only through MPI); that process would train alone, so it stops and names the commands
  that work (:func:`check_launch`).
- ``WORLD_SIZE`` without ``RANK``, ``MASTER_ADDR`` or ``MASTER_PORT``, a rank outside the world, or
  processes that do not all arrive at the rendezvous within ``SPARSECSE_RENDEZVOUS_TIMEOUT`` seconds
  (default 600): :func:`init_process_group`.
- A process that stops (its own error, or killed) takes the others down: they see the broken connection
  at their next collective, and :func:`stopped` decides which one process speaks, naming the process that
  stopped first; the rest exit quietly (a :class:`~sparsecse.errors.SparseCSEError` with ``quiet``).
"""

from __future__ import annotations

import datetime
import os
import re
import shutil
import subprocess
import time
from typing import Mapping

import torch
import torch.distributed as dist

from sparsecse.errors import SparseCSEError

RENDEZVOUS_TIMEOUT_S = 600.0
KEY = "sparsecse/stopped"
PROBE_S = 3.0  # how long a survivor waits for the others to say they are alive
_STORE: list = []  # the rendezvous store this process created (process 0 serves it)
MPI_SIZES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


class QuietStop(SparseCSEError):
    """This process stops because another one did; that one (or another survivor) says why."""

    quiet = True


# ---------------------------------------------------------------------------------------- the environment
def launched_rank(env: Mapping[str, str] | None = None) -> int:
    """This process's rank as its launcher set it, before any process group exists (0 when alone)."""
    env = os.environ if env is None else env
    for key in ("RANK", "SLURM_PROCID"):
        if env.get(key, "").isdigit() and (key == "RANK" or int(env.get("SLURM_STEP_NUM_TASKS") or 1) > 1):
            return int(env[key])
    return 0


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list (``node[03-05,9],gpu1`` -> ``node03``), by ``scontrol`` where it is."""
    scontrol = shutil.which("scontrol")
    if scontrol:
        done = subprocess.run([scontrol, "show", "hostnames", nodelist], capture_output=True, text=True)
        if done.returncode == 0 and done.stdout.split():
            return done.stdout.split()[0]
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist)
    if not match:
        raise SparseCSEError(f"Cannot read the first host of the SLURM node list {nodelist!r}; set MASTER_ADDR.")
    prefix, ranges = match.groups()
    return prefix + (re.split(r"[-,]", ranges)[0] if ranges else "")


def slurm_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The launcher variables of a task of an ``srun`` step with several tasks (empty when the step has one
    task, or a launcher already set ``WORLD_SIZE``): rank = ``SLURM_PROCID``, world = ``SLURM_STEP_NUM_TASKS``,
    the rendezvous on the step's first node at a port derived from the job and step ids (``MASTER_ADDR`` and
    ``MASTER_PORT``, when set, win)."""
    tasks = int(env.get("SLURM_STEP_NUM_TASKS") or 1)
    if tasks <= 1 or env.get("WORLD_SIZE") or not env.get("SLURM_PROCID"):
        return {}
    job, step = int(env.get("SLURM_JOB_ID") or 0), env.get("SLURM_STEP_ID") or "0"
    step = int(step) if step.isdigit() else 0
    nodes = max(1, int(env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES") or 1))
    per_node = re.match(r"\d+", env.get("SLURM_STEP_TASKS_PER_NODE") or "")
    return {
        "RANK": env["SLURM_PROCID"], "WORLD_SIZE": str(tasks), "LOCAL_RANK": env.get("SLURM_LOCALID", "0"),
        "LOCAL_WORLD_SIZE": per_node.group(0) if per_node else str(max(1, tasks // nodes)),
        "NODE_RANK": env.get("SLURM_NODEID", "0"),
        "MASTER_ADDR": env.get("MASTER_ADDR") or first_host(env.get("SLURM_STEP_NODELIST")
                                                            or env.get("SLURM_JOB_NODELIST") or "localhost"),
        "MASTER_PORT": env.get("MASTER_PORT") or str(20000 + (job * 16 + step) % 40000),
    }


def check_launch(env: Mapping[str, str] | None = None) -> None:
    """Refuse, in one sentence, a process whose launcher asked for several processes but started one, and
    an environment that names a world of several processes without the means to meet them."""
    env = os.environ if env is None else env
    if (not env.get("WORLD_SIZE") and env.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes")
            and env.get("MASTER_ADDR") and not any(env.get(k) for k in MPI_SIZES)):
        raise SparseCSEError(
            "`accelerate launch --cpu --num_processes N` started this as one process (Accelerate runs several CPU "
            "processes only through MPI), so it would train alone; for N CPU processes run `accelerate launch "
            "--multi_gpu --num_processes N $(which sparsecse) ... --device cpu` or `torchrun --nproc_per_node N "
            "$(which sparsecse) ...`.")
    if not env.get("WORLD_SIZE"):
        return
    try:
        world = int(env["WORLD_SIZE"])
        rank = int(env.get("RANK", "0") or 0)
    except ValueError:
        raise SparseCSEError(f"WORLD_SIZE={env['WORLD_SIZE']!r} and RANK={env.get('RANK')!r} must be whole "
                             "numbers (the launcher sets them).") from None
    if world < 1 or not 0 <= rank < world:
        raise SparseCSEError(f"RANK={rank} does not fit WORLD_SIZE={world}: a run of {world} processes has ranks "
                             f"0 to {world - 1}.")
    if world > 1:
        missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if not env.get(k)]
        if missing:
            raise SparseCSEError(f"WORLD_SIZE={world} asks for a run of {world} processes, but {', '.join(missing)} "
                                 f"{'is' if len(missing) == 1 else 'are'} not set, so they cannot meet; start them "
                                 "with accelerate launch, torchrun or srun, which set it.")


def init_process_group(cpu: bool) -> None:
    """Join the run's processes (gloo between CPU processes, NCCL between GPUs) before Accelerate looks; one
    process alone does nothing. The rendezvous waits ``SPARSECSE_RENDEZVOUS_TIMEOUT`` seconds for the others."""
    env = os.environ
    env.update(slurm_environment(env))
    check_launch(env)
    world = int(env.get("WORLD_SIZE") or 1)
    if world <= 1 or dist.is_initialized():
        return
    rank, addr, port = int(env["RANK"]), env["MASTER_ADDR"], int(env["MASTER_PORT"])
    try:
        wait = float(env.get("SPARSECSE_RENDEZVOUS_TIMEOUT") or RENDEZVOUS_TIMEOUT_S)
    except ValueError:
        raise SparseCSEError("SPARSECSE_RENDEZVOUS_TIMEOUT must be a number of seconds.") from None
    backend = "gloo" if cpu else "nccl"
    if not cpu:
        torch.cuda.set_device(int(env.get("LOCAL_RANK") or 0))
    try:
        if env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true":  # torchrun's agent has met them all
            dist.init_process_group(backend)
        else:
            store = dist.TCPStore(addr, port, world, is_master=rank == 0, wait_for_workers=True,
                                  timeout=datetime.timedelta(seconds=wait))
            _STORE[:] = [store]  # process 0 serves it: it must outlive the group (see stopped)
            dist.init_process_group(backend, store=store, rank=rank, world_size=world)
    except (RuntimeError, ValueError, OSError) as exc:
        cause = " ".join(str(exc).split())[:160]
        raise SparseCSEError(
            f"Process {rank} of {world} did not meet the other processes at {addr}:{port} within {wait:g} s "
            f"({cause}); check that the launcher starts WORLD_SIZE={world} processes and that all of them reach "
            "MASTER_ADDR:MASTER_PORT (SPARSECSE_RENDEZVOUS_TIMEOUT sets the wait).") from None


# ---------------------------------------------------------------------------------------- stopping
def _store():
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - no group, or the store is gone with its host
        return None


def _key(what: str, rank: int) -> str:
    return f"{KEY}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{what}/{rank}"


def _has(store, key: str) -> bool:
    try:
        return bool(store.check([key]))
    except Exception:  # noqa: BLE001
        return False


PEER_LOST = ("connection closed by peer", "connection reset by peer", "broken pipe", "gloo", "nccl",
             "socket", "timed out", "timeout")


def looks_like_peer_loss(exc: BaseException) -> bool:
    """An error of a collective operation (the other side went away), not this process's own."""
    if isinstance(exc, SparseCSEError):
        return False
    if isinstance(exc, getattr(dist, "DistError", ())):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in PEER_LOST)


def stopped(exc: BaseException, step: int | None) -> BaseException:
    """What this process raises when a multi-process run stops on ``exc``.

    The first process to fail by itself records it (in the rendezvous store) and speaks; a process whose
    collective broke because another one stopped exits quietly when that one spoke, else (the other was
    killed without a word) the lowest surviving process names it in one sentence.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return exc
    rank, world = dist.get_rank(), dist.get_world_size()
    store = _store()
    at = f" at step {step}" if step is not None else ""
    if looks_like_peer_loss(exc) and store is not None:
        try:
            store.set(_key("alive", rank), "1")
        except Exception:  # noqa: BLE001 - the store's host (process 0) is gone
            return SparseCSEError(f"Process {rank} of {world} lost the other processes{at}: process 0, which holds "
                                  "the rendezvous, stopped; the run stops.")
        deadline = time.monotonic() + PROBE_S
        while time.monotonic() < deadline:
            failed = [r for r in range(world) if r != rank and _has(store, _key("failed", r))]
            if failed:
                return QuietStop(f"Process {failed[0]} of {world} stopped{at}; this one stops too.")
            alive = [r for r in range(world) if _has(store, _key("alive", r))]
            if len(alive) == world:
                break
            time.sleep(0.2)
        alive = [r for r in range(world) if _has(store, _key("alive", r))]
        dead = [r for r in range(world) if r not in alive]
        if dead:  # else every process is there: the error was this one's own after all
            if rank != min(alive):
                return QuietStop(f"Process {dead[0]} of {world} stopped{at}; this one stops too.")
            who = f"Process {dead[0]}" if len(dead) == 1 else "Processes " + ", ".join(map(str, dead))
            return SparseCSEError(f"{who} of {world} stopped without a word{at} (killed, out of memory, or its "
                                  "node was lost), and the other processes stopped with it.")
    # this process failed by itself: say so once, from the lowest process that failed
    if store is not None:
        try:
            store.set(_key("failed", rank), str(exc)[:500] or type(exc).__name__)
            time.sleep(0.5)  # another process that failed on the same step records it too
        except Exception:  # noqa: BLE001
            pass
        quiet = any(_has(store, _key("failed", r)) for r in range(rank))
        try:  # the others, waiting in a collective, learn now; they read the store before this one exits
            dist.destroy_process_group()
            time.sleep(1.0 if _STORE and rank == 0 else 0.0)
        except Exception:  # noqa: BLE001
            pass
        if quiet:
            return QuietStop(f"Process {rank} of {world} stopped{at} as a lower process did.")
    if isinstance(exc, SparseCSEError) and rank:
        return SparseCSEError(f"Process {rank} of {world}: {exc}")
    return exc
