"""Pruning and deployment stacked: every model x every engine and precision, side by side in one run.

Rows: the dense model (default all-MiniLM-L6-v2), a small dense anchor (``--small``, default
paraphrase-MiniLM-L3-v2) and the pruned, shrunk directories given with ``--pruned``, each as torch fp32,
torch bf16 (only where the CPU has native bf16, or with ``--bf16 always``), ONNX fp32, ONNX dynamic int8,
ONNX static int8, OpenVINO fp32 and OpenVINO int8 (NNCF), the int8 ones calibrated on the same seeded
sample of ``--calibration`` (exported with :func:`sparsecse.export`). Each row's 7-task STS average
comes from ``evaluate`` (what ``sparsecse eval`` runs); then every row is timed against the dense model in torch
fp32 as a target times its candidates (:func:`sparsecse.targets.report.stsb_speedups`: the distinct STS-B test
sentences, ``--rounds`` interleaved rounds on ``--threads`` threads, the median of the rounds' ratios with its
interval; the rows' encoders are loaded here, so they are timed in this process). Exports and quality rows are
cached under ``--work``, so a stopped run resumes; the timing is always redone. The CPU's int8/bf16 features are printed
first: figures from different machines must not be mixed.

    python benchmarks/deploy_speed.py --work runs/deploy_speed --pruned runs/minilm-f50 [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from targets import (add_target_options, pairs_record, parse_target_specs, recipe_of,  # noqa: E402
                     target_record, unknown_target_row, write_targets)

from sparsecse.modeling.cpu_features import describe_cpu  # noqa: E402
from sparsecse.serving.loading import load_encoder  # noqa: E402
from sparsecse.serving.openvino_encoder import FP32_XML, INT8_XML  # noqa: E402
from sparsecse.modeling.encoder import cpu_has_native_bf16, resolve_model  # noqa: E402
from sparsecse.evaluation import evaluate  # noqa: E402
from sparsecse.exporting.export import export  # noqa: E402
from sparsecse.serving.onnx_encoder import FP32_FILE, INT8_FILE, STATIC_INT8_FILE  # noqa: E402
from sparsecse.evaluation.config import EvaluationConfig  # noqa: E402
from sparsecse.exporting.config import ExportConfig  # noqa: E402
from sparsecse.targets.report import stsb_speedups  # noqa: E402
from sparsecse.targets.timing import ROUNDS  # noqa: E402

SMALL = "paraphrase-MiniLM-L3-v2"  # found through $SPARSECSE_MODELS (make sets it to ../shared/models)
CALIBRATION = "../shared/data/wiki/wiki1m_sample.txt"
SPEEDUP_TARGET, STS_TARGET = 8.0, 78.67  # issue 26: >= 8x at paraphrase-MiniLM-L3-v2's fp32 STS average
INT8_COST_LIMIT = 0.3
REPLICATES = 1000  # bootstrap replicates of each row's interval and of the targets' paired intervals


class AtPrecision:
    """A torch encoder whose ``encode`` runs at ``precision`` (autocast), for the timing loop."""

    def __init__(self, encoder, precision: str):
        self.encoder, self.precision = encoder, precision
        self.source, self.tokenizer, self.max_length = encoder.source, encoder.tokenizer, encoder.max_length
        self.pooling, self.dim, self.device = encoder.pooling, encoder.dim, encoder.device

    def encode(self, sentences, batch_size=None, **kwargs):
        return self.encoder.encode(sentences, batch_size=batch_size, **{**kwargs, "precision": self.precision})


def weights_bytes(source: str, file: str | None) -> int:
    if file is None:
        return sum(f.stat().st_size for f in Path(source).glob("*.safetensors"))
    path = Path(source) / file
    return path.stat().st_size + (path.with_suffix(".bin").stat().st_size if path.suffix == ".xml" else 0)


ENGINES = {  # --engines key: (row label suffix, export folder or None for torch, graph file, precision)
    "torch-fp32": ("torch fp32", None, None, "fp32"),
    "torch-bf16": ("torch bf16", None, None, "bf16"),
    "onnx-fp32": ("ONNX fp32", "onnx", FP32_FILE, "fp32"),
    "onnx-int8-dynamic": ("ONNX int8 dynamic", "onnx", INT8_FILE, "fp32"),
    "onnx-int8-static": ("ONNX int8 static", "static", STATIC_INT8_FILE, "fp32"),
    "openvino-fp32": ("OpenVINO fp32", "ov", FP32_XML, "fp32"),
    "openvino-int8": ("OpenVINO int8", "ov", INT8_XML, "fp32"),
}


def parse_engines(text: str, with_bf16: bool) -> list[str]:
    """The ``--engines`` keys in table order (``all``: every engine, torch bf16 only ``with_bf16``)."""
    if text == "all":
        return [key for key in ENGINES if key != "torch-bf16" or with_bf16]
    keys = [key.strip() for key in text.split(",") if key.strip()]
    unknown = [key for key in keys if key not in ENGINES]
    if unknown or not keys:
        raise ValueError(f"--engines: unknown engine {(unknown or [text])[0]!r}; choose from "
                         f"{', '.join(ENGINES)} or all")
    if "torch-fp32" not in keys:
        raise ValueError("--engines must keep torch-fp32: every speed-up is over the dense model in torch fp32")
    return [key for key in ENGINES if key in keys]


def row_label(name: str, engine: str) -> str:
    """A row's label: the model's name and the engine's (``f2x OpenVINO int8``), as ``--target`` names it."""
    return f"{name} {ENGINES[engine][0]}"


