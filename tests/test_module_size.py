"""The codebase stays in small modules: none of the package's or the CLI's modules reaches 450 lines."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 450


def test_every_module_is_under_the_limit():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
             for folder in ("sparsecse", "cli") for p in (ROOT / folder).rglob("*.py")}
    assert sizes, "no modules found"
    assert {name: n for name, n in sizes.items() if n >= LIMIT} == {}
