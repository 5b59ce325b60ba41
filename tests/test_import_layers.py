"""The import contracts in .importlinter hold: no upward import and no loop, between sparsecse's packages or inside
one, and every module is named in a contract (the package contracts are exhaustive)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_imports_follow_the_layers():
    lint = Path(sys.executable).parent / "lint-imports"
    if not lint.is_file():
        pytest.skip(f"import-linter is not installed beside {sys.executable} (pip install import-linter)")
    run = subprocess.run([str(lint), str(ROOT / ".importlinter"), "--no-cache"], cwd=ROOT, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert " kept, 0 broken" in run.stdout
    config = (ROOT / ".importlinter").read_text()
    packages = sorted(p.parent.name for p in (ROOT / "sparsecse").glob("*/__init__.py"))
    assert [name for name in packages if f"containers = sparsecse.{name}\n" not in config] == [], \
        "a package without its own exhaustive contract"
