"""Readers for the STS tasks in SentEval's layout (gold scores with sentence pairs).

STS12-16 come as subsets (``STS.input.<subset>.txt`` with tab-separated sentence pairs and extra
columns tolerated, ``STS.gs.<subset>.txt`` with one gold score per line; an empty gold line marks an
unscored pair, which is skipped). STS-B and SICK come as train/dev/test files.

A gold score that is not a finite number is refused with its file and line; scores outside the
task's scale (0-5 for STS12-16 and STS-B, 1-5 for SICK) are read but named in a warning on stderr.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from sparsecse.data.paths import task_path
from sparsecse.data.text import parse_number, parse_rows, read_lines
from sparsecse.errors import SparseCSEError, exact_number

STSB_SPLITS = ("train", "dev", "test")
STS_RANGE, SICK_RANGE = (0.0, 5.0), (1.0, 5.0)  # the annotation scales
SICK_FILES = {"train": "SICK_train.txt", "trial": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}
SICK_SPLITS = ("train", "trial", "dev", "test")  # dev is SICK's trial split, as SentEval uses it

# The subsets SentEval evaluates, in its order (STS13's SMT subset is not distributed).
STS_YEARS: dict[str, tuple[str, tuple[str, ...]]] = {
    "STS12": ("STS12-en-test", ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews")),
    "STS13": ("STS13-en-test", ("FNWN", "headlines", "OnWN")),
    "STS14": ("STS14-en-test", ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news")),
    "STS15": ("STS15-en-test", ("answers-forums", "answers-students", "belief", "headlines", "images")),
    "STS16": ("STS16-en-test", ("answer-answer", "headlines", "plagiarism", "postediting", "question-question")),
}


@dataclass(frozen=True)
class Pair:
    """One STS sentence pair and its gold similarity score."""
    s1: str
    s2: str
    score: float


def read_sts_benchmark(data_dir: str | os.PathLike | None, split: str = "train") -> list[Pair]:
    """STS-B: tab-separated genre, file, year, id, score, s1, s2 [, extra columns]."""
    if split not in STSB_SPLITS:
        raise SparseCSEError(f"Unknown STS-B split {split!r}; choose one of {', '.join(STSB_SPLITS)}.")
    path = task_path(data_dir, "STS", "STSBenchmark", f"sts-{split}.csv", task="STSBenchmark")
    return read_pair_table(path, s1=5, s2=6, score=4, score_range=STS_RANGE)


def finite_gold(value: float, text: str) -> float:
    """``value`` if finite; a ValueError naming ``text`` otherwise (nan or inf would make every
    correlation computed with it nan)."""
    if not math.isfinite(value):
        raise ValueError(f"the gold score {text.strip()!r} is not a finite number")
    return value


def warn_out_of_range(path, scores: list[tuple[int, float]], score_range: tuple[float, float]) -> None:
    """One warning on stderr naming how many of the (line, gold score) of ``path`` lie outside ``score_range``."""
    low, high = score_range
    outside = [(lineno, score) for lineno, score in scores if not low <= score <= high]
    if outside:
        lineno, score = outside[0]
        print(f"Warning: {path}: {len(outside)} gold score{'s' if len(outside) > 1 else ''} outside the "
              f"task's scale {low:g}-{high:g} (first at line {lineno}: {exact_number(score)}).",
              file=sys.stderr, flush=True)


def read_pair_table(path: Path, s1: int, s2: int, score: int, header: bool = False,
                    score_range: tuple[float, float] | None = None) -> list[Pair]:
    """Scored pairs from a tab-separated file whose columns s1, s2 and score hold them (extra columns
    are tolerated, blank lines skipped); scores outside ``score_range`` are named in a warning."""
    width = max(s1, s2, score) + 1

    def parse(line: str) -> Pair:
        cols = line.split("\t")
        if len(cols) < width:
            raise ValueError(f"expected at least {width} tab-separated columns, found {len(cols)}")
        number = cols[score].strip()
        try:
            value = float(number)
        except ValueError:
            raise ValueError(f"the gold score {number!r} is not a number") from None
        return Pair(cols[s1], cols[s2], finite_gold(value, number))

    pairs = parse_rows(path, parse, header=header, what="sentence pairs")
    if score_range is not None:  # the line numbers of the rows parse_rows kept, in order
        kept = [n for n, line in enumerate(read_lines(path), 1) if not (header and n == 1) and line.strip()]
        warn_out_of_range(path, [(n, p.score) for n, p in zip(kept, pairs)], score_range)
    return pairs


def read_sts_year(data_dir: str | os.PathLike | None, task: str) -> dict[str, list[Pair]]:
    """STS12-16: {subset: scored pairs} for every subset SentEval evaluates, in its order."""
    if task not in STS_YEARS:
        raise SparseCSEError(f"Unknown STS year {task!r}; choose one of {', '.join(STS_YEARS)}.")
    folder, subsets = STS_YEARS[task]
    root = task_path(data_dir, "STS", folder, task=task)  # a missing folder is named before its files
    return {
        subset: read_sts_subset(
            task_path(root, f"STS.input.{subset}.txt", task=task),
            task_path(root, f"STS.gs.{subset}.txt", task=task),
            STS_RANGE,
        )
        for subset in subsets
    }


def read_sts_subset(input_path: str | os.PathLike, gold_path: str | os.PathLike,
                    score_range: tuple[float, float] | None = STS_RANGE) -> list[Pair]:
    """One STS subset: pairs whose gold line is empty are unscored and skipped."""
    inputs, golds = read_lines(input_path), read_lines(gold_path)
    if len(inputs) != len(golds):
        raise SparseCSEError(
            f"{input_path} has {len(inputs)} lines but its gold file {gold_path} has {len(golds)}; "
            f"they must pair up line for line."
        )
    pairs, scores = [], []
    for lineno, (line, gold) in enumerate(zip(inputs, golds), 1):
        if not gold.strip():
            continue
        cols = line.split("\t")
        if len(cols) < 2:
            raise SparseCSEError(f"{input_path}:{lineno}: expected two tab-separated sentences, found one column.")
        value = parse_number(gold, gold_path, lineno)
        try:
            finite_gold(value, gold)
        except ValueError as exc:
            raise SparseCSEError(f"{gold_path}:{lineno}: {exc}.") from None
        pairs.append(Pair(cols[0], cols[1], value))
        scores.append((lineno, value))
    if not pairs:
        raise SparseCSEError(f"{gold_path} holds no scored sentence pairs.")
    if score_range is not None:
        warn_out_of_range(gold_path, scores, score_range)
    return pairs


def read_sick(data_dir: str | os.PathLike | None, split: str = "test") -> list[Pair]:
    """SICK relatedness: a header line, then pair_ID, sentence_A, sentence_B, relatedness_score, ..."""
    if split not in SICK_SPLITS:
        raise SparseCSEError(f"Unknown SICK split {split!r}; choose one of {', '.join(SICK_SPLITS)}.")
    name = SICK_FILES["trial" if split == "dev" else split]
    path = task_path(data_dir, "SICK", name, task="SICKRelatedness")
    return read_pair_table(path, s1=1, s2=2, score=3, header=True, score_range=SICK_RANGE)
