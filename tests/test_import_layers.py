"""The import contract in .importlinter holds: no upward import and no loop between sparsecse's packages."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_imports_follow_the_layers():
    lint = Path(sys.executable).parent / "lint-imports"
    run = subprocess.run([str(lint), str(ROOT / ".importlinter"), "--no-cache"], cwd=ROOT, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 kept, 0 broken" in run.stdout
