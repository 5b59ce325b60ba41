"""Sweeps through a launcher: SLURM job arrays on a real single-node SLURM cluster started by the test
(Debian's slurm-wlm and munge; skipped, with the reason, where they are missing or cannot start), and
several local processes. Tasks run real evaluation and real rewinding of a tiny model, and must give
exactly the files of the same sweep run in one process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from sparsecse.errors import SparseCSEError
from sparsecse.sweeps.cluster.config import load_resources, parse_sbatch_args, parse_time
from sparsecse.sweeps.config import RewindConfig, SweepOptions, sweep_spec
from sparsecse.sweeps.run import sweep
from tests.helpers import evaluation, scoring
from tests.support import local_slurm
from tests.tiny import SENTENCES

pytest.importorskip("submitit")  # the cluster extra (the test extra includes it)
from sparsecse.sweeps.cluster.tasks import PointTask, read_computed  # noqa: E402  (needs submitit)

GRID = ["--sparsities", "0.25,0.5", "--lambdas", "0.25,0.75"]
TIMING = ("eval_seconds", "rewind_seconds")


def common_args(model, data, out, corpus, rewind=True):
    args = ["--model", str(model), "--data-dir", str(data), "--tasks", "STSBenchmark", "--max-batches", "2",
            "--score-batch-size", "8", "--device", "cpu", "--out", str(out), "--quiet"]
    if rewind:
        args += ["--rewind", "--corpus", str(corpus), "--max-steps", "2", "--batch-size", "4", "--eval-steps", "0"]
    return args


def invoke(args, env=None):
    """The CLI, with the tasks' processes on this process's torch thread count (float sums depend on it)."""
    from sparsecse.cli import main

    env = {"OMP_NUM_THREADS": str(torch.get_num_threads()), **(env or {})}
    return CliRunner().invoke(main, ["sweep", *args], env=env)


@pytest.fixture(scope="module")
def reference(tiny_bert_dir, tiny_stsb_dir, corpus, tmp_path_factory):
    """The 2 x 2 sweep with rewinding, in one process."""
    out = tmp_path_factory.mktemp("reference") / "sweep"
    sweep(tiny_bert_dir, sparsities="0.25,0.5", lambdas="0.25,0.75", out=out, score=scoring(tiny_stsb_dir),
          evaluate=evaluation(tiny_stsb_dir),
          rewind=RewindConfig(corpus=corpus, args={"max_steps": 2, "batch_size": 4, "eval_steps": 0}),
          options=SweepOptions(show_progress=False))
    return out


def snapshot(out: Path) -> dict:
    """Everything a sweep computed, without timings: point files, masks, per-pair similarities, the CSV."""
    snap = {}
    for path in sorted((out / "points").rglob("*.json")):
        point = json.loads(path.read_text())
        snap[str(path.relative_to(out))] = {k: v for k, v in point.items() if k not in TIMING}
    for path in sorted([*(out / "masks").glob("*.safetensors"), *(out / "pairs").rglob("*.safetensors")]):
        snap[str(path.relative_to(out))] = {k: v.tolist() for k, v in load_file(str(path)).items()}
    table = pd.read_csv(out / "results.csv").drop(columns=list(TIMING))
    table = table.sort_values("point").reset_index(drop=True)
    snap["results.csv"] = table.astype(object).fillna("NA").to_dict("list")  # NaN != NaN
    return snap


def assert_same_sweep(out: Path, reference: Path) -> None:
    a, b = snapshot(out), snapshot(reference)
    assert sorted(a) == sorted(b)
    for key in b:
        assert a[key] == b[key], key


def point_files(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out / "points").with_suffix("")) for p in (out / "points").rglob("*.json"))


# ---------------------------------------------------------------------------- no cluster needed
def test_launcher_config_file_and_options(tmp_path):
    cfg = tmp_path / "cluster.toml"
    cfg.write_text('partition = "gpu"\ngpus_per_task = 1\nmem = "32G"\ntime = "1:00:00"\n'
                   'setup = "module load cuda"\n[sbatch]\naccount = "lab"\n[rewind]\ntime = "8:00:00"\n'
                   '[rewind.sbatch]\nqos = "long"\n')
    res = load_resources(cfg, {"partition": "debug", "cpus_per_task": 4, "sbatch": {"account": "other"}})
    assert res.slurm_parameters("evaluate") == {
        "partition": "debug", "gpus_per_task": 1, "mem": "32G", "time": 60, "setup": ["module load cuda"],
        "cpus_per_task": 4, "additional_parameters": {"account": "other"}}
    assert res.slurm_parameters("rewind")["time"] == 480
    assert res.slurm_parameters("rewind")["additional_parameters"] == {"account": "other", "qos": "long"}
    (tmp_path / "c.json").write_text(json.dumps({"array_parallelism": 8}))
    assert load_resources(tmp_path / "c.json").slurm_parameters("rewind") == {"array_parallelism": 8}
    assert [parse_time(t) for t in (30, "45", "2:00:00", "1-00:00", "90:00")] == [30, 45, 120, 1440, 90]
    assert parse_sbatch_args(["--account=lab", "qos=high"]) == {"account": "lab", "qos": "high"}
    (tmp_path / "bad.toml").write_text('partitoin = "gpu"\n')
    with pytest.raises(SparseCSEError, match="unknown launcher setting 'partitoin'"):
        load_resources(tmp_path / "bad.toml")
    for bad in ("soon", 0, "0:00"):
        with pytest.raises(SparseCSEError, match="time limit"):
            parse_time(bad)
    with pytest.raises(SparseCSEError, match="KEY=VALUE"):
        parse_sbatch_args(["account"])


def test_missing_sbatch_is_one_sentence_and_submits_nothing(tiny_bert_dir, tiny_stsb_dir, corpus, tmp_path):
    out = tmp_path / "sweep"
    empty = tmp_path / "bin"
    empty.mkdir()
    result = invoke([*common_args(tiny_bert_dir, tiny_stsb_dir, out, corpus), *GRID, "--launcher", "slurm"],
                    env={"PATH": str(empty)})
    assert result.exit_code == 1
    message = result.output.strip().splitlines()[-1]
    assert "--launcher slurm needs SLURM's sbatch on PATH" in message and message.count(". ") <= 1
    assert not out.exists()  # not even scored


def test_launcher_options_need_a_launcher(tiny_bert_dir, tiny_stsb_dir, corpus, tmp_path):
    result = invoke([*common_args(tiny_bert_dir, tiny_stsb_dir, tmp_path / "s", corpus), *GRID, "--partition", "gpu"])
    assert result.exit_code == 1 and "--partition only apply with --launcher" in result.output
    result = invoke([*common_args(tiny_bert_dir, tiny_stsb_dir, tmp_path / "s", corpus), *GRID, "--launcher",
                     "local", "--detach"])
    assert result.exit_code == 1 and "--detach needs --launcher slurm" in result.output


def test_local_launcher_with_two_workers_gives_the_one_process_results(tiny_bert_dir, tiny_stsb_dir, corpus,
                                                                       reference, tmp_path):
    out = tmp_path / "sweep"
    result = invoke([*common_args(tiny_bert_dir, tiny_stsb_dir, out, corpus), *GRID, "--launcher", "local",
                     "--workers", "2", "--poll-seconds", "0.5"])
    assert result.exit_code == 0, result.output
    assert_same_sweep(out, reference)
    assert Counter(r["point"] for r in read_computed(out)) == Counter(
        {label: 1 for label in ["dense", "masked/s0.25-l0.25", "masked/s0.25-l0.75", "masked/s0.5-l0.25",
                                "masked/s0.5-l0.75", "rewound/dense-seed0", "rewound/s0.25-lbest-seed0",
                                "rewound/s0.5-lbest-seed0"]})
    again = invoke([*common_args(tiny_bert_dir, tiny_stsb_dir, out, corpus), *GRID, "--launcher", "local"])
    assert again.exit_code == 0 and "nothing to submit" in again.output
    assert len(read_computed(out)) == 8


# ---------------------------------------------------------------------------- a real SLURM cluster
from tests.helpers import _cluster_unavailable, slurm  # noqa: E402,F401  (slurm: the fixture, shared with tests/test_distributed.py)


def squeue(*args) -> list[str]:
    done = subprocess.run(["squeue", "-h", "--array", "-t", "all", *args], capture_output=True, text=True, check=True)
    return done.stdout.split()


def job_states(job_ids) -> dict[str, str]:
    """The SLURM state of each task of these jobs (arrays expanded), by task id."""
    jobs = sorted({str(j).split("_")[0] for j in job_ids})
    return dict(line.split("|") for line in squeue("-o", "%i|%T", "-j", ",".join(jobs)))


def wait_until_ended(job_ids, timeout_s=120) -> dict[str, str]:
    """A sweep returns once every point file is written; its tasks' processes may still be exiting then."""
    from sparsecse.sweeps.cluster.launch import ACTIVE

    deadline = time.monotonic() + timeout_s
    states = job_states(job_ids)
    while any(s in ACTIVE for s in states.values()) and time.monotonic() < deadline:
        time.sleep(0.5)
        states = job_states(job_ids)
    return states


