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

Speed: every row's model encodes the distinct STS-B test sentences in the same process, interleaved
batch by batch, best of ``--repeats`` per batch, on ``--threads`` threads
(``benchmarks/shrink_speed.py``'s timing). Evaluation results, and the models this benchmark makes,
are cached under ``--work`` (one JSON per row), so a stopped run resumes; timing is always redone.

    python benchmarks/frontier.py --work runs/frontier --model "L6 f0.5=runs/x/f0.5" [--layer-drop 0.5]
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
from shrink_speed import interleaved_best_times, stsb_test_sentences  # noqa: E402
from targets import (add_target_options, pairs_record, parse_target_specs, target_record,  # noqa: E402
                     unknown_target_row, write_targets)

SHARED = Path(__file__).resolve().parents[2] / "shared"  # ../shared beside the repository, wherever this runs from
DEFAULT_L3 = str(SHARED / "models" / "paraphrase-MiniLM-L3-v2")
REPLICATES = 1000


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

    r = sparsecse.evaluate(model=model_dir, tasks="sts", data_dir=data_dir, align_uniform=False, bootstrap=REPLICATES,
                           keep_pairs=True)
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
    """A model2vec model behind the encode(sentences, batch_size=) call the timing uses."""

    def __init__(self, path: str):
        from model2vec import StaticModel

        self.model = StaticModel.from_pretrained(path)

    def encode(self, sentences, batch_size: int = 128):
        return self.model.encode(list(sentences), batch_size=batch_size, use_multiprocessing=False)


# ---------------------------------------------------------------------------- the run
def build_rows(args, work: Path) -> list[Row]:
    """The rows asked for, their model directories checked; nothing is written (see :func:`save_dense`)."""
    rows = [Row("all-MiniLM-L6-v2 dense", "dense", str(work / "dense-l6"))]
    if args.l3:
        rows.append(Row("paraphrase-MiniLM-L3-v2 dense", "dense", args.l3))
    rows += [Row(label, "sparsecse", path) for label, path in parse_model_specs(args.model)]
    for f in [float(x) for x in args.layer_drop.split(",") if x.strip()]:
        rows.append(Row(f"layers {f:g} + distill", "layers", None, {"budget": f}))
    if not args.no_model2vec:
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
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", default="runs/frontier", help="cached rows and made models (resumable)")
    parser.add_argument("--out", default=None, help="prefix of the .md, .csv and .png outputs (default: WORK/frontier)")
    add_target_options(parser, "2x=L6 f0.45:paraphrase-MiniLM-L3-v2 dense")
    args = parser.parse_args(argv)
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
    if any(r.kind == "layers" for r in rows):
        fill_layers_rows(rows, args, work)
    teacher = SentenceEncoder.load(rows[0].model_dir, device="cpu")
    for row in rows:
        made = row.record or {}
        if row.kind == "model2vec":
            row.model_dir, seconds = make_model2vec(work, rows[0].model_dir, args.pca_dims)
            made = {"method_s": seconds}
        print(f"-- {row.label}", file=sys.stderr, flush=True)
        evaluate = (lambda d=row.model_dir: evaluate_static(StaticEncoder(d), args.data_dir)) \
            if row.kind == "model2vec" else (lambda d=row.model_dir: evaluate_encoder(d, args.data_dir))
        row.record = {**cached_record(work, row.label, weights_key(row.model_dir), evaluate), **made}

    # speed: all rows in this process, interleaved
    unique, _ = stsb_test_sentences(args.data_dir, teacher)
    models = {}
    for i, row in enumerate(rows):
        models[i] = StaticEncoder(row.model_dir) if row.kind == "model2vec" else \
            SentenceEncoder.load(row.model_dir, device="cpu")
        if row.kind != "model2vec":
            models[i].model.eval()
    wall, cpu = interleaved_best_times(models, unique, args.batch_size, args.repeats)
    speedups = [sum(wall[0]) / sum(wall[i]) for i in range(len(rows))]
    cpu_speedups = [sum(cpu[0]) / sum(cpu[i]) for i in range(len(rows))]
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
            "speedup": speedups[i], "cpu_speedup": cpu_speedups[i], "parameters": int(params),
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

    out = Path(args.out) if args.out else work / "frontier"
    header = (f"{len(unique)} distinct STS-B test sentences, {args.threads} threads, torch fp32, best of "
              f"{args.repeats} interleaved runs per batch of {args.batch_size}; speed-up over all-MiniLM-L6-v2 "
              f"(wall / process CPU); STS avg of 7 tasks with bootstrap 95% interval ({REPLICATES} replicates); "
              "Δ = this row minus the row of nearest speed, paired bootstrap 95% interval.")
    lines = [header, "",
             "| model | STS avg [95% CI] | Δ vs nearest speed [95% CI] | speed-up | params | layer FLOPs | method time |",
             "|---|---|---|---|---|---|---|"]
    for r in sorted(table, key=lambda r: r["speedup"]):
        diff = "—" if r["vs"] is None else f"{r['diff']:+.2f} [{r['diff_lo']:+.2f}, {r['diff_hi']:+.2f}] vs {r['vs']}"
        method = "—" if r["method_s"] is None else f"{r['method_s'] / 60:.1f} min"
        lines.append(f"| {r['label']} | {r['avg_sts']:.2f} [{r['ci_lo']:.2f}, {r['ci_hi']:.2f}] | {diff} | "
                     f"{r['speedup']:.2f}x / {r['cpu_speedup']:.2f}x | {r['parameters'] / 1e6:.1f} M | "
                     f"{r['layer_flops']:.3f} | {method} |")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    columns = ["label", "kind", "model_dir", "avg_sts", "ci_lo", "ci_hi", "vs", "diff", "diff_lo", "diff_hi", "speedup",
               "cpu_speedup", "parameters", "layer_flops", "method_s"]
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(table)
    plot(table, out.with_suffix(".png"), args.threads)
    print("\n".join(lines))
    print(f"wrote {out.with_suffix('.md')}, .csv, .png", file=sys.stderr)
    return 0


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
