"""Training on a CUDA GPU (skipped without one): bf16 autocast whose recorded best dev score is the saved
model's, a run killed mid-way that resumes, ``sparsecse train`` under ``torchrun`` on one GPU, and NCCL
between two processes where the machine has two GPUs.

Tolerances are those of the GPU: the recorded score and the reload's are computed by the same kernels on the
same batches (equal up to 1e-6); a resumed bf16 run follows the uninterrupted one within 5% per step (the
embedding backward adds with atomics, so two GPU runs differ in the last bits and bf16 rounds them up)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.training.api import train
from sparsecse.training.config import TrainingConfig
from sparsecse.training.dev_eval import dev_set
from tests.helpers import random_sentences
from tests.test_distributed import KILLER, environment, free_port, launch, log, losses
from tests.tiny import make_tiny_model_dir, write_stsb

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
STEPS = 8


@pytest.fixture(scope="module")
def gpu_setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu")
    model = make_tiny_model_dir(root / "model", "bert", init_range=0.2)
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(random_sentences(96, seed=1)) + "\n")
    stsb = write_stsb(root / "senteval")
    common = ["--corpus", str(corpus), "--batch-size", "8", "--max-steps", str(STEPS), "--lr", "1e-3",
              "--eval-steps", "4", "--save-steps", "3", "--data-dir", str(stsb), "--device", "cuda",
              "--mixed-precision", "bf16", "--quiet"]
    return {"root": root, "model": model, "corpus": corpus, "stsb": stsb,
            "train": ["train", "--model", str(model), "--objective", "simcse", *common]}


def test_bf16_training_records_the_best_score_its_saved_model_gives(gpu_setup, tmp_path):
    config = TrainingConfig(max_steps=STEPS, batch_size=8, lr=1e-3, eval_steps=2, save_steps=0, device="cuda",
                            mixed_precision="bf16", data_dir=gpu_setup["stsb"], show_progress=False)
    result = train(gpu_setup["model"], gpu_setup["corpus"], tmp_path / "out", objective="simcse", config=config)
    assert result.hyperparameters["mixed_precision"] == "bf16" and result.best_step is not None
    assert len(result.losses) == STEPS and all(isinstance(v, float) for v in result.losses.values())
    reloaded = SentenceEncoder.load(tmp_path / "out", device="cuda")
    assert dev_set(None, gpu_setup["stsb"]).score(reloaded) == pytest.approx(result.best_score, abs=1e-6)


def test_a_killed_gpu_run_resumes_where_its_checkpoint_left_it(gpu_setup, tmp_path):
    whole = tmp_path / "whole"
    launch("one", [*gpu_setup["train"], "--out", str(whole)], tmp_path)
    killer = tmp_path / "killer.py"
    killer.write_text(KILLER)
    out = tmp_path / "killed"
    env = environment(tmp_path, KILL_AT="5", KILL_RANK="0", KILL_HOW="kill")
    killed = launch("one", [*gpu_setup["train"], "--out", str(out)], tmp_path, env=env, expect_ok=False,
                    script=str(killer))
    assert killed.returncode != 0 and (tmp_path / "killed.partial" / "checkpoints" / "step-000003").is_dir()
    launch("one", [*gpu_setup["train"], "--out", str(out), "--resume"], tmp_path)
    steps = [r["step"] for r in log(out) if "loss" in r]
    assert steps == list(range(1, STEPS + 1))
    assert losses(out) == pytest.approx(losses(whole), rel=0.05)


def test_train_under_torchrun_on_one_gpu(gpu_setup, tmp_path):
    out = tmp_path / "out"
    done = launch("one", [*gpu_setup["train"], "--out", str(out), "--json"], tmp_path)
    single = json.loads(done.stdout.strip().splitlines()[-1])
    launched = tmp_path / "torchrun"
    cmd = [str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node", "1", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), str(Path(sys.executable).parent / "sparsecse"), *gpu_setup["train"], "--out",
           str(launched)]
    run = subprocess.run(cmd, env=environment(tmp_path), capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    manifest = json.loads((launched / "manifest.json").read_text())
    assert manifest["params"]["processes"] == 1 and manifest["params"]["mixed_precision"] == "bf16"
    assert [r["step"] for r in log(launched) if "loss" in r] == list(range(1, STEPS + 1))
    assert single["steps"] == STEPS


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL between processes needs two GPUs")
def test_two_gpu_processes_meet_over_nccl_and_train(gpu_setup, tmp_path):
    out = tmp_path / "out"
    env = environment(tmp_path, NCCL_DEBUG="WARN")
    launch("torchrun", [*gpu_setup["train"], "--out", str(out)], tmp_path, env=env)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["params"]["processes"] == 2
    assert [r["step"] for r in log(out) if "loss" in r] == list(range(1, STEPS + 1))


def test_encoding_device_encodes_on_the_gpu_and_puts_the_model_back(gpu_setup):
    from sparsecse.modeling.encoder import encoding_device

    encoder = SentenceEncoder.load(gpu_setup["model"], device="cpu")
    with encoding_device(encoder):
        assert encoder.device.type == "cuda"
        assert encoder.encode(["a man is playing the guitar"]).shape == (1, encoder.dim)
    assert encoder.device.type == "cpu"