@pytest.mark.slurm
def test_local_cluster_stops_its_daemons_and_leaves_nothing(tmp_path):
    reason = _cluster_unavailable()
    if reason:
        pytest.skip(reason)
    root = tmp_path / "cluster"
    try:
        env = local_slurm.start(root)
    except SparseCSEError as exc:
        pytest.skip(f"the local SLURM cluster did not start: {exc}")
    pids = {d: int((root / f"{d}.pid").read_text().split()[0]) for d in local_slurm.DAEMONS}
    job = subprocess.run(["sbatch", "--parsable", "--wrap", "true"], env={**os.environ, **env}, capture_output=True,
                         text=True, check=True)
    assert job.stdout.strip().isdigit()
    local_slurm.stop(root)
    assert not root.exists()
    for daemon, pid in pids.items():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.slurm
@pytest.mark.integration
def test_slurm_sweep_gives_the_one_process_results(slurm, tiny_bert_dir, tiny_stsb_dir, corpus, reference, tmp_path):
    out = tmp_path / "sweep"
    cfg = tmp_path / "cluster.yaml"
    cfg.write_text("partition: debug\ncpus_per_task: 1\nmem: 1G\ntime: 30\nrewind:\n  time: '0:40:00'\n")
    result = invoke([*common_args(tiny_bert_dir, tiny_stsb_dir, out, corpus), *GRID, "--launcher", "slurm",
                     "--launcher-config", str(cfg), "--array-parallelism", "2", "--poll-seconds", "1"])
    assert result.exit_code == 0, result.output
    assert_same_sweep(out, reference)
    counts = Counter(r["point"] for r in read_computed(out))
    assert len(counts) == 8 and set(counts.values()) == {1}
    jobs = json.loads((out / "cluster" / "jobs.json").read_text())
    arrays = {a: {j["job_id"].split("_")[0] for j in jobs.values() if j["array"] == a} for a in ("evaluate", "rewind")}
    assert all(len(ids) == 1 for ids in arrays.values()) and arrays["evaluate"] != arrays["rewind"]
    states = wait_until_ended(j["job_id"] for j in jobs.values())
    assert len(states) == 8 and set(states.values()) == {"COMPLETED"}, states


