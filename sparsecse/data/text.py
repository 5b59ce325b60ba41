"""Reading the plain-text files of the SentEval layout, line by line."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from sparsecse.errors import SparseCSEError


def normalize_text(sentence: str) -> str:
    """SentEval splits every sentence on whitespace and the batcher joins the tokens with one space; every
    comparison of sentences (identity checks, distinct candidates) uses this form too.

    >>> normalize_text("  a  cat\tsits ")
    'a cat sits'
    """
    return " ".join(sentence.split())


def read_lines(path: str | os.PathLike) -> list[str]:
    """The lines of a text file without their line endings.

    UTF-8 (a byte-order mark is dropped), else Latin-1 as SentEval reads TREC. Lines are split on
    newlines only (not on the other characters ``str.splitlines`` treats as breaks), so a gold-score
    file stays aligned with its input file line for line, trailing empty lines included.
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise SparseCSEError(f"Cannot read {path} ({exc.strerror or exc}).") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    lines = text.replace("\r\n", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def parse_number(text: str, path: str | os.PathLike, lineno: int, what: str = "gold score") -> float:
    """``text`` as a number (one sentence naming the file and line otherwise).

    Args:
        text: the field.
        path: the file it came from.
        lineno: its line.
        what: what the field is, for the refusal.

    Returns:
        The number.
    """
    try:
        return float(text)
    except ValueError:
        raise SparseCSEError(f"{path}:{lineno}: the {what} {text.strip()!r} is not a number.") from None


def parse_rows(path: str | os.PathLike, parse: Callable[[str], Any], header: bool = False,
               what: str = "examples") -> list:
    """``parse`` applied to every non-blank line (after the header, if any); its ValueError is reported
    with the file and line number, and a file with no examples is refused."""
    examples = []
    for lineno, line in enumerate(read_lines(path), 1):
        if (header and lineno == 1) or not line.strip():
            continue
        try:
            examples.append(parse(line))
        except ValueError as exc:
            raise SparseCSEError(f"{path}:{lineno}: {exc}.") from None
    if not examples:
        raise SparseCSEError(f"{path} holds no {what}.")
    return examples
