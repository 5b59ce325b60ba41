"""Every public function, class and method of sparsecse/ has a docstring (read from the source, so nothing is
imported): a name without a leading underscore, at module level or in a public class."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def undocumented(path: Path, root: Path = ROOT) -> list[str]:
    """The public functions, classes and methods of one module without a docstring, as ``FILE:LINE NAME``."""
    found = []

    def visit(body, prefix):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                if ast.get_docstring(node) is None:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {prefix}{node.name}")
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{prefix}{node.name}.")

    visit(ast.parse(path.read_text(encoding="utf-8")).body, "")
    return found


def test_every_public_function_and_class_has_a_docstring():
    missing = [item for path in sorted((ROOT / "sparsecse").rglob("*.py")) for item in undocumented(path)]
    assert missing == [], f"{len(missing)} without a docstring:\n" + "\n".join(missing)


def test_the_check_sees_a_missing_docstring(tmp_path):
    module = tmp_path / "probe.py"
    module.write_text('def documented():\n    """Yes."""\n\n\nclass Bare:\n    def method(self):\n        pass\n\n'
                      '    def _private(self):\n        pass\n')
    assert undocumented(module, tmp_path) == ["probe.py:5 Bare", "probe.py:6 Bare.method"]
