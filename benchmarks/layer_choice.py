"""Which whole layers should a depth cut remove? Each layer criterion's choice, and a set of other cuts, judged by
STS-B dev right after the cut and after a short recovery (the depth finalists' own judge in a target run).

For every cut of ``--remove`` layers (the ones each layer criterion of :mod:`sparsecse.scoring.criteria` chooses,
plus ``--cuts``), the input model loses those layers at full width (:func:`sparsecse.shrinking.layers.without_layers`),
is scored on STS-B dev, distilled (MSE) from the input model for ``--steps`` steps on the same corpus sample, and
scored again. Each cut also gets its embedding fidelity (the mean cosine between its sentence embeddings and the input
model's on the dev sentences, the greedy criterion's measure), so whether that measure ranks the cuts as the recovered
dev score does can be read off.

    python benchmarks/layer_choice.py --remove 3 --cuts 1,3,5 3,4,5 --steps 300 --store docs/results/store
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

import torch

from sparsecse.artifacts.model_names import resolve_model
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.scoring.criteria import criterion_names, get_criterion
from sparsecse.scoring.layer_criteria import removal_order
from sparsecse.shrinking.layers import without_layers
from sparsecse.training.api import train
from sparsecse.training.config import TrainingConfig
from sparsecse.training.dev_eval import dev_set


def fidelity(encoder: SentenceEncoder, sentences: list[str], reference: torch.Tensor) -> float:
    """The mean cosine between ``encoder``'s embeddings of ``sentences`` and ``reference`` (1 − the greedy layer
    criterion's cost)."""
    embeddings = torch.as_tensor(encoder.encode(sentences, batch_size=128, convert_to_numpy=False))
    return 1.0 - get_criterion("embedding_fidelity", unit="layer").cost(embeddings, reference)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--corpus", default="../shared/data/unlabeled/train_sentences.txt")
    parser.add_argument("--data-dir", default=os.environ.get("SPARSECSE_DATA", "../shared/data/senteval"))
    parser.add_argument("--remove", type=int, default=3, help="layers each cut removes")
    parser.add_argument("--cuts", nargs="*", default=[], metavar="I,J,K", help="other cuts to judge (layer indices)")
    parser.add_argument("--steps", type=int, default=300, help="distillation steps of the short recovery")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-4, help="the recovery's learning rate (the budget stage's)")
    parser.add_argument("--fidelity-sentences", type=int, default=512, help="dev sentences the fidelity reads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--store", default=None, metavar="DIR", help="also write the table to this results store")
    args = parser.parse_args()

    t0 = time.perf_counter()
    model = resolve_model(args.model)
    dev = dev_set(None, args.data_dir)
    dense = SentenceEncoder.load(model, device="cpu")
    sentences = list(dict.fromkeys(dev.sentences))
    chosen = {name: sorted(removal_order(dense, sentences, name, limit=args.remove)[:args.remove])
              for name in criterion_names("layer")}
    cuts = {tuple(layers): [name for name, c in chosen.items() if c == layers] for layers in chosen.values()}
    for text in args.cuts:
        cuts.setdefault(tuple(sorted(int(i) for i in text.split(","))), [])
    lines = Path(args.corpus).read_text(encoding="utf-8").splitlines()
    random.Random(args.seed).shuffle(lines)
    reference_dev = float(dev.score(dense))
    picked = sentences[:args.fidelity_sentences]
    reference = torch.as_tensor(dense.encode(picked, batch_size=128, convert_to_numpy=False))
    print(f"input dev {reference_dev:.2f}; criteria chose {chosen} ({time.perf_counter() - t0:.0f} s)", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text("\n".join(lines[:args.steps * args.batch_size]) + "\n", encoding="utf-8")
        for layers, names in cuts.items():
            cut = without_layers(dense, list(layers))
            before, faithful = float(dev.score(cut)), fidelity(cut, picked, reference)
            config = TrainingConfig(max_steps=args.steps, batch_size=args.batch_size, lr=args.lr, eval_steps=0,
                                    data_dir=args.data_dir, overwrite=True, show_progress=False)
            out = Path(tmp) / ("cut-" + "-".join(map(str, layers)))
            result = train(model=cut, corpus=str(corpus), out=str(out), objective="distill",
                           objective_args={"teacher": model}, seed=args.seed, config=config)
            after = float(dev.score(SentenceEncoder.load(result.out, device="cpu")))
            rows.append({"removed": list(layers), "chosen_by": names, "fidelity": round(faithful, 4),
                         "dev_after_cut": round(before, 2), "dev_recovered": round(after, 2)})
            print(json.dumps(rows[-1]), f"({time.perf_counter() - t0:.0f} s)", flush=True)
    rows.sort(key=lambda r: -r["dev_recovered"])
    if args.store:
        print(f"wrote {store_entry(args, reference_dev, rows)}")


def store_entry(args, reference_dev: float, rows: list[dict]):
    """The table as one results-store entry, ``layer-choice.MODEL.removeK.MACHINE`` (lower case)."""
    from sparsecse.artifacts.model_names import model_label
    from sparsecse.reporting.store import Entry, command_line, machine_slug, provenance, write_entry

    label = model_label(args.model)
    figures = {"model": label, "removed_layers": args.remove, "steps": args.steps, "batch_size": args.batch_size,
               "lr": args.lr, "reference_dev": round(reference_dev, 2), "rows": rows}
    prov = provenance(command_line("benchmarks/layer_choice.py"), threads=torch.get_num_threads(),
                      batch_size=args.batch_size, engine=None)
    entry = Entry(f"layer-choice.{label.lower()}.remove{args.remove}.{machine_slug()}",
                  f"Which {args.remove} layers of {label} to remove: STS-B dev after the cut and after "
                  f"{args.steps} distillation steps", figures, prov)
    return write_entry(args.store, entry)

if __name__ == "__main__":
    main()
