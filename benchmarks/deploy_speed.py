"""Pruning and deployment stacked: every model x every engine and precision, side by side in one run.

Rows: the dense model (default all-MiniLM-L6-v2), a small dense anchor (``--small``, default
paraphrase-MiniLM-L3-v2) and the pruned, shrunk directories given with ``--pruned``, each as torch fp32,
torch bf16 (only where the CPU has native bf16, or with ``--bf16 always``), ONNX fp32, ONNX dynamic int8,
ONNX static int8, OpenVINO fp32 and OpenVINO int8 (NNCF), the int8 ones calibrated on the same seeded
sample of ``--calibration`` (exported with :func:`sparsecse.export`). Each row's 7-task STS average
comes from ``evaluate`` (what ``sparsecse eval`` runs); then all rows encode the distinct STS-B test
sentences on ``--threads`` threads, interleaved batch by batch in rotating order, each keeping its best
of ``--repeats`` times per batch. Exports and quality rows are cached under ``--work``, so a stopped
run resumes; the timing is always one fresh interleaved pass. The CPU's int8/bf16 features are printed
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
from shrink_speed import interleaved_best_times, stsb_test_sentences  # noqa: E402  (beside this file)
from targets import (DEFAULT_PATH as TARGETS_PATH, pairs_record, parse_target_specs, target_record,  # noqa: E402
                     unknown_target_row, write_targets)

from sparsecse.modeling.cpu_features import describe_cpu  # noqa: E402
from sparsecse.deploy.loading import load_encoder  # noqa: E402
from sparsecse.deploy.openvino_encoder import FP32_XML, INT8_XML  # noqa: E402
from sparsecse.modeling.encoder import cpu_has_native_bf16, resolve_model  # noqa: E402
from sparsecse.evaluation import evaluate  # noqa: E402
from sparsecse.deploy.export import export  # noqa: E402
from sparsecse.deploy.onnx_encoder import FP32_FILE, INT8_FILE, STATIC_INT8_FILE  # noqa: E402

SMALL = "/work/shared/models/paraphrase-MiniLM-L3-v2"
CALIBRATION = "/work/shared/data/wiki/wiki1m_sample.txt"
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


def build_rows(name: str, source: str, work: Path, args, with_bf16: bool) -> list[dict]:
    """The rows of one model: (label, directory, graph file or None for torch, precision)."""
    calib = dict(calibration=args.calibration, calibration_size=args.calibration_size, calibration_seed=0)
    dirs = {"onnx": work / f"{name}-onnx", "static": work / f"{name}-onnx-static", "ov": work / f"{name}-openvino"}
    if not dirs["onnx"].exists():
        export(source, dirs["onnx"], quantize="int8")
    if not dirs["static"].exists():
        export(source, dirs["static"], quantize="int8", **calib)
    if not dirs["ov"].exists():
        export(source, dirs["ov"], format="openvino", quantize="int8", **calib)
    rows = [(f"{name} torch fp32", source, None, "fp32")]
    if with_bf16:
        rows.append((f"{name} torch bf16", source, None, "bf16"))
    rows += [(f"{name} ONNX fp32", dirs["onnx"], FP32_FILE, "fp32"),
             (f"{name} ONNX int8 dynamic", dirs["onnx"], INT8_FILE, "fp32"),
             (f"{name} ONNX int8 static", dirs["static"], STATIC_INT8_FILE, "fp32"),
             (f"{name} OpenVINO fp32", dirs["ov"], FP32_XML, "fp32"),
             (f"{name} OpenVINO int8", dirs["ov"], INT8_XML, "fp32")]
    return [{"model": label, "group": name, "source": str(path), "file": file, "precision": precision,
             "model_dir": str(source)} for label, path, file, precision in rows]


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
    result = evaluate(model=target, tasks=args.tasks, data_dir=args.data_dir, batch_size=args.batch_size,
                      precision=row["precision"], align_uniform=False, show_progress=True, bootstrap=REPLICATES,
                      keep_pairs=True)
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
    parser.add_argument("--pruned", nargs="*", default=[], help="pruned model directories (sparsecse shrink/train)")
    parser.add_argument("--calibration", default=CALIBRATION, help="corpus for the static int8 rows")
    parser.add_argument("--calibration-size", type=int, default=300)
    parser.add_argument("--data-dir", default=None, help="SentEval data (default: $SPARSECSE_DATA / cache)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--tasks", default="sts", help="evaluation tasks for the quality columns")
    parser.add_argument("--bf16", choices=["auto", "always", "never"], default="auto",
                        help="torch bf16 rows: auto = only where the CPU has native bf16 (else slower than fp32)")
    parser.add_argument("--work", required=True, help="exports and cached quality rows go here (resumable)")
    parser.add_argument("--json", dest="json_out", default=None, help="also write the results here")
    parser.add_argument("--target", action="append", default=[], metavar="NAME=ROW:VERSUS",
                        help="a target row (repeatable), e.g. '6x-int8=f2x OpenVINO int8:L3 OpenVINO int8': its "
                             "paired interval against the row VERSUS goes into --targets-json")
    parser.add_argument("--targets-json", default=str(TARGETS_PATH), help="the targets file to update")
    args = parser.parse_args(argv)
    targets = parse_target_specs(args.target)
    torch.set_num_threads(args.threads)
    print(f"CPU {describe_cpu()}; {args.threads} threads; machine shared with other jobs", file=sys.stderr)

    models = [("dense", args.model)] + ([("L3", args.small)] if args.small else [])
    models += [(Path(p).name, p) for p in args.pruned]
    names = [n for n, _ in models]
    if len(set(names)) != len(names):
        parser.error("the --pruned directories need distinct names other than 'dense' and 'L3'")
    with_bf16 = args.bf16 == "always" or (args.bf16 == "auto" and cpu_has_native_bf16())
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = [row for name, source in models for row in build_rows(name, resolve_model(source), work,
                                                                  args, with_bf16)]
    unknown = unknown_target_row(targets, {row["model"] for row in rows})  # before any evaluation
    if unknown:
        parser.error(unknown)
    for row in rows:
        row.update(quality(row, work, args))
        print(f"{row['model']}: STS avg {row['avg_sts']:.2f}", file=sys.stderr, flush=True)

    encoders = {row["model"]: open_encoder(row, args.threads) for row in rows}
    unique, _ = stsb_test_sentences(args.data_dir, encoders[rows[0]["model"]])
    print(f"{len(unique)} distinct STS-B test sentences; per batch of {args.batch_size} the best of {args.repeats} "
          f"interleaved runs", file=sys.stderr)
    best_wall, best_cpu = interleaved_best_times(encoders, unique, args.batch_size, args.repeats)
    reference = rows[0]
    for row in rows:
        row.update(seconds=sum(best_wall[row["model"]]), cpu_seconds=sum(best_cpu[row["model"]]),
                   weights_bytes=weights_bytes(row["source"], row["file"]))
    for row in rows:
        row.update(sentences_per_second=len(unique) / row["seconds"], speedup=reference["seconds"] / row["seconds"],
                   cpu_speedup=reference["cpu_seconds"] / row["cpu_seconds"])

    width = max(len(row["model"]) for row in rows)
    print(f"# CPU {describe_cpu()}; {args.threads} threads; {len(unique)} STS-B test sentences")
    print(f"{'model':<{width}} {'weights':>9} {'sent/s':>8} {'speed-up':>9} {'CPU-time':>9} {'STS-B':>6} "
          f"{'STS avg':>8}")
    for row in rows:
        print(f"{row['model']:<{width}} {row['weights_bytes'] / 1e6:>7.1f}MB {row['sentences_per_second']:>8.0f} "
              f"{row['speedup']:>8.2f}x {row['cpu_speedup']:>8.2f}x {row['scores'].get('STSBenchmark', 0):>6.2f} "
              f"{row['avg_sts']:>8.2f}")
    report_targets(rows, names)
    if targets:
        print(f"wrote {write_targets(target_records(rows, targets), Path(args.targets_json))}", file=sys.stderr)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"cpu": describe_cpu(), "threads": args.threads, "repeats": args.repeats,
                       "batch_size": args.batch_size, "sentences": len(unique),
                       "rows": [{k: v for k, v in row.items() if k != "pairs"} for row in rows]}, f, indent=2)
    return 0


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


def report_targets(rows: list[dict], names: list[str]) -> None:
    """Issue 26's targets, each said met or missed by how much."""
    by = {row["model"]: row for row in rows}
    pruned = [row for row in rows if row["group"] not in ("dense", "L3")]
    for group in names:
        fp32 = {"ONNX": by[f"{group} ONNX fp32"], "OpenVINO": by[f"{group} OpenVINO fp32"]}
        for label in ("ONNX int8 dynamic", "ONNX int8 static", "OpenVINO int8"):
            cost = fp32[label.split()[0]]["avg_sts"] - by[f"{group} {label}"]["avg_sts"]
            print(f"{group} {label}: int8 costs {cost:+.2f} STS avg (limit {INT8_COST_LIMIT}: "
                  f"{'ok' if cost <= INT8_COST_LIMIT else 'MISSED'})")
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
