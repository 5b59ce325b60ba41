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
import os
import stat
from pathlib import Path

from sparsecse.errors import SparseCSEError


FIELD_LIMIT = 131_072  # the most characters one field of a user's file may hold (csv's own default limit)


def what_is(path: str | os.PathLike) -> str:
    """What ``path`` is when it is not a regular file, as the end of a sentence ("is a directory", "does not
    exist", ...); "is a file" for a regular file.

    >>> what_is("/")
    'is a directory, not a file'
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "is a symbolic link to nothing" if os.path.islink(path) else "does not exist"
    except OSError as exc:
        return f"cannot be looked at ({exc.strerror or exc})"
    for test, what in ((stat.S_ISREG, "is a file"), (stat.S_ISDIR, "is a directory, not a file"),
                       (stat.S_ISFIFO, "is a named pipe (FIFO), not a file"),
                       (stat.S_ISCHR, "is a character device, not a file"),
                       (stat.S_ISBLK, "is a block device, not a file"), (stat.S_ISSOCK, "is a socket, not a file")):
        if test(mode):
            return what
    return "is not a regular file"


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
