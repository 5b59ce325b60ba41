"""Readers for the STS tasks in SentEval's layout (gold scores with sentence pairs).

STS12-16 come as subsets (``STS.input.<subset>.txt`` with tab-separated sentence pairs and extra
columns tolerated, ``STS.gs.<subset>.txt`` with one gold score per line; an empty gold line marks an
unscored pair, which is skipped). STS-B and SICK come as train/dev/test files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sparsecse.data.paths import task_path
from sparsecse.data.text import parse_number, read_lines
from sparsecse.errors import SparseCSEError

STSB_SPLITS = ("train", "dev", "test")
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
    s1: str
    s2: str
    score: float


def read_sts_benchmark(data_dir: str | os.PathLike | None, split: str = "train") -> list[Pair]:
    """STS-B: tab-separated genre, file, year, id, score, s1, s2 [, extra columns]."""
    if split not in STSB_SPLITS:
        raise SparseCSEError(f"Unknown STS-B split {split!r}; choose one of {', '.join(STSB_SPLITS)}.")
    path = task_path(data_dir, "STS", "STSBenchmark", f"sts-{split}.csv", task="STSBenchmark")
    pairs = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            cols = line.split("\t")
            if len(cols) < 7:
                raise SparseCSEError(f"{path}:{lineno}: expected at least 7 tab-separated columns, found {len(cols)}.")
            pairs.append(Pair(cols[5], cols[6], _score(cols[4], path, lineno)))
    if not pairs:
        raise SparseCSEError(f"{path} holds no sentence pairs.")
    return pairs


def _score(text: str, path: Path, lineno: int) -> float:
    return parse_number(text, path, lineno)


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
        )
        for subset in subsets
    }


def read_sts_subset(input_path: str | os.PathLike, gold_path: str | os.PathLike) -> list[Pair]:
    """One STS subset: pairs whose gold line is empty are unscored and skipped."""
    inputs, golds = read_lines(input_path), read_lines(gold_path)
    if len(inputs) != len(golds):
        raise SparseCSEError(
            f"{input_path} has {len(inputs)} lines but its gold file {gold_path} has {len(golds)}; "
            f"they must pair up line for line."
        )
    pairs = []
    for lineno, (line, gold) in enumerate(zip(inputs, golds), 1):
        if not gold.strip():
            continue
        cols = line.split("\t")
        if len(cols) < 2:
            raise SparseCSEError(f"{input_path}:{lineno}: expected two tab-separated sentences, found one column.")
        pairs.append(Pair(cols[0], cols[1], parse_number(gold, gold_path, lineno)))
    if not pairs:
        raise SparseCSEError(f"{gold_path} holds no scored sentence pairs.")
    return pairs


def read_sick(data_dir: str | os.PathLike | None, split: str = "test") -> list[Pair]:
    """SICK relatedness: a header line, then pair_ID, sentence_A, sentence_B, relatedness_score, ..."""
    if split not in SICK_SPLITS:
        raise SparseCSEError(f"Unknown SICK split {split!r}; choose one of {', '.join(SICK_SPLITS)}.")
    name = SICK_FILES["trial" if split == "dev" else split]
    path = task_path(data_dir, "SICK", name, task="SICKRelatedness")
    pairs = []
    for lineno, line in enumerate(read_lines(path), 1):
        if lineno == 1 or not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) < 4:
            raise SparseCSEError(f"{path}:{lineno}: expected at least 4 tab-separated columns, found {len(cols)}.")
        pairs.append(Pair(cols[1], cols[2], parse_number(cols[3], path, lineno)))
    if not pairs:
        raise SparseCSEError(f"{path} holds no sentence pairs.")
    return pairs
