"""The frontier: STS quality against measured encode speed, for every way to get a smaller encoder.

One run, one table (markdown + CSV) and one figure (PNG): for each row, the 7-task STS average with
its bootstrap 95% interval, the paired comparison (difference and its 95% interval, pairs resampled
alike) against the row of the nearest speed, the encode speed-up over dense all-MiniLM-L6-v2 (torch
fp32), parameters, layer FLOPs per token (128 tokens) relative to dense all-MiniLM-L6-v2, and the
method's wall time where the model's manifests record it (reconstruction or iterative pruning, plus the
model's own training).

Rows:

- ``L6 dense``: all-MiniLM-L6-v2 (the default model);
- ``L3 dense``: paraphrase-MiniLM-L3-v2 (``--l3``);
- ``--model LABEL=DIR`` (repeatable): sparsecse models (shrunk, reconstructed, distilled...);
- ``layers F + distill`` for every F in ``--layer-drop``: sentence-transformers' layer dropping (evenly
  spaced whole layers of all-MiniLM-L6-v2) + the ``distill`` objective on ``--corpus`` for ``--epochs``
  (``benchmarks/compression.py``'s row (e), same code);
- ``model2vec``: a static-embedding model distilled from all-MiniLM-L6-v2 with ``model2vec.distill``
  (offline, on the local model directory; needs the ``bench`` extra:
  ``model2vec`` and ``skeletoken``, not ``model2vec[distill]``, which downgrades transformers). ``--no-model2vec`` leaves it out.

Transfer (``--transfer``, on by default): every row is also scored on the 7 SentEval transfer tasks
(accuracy x 100; SentEval's fast settings, 5 folds, as the recipes' cards use them; ``--transfer-full``: the
papers' 10 folds), with its interval (the spread of the folds of MR, CR, SUBJ and MPQA; a bootstrap over the
test items of SST2, TREC and MRPC), the paired difference against paraphrase-MiniLM-L3-v2 and against dense
all-MiniLM-L6-v2 on every task (same folds, same test items:
:func:`sparsecse.evaluation.transfer_intervals.paired_transfer_difference`), and the tasks where the row loses
to either: a test-set task whose paired 95% interval lies below 0, or a cross-validated task where every fold
is below. ``--transfer-only`` scores only that, on existing model directories (the ``--model`` rows, dense L6
and L3; no layer-dropping or model2vec row is made, nothing is timed), into ``OUT-transfer.md``/``.json``.

Speed: every row's model is timed against dense all-MiniLM-L6-v2 as a target times its candidates and a card
its speed-up (:func:`sparsecse.targets.report.stsb_speedups`: the distinct STS-B test sentences, ``--rounds``
interleaved rounds in a fresh process on ``--threads`` threads, the figure the median of the rounds' ratios with
its interval; the model2vec row, an encoder only this benchmark loads, the same way in this process). Evaluation
results, and the models this benchmark makes, are cached under ``--work`` (one JSON per row), so a stopped run
resumes; timing is always redone.

    python benchmarks/frontier.py --work runs/frontier --model "L6 f0.5=runs/x/f0.5" [--layer-drop 0.5]
    python benchmarks/frontier.py --transfer-only --work runs/frontier --model "frontier-2x=runs/f2x/model"
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helpers beside this file
from sparsecse.targets.timing import ROUNDS  # noqa: E402
from targets import (add_target_options, pairs_record, parse_target_specs, target_record,  # noqa: E402
                     unknown_target_row, write_targets)

SHARED = Path(__file__).resolve().parents[2] / "shared"  # ../shared beside the repository, wherever this runs from
DEFAULT_L3 = str(SHARED / "models" / "paraphrase-MiniLM-L3-v2")
REPLICATES = 1000
TRANSFER = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
DENSE_LABEL, L3_LABEL = "all-MiniLM-L6-v2 dense", "paraphrase-MiniLM-L3-v2 dense"


# ---------------------------------------------------------------------------- pure pieces (tested)
@dataclass
class Row:
    label: str
    kind: str  # dense, sparsecse, layers, model2vec
    model_dir: str | None = None
    record: dict | None = None  # cached evaluation (+ what made the model)


def parse_model_specs(specs: list[str]) -> list[tuple[str, str]]:
    """``LABEL=DIR`` strings as (label, dir); a label appears once."""
    out, seen = [], set()
    for spec in specs:
        label, sep, path = spec.partition("=")
        if not sep or not label.strip() or not path.strip():
            raise SystemExit(f"--model takes LABEL=DIR, not {spec!r}")
        if label in seen:
            raise SystemExit(f"The label {label!r} is given twice.")
        seen.add(label)
        out.append((label.strip(), path.strip()))
    return out


def slug(label: str) -> str:
    """A file name for a row label: 'L6 f0.5 (distill)' -> 'L6-f0.5-distill'."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", label).strip("-") or "row"


