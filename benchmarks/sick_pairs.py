"""Write SICK relatedness pairs as the scored-pairs TSV a user would bring (``--dev``/``--test`` files).

Reads SICK from the SentEval-layout data directory with sparsecse's own reader (the rows
``sparsecse eval --tasks SICKRelatedness`` scores) and writes ``sentence1<TAB>sentence2<TAB>score``
with a header row, one pair a line, no quoting (the format of ``sparsecse.data.pairs_files``).
Nothing is committed: the files go where ``--out`` says.

    python benchmarks/sick_pairs.py --out /work/data [--data-dir ../shared/data/senteval] [--splits train,test]

writes ``sickr_train.tsv`` and ``sickr_test.tsv`` (SICK's ``dev`` is its trial split).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from sparsecse.artifacts.files import atomic_file
from sparsecse.data.sts import SICK_SPLITS, read_sick


def write_scored_pairs(path: Path, pairs) -> int:
    """Write (s1, s2, score) pairs as a header-row TSV at ``path`` (atomically); the number of rows."""
    with atomic_file(path, overwrite=True) as tmp, open(tmp, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", quoting=csv.QUOTE_NONE, lineterminator="\n")
        writer.writerow(("sentence1", "sentence2", "score"))
        writer.writerows((p.s1, p.s2, repr(p.score)) for p in pairs)
    return len(pairs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for sickr_<split>.tsv")
    parser.add_argument("--data-dir", default=None, help="SentEval-layout data (default: sparsecse's)")
    parser.add_argument("--splits", default="train,test", help=f"comma-separated, of {', '.join(SICK_SPLITS)}")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for split in args.splits.split(","):
        path = args.out / f"sickr_{split}.tsv"
        rows = write_scored_pairs(path, read_sick(args.data_dir, split))
        print(f"{path}: {rows} pairs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
