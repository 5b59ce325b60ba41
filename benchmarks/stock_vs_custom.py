"""Stock against custom layout at the same targets: what the input's own architecture costs (issue 64).

Each row pairs two runs of one target, one per layout (``sparsecse compress ... --layout custom|stock``), on this
machine: each side's final figures come from its run's results-store entry (the run's one speed figure, 7-task
STS with its interval, STS-B dev, minutes), its shape from its model's config (layers kept, FFN widths, heads),
and the paired difference stock − custom on the 7 STS tasks from the two runs' result files
(:func:`sparsecse.evaluation.compare.compare`: a paired bootstrap over the same pairs; nothing is re-encoded).
The choice is custom as soon as stock costs more than ``--tolerance`` STS at one target; it is stock only with
``--choose`` (the pairs cover every target the default is chosen on) where stock costs no more than that at every
target (its run met the target); otherwise none is recorded yet.

Example::

    python benchmarks/stock_vs_custom.py --runs runs --store docs/results/store \\
        --pair 1.5x=l6-custom-curve/speedup-1.5:l6-stock-curve/speedup-1.5 \\
        --pair 2x-latency=lat2x-5:lat2x-stock
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TOLERANCE = 0.2  # the STS stock may cost and still be the default (issue 64)


def run_entry_id(run: str, store: dict) -> str:
    """The store entry of a run named as ``--pair`` names it (``NAME`` or ``NAME/speedup-X``): its id's prefix is
    ``NAME.`` or ``NAME.speedup-X.``, its last part the machine."""
    prefix = run.replace("/", ".") + "."
    found = [i for i in store if i.startswith(prefix) and i.count(".") == prefix.count(".")]
    if len(found) != 1:
        raise SystemExit(f"{run}: expected one store entry {prefix}MACHINE, found {found or 'none'}")
    return found[0]


def shape(model_dir: Path) -> dict:
    """Layers kept (of the input's: its run's manifest), FFN width per kept layer and heads per kept layer, from the
    model's config."""
    config = json.loads((model_dir / "config.json").read_text())
    layers = config["num_hidden_layers"]
    ffn = config.get("intermediate_sizes") or [config["intermediate_size"]] * layers
    kept = config.get("kept_heads")
    heads = [len(h) for h in kept] if kept else [config["num_attention_heads"]] * layers
    path = model_dir / "manifest.json"
    manifest = json.loads(path.read_text()) if path.is_file() else {}
    source = ((manifest.get("figures") or {}).get("target") or {}).get("input_layers")
    return {"layers": layers, "source_layers": source or config.get("source_layers") or layers, "ffn": ffn,
            "heads": heads, "model_type": config["model_type"], "remote_code": "auto_map" in config}


def side(run: str, runs: Path, store: dict) -> dict:
    """One run's row: its entry's final figures and its model's shape."""
    ident = run_entry_id(run, store)
    f = store[ident].figures
    target = f.get("target") or {}
    return {"run": run, "entry": ident, "speedup": f["speedup"], "speedup_target": target.get("speedup_target"),
            "met": target.get("met"), "sts_avg": f["sts_avg"], "ci": f["ci"], "stsb_dev": f["stsb_dev"],
            "minutes": f.get("minutes"), "metric": "latency-p50" if target.get("batch_size") == 1 else "throughput",
            "batch_size": target.get("batch_size"), **shape(runs / run / "model")}


def results_file(run_dir: Path) -> Path:
    """The run's 7-task result file (``eval/sts_results.json``, or the model's copy)."""
    for path in (run_dir / "eval" / "sts_results.json", run_dir / "model" / "sts_results.json"):
        if path.is_file():
            return path
    raise SystemExit(f"{run_dir}: no sts_results.json")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", action="append", required=True, metavar="LABEL=CUSTOM:STOCK",
                        help="a target's two runs, each as a run directory under --runs (NAME or NAME/speedup-X)")
    parser.add_argument("--runs", default="runs", help="where the runs' directories are")
    parser.add_argument("--store", default="docs/results/store", help="the results store (read, and written with "
                                                                    "--store-id)")
    parser.add_argument("--store-id", default=None, help="write the table as this store entry")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE)
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--choose", action="store_true",
                        help="the pairs cover every target the default is chosen on: record the choice (without it "
                             "the entry records none, and custom stays the default)")
    args = parser.parse_args(argv)

    from sparsecse.evaluation.compare import ComparisonConfig, compare
    from sparsecse.reporting.store import Entry, command_line, load_store, provenance, write_entry

    store, runs = load_store(args.store), Path(args.runs)
    rows = []
    for spec in args.pair:
        label, _, pair = spec.partition("=")
        custom_run, _, stock_run = pair.partition(":")
        custom, stock = side(custom_run, runs, store), side(stock_run, runs, store)
        paired = compare(results_file(runs / custom_run), results_file(runs / stock_run),
                         config=ComparisonConfig(replicates=args.bootstrap))["avg_sts"]
        rows.append({"target": label, "custom": custom, "stock": stock, "difference": round(paired["diff"], 4),
                     "paired_ci": [round(v, 4) for v in paired["ci"]], "p": paired["p"]})
        print(f"{label}: custom {custom['speedup']:.2f}x {custom['sts_avg']:.2f} | stock {stock['speedup']:.2f}x "
              f"{stock['sts_avg']:.2f} | stock - custom {paired['diff']:+.2f} [{paired['ci'][0]:+.2f}, "
              f"{paired['ci'][1]:+.2f}]")
    within = all(r["difference"] >= -args.tolerance and r["stock"]["met"] is not False for r in rows)
    # one target where stock costs more than the tolerance decides for custom; stock needs every target paired
    choice = "custom" if not within else ("stock" if args.choose else None)
    result = {"rows": rows, "tolerance": args.tolerance, "choice": choice}
    print(f"stock within {args.tolerance} STS of custom at every target paired: {within}; choice: {choice}")
    if args.store_id:
        first = rows[0]["custom"]
        threads = store[first["entry"]].provenance.get("threads")
        entry = Entry(args.store_id, "benchmarks/stock_vs_custom.py: stock against custom layout, the same targets "
                      "on the same machine (final figures from each run's store entry, paired STS difference)",
                      result, provenance(command_line("benchmarks/stock_vs_custom.py", argv), threads=threads,
                                         batch_size=first["batch_size"], engine="torch-fp32"))
        print(f"wrote {write_entry(args.store, entry)}")
    return result


if __name__ == "__main__":
    main()
