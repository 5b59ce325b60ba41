"""Data-parallel train and rewind on 2 CPU processes (gloo), through the launchers a user runs:
``torchrun`` and ``accelerate launch`` around the installed ``sparsecse`` command, and ``srun`` on a real
single-node SLURM cluster. With dropout off, every step's loss equals the one-process run with the same
global batch, data order and seed; without gathering the negatives it differs as documented; a run killed
mid-way resumes with 1 or 2 processes; one process reports; failures are one sentence."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from sparsecse.errors import SparseCSEError
from tests.helpers import make_mask, random_sentences, slurm  # noqa: F401  (slurm: a fixture)
from tests.tiny import make_tiny_model_dir

BIN = Path(sys.executable).parent
SPARSECSE = str(BIN / "sparsecse")
STEPS = 8
KILLER = '''import os, signal, sys
from sparsecse.errors import SparseCSEError
from sparsecse.training import loop
step = loop.Trainer._train_step
def _train_step(self):  # process KILL_RANK stops before step KILL_AT + 1: killed, or with its own error
    if self.step == int(os.environ["KILL_AT"]) and self.acc.process_index == int(os.environ["KILL_RANK"]):
        if os.environ.get("KILL_HOW") == "error":
            raise SparseCSEError("The disk is full.")
        os.kill(os.getpid(), signal.SIGKILL)
    return step(self)
loop.Trainer._train_step = _train_step
from sparsecse.cli import main
sys.exit(main())
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(tmp_path, **extra):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
           "SPARSECSE_CACHE": str(tmp_path / "cache"), **extra}
    env.pop("SLURM_CONF", None) if "SLURM_CONF" not in extra else None
    return env


def launch(launcher: str, args, tmp_path, env=None, expect_ok=True, script=SPARSECSE):
    """``sparsecse ARGS`` in one process, or in 2 through ``torchrun`` or ``accelerate launch``."""
    if launcher == "one":
        cmd = [sys.executable, script, *args]
    elif launcher == "torchrun":
        cmd = [str(BIN / "torchrun"), "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
               "--master_port", str(free_port()), script, *args]
    elif launcher == "accelerate":
        cmd = [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
               script, *args]
    else:  # accelerate launch --cpu: one process, whatever --num_processes says; --quiet, as Accelerate 1.16 and
        # newer otherwise raise the failed process's stderr again in their own traceback (each line twice)
        cmd = [str(BIN / "accelerate"), "launch", "--cpu", "--quiet", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", script, *args]
    done = subprocess.run(cmd, env=env or environment(tmp_path), capture_output=True, text=True, timeout=900,
                          cwd=tmp_path)
    if expect_ok:
        assert done.returncode == 0, f"{launcher} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def log(out):
    return [json.loads(line) for line in (Path(out) / "train_log.jsonl").read_text().splitlines()]


def losses(out):
    return [r["loss"] for r in log(out) if "loss" in r]


def weights(out):
    return load_file(str(Path(out) / "model.safetensors"))


def same_weights(a, b, atol):
    """The same tensors within ``atol``, but for the attention key biases: softmax does not change when a
    query's scores all shift by the same amount, so their gradient is rounding noise (~1e-10), which Adam
    scales up to steps of the learning rate's size: they differ between any two summation orders."""
    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=atol) for k in a
                                        if not k.endswith("attention.self.key.bias"))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny BERT with dropout off (student and initial checkpoint), a mask of it, another tiny model as
    the teacher, a corpus and a tiny STS-B."""
    from tests.tiny import write_stsb

    root = tmp_path_factory.mktemp("distributed")
    model = make_tiny_model_dir(root / "model", "bert", init_range=0.2)
    config = json.loads((model / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (model / "config.json").write_text(json.dumps(config))
    mask, _ = make_mask(root, model)
    teacher = make_tiny_model_dir(root / "teacher", "bert", seed=5)
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(random_sentences(96, seed=1)) + "\n")
    stsb = write_stsb(root / "senteval")
    common = ["--corpus", str(corpus), "--batch-size", "8", "--max-steps", str(STEPS), "--lr", "1e-3",
              "--eval-steps", str(STEPS), "--save-steps", "3", "--data-dir", str(stsb), "--device", "cpu", "--quiet"]
    return {"root": root, "model": model, "teacher": teacher,
            "rewind": ["rewind", "--mask", str(mask), "--init", str(model), *common],
            "distill": ["train", "--model", str(model), "--objective", "distill", "--objective-args",
                        f"teacher={teacher}", "--pooling", "mean", *common]}


@pytest.fixture(scope="module")
def rewinds(setup):
    """A short SimCSE rewind in 1 process, in 2 (torchrun) and in 2 without gathering the negatives."""
    root = setup["root"]
    runs = {"one": ("one", []), "two": ("torchrun", []), "local": ("torchrun", ["--no-gather-negatives"])}
    done = {name: launch(how, [*setup["rewind"], *extra, "--out", str(root / f"rewind-{name}")], root)
            for name, (how, extra) in runs.items()}
    return {name: root / f"rewind-{name}" for name in runs} | {"output": done}


@pytest.fixture(scope="module")
def distills(setup):
    """A short distillation in 1 process and in 2 (accelerate launch), each with its own teacher cache."""
    root = setup["root"]
    out = {}
    for name, how in (("one", "one"), ("two", "accelerate")):
        out[name] = root / f"distill-{name}"
        launch(how, [*setup["distill"], "--out", str(out[name])], root,
               env=environment(root, SPARSECSE_CACHE=str(root / f"cache-{name}")))
    return out


def test_simcse_rewind_on_two_processes_follows_the_one_process_losses(rewinds):
    one, two = losses(rewinds["one"]), losses(rewinds["two"])
    assert len(one) == len(two) == STEPS and one[-1] < one[0]
    assert two == pytest.approx(one, abs=2e-5)
    assert same_weights(weights(rewinds["one"]), weights(rewinds["two"]), atol=1e-4)
    params = json.loads((rewinds["two"] / "manifest.json").read_text())["params"]
    assert (params["processes"], params["batch_size"], params["per_process_batch_size"]) == (2, 8, 4)
    assert params["gather_negatives"] is True
    # only the first process reports; the second prints nothing
    assert rewinds["output"]["two"].stdout.count("saved the") == 1


def test_without_gathering_each_process_contrasts_its_own_half(rewinds):
    """The documented difference: 4 candidates per anchor instead of 8, so a lower InfoNCE from step 1
    on (with dropout off both views are equal, the loss is the log of a sum over fewer negatives)."""
    one, local = losses(rewinds["one"]), losses(rewinds["local"])
    assert local[0] < one[0] - 0.05
    params = json.loads((rewinds["local"] / "manifest.json").read_text())["params"]
    assert params["gather_negatives"] is False


def test_distillation_on_two_processes_follows_the_one_process_losses(distills):
    one, two = losses(distills["one"]), losses(distills["two"])
    assert len(one) == len(two) == STEPS and one[-1] < one[0]
    assert two == pytest.approx(one, rel=1e-5, abs=1e-7)
    assert same_weights(weights(distills["one"]), weights(distills["two"]), atol=1e-5)
    # the teacher's embeddings: one cache, written once, the same as one process computed
    caches = [sorted(p for p in (distills[n].parent / f"cache-{n}" / "teacher_embeddings").iterdir() if p.is_dir())
              for n in ("one", "two")]
    assert [len(c) for c in caches] == [1, 1] and caches[0][0].name == caches[1][0].name
    meta = json.loads((caches[1][0] / "meta.json").read_text())
    assert meta["complete"] and not (caches[1][0] / "chunks").exists()
    import numpy as np

    assert np.allclose(np.load(caches[0][0] / "embeddings.npy"), np.load(caches[1][0] / "embeddings.npy"), atol=1e-5)


def kill_and_resume(setup, tmp_path, how: str, resume_with: str):
    out = tmp_path / "killed"
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    env = environment(tmp_path, KILL_AT="5", KILL_RANK="1", KILL_HOW=how)
    done = launch("torchrun", [*setup["rewind"], "--out", str(out)], tmp_path, env=env, expect_ok=False,
                  script=str(script))
    assert done.returncode != 0
    assert (tmp_path / "killed.partial" / "checkpoints" / "step-000003").is_dir()
    launch(resume_with, [*setup["rewind"], "--out", str(out), "--resume"], tmp_path)
    return done, out


@pytest.mark.parametrize("resume_with", ["one", "torchrun"])
def test_a_killed_two_process_run_resumes_with_one_or_two_processes(setup, rewinds, tmp_path, resume_with):
    done, out = kill_and_resume(setup, tmp_path, "kill", resume_with)
    # the one message names the process that was killed
    said = done.stdout + done.stderr
    assert "Process 1 of 2 stopped without a word at step 6" in said or "rank: 1" in said, said[-3000:]
    assert losses(out) == pytest.approx(losses(rewinds["one"]), abs=2e-5)
    assert [r["step"] for r in log(out) if "loss" in r] == list(range(1, STEPS + 1))
    assert same_weights(weights(out), weights(rewinds["one"]), atol=1e-4)


def test_a_process_that_fails_says_so_once_and_the_other_stops(setup, tmp_path):
    out = tmp_path / "failed"
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    env = environment(tmp_path, KILL_AT="5", KILL_RANK="1", KILL_HOW="error")
    done = launch("torchrun", [*setup["rewind"], "--out", str(out)], tmp_path, env=env, expect_ok=False,
                  script=str(script))
    assert done.returncode != 0
    errors = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("Error:")]
    assert errors == ["Error: Process 1 of 2: The disk is full."]


def test_accelerate_launch_cpu_is_named_instead_of_training_alone(setup, tmp_path):
    done = launch("accelerate-cpu", [*setup["distill"], "--out", str(tmp_path / "alone")], tmp_path,
                  expect_ok=False)
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "accelerate launch --multi_gpu --num_processes N" in errors[0]
    assert not (tmp_path / "alone").exists() and not (tmp_path / "alone.partial").exists()


def test_launch_environment_errors_are_one_sentence(monkeypatch):
    from sparsecse.training.distributed import check_launch, init_process_group, slurm_environment

    with pytest.raises(SparseCSEError, match=r"WORLD_SIZE=2 asks for a run of 2 processes, but MASTER_ADDR, "
                                             r"MASTER_PORT are not set"):
        check_launch({"WORLD_SIZE": "2", "RANK": "0"})
    with pytest.raises(SparseCSEError, match="RANK=2 does not fit WORLD_SIZE=2"):
        check_launch({"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"})
    check_launch({"WORLD_SIZE": "1"})
    # srun with 2 tasks: the rank, the world and the rendezvous from SLURM's variables
    env = slurm_environment({"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "1",
                             "SLURM_STEP_NODELIST": "node[03-04]", "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
                             "SLURM_STEP_NUM_NODES": "2", "SLURM_NODEID": "1", "SLURM_JOB_ID": "77",
                             "SLURM_STEP_ID": "0"})
    assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")} == \
        {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "1"}
    assert env["MASTER_ADDR"] in ("node03",) and env["MASTER_PORT"] == str(20000 + 77 * 16)
    assert slurm_environment({"SLURM_STEP_NUM_TASKS": "1", "SLURM_PROCID": "0"}) == {}
    # a world of 2 where only this process arrives: one sentence after the rendezvous timeout
    for key in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    monkeypatch.setenv("SPARSECSE_RENDEZVOUS_TIMEOUT", "2")
    with pytest.raises(SparseCSEError, match=r"Process 0 of 2 did not meet the other processes at 127\.0\.0\.1:"
                                             r"\d+ within 2 s .*WORLD_SIZE=2 processes"):
        init_process_group(cpu=True)


@pytest.mark.slurm
def test_srun_with_two_tasks_gives_the_model_of_accelerate_launch(slurm, setup, distills, tmp_path):
    """scripts/slurm/train_multinode.sbatch on the local cluster, 2 tasks on its one node."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "slurm" / "train_multinode.sbatch"
    out = tmp_path / "distill-slurm"
    env = environment(tmp_path, SLURM_CONF=os.environ["SLURM_CONF"], SPARSECSE=SPARSECSE,
                      SPARSECSE_CACHE=str(tmp_path / "cache"))
    done = subprocess.run([shutil.which("sbatch"), "--wait", "--nodes", "1", "--ntasks", "2", "--cpus-per-task", "1",
                           "--output", str(tmp_path / "job.out"), str(script), *setup["distill"], "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    job_log = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else ""
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{job_log[-3000:]}"
    assert job_log.count("saved the") == 1, job_log
    assert json.loads((out / "manifest.json").read_text())["params"]["processes"] == 2
    assert losses(out) == losses(distills["two"])
    assert same_weights(weights(out), weights(distills["two"]), atol=1e-6)


def _gathering_worker(rank, port, folder):
    """One of 2 gloo processes: its half of a batch through info_nce and similarity_loss, gathered and not."""
    import torch.distributed as dist

    from sparsecse.objectives.distill import similarity_loss
    from sparsecse.objectives.losses import gather_with_grad, gathering, info_nce

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        torch.manual_seed(0)
        full_a, full_b, teacher = torch.randn(8, 6), torch.randn(8, 6), torch.randn(8, 5)
        part = slice(4 * rank, 4 * rank + 4)
        out = {}
        for gather in (True, False):
            a = full_a[part].clone().requires_grad_()
            with gathering(gather):
                loss = info_nce(a, full_b[part], 0.05)[0]
                sim = similarity_loss(gather_with_grad(a), gather_with_grad(teacher[part]))
            (loss + sim).backward()
            # every process computes the same gathered loss, and the gather's backward sums their gradients
            # for this process's rows: 2x the loss's; DDP's mean over processes of a weight's gradient halves it
            out[str(gather)] = (float(loss.detach()), float(sim.detach()), (a.grad / 2).tolist())
        Path(folder, f"rank{rank}.json").write_text(json.dumps(out))
    finally:
        dist.destroy_process_group()


def test_gathered_losses_and_gradients_are_the_one_process_ones_and_local_ones_the_mean_of_halves(tmp_path):
    import torch.multiprocessing as mp

    from sparsecse.objectives.distill import similarity_loss
    from sparsecse.objectives.losses import info_nce

    mp.spawn(_gathering_worker, args=(free_port(), str(tmp_path)), nprocs=2, join=True)
    results = {r: {k == "True": v for k, v in json.loads((tmp_path / f"rank{r}.json").read_text()).items()}
               for r in (0, 1)}
    torch.manual_seed(0)
    full_a, full_b, teacher = torch.randn(8, 6), torch.randn(8, 6), torch.randn(8, 5)
    a = full_a.clone().requires_grad_()
    loss, sim = info_nce(a, full_b, 0.05)[0], similarity_loss(a, teacher)
    (loss + sim).backward()
    for rank in (0, 1):  # gathered: the whole batch's loss and gradient (DDP's mean of the processes' gradients)
        got_loss, got_sim, got_grad = results[rank][True]
        assert got_loss == pytest.approx(loss.item(), abs=1e-5) and got_sim == pytest.approx(sim.item(), abs=1e-6)
        assert torch.allclose(torch.tensor(got_grad), a.grad[4 * rank:4 * rank + 4], atol=1e-5)
    # not gathered: each process's loss is its half's; the run logs their mean
    halves = [info_nce(full_a[s], full_b[s], 0.05)[0] for s in (slice(0, 4), slice(4, 8))]
    assert [results[r][False][0] for r in (0, 1)] == pytest.approx([float(h) for h in halves], abs=1e-5)
    assert sum(results[r][False][0] for r in (0, 1)) / 2 < loss.item()
