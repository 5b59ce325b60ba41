"""Running a command in-process and checking how it refuses: shared by the tests of what commands accept."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from sparsecse.cli import main


def run_cli(*args, **kwargs):
    """``sparsecse ARGS`` in this process (every argument as text); click's result."""
    return CliRunner().invoke(main, [str(a) for a in args], **kwargs)


def assert_refused(result, *phrases) -> None:
    """Exit 1 with one sentence holding every phrase, and no traceback."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert all(p in result.output for p in phrases), result.output
    assert "Traceback" not in result.output


def file_tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path, with its bytes (to show that nothing changed)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