def cached_record(work: Path, label: str, key: dict, compute: Callable[[], dict]) -> dict:
    """The record of ``label`` from ``work/rows/<slug>.json`` when it was made from the same ``key``
    (e.g. the model directory and its weights' mtime), else ``compute()``d and saved atomically."""
    path = work / "rows" / f"{slug(label)}.json"
    if path.is_file():
        record = json.loads(path.read_text())
        if record.get("key") == key:
            return record
    record = {**compute(), "key": key, "label": label}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(path)
    return record


def nearest_speed(speedups: list[float], i: int) -> int | None:
    """Index of the row whose speed-up is nearest row ``i``'s (on a log scale; ties: the earlier row)."""
    best = None
    for j, s in enumerate(speedups):
        if j == i:
            continue
        gap = abs(np.log(s) - np.log(speedups[i]))
        if best is None or gap < best[0]:
            best = (gap, j)
    return None if best is None else best[1]


def method_seconds(model_dir: str | None) -> float | None:
    """The method's wall time a sparsecse model directory records: its pruning (iterative pruning or
    reconstruction) plus its own training (``train``'s manifest). A teacher's own training is not counted;
    a recipe's model counts every stage of the recipe (not its final evaluation)."""
    if not model_dir:
        return None
    recipe = _recipe_seconds(Path(model_dir))
    if recipe is not None:
        return recipe
    parts = [_pruning_seconds(Path(model_dir)), _training_seconds(Path(model_dir))]
    return None if all(p is None for p in parts) else sum(p for p in parts if p is not None)


def _pruning_seconds(model_dir: Path) -> float | None:
    from sparsecse.artifacts.model_dir import read_model_config

    manifest = read_model_config(model_dir).get("manifest") or {}
    if manifest.get("method_seconds") is not None:
        return float(manifest["method_seconds"])
    rec = manifest.get("reconstruction") or {}
    return float(rec["seconds"]) if rec.get("seconds") is not None else None


def _manifest(model_dir: Path) -> dict:
    path = model_dir / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _recipe_seconds(model_dir: Path) -> float | None:
    """``sparsecse compress --recipe``'s model: the wall time of its stages, the final evaluation left out."""
    manifest = _manifest(model_dir)
    if manifest.get("kind") != "recipe_model" or not isinstance(manifest.get("seconds"), dict):
        return None
    return float(sum(v for k, v in manifest["seconds"].items() if k != "evaluation"))


def _training_seconds(model_dir: Path) -> float | None:
    """A trained model's wall time; runs from before it was recorded give their steps' time only."""
    manifest = _manifest(model_dir)
    if manifest.get("kind") not in ("train_model", "rewind_model"):
        return None
    result = manifest.get("result") or {}
    if result.get("seconds") is not None:
        return float(result["seconds"])
    steps, rate = result.get("steps"), result.get("steps_per_second")
    return steps / rate if steps and rate else None


# ---------------------------------------------------------------------------- models and evaluation
def weights_key(model_dir: str) -> dict:
    files = sorted(Path(model_dir).glob("*.safetensors"))
    return {"model_dir": str(Path(model_dir).resolve()),
            "weights_mtime": max((f.stat().st_mtime for f in files), default=None)}