def build_rows(name: str, source: str, work: Path, args, engines: list[str]) -> list[dict]:
    """The rows of one model on ``engines`` (label, directory, graph file or None for torch, precision),
    exporting only what those engines need."""
    calib = dict(calibration=args.calibration, calibration_size=args.calibration_size, calibration_seed=0)
    exports = {"onnx": (work / f"{name}-onnx", ExportConfig(quantize="int8")),
               "static": (work / f"{name}-onnx-static", ExportConfig(quantize="int8", **calib)),
               "ov": (work / f"{name}-openvino", ExportConfig(format="openvino", quantize="int8", **calib))}
    rows = []
    for key in engines:
        _, folder, file, precision = ENGINES[key]
        path = source
        if folder is not None:
            path, config = exports[folder]
            if not path.exists():
                export(source, path, config=config)
        rows.append({"model": row_label(name, key), "group": name, "source": str(path), "file": file,
                     "precision": precision, "model_dir": str(source)})
    return rows


def pruned_row_name(text: str) -> tuple[str, str]:
    """(name, directory) of a ``--pruned`` value: ``NAME=DIR``, else the directory's own name."""
    name, sep, path = text.partition("=")
    return (name.strip(), path) if sep and name.strip() else (Path(text).name, text)


def open_encoder(row: dict, threads: int):
    encoder = load_encoder(row["source"], device="cpu", file=row["file"], threads=threads) if row["file"] else \
        load_encoder(row["source"], device="cpu")
    return AtPrecision(encoder, row["precision"]) if row["precision"] != "fp32" else encoder


