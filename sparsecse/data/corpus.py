"""Training corpora: plain text, one sentence per line (SimCSE's wiki1m format)."""

from __future__ import annotations

import io
import os
from pathlib import Path

from sparsecse.errors import SparseCSEError


def check_corpus_file(path: str | os.PathLike) -> Path:
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
    sentences = [line.strip() for line in io.StringIO(text, newline=None)]
    sentences = [s for s in sentences if s]
    if not sentences:
        raise SparseCSEError(f"The corpus {path} holds no sentences (it is empty or blank).")
    return sentences
