"""`sweep --launcher local` stopped, with real processes: Ctrl-C is one sentence and stops the tasks, and the
tasks die with a sweep process that is killed (SIGKILL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}

def _processes_mentioning(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next(line for line in (proc / "status").read_text().splitlines() if line.startswith("State:"))
        except (OSError, StopIteration):
            continue
        if text in cmdline and "Z" not in state.split()[1]:
            found.append(int(proc.name))
    return found


def _start_sweep(tmp_path, tiny_bert_dir, tiny_stsb_dir, corpus):
    out = tmp_path / "sweep"
    args = ["sweep", "--model", str(tiny_bert_dir), "--data-dir", str(tiny_stsb_dir), "--tasks", "STSBenchmark",
            "--sparsities", "0.25", "--lambdas", "0.5", "--max-batches", "2", "--score-batch-size", "8", "--quiet",
            "--rewind", "--corpus", str(corpus), "--no-rewind-dense", "--max-steps", "100000", "--batch-size", "4",
            "--eval-steps", "0", "--launcher", "local", "--workers", "1", "--poll-seconds", "0.2", "--out", str(out)]
    sweep = subprocess.Popen([sys.executable, "-m", "sparsecse", *args], env=ENV, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)  # its own terminal group
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and sweep.poll() is None:  # until a rewinding task is training
        if list(out.glob("rewound/**/*.partial")) or list(out.glob("**/*.partial")):
            break
        time.sleep(0.2)
    assert sweep.poll() is None, sweep.stderr.read()
    workers = _processes_mentioning(str(out / "cluster"))
    assert workers, "no local task is running"
    return sweep, out, workers


def _gone(out: Path, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _processes_mentioning(str(out / "cluster")):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs Linux /proc")
def test_ctrl_c_on_a_local_sweep_is_one_sentence_and_stops_the_tasks(tmp_path, tiny_bert_dir, tiny_stsb_dir,
                                                                      corpus):
    pytest.importorskip("submitit")
    sweep, out, _ = _start_sweep(tmp_path, tiny_bert_dir, tiny_stsb_dir, corpus)
    os.killpg(sweep.pid, signal.SIGINT)  # what the terminal does on Ctrl-C: the whole foreground group
    _, stderr = sweep.communicate(timeout=120)
    assert sweep.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert "the local tasks were stopped" in stderr.strip().splitlines()[-1]
    assert _gone(out)


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs Linux /proc")
def test_local_sweep_tasks_die_with_a_killed_sweep(tmp_path, tiny_bert_dir, tiny_stsb_dir, corpus):
    pytest.importorskip("submitit")
    sweep, out, _ = _start_sweep(tmp_path, tiny_bert_dir, tiny_stsb_dir, corpus)
    sweep.kill()
    sweep.wait(timeout=60)
    assert _gone(out), _processes_mentioning(str(out / "cluster"))
