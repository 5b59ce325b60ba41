"""Pruning and quantization together: six ways to serve all-MiniLM-L6-v2 on a CPU, side by side in one run.

The dense model and one or more pruned, shrunk ones (``--pruned``, ``sparsecse shrink`` or ``train``
directories) each run as torch fp32, ONNX fp32 and ONNX int8 (exported in this run with
:func:`sparsecse.export`).
Each is evaluated on the 7 STS tasks by ``evaluate``, the evaluator ``sparsecse eval`` runs; then all
six encode the distinct STS-B test sentences on ``--threads`` threads, interleaved batch by batch in
rotating order, each keeping its best of ``--repeats`` times per batch (as
``benchmarks/shrink_speed.py`` times). Printed: weights size, sentences/s, speed-up over dense torch fp32
(wall clock, and process CPU time which other jobs on a shared machine disturb less), STS-B and the
STS average. Target: pruned + int8 at least 4x the reference, STS average at most 1 point below dense
(checked for each pruned model; the exit status is 0 when one of them meets both).

    python benchmarks/deploy_speed.py --pruned minilm-f50 [minilm-f35 ...] [--threads 2] [--repeats 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from shrink_speed import interleaved_best_times, stsb_test_sentences  # noqa: E402  (beside this file)

from sparsecse.encoder import SentenceEncoder  # noqa: E402
from sparsecse.evaluation import evaluate  # noqa: E402
from sparsecse.exporting import export  # noqa: E402
from sparsecse.onnx_encoder import FP32_FILE, INT8_FILE, OnnxEncoder  # noqa: E402

SPEEDUP_TARGET = 4.0
STS_DROP_TARGET = 1.0


def weights_bytes(encoder) -> int:
    if isinstance(encoder, OnnxEncoder):
        return (Path(encoder.source) / encoder.file).stat().st_size
    return sum(f.stat().st_size for f in Path(encoder.source).glob("*.safetensors"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="dense model (default: all-MiniLM-L6-v2)")
    parser.add_argument("--pruned", required=True, nargs="+",
                        help="pruned model directories (written by `sparsecse shrink`, or trained from one)")
    parser.add_argument("--data-dir", default=None, help="SentEval data (default: $SPARSECSE_DATA / cache)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--tasks", default="sts", help="evaluation tasks for the quality columns")
    parser.add_argument("--work", default=None, help="keep the exported directories here (default: a temp dir)")
    parser.add_argument("--json", dest="json_out", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    names = [Path(p).name for p in args.pruned]
    if len(set(names)) != len(names) or "dense" in names:
        parser.error("the --pruned directories need distinct names other than 'dense'")
    work = Path(args.work or tempfile.mkdtemp(prefix="deploy_speed."))
    models = {}
    for name, source in (("dense", args.model), *zip(names, args.pruned)):
        torch_encoder = SentenceEncoder.load(source, device="cpu")
        out = work / f"{name}-onnx"
        if not out.exists():
            export(source, out, quantize="int8")
        models[f"{name} torch fp32"] = torch_encoder
        models[f"{name} ONNX fp32"] = OnnxEncoder.load(out, file=FP32_FILE, threads=args.threads)
        models[f"{name} ONNX int8"] = OnnxEncoder.load(out, file=INT8_FILE, threads=args.threads)

    # Quality first, on one thread (the scores do not depend on it, and one thread suffers least on a
    # busy machine), printed as each model finishes.
    quality = {}
    torch.set_num_threads(1)
    for name, encoder in models.items():
        if isinstance(encoder, OnnxEncoder):
            encoder = OnnxEncoder.load(encoder.source, file=encoder.file, threads=1)
        result = evaluate(model=encoder, tasks=args.tasks, data_dir=args.data_dir, batch_size=args.batch_size,
                          align_uniform=False, show_progress=True)
        quality[name] = result
        print(f"{name}: STS avg {result.get('avg_sts', float('nan')):.2f}  {json.dumps(result['scores'])}",
              file=sys.stderr, flush=True)
    torch.set_num_threads(args.threads)

    unique, _ = stsb_test_sentences(args.data_dir, models["dense torch fp32"])
    print(f"{len(unique)} distinct STS-B test sentences; {args.threads} threads; per batch of {args.batch_size} "
          f"the best of {args.repeats} interleaved runs; pruned models {', '.join(args.pruned)}", file=sys.stderr)
    best_wall, best_cpu = interleaved_best_times(models, unique, args.batch_size, args.repeats)

    rows = []
    for name, encoder in models.items():
        result = quality[name]
        rows.append({"model": name, "weights_bytes": weights_bytes(encoder), "seconds": sum(best_wall[name]),
                     "cpu_seconds": sum(best_cpu[name]), "scores": result["scores"],
                     "avg_sts": result.get("avg_sts")})
    reference = rows[0]
    for row in rows:
        row["sentences_per_second"] = len(unique) / row["seconds"]
        row["speedup"] = reference["seconds"] / row["seconds"]
        row["cpu_speedup"] = reference["cpu_seconds"] / row["cpu_seconds"]

    width = max(len(row["model"]) for row in rows)
    print(f"{'model':<{width}} {'weights':>9} {'sent/s':>8} {'speed-up':>9} {'CPU-time':>9} {'STS-B':>6} "
          f"{'STS avg':>8}")
    for row in rows:
        print(f"{row['model']:<{width}} {row['weights_bytes'] / 1e6:>7.1f}MB {row['sentences_per_second']:>8.0f} "
              f"{row['speedup']:>8.2f}x {row['cpu_speedup']:>8.2f}x {row['scores'].get('STSBenchmark', 0):>6.2f} "
              f"{row['avg_sts'] or 0:>8.2f}")
    met = False
    for name in names:
        final = next(row for row in rows if row["model"] == f"{name} ONNX int8")
        speed_ok = final["speedup"] >= SPEEDUP_TARGET
        change = final["avg_sts"] - reference["avg_sts"]
        quality_ok = change >= -STS_DROP_TARGET
        met = met or (speed_ok and quality_ok)
        print(f"{name} ONNX int8: {final['speedup']:.2f}x the reference (target >= {SPEEDUP_TARGET:.0f}x: "
              f"{'ok' if speed_ok else 'MISSED'}), STS avg {change:+.2f} against dense "
              f"(target >= -{STS_DROP_TARGET:.0f}: {'ok' if quality_ok else 'MISSED'})")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"threads": args.threads, "repeats": args.repeats, "batch_size": args.batch_size,
                       "pruned": args.pruned, "sentences": len(unique), "rows": rows}, f, indent=2)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
