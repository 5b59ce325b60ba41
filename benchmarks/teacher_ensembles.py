"""Which teacher to distill from: every single model and every ensemble of them, on STS-B dev and the 7 STS tasks.

An ensemble scores a pair by the mean of its members' cosine similarities: exactly the target that
``distill`` builds for ``teacher=A+B`` (:func:`sparsecse.objectives.teachers.ensemble_vectors`, used here
too). The teacher is chosen by its STS-B dev score; the test average is printed beside it for the record.
Each model's embeddings are cached in ``--work`` (one ``.npy`` per model, keyed by its name and the
sentences), so a second run encodes nothing. Writes OUT.md and OUT.json.

    python benchmarks/teacher_ensembles.py --out docs/figures/frontier/archive/teachers --work runs/teachers \
        --model L6=all-MiniLM-L6-v2 --model L3=../shared/models/paraphrase-MiniLM-L3-v2 --model MPNet=all-mpnet-base-v2
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
from pathlib import Path
from typing import Callable, Mapping, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from sparsecse.artifacts.files import atomic_file, write_json  # noqa: E402
from sparsecse.evaluation.embedding import normalize_text  # noqa: E402
from sparsecse.evaluation.sts import evaluate_sts, load_sts_task, sentences_of  # noqa: E402
from sparsecse.evaluation.tasks import STS_TASKS  # noqa: E402
from sparsecse.objectives.teachers import SEPARATOR, ensemble_vectors  # noqa: E402

Lookup = Callable[[Sequence[str]], np.ndarray]


def ensemble_lookup(lookups: Sequence[Lookup]) -> Lookup:
    """The embedding an ensemble of ``lookups`` gives a list of sentences (distill's target)."""
    def embed(sentences: Sequence[str]) -> np.ndarray:
        return ensemble_vectors([torch.from_numpy(f(sentences)) for f in lookups]).numpy()
    return embed


def score_combinations(lookups: Mapping[str, Lookup], test: Mapping, dev: Mapping, max_members: int) -> list[dict]:
    """One row per combination of up to ``max_members`` models: STS-B dev, the 7-task test average and
    each task's test score; sorted by dev, best first."""
    rows = []
    for n in range(1, max_members + 1):
        for names in itertools.combinations(lookups, n):
            embed = ensemble_lookup([lookups[k] for k in names])
            tests, _ = evaluate_sts(test, embed)
            devs, _ = evaluate_sts(dev, embed)
            rows.append({"teacher": SEPARATOR.join(names), "members": len(names), "dev": devs["STSBenchmark"],
                         "test_avg": float(np.mean(list(tests.values()))), "tasks": tests})
    return sorted(rows, key=lambda r: -r["dev"])


def table(rows: list[dict], models: Mapping[str, str]) -> str:
    names = "; ".join(f"{k} = {v}" for k, v in models.items())
    tasks = list(rows[0]["tasks"])
    lines = ["Teachers for `distill`, chosen on STS-B dev (Spearman x 100); an ensemble (`teacher=A+B`) scores a "
             "pair by the mean of its members' cosine similarities (`benchmarks/teacher_ensembles.py`). "
             f"{names}.", "",
             f"| teacher | STS-B dev | {len(tasks)}-task STS test | " + " | ".join(tasks) + " |",
             "|---|---:|---:|" + "---:|" * len(tasks)]
    for r in rows:
        lines.append(f"| {r['teacher']} | {r['dev']:.2f} | {r['test_avg']:.2f} | "
                     + " | ".join(f"{r['tasks'][t]:.2f}" for t in tasks) + " |")
    return "\n".join(lines) + "\n"


def cached_lookup(name: str, path: str, sentences: list[str], work: Path) -> Lookup:
    """Embeddings of ``sentences`` by the model at ``path``, from ``work`` when computed before."""
    digest = hashlib.sha256(("\n".join([path, *sentences])).encode()).hexdigest()[:16]
    file = work / f"{name}-{digest}.npy"
    if file.is_file():
        emb = np.load(file)
    else:
        from sparsecse.modeling.encoder import SentenceEncoder

        emb = SentenceEncoder.load(path).encode(sentences, batch_size=128, show_progress=True, desc=name)
        with atomic_file(file, overwrite=True) as tmp, open(tmp, "wb") as fh:  # a killed run leaves no half file
            np.save(fh, np.asarray(emb, dtype=np.float32))
    rows = {s: i for i, s in enumerate(sentences)}
    return lambda batch: emb[[rows[normalize_text(s)] for s in batch]]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, metavar="NAME=PATH")
    parser.add_argument("--out", required=True, help="Path stem of the .md and .json written.")
    parser.add_argument("--work", required=True, help="Directory of the cached embeddings.")
    parser.add_argument("--max-members", type=int, default=3)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    models = dict(spec.split("=", 1) for spec in args.model)
    shown = {k: os.path.relpath(p) if os.path.exists(p) else p for k, p in models.items()}  # no machine's paths
    test = {t: load_sts_task(args.data_dir, t, "test") for t in STS_TASKS}
    dev = {"STSBenchmark": load_sts_task(args.data_dir, "STSBenchmark", "dev")}
    sentences = list(dict.fromkeys(normalize_text(s) for d in [*test.values(), *dev.values()] for s in sentences_of(d)))
    lookups = {k: cached_lookup(k, p, sentences, Path(args.work)) for k, p in models.items()}
    rows = score_combinations(lookups, test, dev, min(args.max_members, len(models)))
    out = Path(args.out)
    with atomic_file(out.with_suffix(".md"), overwrite=True) as tmp:
        tmp.write_text(table(rows, shown))
    write_json(out.with_suffix(".json"), {"models": shown, "rows": rows})
    print(table(rows, shown))


if __name__ == "__main__":
    main()
