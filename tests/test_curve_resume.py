"""Issue 65, cause 7: a curve stopped during its second target (SIGTERM or SIGKILL, a real signal to a real
process), then run again with ``--resume``, goes on from its finished first target, which it reads and never
rewrites (its files byte for byte as they were), and takes over the dead process's stale ``.lock``."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparsecse.cli import main
from tests.test_targets import TINY_STAGES, fake_clock, text, tiny_dir  # noqa: F401 (fixtures)

REPO = Path(__file__).resolve().parents[1]
DRIVER = """
import os, signal, sys, time
sys.path.insert(0, {repo!r})
from sparsecse.evaluation import speed
from tests.test_targets import FakeClock
speed.clock = FakeClock()
from sparsecse.recipes import runner
real = runner.run_stage

def stopping(stage, index, current, target, ctx):
    if "speedup-1.4" in str(target) and stage.name == "student":
        os.kill(os.getpid(), signal.{signal})
        time.sleep(30)
    return real(stage, index, current, target, ctx)

runner.run_stage = stopping
from sparsecse.cli import main
main({args!r})
"""


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("signal", ["SIGTERM", "SIGKILL"])
def test_a_curve_stopped_in_its_second_target_resumes_leaving_the_first_as_it_was(tmp_path, tiny_dir, text,
                                                                                  fake_senteval, fake_clock, signal):
    out = tmp_path / "curve"
    args = ["compress", "--model", str(tiny_dir), "--corpus", str(text), "--speedup", "1.2,1.4", "--metric",
            "latency-p50", "--data-dir", str(fake_senteval), "--out", str(out), "--quiet", *TINY_STAGES]
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.format(repo=str(REPO), signal=signal, args=args))
    done = subprocess.run([sys.executable, str(driver)], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode != 0, done.stdout + done.stderr  # stopped
    first = out / "speedup-1.2"
    assert (first / "model").is_dir() and not (out / "speedup-1.4" / "model").exists(), done.stderr
    if signal == "SIGKILL":
        assert (out / "speedup-1.4" / ".lock").exists()  # the dead process's lock, left behind
    before = snapshot(first)
    result = CliRunner().invoke(main, [*args, "--resume"])
    assert result.exit_code == 0, result.output
    assert snapshot(first) == before  # the finished target read, never rewritten
    assert (out / "speedup-1.4" / "model" / "manifest.json").is_file()
    assert not (out / "speedup-1.4" / ".lock").exists()
    assert (out / "curve.csv").is_file()
    reached = json.loads((out / "speedup-1.4" / "model" / "manifest.json").read_text())["figures"]["target"]
    assert reached["met"]
