"""A small synthetic data directory in SentEval's layout, every task present, for fast tests."""

from __future__ import annotations

import random
from pathlib import Path

from sparsecse.data.sts import STS_YEARS
from tests.tiny import SENTENCES, write_stsb


def _write(path: Path, lines: list[str], encoding: str = "utf-8", newline: str = "\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((newline.join(lines) + newline).encode(encoding))


def _pair_lines(rng: random.Random, n: int) -> list[tuple[str, str, float]]:
    out = []
    for i in range(n):
        a = rng.choice(SENTENCES)
        b, score = (a, 5.0) if i % 4 == 0 else (rng.choice(SENTENCES), round(rng.random() * 4, 2))
        out.append((a, b, score))
    return out


def write_senteval(root: Path, seed: int = 0) -> Path:
    """Every task of the suite with a handful of examples; STS16-style extra columns and unscored pairs."""
    rng = random.Random(seed)
    root = Path(root)
    for task, (folder, subsets) in STS_YEARS.items():
        for subset in subsets:
            rows = _pair_lines(rng, 8)
            inputs = [f"{a}\t{b}" + ("\tsource-a\tsource-b" if task == "STS16" else "") for a, b, _ in rows]
            golds = [f"{s}" for _, _, s in rows]
            if task in ("STS15", "STS16"):
                inputs.append(f"{SENTENCES[0]}\t{SENTENCES[1]}")
                golds.append("")  # an unscored pair
            _write(root / "STS" / folder / f"STS.input.{subset}.txt", inputs)
            _write(root / "STS" / folder / f"STS.gs.{subset}.txt", golds)
    write_stsb(root)
    for split, name in (("train", "SICK_train.txt"), ("trial", "SICK_trial.txt"), ("test", "SICK_test_annotated.txt")):
        rows = _pair_lines(rng, 20)
        lines = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
        lines += [f"{i}\t{a}\t{b}\t{1 + s * 0.8:.1f}\tNEUTRAL" for i, (a, b, s) in enumerate(rows)]
        _write(root / "SICK" / name, lines, newline="\r\n" if split == "test" else "\n")
    positive = [s for s in SENTENCES[:8]]
    negative = [s for s in SENTENCES[8:]]
    for folder, pos, neg in (("MR", "rt-polarity.pos", "rt-polarity.neg"), ("CR", "custrev.pos", "custrev.neg"),
                             ("SUBJ", "subj.objective", "subj.subjective"), ("MPQA", "mpqa.pos", "mpqa.neg")):
        _write(root / folder / pos, [f"{s} good" for s in positive] * 2 + [""])
        _write(root / folder / neg, [f"{s} bad" for s in negative] * 2)
    for split, n in (("train", 40), ("dev", 12), ("test", 12)):
        lines = [f"{SENTENCES[i % 16]} {'good' if i % 2 else 'bad'}\t{i % 2}" for i in range(n)]
        _write(root / "SST" / "binary" / f"sentiment-{split}", lines)
    classes = ["ABBR:abb", "DESC:def", "ENTY:animal", "HUM:ind", "LOC:city", "NUM:count"]
    for name, n in (("train_5500.label", 60), ("TREC_10.label", 18)):
        lines = [f"{classes[i % 6]} {SENTENCES[i % 6]} {i % 6} ?" for i in range(n)]
        lines[0] = lines[0] + " caf\xe9"  # Latin-1, as the real TREC training file
        _write(root / "TREC" / name, lines, encoding="latin-1")
    for name, n in (("msr_paraphrase_train.txt", 40), ("msr_paraphrase_test.txt", 16)):
        lines = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
        for i in range(n):
            a = SENTENCES[i % 16]
            b = a if i % 2 else SENTENCES[(i + 5) % 16]
            lines.append(f"{i % 2}\t{i}\t{i + 100}\t{a}\t{b}")
        _write(root / "MRPC" / name, ["\ufeff" + lines[0]] + lines[1:])
    return root