def evaluate_encoder(model_dir: str, data_dir) -> dict:
    import sparsecse

    r = sparsecse.evaluate(model=model_dir, config=sparsecse.EvaluationConfig(tasks="sts", data_dir=data_dir,
        align_uniform=False, bootstrap=REPLICATES, keep_pairs=True))
    return {"avg_sts": r["avg_sts"], "scores": r["scores"], "ci": r["bootstrap"]["avg"],
            "pairs": pairs_record(r["pairs"])}


def evaluate_static(model, data_dir) -> dict:
    """The same STS protocol as sparsecse.evaluate for any ``model.encode``-able object."""
    from sparsecse.data.paths import resolve_data_dir
    from sparsecse.evaluation.bootstrap import score_intervals
    from sparsecse.evaluation.runner import task_pairs
    from sparsecse.evaluation.sts import evaluate_sts, load_sts_task
    from sparsecse.evaluation.tasks import STS_TASKS

    root = resolve_data_dir(data_dir)
    data = {t: load_sts_task(root, t, "test") for t in STS_TASKS}
    scores, details = evaluate_sts(data, lambda s: np.asarray(model.encode(list(s))), "all")
    pairs = {t: d["pairs"] for t, d in details.items()}
    ci = score_intervals({t: p["similarity"] for t, p in pairs.items()}, task_pairs(pairs), REPLICATES)["avg"]
    return {"avg_sts": float(np.mean(list(scores.values()))), "scores": scores, "ci": ci,
            "pairs": pairs_record(pairs)}


def evaluate_transfer_row(encoder, data_dir, fasttest: bool, seed: int) -> dict:
    """The 7 transfer tasks for any encoder (``encode(sentences, batch_size=..., **)`` and ``dim``), with the
    per-fold and per-item results the paired differences need."""
    from sparsecse.data.paths import resolve_data_dir
    from sparsecse.evaluation.embedding import EmbeddingTable
    from sparsecse.evaluation.transfer import evaluate_transfer, load_transfer_task, transfer_sentences

    root = resolve_data_dir(data_dir)
    data = {t: load_transfer_task(root, t) for t in TRANSFER}
    table = EmbeddingTable(encoder)
    table.add([s for d in data.values() for s in transfer_sentences(d)])
    scores, details = evaluate_transfer(data, table, fasttest=fasttest, seed=seed, replicates=REPLICATES)
    keep = ("acc", "ci", "fold_std", "fold_range", "fold_acc", "correct", "f1")
    return {"transfer": {t: {k: v for k, v in details[t].items() if k in keep} for t in TRANSFER},
            "avg_transfer": float(np.mean(list(scores.values()))), "fasttest": fasttest, "seed": seed}


def loses(paired: dict) -> bool:
    """A paired difference (B - A) that says B loses: a test-set task's 95% interval below 0, or a
    cross-validated task whose every fold is below."""
    if "ci" in paired:
        return paired["ci"][1] < 0
    agree, folds = (int(x) for x in paired["folds_agree"].split("/"))
    return paired["diff"] < 0 and agree == folds


def transfer_rows(records: dict[str, dict], seed: int) -> list[dict]:
    """Per row label: its transfer figures, the paired differences against L3 and dense L6 (where those rows
    ran) and the tasks it loses on to each."""
    from sparsecse.evaluation.transfer_intervals import paired_transfer_difference

    out = []
    for label, rec in records.items():
        row = {"label": label, "transfer": rec["transfer"], "avg_transfer": rec["avg_transfer"]}
        for key, other in (("l3", L3_LABEL), ("dense", DENSE_LABEL)):
            if other in records and other != label:
                paired = paired_transfer_difference(records[other]["transfer"], rec["transfer"], REPLICATES, seed)
                row[f"vs_{key}"] = paired
                row[f"avg_diff_{key}"] = rec["avg_transfer"] - records[other]["avg_transfer"]
                row[f"loses_to_{key}"] = [t for t in TRANSFER if loses(paired[t])]
        out.append(row)
    return out


