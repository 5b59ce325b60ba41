"""Where the evaluation data comes from: the public archives `sparsecse data download` fetches.

Each archive has its URLs (tried in order), its SHA-256 and the files it must hold, relative to the
data directory, taken from the readers' own tables so the check and the readers cannot disagree.
The SentEval/SimCSE set is the tar SimCSE's ``SentEval/data/downstream/download_dataset.sh`` fetches:
its members are SentEval's task folders (``STS/STSBenchmark/sts-dev.csv``, ``SICK/...``, ``MR/...``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sparsecse.data.sts import SICK_FILES, STS_YEARS, STSB_SPLITS
from sparsecse.data.transfer import BINARY_TASKS, MRPC_FILES, SST2_SPLITS, TREC_FILES


@dataclass(frozen=True)
class DataArchive:
    """A downloadable data archive: its name, mirrors, sha256 and the files its extracted directory must hold."""
    name: str  # the archive's file name
    urls: tuple[str, ...]
    sha256: str | None  # None: not recorded yet; the download then checks the layout only and says so
    required: tuple[str, ...]  # files the extracted data directory must hold (POSIX, relative)
    description: str


def senteval_required_files() -> tuple[str, ...]:
    """Every file the STS and transfer readers open, relative to the data directory.

    >>> "STS/STSBenchmark/sts-dev.csv" in senteval_required_files()
    True
    """
    files = [f"STS/STSBenchmark/sts-{split}.csv" for split in STSB_SPLITS]
    for folder, subsets in STS_YEARS.values():
        for subset in subsets:
            files += [f"STS/{folder}/STS.input.{subset}.txt", f"STS/{folder}/STS.gs.{subset}.txt"]
    files += [f"SICK/{name}" for name in SICK_FILES.values()]
    for folder, pos, neg in BINARY_TASKS.values():
        files += [f"{folder}/{pos}", f"{folder}/{neg}"]
    files += [f"SST/binary/sentiment-{split}" for split in SST2_SPLITS]
    files += [f"TREC/{name}" for name in TREC_FILES.values()]
    files += [f"MRPC/{name}" for name in MRPC_FILES.values()]
    return tuple(files)


# The one place to record a published checksum: fill sha256 once it is known (`sparsecse data download`
# prints the SHA-256 of what it fetched when none is recorded here).
SENTEVAL = DataArchive(
    name="senteval.tar",
    urls=("https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/senteval.tar",),
    sha256=None,
    required=senteval_required_files(),
    description="SentEval/SimCSE evaluation data (STS12-16, STS-B, SICK, MR, CR, SUBJ, MPQA, SST-2, TREC, MRPC)",
)


def missing_files(root: str | os.PathLike, archive: DataArchive = SENTEVAL) -> list[str]:
    """The archive's required files that ``root`` lacks (all of them if ``root`` does not exist).

    >>> missing_files("/nonexistent")[:1]
    ['STS/STSBenchmark/sts-train.csv']
    """
    root = Path(root)
    return [name for name in archive.required if not (root / name).is_file()]
