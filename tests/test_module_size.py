"""The codebase stays in small modules: none of the package's or the CLI's modules reaches 450 lines."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 450


def test_every_module_is_under_the_limit():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
             for folder in ("sparsecse", "cli") for p in (ROOT / folder).rglob("*.py")}
    assert sizes, "no modules found"
    assert {name: n for name, n in sizes.items() if n >= LIMIT} == {}


def test_modules_import_at_the_top():
    """A module's dependencies are visible at its top: no sparsecse import inside a function."""
    import ast

    found = set()
    for path in (ROOT / "sparsecse").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith("sparsecse"):
                        found.add((str(path.relative_to(ROOT)), inner.module))
    assert found == set()


def test_no_function_takes_more_than_ten_parameters():
    """Stages take one config each instead of a flag per setting (CLI commands, which click calls with one
    argument per option, are outside ``sparsecse/``). ``**options`` is not counted."""
    import ast

    too_many = {}
    for path in (ROOT / "sparsecse").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
                names += [a.vararg.arg] if a.vararg else []
                if len(names) > 10:
                    too_many[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = len(names)
    assert too_many == {}