def transfer_markdown(rows: list[dict], fasttest: bool) -> list[str]:
    """The transfer table: accuracy with its interval per task, the average, the paired average difference to
    L3, and the tasks lost to L3 or dense L6; then the per-task paired differences to L3."""
    def cell(d):
        return f"{d['acc']:.2f} [{d['ci'][0]:.1f}, {d['ci'][1]:.1f}]" if "ci" in d else \
            f"{d['acc']:.2f} ± {d['fold_std']:.2f}"

    def diff(d):
        return f"{d['diff']:+.2f} [{d['ci'][0]:+.1f}, {d['ci'][1]:+.1f}]" if "ci" in d else \
            f"{d['diff']:+.2f} ({d['folds_agree']})"

    folds = 5 if fasttest else 10
    lines = [f"SentEval transfer tasks, accuracy x 100 ({'fast settings, ' if fasttest else ''}{folds} folds): MR, CR, "
             "SUBJ, MPQA ± the spread of the folds; SST2, TREC, MRPC a 95% bootstrap interval over the test items. "
             "Loses: a paired difference whose 95% interval lies below 0 (test-set tasks) or whose every fold is "
             "below (cross-validated tasks).", "",
             "| model | " + " | ".join(TRANSFER) + " | avg | Δ avg vs L3 | loses to L3 on | loses to dense L6 on |",
             "|---" * (len(TRANSFER) + 5) + "|"]
    for r in rows:
        vs = f"{r['avg_diff_l3']:+.2f}" if "avg_diff_l3" in r else "—"
        lost = [", ".join(r[k]) or "none" if k in r else "—" for k in ("loses_to_l3", "loses_to_dense")]
        lines.append(f"| {r['label']} | " + " | ".join(cell(r["transfer"][t]) for t in TRANSFER)
                     + f" | {r['avg_transfer']:.2f} | {vs} | {lost[0]} | {lost[1]} |")
    lines += ["", "Paired differences to paraphrase-MiniLM-L3-v2 (this row minus L3; test-set tasks: 95% interval; "
              "cross-validated tasks: how many folds agree with the sign):", "",
              "| model | " + " | ".join(TRANSFER) + " |", "|---" * (len(TRANSFER) + 1) + "|"]
    lines += [f"| {r['label']} | " + " | ".join(diff(r["vs_l3"][t]) for t in TRANSFER) + " |" for r in rows if "vs_l3" in r]
    return lines


def _plain_transfer(rows: list[dict]) -> list[dict]:
    """The rows without the per-fold and per-item lists (the cached row files keep those)."""
    drop = ("fold_acc", "correct")
    return [{**r, "transfer": {t: {k: v for k, v in d.items() if k not in drop} for t, d in r["transfer"].items()}}
            for r in rows]


def run_transfer(rows: list[Row], args, work: Path, out: Path) -> list[dict]:
    """Score every row on the transfer tasks (cached per row and setting), write ``OUT-transfer.md``/``.json``."""
    from sparsecse.modeling.encoder import SentenceEncoder

    fasttest = not args.transfer_full
    records = {}
    for row in rows:
        print(f"-- {row.label}: transfer tasks", file=sys.stderr, flush=True)
        load = (lambda d=row.model_dir: StaticEncoder(d)) if row.kind == "model2vec" else \
            (lambda d=row.model_dir: SentenceEncoder.load(d, device="cpu"))
        key = {**weights_key(row.model_dir), "fasttest": fasttest, "seed": args.seed}
        records[row.label] = cached_record(work, f"{row.label} transfer", key,
                                           lambda: evaluate_transfer_row(load(), args.data_dir, fasttest, args.seed))
    table = transfer_rows(records, args.seed)
    lines = transfer_markdown(table, fasttest)
    path = out.parent / f"{out.name}-transfer.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    path.with_suffix(".json").write_text(json.dumps({"fasttest": fasttest, "seed": args.seed,
                                                     "rows": _plain_transfer(table)}, indent=1) + "\n")
    print("\n".join(lines))
    print(f"wrote {path} and .json", file=sys.stderr)
    return table


