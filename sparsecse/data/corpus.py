"""Training corpora: plain text, one sentence per line (SimCSE's wiki1m format)."""

from __future__ import annotations

import io
import os
from pathlib import Path

from sparsecse.errors import SparseCSEError


def check_corpus_file(path: str | os.PathLike) -> Path:
    """``path`` as a Path once it is known to be a file (one sentence otherwise)."""
    path = Path(path)
    if not path.is_file():
        raise SparseCSEError(f"The corpus {path} does not exist or is not a file.")
    return path


def read_corpus(path: str | os.PathLike) -> list[str]:
    """The non-empty lines of ``path``, stripped, in file order (duplicates kept)."""
    path = check_corpus_file(path)
    try:  # decoded whole, so the error's offset is the file's (a streamed read counts from its buffer)
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SparseCSEError(f"The corpus {path} is not UTF-8 text (byte {exc.start}).") from None
    lines = [line.strip() for line in io.StringIO(text, newline=None)]
    if "\0" in text:  # a binary file, or text with a NUL byte in it: never a sentence
        lineno = next(i for i, line in enumerate(lines, 1) if "\0" in line)
        raise SparseCSEError(f"The corpus {path} holds a NUL byte on line {lineno}; it is not plain text.")
    sentences = [s for s in lines if s]
    if not sentences:
        raise SparseCSEError(f"The corpus {path} holds no sentences (it is empty or blank).")
    return sentences
