"""A training run killed, with real processes: its directory is usable or absent at every instant of its life
(killed with SIGKILL, SIGINT or SIGTERM at each stage, then resumed), and two processes writing the same --out."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparsecse.cli import main

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}

# Runs `sparsecse ARGS` in a child process that sends itself SIG at STAGE (SIGKILL: as `kill -9` would).
CHILD = textwrap.dedent('''
    import os, signal, sys, time
    stage, sig, args = sys.argv[1], getattr(signal, sys.argv[2]), sys.argv[3:]
    from sparsecse.training import loop, rundir

    def fire():
        os.kill(os.getpid(), sig)
        time.sleep(30)  # SIGINT/SIGTERM raise here; SIGKILL never returns

    real_replace = os.replace
    def replace(src, dst, *a, **k):
        name = os.path.basename(str(dst))
        if (stage == "partial" and name.endswith(".partial")) or (stage == "best" and name.startswith("best-step")) \\
                or (stage == "assemble" and name == "out"):
            fire()
        return real_replace(src, dst, *a, **k)
    os.replace = replace

    real_write_state, calls = loop.write_state, []
    def write_state(*a, **k):
        calls.append(a[1])
        if stage == "checkpoint" and len(calls) == 2:  # between two files of the first checkpoint
            fire()
        return real_write_state(*a, **k)
    loop.write_state = write_state

    real_step = loop.Trainer._train_step
    def train_step(self):
        if stage == "after-checkpoint" and self.step == 3:
            fire()
        while stage == "gate" and self.step == 3 and not os.path.exists(os.environ["GATE"]):
            time.sleep(0.05)  # holds the run (and its lock) until the test opens the gate
        return real_step(self)
    loop.Trainer._train_step = train_step

    real_remove = rundir.RunDir.remove
    def remove(self):
        if stage == "assembled" and self.out.exists():
            fire()
        return real_remove(self)
    rundir.RunDir.remove = remove

    from sparsecse.cli import main
    main(args)
''')

STAGES = ("partial", "checkpoint", "after-checkpoint", "best", "assemble", "assembled")
CASES = [(stage, "SIGKILL") for stage in STAGES] + [("partial", "SIGINT"), ("after-checkpoint", "SIGINT"),
                                                    ("checkpoint", "SIGTERM"), ("assemble", "SIGTERM")]


def _train_args(model, corpus, data, out, *extra):
    return ["train", "--model", str(model), "--corpus", str(corpus), "--out", str(out), "--max-steps", "6",
            "--save-steps", "2", "--eval-steps", "2", "--data-dir", str(data), "--batch-size", "8", "--quiet",
            *extra]


def _complete(out: Path) -> bool:
    from sparsecse.modeling.encoder import SentenceEncoder

    if not out.exists():
        return False
    assert json.loads((out / "manifest.json").read_text())["kind"] == "train_model"
    SentenceEncoder.load(out, device="cpu")  # loads whole
    return True


def _usable_or_absent(runs: Path) -> None:
    """The state a kill may leave: OUT absent or complete; OUT.partial absent or with a readable run.json."""
    out, partial = runs / "out", runs / "out.partial"
    if out.exists():
        assert _complete(out)
    if partial.exists():
        assert isinstance(json.loads((partial / "run.json").read_text())["fingerprint"], dict)
    visible = sorted(p.name for p in runs.iterdir() if not p.name.startswith("."))
    assert set(visible) <= {"out", "out.partial"}, visible


@pytest.mark.parametrize("stage,sig", CASES)
def test_a_run_killed_at_any_stage_is_usable_or_absent_and_resumes(stage, sig, tmp_path, tiny_bert_dir,
                                                                    tiny_stsb_dir, corpus):
    runs = tmp_path / "runs"
    runs.mkdir()
    args = _train_args(tiny_bert_dir, corpus, tiny_stsb_dir, runs / "out")
    child = subprocess.run([sys.executable, "-c", CHILD, stage, sig, *args], env=ENV, capture_output=True,
                           text=True, timeout=300)
    if sig == "SIGKILL":
        assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    else:
        assert child.returncode == (130 if sig == "SIGINT" else 143), child.stderr[-2000:]
        assert "Traceback" not in child.stderr
        last = child.stderr.strip().splitlines()[-1]
        kept = (runs / "out.partial").exists()
        assert ("--resume" in last) if kept else ("nothing to resume" in last or "nothing half-written" in last), last
        assert ("Terminated" in last) == (sig == "SIGTERM"), last
    _usable_or_absent(runs)
    if (runs / "out").exists():  # killed after OUT was in place: the finished run is whole
        assert stage == "assembled" and _complete(runs / "out")
        return
    result = CliRunner().invoke(main, _train_args(tiny_bert_dir, corpus, tiny_stsb_dir, runs / "out", "--resume"))
    assert result.exit_code == 0, result.output
    assert _complete(runs / "out") and not (runs / "out.partial").exists()
    assert sorted(p.name for p in runs.iterdir()) == ["out"]  # no lock, no temporary left


def test_two_processes_writing_the_same_out(tmp_path, tiny_bert_dir, corpus):
    runs = tmp_path / "runs"
    runs.mkdir()
    gate = tmp_path / "gate"

    def start(*extra, hold=False):
        args = ["train", "--model", str(tiny_bert_dir), "--corpus", str(corpus), "--out", str(runs / "out"),
                "--batch-size", "8", "--max-steps", "6", "--eval-steps", "0", "--quiet", *extra]
        command = ["-c", CHILD, "gate", "SIGINT", *args] if hold else ["-m", "sparsecse", *args]
        return subprocess.Popen([sys.executable, *command], env={**ENV, "GATE": str(gate)}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    # started together, without --overwrite: exactly one succeeds
    first, second = start(), start()
    outcomes = [p.wait(timeout=600) for p in (first, second)]
    errors = [p.stderr.read() for p in (first, second)]
    assert sorted(outcomes) == [0, 1], errors
    loser = errors[outcomes.index(1)].strip().splitlines()[-1]
    assert "being written by another process" in loser or "already exists" in loser, loser
    assert _complete(runs / "out")
    before = (runs / "out" / "model.safetensors").read_bytes()

    # with --overwrite, a second writer while the first runs is refused; the survivor is whole
    first = start("--overwrite", "--seed", "1", hold=True)  # holds at step 3 until the gate opens
    deadline = time.monotonic() + 300
    while not (runs / "out.partial").exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    second = start("--overwrite", "--seed", "2")
    assert second.wait(timeout=600) == 1
    assert "being written by another process" in second.stderr.read()
    gate.touch()
    assert first.wait(timeout=600) == 0, first.stderr.read()
    assert _complete(runs / "out") and (runs / "out" / "model.safetensors").read_bytes() != before
    assert json.loads((runs / "out" / "manifest.json").read_text())["seed"] == 1
    assert sorted(p.name for p in runs.iterdir()) == ["out"]