@pytest.mark.slurm
@pytest.mark.integration
def test_a_cancelled_task_is_resubmitted_and_every_point_computed_once(slurm, tiny_bert_dir, tiny_stsb_dir, corpus,
                                                                        tmp_path):
    out = tmp_path / "sweep"
    args = [*common_args(tiny_bert_dir, tiny_stsb_dir, out, corpus), *GRID, "--rewind-sparsities", "0.5",
            "--no-rewind-dense", "--launcher", "slurm", "--poll-seconds", "1"]
    result = invoke([*args, "--detach", "--array-parallelism", "1"])  # one task at a time: the last one waits
    assert result.exit_code == 0, result.output
    jobs = json.loads((out / "cluster" / "jobs.json").read_text())
    submitted = {v["job_id"] for v in jobs.values()}
    victim = max((v["job_id"] for v in jobs.values() if v["array"] == "evaluate"), key=lambda j: int(j.split("_")[1]))
    assert job_states([victim])[victim] == "PENDING"
    subprocess.run(["scancel", victim], check=True)  # a task that never ran: no race with it finishing
    assert wait_until_ended([victim]).get(victim, "CANCELLED") == "CANCELLED"  # or no longer listed at all
    result = invoke(args)  # waits for what still runs and resubmits the cancelled point
    assert result.exit_code == 0, result.output
    counts = Counter(r["point"] for r in read_computed(out))
    assert counts == Counter({p: 1 for p in ["dense", "masked/s0.25-l0.25", "masked/s0.25-l0.75", "masked/s0.5-l0.25",
                                             "masked/s0.5-l0.75", "rewound/s0.5-lbest-seed0"]})
    assert len(point_files(out)) == 6
    jobs = json.loads((out / "cluster" / "jobs.json").read_text())
    assert victim not in {v["job_id"] for v in jobs.values()} and victim in submitted  # resubmitted
    assert not list(out.rglob("*.lock"))


