"""A user's own pairs file: scored pairs or positive pairs, as TSV, CSV or JSONL.

The format follows the file's suffix (``.tsv``, ``.csv``, ``.jsonl``; anything else is refused), and the
kind follows its columns (names are matched without regard to case or surrounding spaces):

- **scored pairs**: ``sentence1``, ``sentence2``, ``score`` (any numeric scale). Rows whose score is
  empty (or JSON ``null``) are unscored and skipped, as the STS tasks skip them; :attr:`PairsFile.skipped`
  counts them.
- **positive pairs**: ``query``, ``positive``, and optionally ``candidate``: every row with a query and a
  positive is one query; a ``candidate`` value adds one more sentence for every query to be ranked
  against (a distractor), and a row may hold only a candidate (query and positive empty or absent).

TSV has a header row, one row a line, columns separated by tabs and no quoting (the layout of STS-B and
SentEval's files: a sentence holds no tab or line break). CSV has a header row and the usual quoting
(RFC 4180, what spreadsheets and pandas write). JSONL has one JSON object a line, keyed by the column
names. Other columns are ignored. Files are UTF-8 (a byte-order mark is dropped).

Refused in one sentence naming the file (and line): another suffix, a path that is no regular file (a
directory, a FIFO, a device: said as such), bad UTF-8, a NUL byte, a missing column, a column named twice
(in a JSONL line too, by keys that differ only in case), a row with another number of fields than the
header, a field over 131,072 characters (every format), an empty sentence, a positive equal to its query
up to spaces, a score that is not a finite number, no rows, fewer than two scored pairs or scores that are
all equal (no correlation). Sentences are compared as the evaluation encodes them: whitespace-normalised.

Example::

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "dev.tsv"
    >>> _ = path.write_text("sentence1\\tsentence2\\tscore\\nA cat.\\tA cat sits.\\t4\\nA car.\\tRain.\\t0.5\\n")
    >>> pairs = read_pairs_file(path)
    >>> pairs.kind, len(pairs.scored), pairs.scored[0].score
    ('scored', 2, 4.0)
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from sparsecse.data.sts import Pair
from sparsecse.data.text import normalize_text
from sparsecse.data.text_files import FIELD_LIMIT, json_lines, read_text, what_is
from sparsecse.errors import SparseCSEError

FORMATS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl"}
SCORED_COLUMNS = ("sentence1", "sentence2", "score")
POSITIVE_COLUMNS = ("query", "positive")
CANDIDATE_COLUMN = "candidate"
SCORED, POSITIVES = "scored", "positives"


@dataclass(frozen=True)
class PairsFile:
    """What a pairs file holds: ``kind`` ("scored" or "positives"); ``scored``: the scored pairs (for
    "scored"); ``positives``: (query, positive) per query row and ``candidates``: the extra candidate
    sentences (for "positives"); ``rows``: the data rows read, ``skipped``: rows with an empty score."""

    path: Path
    format: str
    kind: str
    scored: tuple[Pair, ...] = ()
    positives: tuple[tuple[str, str], ...] = ()
    candidates: tuple[str, ...] = ()
    rows: int = 0
    skipped: int = 0
    sha256: str = ""
    size: int = 0


def pairs_format(path: str | os.PathLike) -> str:
    """``tsv``, ``csv`` or ``jsonl`` from the file's suffix; other suffixes are refused.

    >>> pairs_format("dev.JSONL")
    'jsonl'
    """
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise SparseCSEError(f"{path}: a pairs file must end in {', '.join(FORMATS)} (its format), not "
                             f"{suffix or 'no suffix'!r}.")
    return FORMATS[suffix]


def _delimited_rows(path: Path, text: str, delimiter: str, quoting: int) -> Iterator[tuple[int, dict]]:
    """(line, {column: value}) per non-blank data row of a TSV or CSV text with a header row."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting, strict=True)
    try:
        header = next(reader, None)
        while header is not None and not any(cell.strip() for cell in header):
            header = next(reader, None)  # blank lines before the header
        if header is None:
            raise SparseCSEError(f"{path} is empty; a pairs file starts with a header row naming its columns.")
        names = [cell.strip().lower() for cell in header]
        repeated = sorted({n for n in names if names.count(n) > 1 and n})
        if repeated:
            raise SparseCSEError(f"{path}:{reader.line_num}: the header names the column {repeated[0]!r} twice.")
        yield reader.line_num, {name: None for name in names}  # the header: its columns, no values
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(names):
                raise SparseCSEError(f"{path}:{reader.line_num}: the row has {len(row)} fields but the header has "
                                     f"{len(names)}.")
            if any(len(cell) > FIELD_LIMIT for cell in row):
                raise _too_long(path, reader.line_num)
            yield reader.line_num, dict(zip(names, row))
    except csv.Error as exc:
        if "field larger than field limit" in str(exc):
            raise _too_long(path, reader.line_num) from None
        raise SparseCSEError(f"{path}:{reader.line_num}: the row is not valid {path.suffix[1:].upper()} "
                             f"({exc}).") from None


def _jsonl_rows(path: Path, text: str) -> Iterator[tuple[int, dict]]:
    """(line, {column: value}) per non-blank line of a JSONL text (keys lower-cased; two keys of a line that
    differ only in case or spaces are refused, as a TSV/CSV header's are); the first yield names the columns
    seen in the whole file."""
    rows = []
    for lineno, obj in json_lines(path, text):
        row: dict = {}
        for key, value in obj.items():
            name = str(key).strip().lower()
            if name in row:
                raise SparseCSEError(f"{path}:{lineno}: the line names the column {name!r} twice (keys that differ "
                                     "only in case or spaces are one column).")
            row[name] = value
            if isinstance(value, str) and len(value) > FIELD_LIMIT:
                raise _too_long(path, lineno)
        rows.append((lineno, row))
    yield 0, {name: None for _, row in rows for name in row}
    yield from rows