def make_model2vec(work: Path, teacher_dir: str, pca_dims: int) -> tuple[str, float]:
    """Distil (once) a static model from ``teacher_dir`` into ``work/model2vec``; (dir, seconds)."""
    out = work / "model2vec"
    stamp = out / "distill_seconds.txt"
    if not stamp.is_file():
        try:
            from model2vec.distill import distill
        except ImportError as exc:
            raise SystemExit(f"model2vec row: {exc} (pip install 'model2vec[distill]', or pass --no-model2vec)")
        t0 = time.perf_counter()
        distill(model_name=teacher_dir, pca_dims=pca_dims, device="cpu").save_pretrained(str(out))
        stamp.write_text(f"{time.perf_counter() - t0:.3f}\n")
    return str(out), float(stamp.read_text())


class StaticEncoder:
    """A model2vec model behind the encode(sentences, batch_size=) call the timing and the transfer tasks use."""

    def __init__(self, path: str):
        from model2vec import StaticModel

        self.model = StaticModel.from_pretrained(path)
        self.dim = int(self.model.embedding.shape[1])

    def encode(self, sentences, batch_size: int | None = 128, **_):
        return self.model.encode(list(sentences), batch_size=batch_size or 128, use_multiprocessing=False)


# ---------------------------------------------------------------------------- the run
def build_rows(args, work: Path) -> list[Row]:
    """The rows asked for, their model directories checked; nothing is written (see :func:`save_dense`)."""
    rows = [Row(DENSE_LABEL, "dense", str(work / "dense-l6"))]
    if args.l3:
        rows.append(Row(L3_LABEL, "dense", args.l3))
    rows += [Row(label, "sparsecse", path) for label, path in parse_model_specs(args.model)]
    for f in [float(x) for x in args.layer_drop.split(",") if x.strip()] if not args.transfer_only else []:
        rows.append(Row(f"layers {f:g} + distill", "layers", None, {"budget": f}))
    if not args.no_model2vec and not args.transfer_only:
        rows.append(Row("model2vec (static, from L6)", "model2vec"))
    for row in rows[1:]:
        if row.model_dir and not Path(row.model_dir).is_dir():
            raise SystemExit(f"{row.label}: {row.model_dir} is not a model directory.")
    return rows


def save_dense(dense_dir: Path) -> None:
    """The default model as the first row's directory (once), so every row loads the same way."""
    from sparsecse.modeling.encoder import SentenceEncoder
    from sparsecse.shrinking.shrink import save_model_dir

    if not dense_dir.is_dir():
        save_model_dir(SentenceEncoder.load(None, device="cpu"), dense_dir)