@pytest.mark.slurm
@pytest.mark.integration
def test_a_failing_task_is_reported_with_its_log_and_the_others_finish(slurm, tiny_bert_dir, tiny_stsb_dir, corpus,
                                                                       tmp_path):
    out = tmp_path / "sweep"
    sweep(tiny_bert_dir, sparsities="0.25", lambdas="0.5", out=out, score=scoring(tiny_stsb_dir),
          evaluate=evaluation(tiny_stsb_dir),
          options=SweepOptions(show_progress=False, make_report=False))  # scored, opened
    (out / "masks" / "mask-s0.5-l0.5.safetensors").write_bytes(b"not a mask")  # bad data for one rewind
    result = invoke([*common_args(tiny_bert_dir, tiny_stsb_dir, out, corpus), "--sparsities", "0.25,0.5",
                     "--lambdas", "0.5", "--rewind-lambda", "0.5", "--no-rewind-dense", "--launcher", "slurm",
                     "--poll-seconds", "1"])
    assert result.exit_code == 1
    assert "1 sweep points failed: rewound/s0.5-l0.5-seed0" in result.output
    log = Path(result.output.split("rewound/s0.5-l0.5-seed0 (")[1].split("; log ")[1].split(")")[0])
    assert log.is_file() and "mask-s0.5-l0.5.safetensors" in log.read_text()
    assert point_files(out) == ["dense", "masked/s0.25-l0.5", "masked/s0.5-l0.5",
                                f"rewound/{next((out / 'points' / 'rewound').iterdir()).name}/s0.25-l0.5-seed0"]