def _too_long(path: Path, lineno: int) -> SparseCSEError:
    return SparseCSEError(f"{path}:{lineno}: a field holds more than {FIELD_LIMIT:,} characters, the most a pairs "
                          "file's field may hold.")


def _rows(path: Path, fmt: str, text: str) -> Iterator[tuple[int, dict]]:
    if fmt == "jsonl":
        return _jsonl_rows(path, text)
    return _delimited_rows(path, text, "\t" if fmt == "tsv" else ",",
                           csv.QUOTE_NONE if fmt == "tsv" else csv.QUOTE_MINIMAL)


def _sentence(path: Path, lineno: int, row: dict, column: str, required: bool = True) -> str | None:
    value = row.get(column)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise SparseCSEError(f"{path}:{lineno}: the {column} is empty.")
        return None
    if not isinstance(value, str):
        raise SparseCSEError(f"{path}:{lineno}: the {column} must be text, not {json.dumps(value)}.")
    return value


def _score(path: Path, lineno: int, value) -> float | None:
    """The score as a finite float; None for an empty score (the row is unscored)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise SparseCSEError(f"{path}:{lineno}: the score {json.dumps(value)} is not a number.")
    try:
        number = float(value)
    except ValueError:
        raise SparseCSEError(f"{path}:{lineno}: the score {value.strip()!r} is not a number.") from None
    if not math.isfinite(number):
        raise SparseCSEError(f"{path}:{lineno}: the score {str(value).strip()!r} is not a finite number.")
    return number


def _kind(path: Path, columns: dict) -> str:
    if all(c in columns for c in POSITIVE_COLUMNS):
        return POSITIVES
    if any(c in columns for c in SCORED_COLUMNS):
        missing = [c for c in SCORED_COLUMNS if c not in columns]
        if missing:
            raise SparseCSEError(f"{path}: the scored-pairs file lacks the column{'s' if len(missing) > 1 else ''} "
                                 f"{', '.join(missing)} (it needs {', '.join(SCORED_COLUMNS)}).")
        return SCORED
    found = ", ".join(c for c in columns if c) or "none"
    raise SparseCSEError(f"{path}: a pairs file needs the columns {', '.join(SCORED_COLUMNS)} (scored pairs) or "
                         f"{', '.join(POSITIVE_COLUMNS)} (positive pairs), but has {found}.")


def read_pairs_file(path: str | os.PathLike) -> PairsFile:
    """Read and check a scored-pairs or positive-pairs file (see the module docstring for the formats).

    Args:
        path: a ``.tsv``, ``.csv`` or ``.jsonl`` file.

    Returns:
        A :class:`PairsFile`; every fault is a :class:`~sparsecse.errors.SparseCSEError` of one sentence
        naming the file and, where it applies, the line.
    """
    path = Path(path)
    fmt = pairs_format(path)
    if not path.is_file():
        raise SparseCSEError(f"The pairs file {path} {what_is(path)}.")
    text, raw = read_text(path, "pairs file")
    rows = _rows(path, fmt, text)
    _, columns = next(rows)
    if not columns:  # JSONL: the columns are those of its objects
        raise SparseCSEError(f"{path} holds no rows.")
    kind = _kind(path, columns)
    scored, positives, candidates, count, skipped = [], [], [], 0, 0
    for lineno, row in rows:
        count += 1
        if kind == SCORED:
            s1, s2 = (_sentence(path, lineno, row, c) for c in SCORED_COLUMNS[:2])
            value = _score(path, lineno, row.get("score"))
            if value is None:
                skipped += 1
            else:
                scored.append(Pair(s1, s2, value))
            continue
        candidate = _sentence(path, lineno, row, CANDIDATE_COLUMN, required=False)
        query, positive = (_sentence(path, lineno, row, c, required=False) for c in POSITIVE_COLUMNS)
        if candidate is None or query is not None or positive is not None:  # not a candidate-only row
            query, positive = (_sentence(path, lineno, row, c) for c in POSITIVE_COLUMNS)
            if normalize_text(query) == normalize_text(positive):
                raise SparseCSEError(f"{path}:{lineno}: the positive is the query itself (up to spaces), so there is "
                                     "nothing to rank.")
            positives.append((query, positive))
        if candidate is not None:
            candidates.append(candidate)
    if not count:
        raise SparseCSEError(f"{path} holds a header but no rows.")
    if kind == SCORED:
        if len(scored) < 2:
            raise SparseCSEError(f"{path} holds {len(scored)} scored pair{'' if len(scored) == 1 else 's'} "
                                 f"({skipped} with an empty score skipped); a correlation needs at least two.")
        if len({p.score for p in scored}) < 2:
            raise SparseCSEError(f"{path}: every score is {scored[0].score:g}, so no correlation can be computed.")
    elif not positives:
        raise SparseCSEError(f"{path} holds candidates but no row with a query and its positive.")
    return PairsFile(path, fmt, kind, tuple(scored), tuple(positives), tuple(candidates), count, skipped,
                     hashlib.sha256(raw).hexdigest(), len(raw))