def quality(row: dict, work: Path, args) -> dict:
    """The row's STS scores, their bootstrap interval and per-pair similarities, cached under ``work/quality``
    (a cached row from before the intervals is computed again)."""
    cache = work / "quality" / (row["model"].replace(" ", "_") + ".json")
    if cache.is_file():
        record = json.loads(cache.read_text())
        if "pairs" in record:
            return record
    encoder = open_encoder(row, args.threads)
    target = encoder.encoder if isinstance(encoder, AtPrecision) else encoder
    result = evaluate(model=target, config=EvaluationConfig(tasks=args.tasks, data_dir=args.data_dir,
        batch_size=args.batch_size, precision=row["precision"], align_uniform=False, show_progress=True,
        bootstrap=REPLICATES, keep_pairs=True))
    record = {"scores": result["scores"], "avg_sts": result.get("avg_sts"),
              "ci": result.get("bootstrap", {}).get("avg"), "pairs": pairs_record(result.get("pairs", {}))}
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2))
    os.replace(tmp, cache)
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="dense model (default: all-MiniLM-L6-v2)")
    parser.add_argument("--small", default=SMALL, help="small dense anchor ('' for none)")
    parser.add_argument("--pruned", nargs="*", default=[], metavar="[NAME=]DIR",
                        help="pruned model directories (sparsecse shrink/train/compress), each row named NAME or "
                             "after its directory")
    parser.add_argument("--calibration", default=CALIBRATION, help="corpus for the static int8 rows")
    parser.add_argument("--calibration-size", type=int, default=300)
    parser.add_argument("--data-dir", default=None, help="SentEval data (default: $SPARSECSE_DATA / cache)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved timing rounds")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--tasks", default="sts", help="evaluation tasks for the quality columns")
    parser.add_argument("--bf16", choices=["auto", "always", "never"], default="auto",
                        help="torch bf16 rows: auto = only where the CPU has native bf16 (else slower than fp32)")
    parser.add_argument("--engines", default="all", metavar="LIST",
                        help="comma-separated engines to measure (" + ", ".join(ENGINES) + "), or all (default; "
                             "torch-bf16 as --bf16 says)")
    parser.add_argument("--work", required=True, help="exports and cached quality rows go here (resumable)")
    parser.add_argument("--json", dest="json_out", default=None, help="also write the results here")
    parser.add_argument("--out", default=None, metavar="STEM",
                        help="also write STEM.md (one line per model, its engines side by side, the recipe that made "
                             "it) and STEM.png (STS average against speed-up, one marker per engine)")
    parser.add_argument("--store", default=None, metavar="DIR",
                        help="also write the results as one entry of this results store (docs/results/store; "
                             "`make figures` puts them into the docs)")
    parser.add_argument("--store-id", default="deploy-speed", metavar="ID",
                        help="the entry's id, less the machine (default: deploy-speed; the entry is ID.MACHINE)")
    add_target_options(parser, "6x-int8=f2x OpenVINO int8:L3 OpenVINO int8")
    args = parser.parse_args(argv)
    targets = parse_target_specs(args.target)
    torch.set_num_threads(args.threads)
    print(f"CPU {describe_cpu()}; {args.threads} threads; machine shared with other jobs", file=sys.stderr)

    models = [("dense", args.model)] + ([("L3", args.small)] if args.small else [])
    models += [pruned_row_name(p) for p in args.pruned]
    names = [n for n, _ in models]
    if len(set(names)) != len(names):
        parser.error("the --pruned directories need distinct names other than 'dense' and 'L3'")
    with_bf16 = args.bf16 == "always" or (args.bf16 == "auto" and cpu_has_native_bf16())
    try:
        engines = parse_engines(args.engines, with_bf16)
    except ValueError as error:
        parser.error(str(error))
    labels = {row_label(name, key) for name in names for key in engines}
    unknown = unknown_target_row(targets, labels)  # before any export or evaluation
    if unknown:
        parser.error(unknown)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = [row for name, source in models for row in build_rows(name, resolve_model(source), work,
                                                                  args, engines)]
    for row in rows:
        row.update(quality(row, work, args))
        print(f"{row['model']}: STS avg {row['avg_sts']:.2f}", file=sys.stderr, flush=True)

    sentences = time_rows(rows, args)

    width = max(len(row["model"]) for row in rows)
    print(f"# CPU {describe_cpu()}; {args.threads} threads; {len(sentences)} STS-B test sentences")
    print(f"{'model':<{width}} {'weights':>9} {'sent/s':>8} {'speed-up':>9} {'interval':>14} {'STS-B':>6} "
          f"{'STS avg':>8}")
    for row in rows:
        low, high = row["speedup_ci"]
        print(f"{row['model']:<{width}} {row['weights_bytes'] / 1e6:>7.1f}MB {row['sentences_per_second']:>8.0f} "
              f"{row['speedup']:>8.2f}x {f'[{low:.2f}, {high:.2f}]':>14} "
              f"{row['scores'].get('STSBenchmark', 0):>6.2f} {row['avg_sts']:>8.2f}")
    report_targets(rows, names)
    if args.out:
        header = (f"{len(sentences)} distinct STS-B test sentences, {args.threads} threads, batch {args.batch_size}; "
                  "speed-up over dense all-MiniLM-L6-v2 in torch fp32, the median of "
                  f"{args.rounds} interleaved rounds' ratios, timed as targets time; STS avg of 7 tasks with bootstrap 95% interval ({REPLICATES} replicates). CPU: "
                  f"{describe_cpu()}.")
        written = write_side_by_side(rows, names, [ENGINES[key][0] for key in engines], Path(args.out), header)
        print(f"wrote {', '.join(map(str, written))}", file=sys.stderr)
    if targets:
        print(f"wrote {write_targets(target_records(rows, targets), Path(args.targets_json))}", file=sys.stderr)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"cpu": describe_cpu(), "threads": args.threads, "rounds": args.rounds,
                       "batch_size": args.batch_size, "sentences": len(sentences),
                       "rows": [{k: v for k, v in row.items() if k != "pairs"} for row in rows]}, f, indent=2)
    if args.store:
        print(f"wrote {store_entry(rows, len(sentences), args, argv)}", file=sys.stderr)
    return 0