def test_ctrl_c_leaves_slurm_jobs_running_unless_confirmed():
    from types import SimpleNamespace

    from sparsecse.sweeps.cluster.launch import LaunchResult, Task, _interrupted
    from sparsecse.sweeps.prepared import Point

    class Backend:
        cancelled = []

        def cancel(self, jobs):
            self.cancelled += [j.job_id for j in jobs]

    tasks = [Task(Point("dense"), "evaluate", SimpleNamespace(job_id="12_0"), "running"),
             Task(Point("masked", 0.1, 0.5), "evaluate", SimpleNamespace(job_id="12_1"), "done"),
             Task(Point("rewound", 0.1, "best", 0), "rewind", SimpleNamespace(job_id="13_0"), "pending")]
    backend = Backend()
    message = _interrupted(backend, LaunchResult(Path("x"), tasks), "slurm", None)
    assert "scancel 12 13" in message and backend.cancelled == []
    message = _interrupted(backend, LaunchResult(Path("x"), tasks), "slurm", lambda question: False)
    assert "keep running" in message and backend.cancelled == []
    asked = []
    message = _interrupted(backend, LaunchResult(Path("x"), tasks), "slurm", lambda q: asked.append(q) or True)
    assert backend.cancelled == ["12_0", "13_0"] and "Cancelled jobs 12, 13" in message
    assert asked == ["Cancel the sweep's 2 unfinished SLURM tasks (jobs 12, 13)?"]


def test_a_task_reaching_its_time_limit_is_requeued_with_the_same_point():
    """submitit calls checkpoint() on the time-limit signal and requeues what it returns; the requeued task
    computes the same point, and a rewind resumes from its checkpoint (``rewind(resume=True)``)."""
    from sparsecse.sweeps.prepared import Point

    task = PointTask(sweep_spec(out="x", options=SweepOptions(overwrite=True, show_progress=True)))
    assert task.spec.run.overwrite is False  # a task never replaces the sweep directory
    again = task.checkpoint(Point("rewound", 0.5, "best", 1))
    assert again.function is task and again.args == (Point("rewound", 0.5, "best", 1),)


def test_job_states_from_squeue_without_accounting():
    from sparsecse.sweeps.cluster.slurm_status import SqueueWatcher

    watcher = SqueueWatcher(delay_s=60)
    watcher.register_job("7_1")
    watcher.register_job("8")
    assert watcher._make_command()[-2:] == ["--jobs", "7,8"]
    info = watcher.read_info(b"7_0|COMPLETED|vm\n7_1|RUNNING|vm\n8|PENDING|\n")
    assert info["7_1"]["State"] == "RUNNING" and info["8"]["State"] == "PENDING" and len(info) == 3


def test_a_point_lock_of_a_gone_slurm_job_is_taken_over(tmp_path, monkeypatch):
    """A task killed on another node leaves its lock; the job's requeued run (same SLURM_JOB_ID), or any
    process once squeue no longer lists the job as running, takes it over instead of waiting a day."""
    from sparsecse.artifacts.locks import FileLock

    path = tmp_path / "s0.1-l0.5.json.lock"

    def held_elsewhere(**extra):
        path.write_text(json.dumps({"pid": 1, "host": "another-node", "started": time.time(), **extra}))

    held_elsewhere()
    assert not FileLock(path).acquire()  # another host's fresh lock, no job to ask about
    held_elsewhere(slurm_job="123")
    monkeypatch.setenv("SLURM_JOB_ID", "123")
    lock = FileLock(path)
    assert lock.acquire() and json.loads(path.read_text())["slurm_job"] == "123"
    lock.release()
    held_elsewhere(slurm_job="77")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text("#!/bin/sh\necho 'slurm_load_jobs error: Invalid job id specified' >&2\nexit 1\n")
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert FileLock(path).acquire()  # SLURM has forgotten job 77: it is gone
    (bin_dir / "squeue").write_text("#!/bin/sh\necho RUNNING\n")
    held_elsewhere(slurm_job="77")
    assert not FileLock(path).acquire()


def test_a_task_carries_the_submitters_consent_to_run_model_code():
    import pickle

    from sparsecse.artifacts.remote_code import remote_code_trusted, trusting_remote_code
    from sparsecse.sweeps.cluster.tasks import PointTask

    with trusting_remote_code(True):
        consenting = PointTask(sweep_spec())
    assert not remote_code_trusted()
    assert pickle.loads(pickle.dumps(consenting)).trust_remote_code is True  # what a SLURM task unpickles
    assert PointTask(sweep_spec()).trust_remote_code is False
