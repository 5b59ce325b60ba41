"""The test suite's own layout: shared helpers live in tests/helpers.py, conftest.py and tiny.py, so no
test file imports another (a test module imported twice runs its module-level code twice, and a helper
hidden in a test file is found only by reading it)."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    return names | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}


def test_no_test_file_imports_another():
    offenders = {f"{path.name} imports {module}" for path in TESTS.glob("*.py") for module in imported_modules(path)
                 if module.startswith("tests.test_")}
    assert not offenders, sorted(offenders)


def test_the_checker_sees_an_import_between_test_files(tmp_path):
    bad = tmp_path / "test_x.py"
    bad.write_text("def f():\n    from tests.test_training import quick\n")
    assert "tests.test_training" in imported_modules(bad)