def time_rows(rows: list[dict], args) -> list[str]:
    """Every row but the first (the dense model in torch fp32, the 1x) timed against the first as targets time
    (:func:`~sparsecse.targets.report.stsb_speedups`, the encoders loaded here); each row gets its ``speedup``,
    ``speedup_ci``, ``sentences_per_second`` and ``weights_bytes``. Returns the timed sentences."""
    encoders = {row["model"]: open_encoder(row, args.threads) for row in rows[1:]}
    timed, _, sentences = stsb_speedups(rows[0]["model_dir"], encoders, args.data_dir, args.batch_size,
                                        args.threads, args.rounds)
    reference = next(iter(timed.values())).reference_figure if timed else float("nan")
    for row in rows:
        timing = timed.get(row["model"])
        row.update(speedup=timing.speedup if timing else 1.0,
                   speedup_ci=[timing.interval.low, timing.interval.high] if timing else [1.0, 1.0],
                   sentences_per_second=timing.figure if timing else reference,
                   weights_bytes=weights_bytes(row["source"], row["file"]))
    return sentences


def store_entry(rows: list[dict], sentences: int, args, argv) -> Path:
    """The run as one results-store entry: per model (its row group) and engine, the speed-up over the first
    row with its interval, sentences/s and the STS figures."""
    from sparsecse.reporting.store import Entry, command_line, machine_slug, provenance, write_entry

    table: dict = {}
    for row in rows:
        engine = row["model"][len(row["group"]):].strip().lower().replace(" ", "-")
        table.setdefault(stored_name(row["group"], args), {})[engine] = {
            "speedup": round(row["speedup"], 4), "speedup_ci": [round(x, 4) for x in row["speedup_ci"]],
            "sentences_per_second": round(row["sentences_per_second"], 1),
            "sts_avg": round(row["avg_sts"], 4), "ci": [round(x, 4) for x in row["ci"]] if row.get("ci") else None,
            "stsb_test": round(row["scores"].get("STSBenchmark", 0.0), 4)}
    figures = {"reference": rows[0]["model"], "sentences": sentences, "rounds": args.rounds, "rows": table}
    ident = f"{args.store_id}.{machine_slug()}"
    prov = provenance(command_line("benchmarks/deploy_speed.py", argv), threads=args.threads,
                      batch_size=args.batch_size, engine=",".join(sorted({e for r in table.values() for e in r})))
    return write_entry(args.store, Entry(ident, "benchmarks/deploy_speed.py: speed and STS per engine", figures,
                                         prov))


def stored_name(group: str, args) -> str:
    """A row group as the store names it: the two downloaded models by their names ("dense" and "L3" are the
    table's short labels), the --pruned rows by theirs."""
    names = {"dense": Path(args.model).name if args.model else "all-MiniLM-L6-v2",
             "L3": Path(args.small).name if args.small else "L3"}
    return names.get(group, group)


def target_records(rows: list[dict], targets: list[tuple[str, str, str]]) -> list[dict]:
    """The targets file's objects of the ``targets`` (name, row, versus), the engine read off the row's label."""
    by = {row["model"]: row for row in rows}
    records = []
    for name, label, versus in targets:
        row, other = ({**by[x], "label": x} for x in (label, versus))
        records.append(target_record(name, row, other, engine=label[len(row["group"]):].strip(),
                                     speedup=row["speedup"], replicates=REPLICATES,
                                     measured_by="benchmarks/deploy_speed.py"))
    return records


