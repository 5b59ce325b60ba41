"""Every docstring example in the package runs (``make test`` runs this file, so CI does): each module of sparsecse/
and cli/ whose docstrings hold an example is imported and its examples are run with doctest. Examples that need the
network, a real model or data on disk are marked ``# doctest: +SKIP`` where they stand; a module that needs an
optional extra is skipped with the extra's name when that extra is not installed."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# optional extras: a module importing one of these is skipped where it is not installed
EXTRAS = ("openvino", "nncf", "onnxruntime", "onnx", "submitit", "mteb", "optimum")


def _modules_with_examples() -> list[str]:
    names = []
    for package in ("sparsecse", "cli"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if ">>>" in path.read_text(encoding="utf-8"):
                parts = path.relative_to(ROOT).with_suffix("").parts
                parts = ("sparsecse", "cli") + parts[1:] if package == "cli" else parts  # installed as sparsecse.cli
                names.append(".".join(p for p in parts if p != "__init__"))
    return names


MODULES = _modules_with_examples()


def test_the_examples_are_found():
    assert len(MODULES) >= 20 and "sparsecse.objectives.registry" in MODULES and "sparsecse.cli.options" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in EXTRAS:
            pytest.skip(f"{name} needs {exc.name} (an optional extra)")
        raise
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(module, name) if t.examples]
    assert tests, f"{name} holds '>>>' but doctest finds no example"
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} failed (output above)"
