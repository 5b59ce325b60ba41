"""A/A timing: the input model timed against a second copy of itself at a target's shape, several times over, each
time printing the figure and its interval (:mod:`sparsecse.targets.statistics`). With no model difference, every
interval should contain 1.00x; the spread of the rounds is the machine's noise at that shape, and the line under
each timing says how many rounds a figure needs there to resolve the margin.

Example (issue 62's must-show 2: batch 1, ten times)::

    python benchmarks/aa_timing.py --model all-MiniLM-L6-v2 --metric latency-p50 --batch-size 1 --times 10
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparsecse.data.sts import read_sts_benchmark  # noqa: E402
from sparsecse.modeling.encoder import SentenceEncoder  # noqa: E402
from sparsecse.targets.alone import ALONE, measure_alone  # noqa: E402
from sparsecse.targets import timing  # noqa: E402
from sparsecse.targets.engines import to_time  # noqa: E402
from sparsecse.targets.spec import METRICS, LOADERS, Shape, default_loader  # noqa: E402
from sparsecse.targets.statistics import TooNoisy, check_precision, noise  # noqa: E402
from sparsecse.targets.timing import AGAIN, INTERLEAVED, aa_timing, engine_threads, timing_sentences  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--data-dir", default=os.environ.get("SPARSECSE_DATA", "../shared/data/senteval"))
    parser.add_argument("--metric", choices=METRICS, default="latency-p50")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--times", type=int, default=10, help="A/A timings, one after the other")
    parser.add_argument("--rounds", type=int, default=9, help="rounds per timing")
    parser.add_argument("--margin", type=float, default=0.05, help="the margin the rounds are sized for")
    parser.add_argument("--requests", type=int, default=timing.LATENCY_REQUESTS,
                        help="requests per round of a latency metric (a target times %(default)s)")
    parser.add_argument("--alone", action="store_true", help="each copy served alone in its own processes")
    parser.add_argument("--loader", choices=LOADERS, default=default_loader("torch-fp32"))
    parser.add_argument("--json", default=None, metavar="FILE", help="also write every timing here")
    parser.add_argument("--store", default=None, metavar="DIR",
                        help="also write the timings as one entry of this results store (docs/results/store)")
    args = parser.parse_args()
    timing.LATENCY_REQUESTS = args.requests  # the requests are picked here; the timing process only runs them
    shape = Shape(args.metric, args.batch_size, args.threads or engine_threads(), loader=args.loader)
    dense = SentenceEncoder.load(args.model, device="cpu")
    pairs = read_sts_benchmark(args.data_dir, "dev")
    sentences = timing_sentences([p.s1 for p in pairs] + [p.s2 for p in pairs], dense.tokenizer, dense.max_length)
    reference = to_time(args.model, "torch-fp32", loader=args.loader)
    print(f"A/A: {args.model} against itself at {shape.describe()}, {args.rounds} rounds of {args.requests} requests, "
          f"{'served alone' if args.alone else 'interleaved in one fresh process'}", flush=True)
    found, contained = [], 0
    for i in range(1, args.times + 1):
        t0 = time.perf_counter()
        aa = (measure_alone(reference, {AGAIN: reference}, sentences, shape, args.rounds)[AGAIN] if args.alone
              else aa_timing(reference, sentences, shape, args.rounds))
        iv, sigma = aa.interval, noise(aa.ratios)
        try:
            sized = f"{check_precision(sigma, args.margin, shape.describe())} rounds resolve a {args.margin:.0%} margin"
        except TooNoisy as exc:
            sized = str(exc)
        contained += iv.contains(1.0)
        print(f"{i:2d}. {iv.describe()}, contains 1.00x: {'yes' if iv.contains(1.0) else 'NO'}; noise "
              f"{sigma:.1%} a round; {sized} ({time.perf_counter() - t0:.0f} s)", flush=True)
        found.append({**aa.facts(), "contains_one": iv.contains(1.0), "noise": round(sigma, 4),
                      "ratios": [round(r, 5) for r in aa.ratios]})
    print(f"{contained} of {args.times} intervals contain 1.00x")
    method = ALONE if args.alone else INTERLEAVED
    if args.json:
        Path(args.json).write_text(json.dumps({"model": args.model, "shape": shape.to_dict(), "method": method,
                                               "timings": found}, indent=1))
    if args.store:
        from sparsecse.reporting.store import Entry, command_line, machine_slug, provenance, write_entry

        ident = f"aa-timing.{'alone' if args.alone else 'interleaved'}.b{args.batch_size}.{machine_slug()}"
        figures = {"model": args.model, "metric": args.metric, "rounds": args.rounds, "requests": args.requests,
                   "method": method, "contained": contained, "times": args.times, "timings": found}
        prov = provenance(command_line("benchmarks/aa_timing.py"), threads=shape.threads, batch_size=args.batch_size,
                          engine=f"torch-fp32 ({shape.loader})")
        entry = Entry(ident, f"A/A: {args.model} timed against itself at {shape.describe()}, {method}", figures, prov)
        print(f"wrote {write_entry(args.store, entry)}")


if __name__ == "__main__":
    main()