def side_by_side(rows: list[dict], names: list[str], engines: list[str]) -> list[str]:
    """Markdown table lines: one line per model (in ``names`` order), each engine's STS avg [CI] and
    speed-up side by side, the int8 cost against the model's torch fp32 row, and the recipe that made it."""
    by = {row["model"]: row for row in rows}
    int8 = [e for e in engines if "int8" in e]
    head = ["model", "made by"] + [f"{e} {what}" for e in engines for what in ("STS avg [95% CI]", "speed-up")]
    head += [f"{e} cost" for e in int8]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        first = by[f"{name} {engines[0]}"]
        recipe = recipe_of(first["model_dir"])
        cells = [name, f"`{recipe}`" if recipe else "download"]
        for engine in engines:
            row = by[f"{name} {engine}"]
            cells += [f"{row['avg_sts']:.2f} [{row['ci'][0]:.2f}, {row['ci'][1]:.2f}]" if row.get("ci")
                      else f"{row['avg_sts']:.2f}", f"{row['speedup']:.2f}x"]
        cells += [f"{by[f'{name} torch fp32']['avg_sts'] - by[f'{name} {e}']['avg_sts']:+.2f}" for e in int8]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def write_side_by_side(rows: list[dict], names: list[str], engines: list[str], stem: Path, header: str) -> list[Path]:
    """``stem``.md (:func:`side_by_side` under ``header``) and ``stem``.png: each model's engines as markers joined
    by a line, STS average (95% interval) against speed-up."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stem.parent.mkdir(parents=True, exist_ok=True)
    md = stem.with_suffix(".md")
    md.write_text("\n".join([header, ""] + side_by_side(rows, names, engines)) + "\n")
    by = {row["model"]: row for row in rows}
    markers = dict(zip(engines, "osD^v<>"))
    fig, ax = plt.subplots(figsize=(9, 5))
    for i, name in enumerate(names):
        color = f"C{i}"
        points = [by[f"{name} {e}"] for e in engines]
        ax.plot([p["speedup"] for p in points], [p["avg_sts"] for p in points], color=color, alpha=0.4)
        for engine, p in zip(engines, points):
            low, high = p.get("ci") or (p["avg_sts"], p["avg_sts"])
            ax.errorbar(p["speedup"], p["avg_sts"], yerr=[[p["avg_sts"] - low], [high - p["avg_sts"]]],
                        fmt=markers[engine], color=color, capsize=3)
        ax.annotate(name, (points[-1]["speedup"], points[-1]["avg_sts"]), textcoords="offset points",
                    xytext=(6, 3), fontsize=8, color=color)
    for engine in engines:
        ax.plot([], [], markers[engine], color="gray", label=engine)
    ax.set_xlabel("encode speed-up over dense all-MiniLM-L6-v2 in torch fp32")
    ax.set_ylabel("STS average, 7 tasks (95% bootstrap CI)")
    ax.set_title("Each model in each engine, measured side by side")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    png = stem.with_suffix(".png")
    fig.savefig(png, dpi=150)
    plt.close(fig)
    return [md, png]


def report_targets(rows: list[dict], names: list[str]) -> None:
    """Issue 26's targets, each said met or missed by how much."""
    by = {row["model"]: row for row in rows}
    pruned = [row for row in rows if row["group"] not in ("dense", "L3")]
    for group in names:
        for label in ("ONNX int8 dynamic", "ONNX int8 static", "OpenVINO int8"):
            if f"{group} {label}" not in by:
                continue
            base = by.get(f"{group} {label.split()[0]} fp32") or by.get(f"{group} torch fp32")
            if base is None:
                continue
            cost = base["avg_sts"] - by[f"{group} {label}"]["avg_sts"]
            print(f"{group} {label}: int8 costs {cost:+.2f} STS avg against {base['model']} (limit "
                  f"{INT8_COST_LIMIT}: {'ok' if cost <= INT8_COST_LIMIT else 'MISSED'})")
    if not pruned:
        return
    best = max(pruned, key=lambda r: r["speedup"] if r["avg_sts"] >= STS_TARGET else -1)
    print(f"fastest pruned row at STS avg >= {STS_TARGET}: "
          + (f"{best['model']} {best['speedup']:.2f}x (target {SPEEDUP_TARGET:.0f}x: "
             f"{'ok' if best['speedup'] >= SPEEDUP_TARGET else 'MISSED'})" if best["avg_sts"] >= STS_TARGET
             else "none"))
    for anchor in ("dense OpenVINO int8", "L3 OpenVINO int8"):
        if anchor not in by:
            continue
        at_speed = [r for r in pruned if r["speedup"] >= by[anchor]["speedup"]]
        top = max(at_speed, key=lambda r: r["avg_sts"], default=None)
        print(f"at the speed of {anchor} ({by[anchor]['speedup']:.2f}x, STS avg {by[anchor]['avg_sts']:.2f}): "
              + (f"{top['model']} STS avg {top['avg_sts']:.2f} ({'ok' if top['avg_sts'] > by[anchor]['avg_sts'] else 'MISSED'})"
                 if top else "no pruned row that fast (MISSED)"))


if __name__ == "__main__":
    sys.exit(main())
