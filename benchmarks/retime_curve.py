"""A curve's models timed again the way a target times them today, to compare with the figures the run measured and
with an independent timing (``benchmarks/serving_latency.py --whole``).

Reads ``OUT/curve.csv`` of ``sparsecse compress --speedup 1.5,2,3 --out OUT`` and times every model of it against the
input model at the curve's serving shape with :func:`sparsecse.targets.timing.measure` (each timing in a new worker
process, the models taking turns round by round), twice: on the dev sentences the run timed on (STS-B dev, thinned to
2,048 as the run thins them) and on every distinct STS-B test sentence, the sentences the independent timing encodes.
So a difference between a run's figure and the independent one can be split into the timing method and the sentences.

Example::

    python benchmarks/retime_curve.py runs/l6-curve --store docs/results/store --store-id retimed.l6-curve
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparsecse.data.sts import read_sts_benchmark  # noqa: E402
from sparsecse.modeling.encoder import SentenceEncoder  # noqa: E402
from sparsecse.reporting.store import Entry, command_line, machine_slug, provenance, write_entry  # noqa: E402
from sparsecse.targets.engines import to_time  # noqa: E402
from sparsecse.targets.spec import LOADERS, Shape, default_loader  # noqa: E402
from sparsecse.targets.timing import measure, timing_sentences  # noqa: E402


def split_sentences(data_dir, split: str, tokenizer, max_length: int, limit: int) -> list[str]:
    """The distinct sentences of STS-B ``split``, longest first, thinned to ``limit`` as a target thins them."""
    pairs = read_sts_benchmark(data_dir, split)
    return timing_sentences([p.s1 for p in pairs] + [p.s2 for p in pairs], tokenizer, max_length, limit)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("curve", help="the curve's directory (OUT of compress --speedup A,B,C)")
    parser.add_argument("--data-dir", default=os.environ.get("SPARSECSE_DATA", "../shared/data/senteval"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--loader", choices=LOADERS, default=default_loader("torch-fp32"),
                        help="what loads the models to time them (default: sentence-transformers where installed)")
    parser.add_argument("--store", default=None, metavar="DIR", help="also write the figures as one results-store entry")
    parser.add_argument("--store-id", default="retimed", metavar="ID", help="the entry's id, less the machine")
    args = parser.parse_args()
    curve = Path(args.curve)
    rows = pd.read_csv(curve / "curve.csv").to_dict("records")
    shape = Shape(rows[0]["metric"], int(rows[0]["batch_size"]), int(rows[0]["threads"]), loader=args.loader)
    dense = SentenceEncoder.load(rows[0]["model"], device="cpu")
    reference = to_time(rows[0]["model"], "torch-fp32", loader=args.loader)
    models = {r["name"]: to_time(r["model"], "torch-fp32", loader=args.loader) for r in rows[1:]}  # paths as the run wrote them
    sets = {"dev": split_sentences(args.data_dir, "dev", dense.tokenizer, dense.max_length, 2048),
            "test": split_sentences(args.data_dir, "test", dense.tokenizer, dense.max_length, 10 ** 6)}
    found = {name: measure(reference, models, sentences, shape, rounds=args.rounds) for name, sentences in sets.items()}
    table = [{"name": r["name"], "run": r["speedup"],
              **{f"{k}_speedup": round(found[k][r["name"]].speedup, 4) for k in sets},
              **{f"{k}_spread": round(found[k][r["name"]].spread, 4) for k in sets}} for r in rows[1:]]
    print(f"{shape.describe()}, {args.rounds} rounds, each timing in a new process")
    for t in table:
        print(f"{t['name']}: curve's run {t['run']:.2f}x; now on dev {t['dev_speedup']:.2f}x ±{t['dev_spread']:.0%}, "
              f"on test {t['test_speedup']:.2f}x ±{t['test_spread']:.0%}")
    if args.store:
        prov = provenance(command_line("benchmarks/retime_curve.py"), threads=shape.threads,
                          batch_size=shape.batch_size, engine="torch-fp32")
        figures = {"rows": table, "rounds": args.rounds, "shape": shape.to_dict(),
                   "sentences": {k: len(v) for k, v in sets.items()}}
        entry = Entry(f"{args.store_id}.{machine_slug()}", f"the models of {curve.name} timed again as targets time "
                      "today (a new process per timing, turns round by round), on STS-B dev and test sentences",
                      figures, prov)
        print(f"wrote {write_entry(args.store, entry)}")


if __name__ == "__main__":
    main()
