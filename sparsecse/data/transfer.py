"""Readers for the SentEval transfer tasks: MR, CR, SUBJ, MPQA, SST-2, TREC and MRPC.

Blank lines are skipped (CR and MPQA end with a few; SentEval would keep them as empty sentences).
Labels are small integers; the class order follows SentEval (positive/objective = 1).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sparsecse.data.paths import task_path
from sparsecse.data.text import parse_rows, read_lines
from sparsecse.errors import SparseCSEError

# task -> (folder, file with label 1, file with label 0)
BINARY_TASKS: dict[str, tuple[str, str, str]] = {
    "MR": ("MR", "rt-polarity.pos", "rt-polarity.neg"),
    "CR": ("CR", "custrev.pos", "custrev.neg"),
    "SUBJ": ("SUBJ", "subj.objective", "subj.subjective"),
    "MPQA": ("MPQA", "mpqa.pos", "mpqa.neg"),
}
SST2_SPLITS = ("train", "dev", "test")
TREC_FILES = {"train": "train_5500.label", "test": "TREC_10.label"}
TREC_CLASSES = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
MRPC_FILES = {"train": "msr_paraphrase_train.txt", "test": "msr_paraphrase_test.txt"}


@dataclass(frozen=True)
class Example:
    """One labelled sentence of a SentEval classification task."""
    text: str
    label: int


@dataclass(frozen=True)
class PairExample:
    """One labelled sentence pair of a SentEval pair task (MRPC)."""
    s1: str
    s2: str
    label: int


def read_binary_task(data_dir: str | os.PathLike | None, task: str) -> list[Example]:
    """MR, CR, SUBJ or MPQA: one sentence per line, one file per class (label 1 first)."""
    if task not in BINARY_TASKS:
        raise SparseCSEError(f"Unknown binary task {task!r}; choose one of {', '.join(BINARY_TASKS)}.")
    folder, pos_name, neg_name = BINARY_TASKS[task]
    examples = []
    for name, label in ((pos_name, 1), (neg_name, 0)):
        path = task_path(data_dir, folder, name, task=task)
        examples += [Example(line, label) for line in read_lines(path) if line.strip()]
    labels = {e.label for e in examples}
    if labels != {0, 1}:
        raise SparseCSEError(f"The {task} data in {task_path(data_dir, folder, task=task)} lacks one of its two classes.")
    return examples


def read_sst2(data_dir: str | os.PathLike | None, split: str) -> list[Example]:
    """SST-2 (binary): ``sentence<TAB>label`` per line."""
    if split not in SST2_SPLITS:
        raise SparseCSEError(f"Unknown SST-2 split {split!r}; choose one of {', '.join(SST2_SPLITS)}.")

    def parse(line: str) -> Example:
        text, sep, label = line.rstrip().rpartition("\t")
        if not sep or label not in ("0", "1"):
            raise ValueError("expected 'sentence<TAB>0|1'")
        return Example(text, int(label))

    return parse_rows(task_path(data_dir, "SST", "binary", f"sentiment-{split}", task="SST2"), parse)


def read_trec(data_dir: str | os.PathLike | None, split: str) -> list[Example]:
    """TREC question types: ``COARSE:fine question words``; the label is the coarse class."""
    if split not in TREC_FILES:
        raise SparseCSEError(f"Unknown TREC split {split!r}; choose one of {', '.join(TREC_FILES)}.")

    def parse(line: str) -> Example:
        coarse, _, rest = line.strip().partition(":")
        _fine, space, question = rest.partition(" ")
        if coarse not in TREC_CLASSES or not space or not question.strip():
            raise ValueError(f"expected 'COARSE:fine question' with COARSE one of {', '.join(TREC_CLASSES)}")
        return Example(question.strip(), TREC_CLASSES.index(coarse))

    return parse_rows(task_path(data_dir, "TREC", TREC_FILES[split], task="TREC"), parse)


def read_mrpc(data_dir: str | os.PathLike | None, split: str) -> list[PairExample]:
    """MRPC: a header line, then ``label<TAB>id1<TAB>id2<TAB>s1<TAB>s2``."""
    if split not in MRPC_FILES:
        raise SparseCSEError(f"Unknown MRPC split {split!r}; choose one of {', '.join(MRPC_FILES)}.")

    def parse(line: str) -> PairExample:
        cols = line.split("\t")
        if len(cols) < 5 or cols[0].strip() not in ("0", "1"):
            raise ValueError("expected 'label<TAB>id1<TAB>id2<TAB>s1<TAB>s2' with label 0 or 1")
        return PairExample(cols[3], cols[4], int(cols[0]))

    return parse_rows(task_path(data_dir, "MRPC", MRPC_FILES[split], task="MRPC"), parse, header=True)