def fill_layers_rows(rows: list[Row], args, work: Path) -> None:
    """Row (e) of benchmarks/compression.py: evenly spaced layers, then the same distillation."""
    from compression import Bench

    bench_args = argparse.Namespace(model=None, corpus=args.corpus, data_dir=args.data_dir, epochs=args.epochs,
                                    seed=args.seed)
    bench = Bench(argparse.Namespace(**vars(bench_args), work=str(work / "layers")))
    for row in rows:
        if row.kind == "layers":
            f = row.record["budget"]
            record = bench.distilled_row(f"f{f:g}-e", bench.layers_start(f"f{f:g}-e-start", f))
            row.model_dir = record["model_dir"]
            row.record = {"method_s": record["method_s"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", default=[], metavar="LABEL=DIR",
                        help="a sparsecse model row (repeatable)")
    parser.add_argument("--l3", default=DEFAULT_L3, help="paraphrase-MiniLM-L3-v2 directory ('' to leave out)")
    parser.add_argument("--layer-drop", default="0.5", help="kept fractions of layers for the layer-dropping "
                        "+ distillation rows ('' for none)")
    parser.add_argument("--corpus", default=str(SHARED / "data" / "wiki" / "wiki1m_sample.txt"), help="distillation sentences")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--no-model2vec", action="store_true", help="leave out the model2vec row")
    parser.add_argument("--pca-dims", type=int, default=256, help="model2vec's PCA dimensions")
    parser.add_argument("--data-dir", default=None, help="SentEval data (default: $SPARSECSE_DATA / cache)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved timing rounds")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", default="runs/frontier", help="cached rows and made models (resumable)")
    parser.add_argument("--out", default=None, help="prefix of the .md, .csv and .png outputs (default: WORK/frontier)")
    parser.add_argument("--no-transfer", action="store_true", help="leave out the 7 SentEval transfer tasks")
    parser.add_argument("--transfer-only", action="store_true",
                        help="only the transfer tasks, on existing model directories: the --model rows, dense L6 and "
                             "--l3 (no layer-dropping or model2vec row is made, nothing is timed); writes "
                             "OUT-transfer.md and .json")
    parser.add_argument("--transfer-full", action="store_true",
                        help="the transfer tasks with the papers' 10 folds (default: SentEval's fast settings, 5 "
                             "folds, as the recipes' model cards use them)")
    parser.add_argument("--store", default=None, metavar="DIR",
                        help="also write the table as one entry of this results store (docs/results/store; "
                             "`make figures` puts it into the docs)")
    parser.add_argument("--store-id", default=None, metavar="ID", help="the entry's id (default: frontier.MACHINE)")
    add_target_options(parser, "2x=L6 f0.45:paraphrase-MiniLM-L3-v2 dense")
    args = parser.parse_args(argv)
    if args.transfer_only and args.no_transfer:
        parser.error("--transfer-only and --no-transfer leave nothing to do.")
    targets = parse_target_specs(args.target)

    import torch

    from sparsecse.modeling.encoder import SentenceEncoder
    from sparsecse.evaluation.bootstrap import paired_comparison
    from sparsecse.evaluation.runner import task_pairs
    from sparsecse.modeling.flops import count_parameters, flops_per_token

    torch.set_num_threads(args.threads)
    work = Path(args.work)
    rows = build_rows(args, work)
    unknown = unknown_target_row(targets, {r.label for r in rows})
    if unknown:
        parser.error(unknown)
    work.mkdir(parents=True, exist_ok=True)  # only once every input is checked
    save_dense(Path(rows[0].model_dir))
    out = Path(args.out) if args.out else work / "frontier"
    if args.transfer_only:
        run_transfer(rows, args, work, out)
        return 0
    if any(r.kind == "layers" for r in rows):
        fill_layers_rows(rows, args, work)
    for row in rows:
        made = row.record or {}
        if row.kind == "model2vec":
            row.model_dir, seconds = make_model2vec(work, rows[0].model_dir, args.pca_dims)
            made = {"method_s": seconds}
        print(f"-- {row.label}", file=sys.stderr, flush=True)
        evaluate = (lambda d=row.model_dir: evaluate_static(StaticEncoder(d), args.data_dir)) \
            if row.kind == "model2vec" else (lambda d=row.model_dir: evaluate_encoder(d, args.data_dir))
        row.record = {**cached_record(work, row.label, weights_key(row.model_dir), evaluate), **made}

    models = {i: StaticEncoder(row.model_dir) if row.kind == "model2vec" else
              SentenceEncoder.load(row.model_dir, device="cpu") for i, row in enumerate(rows)}
    timings, sentences = time_rows(rows, models, args)
    speedups = [timings[i].speedup if i in timings else 1.0 for i in range(len(rows))]
    dense_flops = flops_per_token(models[0], 128)

    pairs = task_pairs(rows[0].record["pairs"])
    table = []
    for i, row in enumerate(rows):
        rec = row.record
        j = nearest_speed(speedups, i)
        cmp = None
        if j is not None:
            other = rows[j].record
            c = paired_comparison({t: p["similarity"] for t, p in other["pairs"].items()},
                                  {t: p["similarity"] for t, p in rec["pairs"].items()}, pairs, other["scores"],
                                  rec["scores"], REPLICATES, args.seed, unpaired=False)["avg"]
            cmp = {"against": rows[j].label, "diff": c["diff"], "ci": c["ci"], "p": c["p"]}
        static = row.kind == "model2vec"
        params = sum(np.prod(w.shape) for w in [models[i].model.embedding]) if static else \
            count_parameters(models[i])
        table.append({
            "label": row.label, "kind": row.kind, "model_dir": row.model_dir,
            "avg_sts": rec["avg_sts"], "ci_lo": rec["ci"][0], "ci_hi": rec["ci"][1],
            "vs": cmp["against"] if cmp else None, "diff": cmp["diff"] if cmp else None,
            "diff_lo": cmp["ci"][0] if cmp else None, "diff_hi": cmp["ci"][1] if cmp else None,
            "speedup": speedups[i], "speedup_lo": timings[i].interval.low if i in timings else 1.0,
            "speedup_hi": timings[i].interval.high if i in timings else 1.0, "parameters": int(params),
            "layer_flops": 0.0 if static else flops_per_token(models[i], 128) / dense_flops,
            "method_s": rec.get("method_s") if rec.get("method_s") is not None else method_seconds(row.model_dir),
            "scores": rec["scores"]})

    if targets:
        by_label = {r["label"]: i for i, r in enumerate(table)}
        records = []
        for name, label, versus in targets:  # every label was checked before the evaluations
            i, j = by_label[label], by_label[versus]
            records.append(target_record(name, {**rows[i].record, "label": label, "model_dir": table[i]["model_dir"]},
                                         {**rows[j].record, "label": versus, "model_dir": table[j]["model_dir"]},
                                         engine="torch fp32", speedup=speedups[i], replicates=REPLICATES,
                                         seed=args.seed, measured_by="benchmarks/frontier.py"))
        print(f"wrote {write_targets(records, Path(args.targets_json))}", file=sys.stderr)

    header = (f"{len(sentences)} distinct STS-B test sentences, {args.threads} threads, torch fp32, batch "
              f"{args.batch_size}; speed-up over all-MiniLM-L6-v2: the median of {args.rounds} interleaved rounds' "
              f"ratios [its interval], timed as targets time; STS avg of 7 tasks with bootstrap 95% interval ({REPLICATES} replicates); "
              "Δ = this row minus the row of nearest speed, paired bootstrap 95% interval.")
    lines = [header, "",
             "| model | STS avg [95% CI] | Δ vs nearest speed [95% CI] | speed-up | params | layer FLOPs | method time |",
             "|---|---|---|---|---|---|---|"]
    for r in sorted(table, key=lambda r: r["speedup"]):
        diff = "—" if r["vs"] is None else f"{r['diff']:+.2f} [{r['diff_lo']:+.2f}, {r['diff_hi']:+.2f}] vs {r['vs']}"
        method = "—" if r["method_s"] is None else f"{r['method_s'] / 60:.1f} min"
        lines.append(f"| {r['label']} | {r['avg_sts']:.2f} [{r['ci_lo']:.2f}, {r['ci_hi']:.2f}] | {diff} | "
                     f"{r['speedup']:.2f}x [{r['speedup_lo']:.2f}, {r['speedup_hi']:.2f}] | "
                     f"{r['parameters'] / 1e6:.1f} M | "
                     f"{r['layer_flops']:.3f} | {method} |")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    columns = ["label", "kind", "model_dir", "avg_sts", "ci_lo", "ci_hi", "vs", "diff", "diff_lo", "diff_hi", "speedup",
               "speedup_lo", "speedup_hi", "parameters", "layer_flops", "method_s"]
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(table)
    plot(table, out.with_suffix(".png"), args.threads)
    print("\n".join(lines))
    print(f"wrote {out.with_suffix('.md')}, .csv, .png", file=sys.stderr)
    if args.store:
        print(f"wrote {store_entry(table, len(sentences), args, argv)}", file=sys.stderr)
    if not args.no_transfer:
        run_transfer(rows, args, work, out)
    return 0


def time_rows(rows: list, models: dict, args) -> tuple[dict, list[str]]:
    """Every row but the first (dense all-MiniLM-L6-v2, the 1x) timed against the first as targets time
    (:func:`~sparsecse.targets.report.stsb_speedups`): the model directories in one fresh process, the model2vec
    encoder (which only this benchmark loads) in this one. Returns (row index to its timing, the timed sentences)."""
    from sparsecse.targets.report import stsb_speedups

    on_disk = {f"row{i}": row.model_dir for i, row in enumerate(rows) if i and row.kind != "model2vec"}
    loaded = {f"row{i}": models[i] for i, row in enumerate(rows) if i and row.kind == "model2vec"}
    timings, sentences = {}, []
    for group in (on_disk, loaded):
        if group:
            timed, _, sentences = stsb_speedups(rows[0].model_dir, group, args.data_dir, args.batch_size,
                                                args.threads, args.rounds)
            timings.update({int(name[3:]): t for name, t in timed.items()})
    return timings, sentences


def store_entry(table: list[dict], sentences: int, args, argv) -> Path:
    """The table as one results-store entry: per row label, torch fp32 speed-up over all-MiniLM-L6-v2 (with its
    interval), STS average
    with its interval, the paired difference to the row of nearest speed, parameters and layer FLOPs."""
    from sparsecse.reporting.store import Entry, command_line, machine_slug, provenance, write_entry

    rows = {r["label"]: {"speedup": round(r["speedup"], 4),
                         "speedup_ci": [round(r["speedup_lo"], 4), round(r["speedup_hi"], 4)],
                         "sts_avg": round(r["avg_sts"], 4), "ci": [round(r["ci_lo"], 4), round(r["ci_hi"], 4)],
                         "versus": r["vs"], "difference": None if r["diff"] is None else round(r["diff"], 4),
                         "paired_ci": None if r["vs"] is None else [round(r["diff_lo"], 4), round(r["diff_hi"], 4)],
                         "parameters": r["parameters"], "layer_flops": round(r["layer_flops"], 4)} for r in table}
    figures = {"reference": table[0]["label"], "sentences": sentences, "rounds": args.rounds, "rows": rows}
    prov = provenance(command_line("benchmarks/frontier.py", argv), threads=args.threads,
                      batch_size=args.batch_size, engine="torch-fp32")
    return write_entry(args.store, Entry(args.store_id or f"frontier.{machine_slug()}",
                                         "benchmarks/frontier.py: torch fp32 speed and STS per model", figures, prov))


def plot(table: list[dict], path: Path, threads: int) -> None:
    """Numbered points (the legend names them); a static-embedding row far to the right gets its own panel so
    the transformer rows, which sit close together, stay readable."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"dense": "black", "sparsecse": "tab:blue", "layers": "tab:orange", "model2vec": "tab:green"}
    near = [r for r in table if r["kind"] != "model2vec"]
    far = [r for r in table if r["kind"] == "model2vec"]
    fig, axes = plt.subplots(1, 2 if far else 1, figsize=(11, 4.8), squeeze=False,
                             gridspec_kw={"width_ratios": [4, 1]} if far else None)
    handles = []
    for ax, rows in zip(axes[0], (near, far)):
        for r in rows:
            number = table.index(r) + 1
            h = ax.errorbar(r["speedup"], r["avg_sts"], yerr=[[r["avg_sts"] - r["ci_lo"]], [r["ci_hi"] - r["avg_sts"]]],
                            fmt="o", color=colors.get(r["kind"], "gray"), capsize=3, label=f"{number}: {r['label']}")
            handles.append(h)
            ax.annotate(str(number), (r["speedup"], r["avg_sts"]), textcoords="offset points", xytext=(5, 4), fontsize=8)
        ax.grid(alpha=0.3)
    axes[0][0].set_xlabel(f"encode speed-up over dense all-MiniLM-L6-v2 (torch fp32, {threads} threads)")
    axes[0][0].set_ylabel("STS average, 7 tasks (95% bootstrap CI)")
    axes[0][0].set_title("Quality against measured speed")
    if far:
        axes[0][1].set_title("static embeddings")
        axes[0][1].set_xlabel("speed-up")
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.08 + 0.025 * ((len(table) + 1) // 2), 1, 1))
    fig.savefig(path, dpi=150)
    plt.close(fig)

if __name__ == "__main__":
    raise SystemExit(main())
