"""User text files read one way: strict UTF-8 with no NUL byte (the line of the first fault named), and JSON Lines
as one object per non-blank line. The pairs files (:mod:`sparsecse.data.pairs_files`) and the local mteb tasks
(:mod:`sparsecse.evaluation.mteb_local`) both read through here, so a bad file gets the same sentence from both.

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "rows.jsonl"
    >>> _ = path.write_text('{"text": "a"}\\n\\n{"text": "b"}\\n')
    >>> json_lines(path, read_text(path, "task file")[0])
    [(1, {'text': 'a'}), (3, {'text': 'b'})]
"""

from __future__ import annotations

import json
from pathlib import Path

from sparsecse.errors import SparseCSEError


def read_text(path: Path, what: str) -> tuple[str, bytes]:
    """The file's text, strict UTF-8 (a BOM dropped) with no NUL byte, and its bytes (read once).

    Args:
        path: the file.
        what: what the file is, for the error's sentence ("pairs file").

    Returns:
        The decoded text and the raw bytes (what a caller hashes).

    Raises:
        SparseCSEError: unreadable, a NUL byte, or invalid UTF-8 (naming the line).
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SparseCSEError(f"Cannot read the {what} {path} ({exc.strerror or exc}).") from None
    if b"\0" in raw:
        line = raw[:raw.index(b"\0")].count(b"\n") + 1
        raise SparseCSEError(f"{path}:{line}: the {what} holds a NUL byte, so it is not a text file.")
    try:
        return raw.decode("utf-8-sig"), raw
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise SparseCSEError(f"{path}:{line}: the {what} is not valid UTF-8 (byte {exc.start}).") from None


def json_lines(path: Path, text: str) -> list[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a JSON Lines ``text``.

    Args:
        path: the file the text came from, for the error's sentence.
        text: its text.

    Returns:
        The objects in file order, each with its 1-based line number.

    Raises:
        SparseCSEError: a line that is not valid JSON or not a JSON object.
    """
    rows = []
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SparseCSEError(f"{path}:{lineno}: the line is not valid JSON ({exc.msg}).") from None
        if not isinstance(obj, dict):
            raise SparseCSEError(f"{path}:{lineno}: each line must be a JSON object, not {type(obj).__name__}.")
        rows.append((lineno, obj))
    return rows
