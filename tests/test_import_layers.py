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


def test_artifacts_names_no_module_above_it_not_even_in_a_string():
    """import-linter sees imports only; a module named in a string (``"sparsecse.exporting.x:f"``, resolved by
    importlib) hides an upward dependency from it. No string of artifacts/ (docstrings aside) names a package
    above it."""
    import ast
    import re

    config = (ROOT / ".importlinter").read_text()
    above = re.search(r"contract:artifacts-below\].*?forbidden_modules =\n((?:    \S+\n)+)", config, re.S).group(1).split()
    assert "sparsecse.exporting" in above and "sparsecse.serving" in above
    found = []
    for path in sorted((ROOT / "sparsecse" / "artifacts").glob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        found += [f"{path.name}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                  and any(re.search(rf"(?<![\w.]){re.escape(m)}(?![\w])", node.value) for m in above)]
    assert found == []
