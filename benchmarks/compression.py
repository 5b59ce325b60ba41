"""Compression that keeps quality: five ways to make all-MiniLM-L6-v2 smaller, side by side in one run.

At each kept-FLOPs budget (fractions of the transformer layers' FLOPs per token at 128 tokens):

  (a) sparsity   today's mask: one fraction of heads and of neurons (abs_grad, λ 0.5), the sparsity
                 whose kept FLOPs come closest to the budget;
  (b) budget     the budgeted mask (heads and neurons chosen jointly, Fisher criterion, λ 0.5);
  (c) +recon     (b) with retraining-free reconstruction (``shrink --reconstruct``);
  (d) +distill   (c) trained with the ``distill`` objective (MSE to the dense model's embeddings) for
                 ``--epochs`` of the corpus;
  (e) layers     sentence-transformers' recipe for a smaller model: keep evenly spaced whole layers of
                 (about) the same FLOPs, then the same distillation on the same sentences and steps.

Every model is a shrunk directory under ``--work`` (reruns reuse finished rows, so the benchmark can be
stopped and resumed) and is evaluated on the 7 STS tasks by ``sparsecse.evaluate``. Then each distinct
architecture is timed against the dense model as a target times its candidates
(:func:`sparsecse.targets.report.stsb_speedups`: the distinct STS-B test sentences, ``--rounds`` interleaved
rounds in a fresh process on ``--threads`` threads, the median of the rounds' ratios with its interval); (c) and
(d) share (b)'s architecture and its speed. Columns: STS average, its difference to dense, encode speed-up over
dense [its interval], layer-FLOPs and parameter ratios (after/before, FFN padding included), and the method's own
wall time (reconstruction or training; masks take milliseconds).

    python benchmarks/compression.py [--budgets 0.7,0.5,0.35] [--work runs/compression] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

import sparsecse  # noqa: E402
from sparsecse.modeling.encoder import SentenceEncoder  # noqa: E402
from sparsecse.modeling.flops import size_report  # noqa: E402
from sparsecse.shrinking import reconstruction_settings as settings  # noqa: E402
from sparsecse.artifacts.files import write_json  # noqa: E402
from sparsecse.shrinking.reconstruction import ReconstructionPlan  # noqa: E402
from sparsecse.shrinking.shrink import save_model_dir  # noqa: E402
from sparsecse.targets.report import stsb_speedups  # noqa: E402
from sparsecse.targets.timing import ROUNDS  # noqa: E402

ROWS = ("a", "b", "c", "d", "e")
LABELS = {"a": "(a) sparsity mask, same FLOPs", "b": "(b) budgeted mask", "c": "(c) budgeted + reconstruction",
          "d": "(d) (c) + distill", "e": "(e) evenly spaced layers + distill"}
TARGETS = {"c": 1.0, "d": 0.5}  # at kept-FLOPs 0.5: STS average at most this far below dense
SPEEDUP_TARGET = 1.9


def evenly_spaced_layers(layers: int, keep: int) -> list[int]:
    """``keep`` of ``layers`` layer indices spread evenly, centred (12 -> 4 keeps 1, 4, 7, 10 as
    sentence-transformers' layer-reduction example does)."""
    return sorted({min(layers - 1, math.floor((i + 0.5) * layers / keep)) for i in range(keep)})


def drop_layers(encoder: SentenceEncoder, keep: list[int]) -> SentenceEncoder:
    """``encoder`` with only the ``keep`` transformer layers (in place)."""
    model = encoder.model
    model.encoder.layer = torch.nn.ModuleList([model.encoder.layer[i] for i in keep])
    model.config.num_hidden_layers = len(keep)
    return encoder


def timed_row(row: str, results: dict) -> str:
    """The row whose model is timed for ``row``: (c) and (d) share (b)'s architecture (when (b) ran, else (c)'s)."""
    arch = "c" if row == "d" else row
    return "b" if arch == "c" and "b" in results else arch


def sparsity_for_flops(scores, budget: float, lam: float) -> tuple[float, object]:
    """The sparsity (0.01 steps) whose mask keeps the FLOPs fraction closest to ``budget``, and its mask."""
    best = None
    for step in range(1, 100):  # kept FLOPs fall as the sparsity grows: stop once past the budget
        try:
            mask = sparsecse.prune(scores, sparsity=step / 100, lam=lam)
        except sparsecse.SparseCSEError:  # past what keeping one head per layer allows
            break
        gap = abs(mask.manifest["kept_flops_ratio"] - budget)
        if best is None or gap < best[0]:
            best = (gap, step / 100, mask)
        if mask.manifest["kept_flops_ratio"] < budget:
            break
    return best[1], best[2]


class Bench:
    def __init__(self, args):
        self.args = args
        self.work = Path(args.work)
        self.work.mkdir(parents=True, exist_ok=True)

    def say(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def cached(self, name: str, compute) -> dict:
        """A row's record from ``work/<name>.json``, computing (and saving) it when missing."""
        path = self.work / f"{name}.json"
        if path.is_file():
            return json.loads(path.read_text())
        self.say(f"-- {name}")
        record = compute()
        write_json(path, record)
        return record

    def evaluate(self, model_dir) -> dict:
        r = sparsecse.evaluate(model=str(model_dir), config=sparsecse.EvaluationConfig(tasks="sts",
            data_dir=self.args.data_dir, align_uniform=False, show_progress=False))
        return {"avg_sts": r["avg_sts"], "scores": r["scores"]}

    def scores(self):
        path = self.work / "scores.safetensors"
        if self.args.scores:
            return sparsecse.GateScores.load(self.args.scores)
        if not path.is_file():
            sparsecse.score(self.args.model, sparsecse.ScoringConfig(data_dir=self.args.data_dir,
                                                                     show_progress=True)).save(path)
        return sparsecse.GateScores.load(path)

    def shrunk_row(self, name: str, mask, reconstruct: ReconstructionPlan | None = None) -> dict:
        def compute():
            out = self.work / name
            t0 = time.perf_counter()
            result = sparsecse.shrink(self.args.model, mask, out=out, overwrite=True, config=sparsecse.ShrinkConfig(
                reconstruct=reconstruct, show_progress=True))
            seconds = time.perf_counter() - t0
            record = {"model_dir": str(out), "method_s": seconds if reconstruct else None,
                      "mask": {k: mask.manifest.get(k) for k in ("sparsity", "budget", "criterion", "lambda",
                                                                  "kept_flops_ratio", "kept_params_ratio")}}
            if result.reconstruction:
                record["reconstruction"] = {k: result.reconstruction.get(k) for k in
                                            ("sentences", "tokens", "method", "target", "ridge", "weighting",
                                                                      "seconds")}
            return {**record, **self.evaluate(out)}
        return self.cached(name, compute)

    def distilled_row(self, name: str, start_dir: Path) -> dict:
        def compute():
            out = self.work / name
            t0 = time.perf_counter()
            sparsecse.train(str(start_dir), corpus=self.args.corpus, out=out, objective="distill",
                            objective_args={"teacher": self.args.model or "all-MiniLM-L6-v2"},
                            config=sparsecse.TrainingConfig(epochs=self.args.epochs, data_dir=self.args.data_dir,
                                overwrite=True, show_progress=True), seed=self.args.seed)
            return {"model_dir": str(out), "method_s": time.perf_counter() - t0, "start": str(start_dir),
                    **self.evaluate(out)}
        return self.cached(name, compute)

    def layers_start(self, name: str, budget: float) -> Path:
        out = self.work / name
        if not out.is_dir():
            encoder = SentenceEncoder.load(self.args.model, device="cpu")
            layers = len(encoder.model.encoder.layer)
            keep = evenly_spaced_layers(layers, max(1, round(budget * layers)))
            save_model_dir(drop_layers(encoder, keep), out, lineage={"layers_kept": keep,
                                                                    "layers_of": encoder.source})
        return out

    def run_budget(self, budget: float, scores, rows) -> dict:
        tag = f"f{budget:g}"
        results = {}
        if "a" in rows:
            sparsity, mask = sparsity_for_flops(scores, budget, 0.5)
            results["a"] = self.shrunk_row(f"{tag}-a-sparsity{sparsity:g}", mask)
        budget_mask = sparsecse.prune(scores, keep_flops=budget, lam=0.5,
                                      config=sparsecse.PruningConfig(criterion="fisher"))
        if "b" in rows:
            results["b"] = self.shrunk_row(f"{tag}-b", budget_mask)
        if rows & {"c", "d"}:
            plan = ReconstructionPlan.prepare(self.args.corpus, self.args.reconstruct_sentences,
                                              method=self.args.reconstruct_method,
                                              target=self.args.reconstruct_target,
                                              weighting=self.args.reconstruct_weighting)
            results["c"] = self.shrunk_row(f"{tag}-c", budget_mask, plan)
        if "d" in rows:
            results["d"] = self.distilled_row(f"{tag}-d", Path(results["c"]["model_dir"]))
        if "e" in rows:
            results["e"] = self.distilled_row(f"{tag}-e", self.layers_start(f"{tag}-e-start", budget))
        return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="dense model (default: all-MiniLM-L6-v2)")
    parser.add_argument("--budgets", default="0.7,0.5,0.35", help="kept-FLOPs budgets")
    parser.add_argument("--rows", default="abcde", help="which rows to compute (letters a-e)")
    parser.add_argument("--scores", default=None, help="score file (default: scored in this run, STS-B train)")
    parser.add_argument("--corpus", default="../shared/data/wiki/wiki1m_sample.txt",
                        help="sentences for reconstruction and distillation")
    parser.add_argument("--data-dir", default=None, help="SentEval data (default: $SPARSECSE_DATA / cache)")
    parser.add_argument("--reconstruct-sentences", type=int, default=settings.DEFAULT_SENTENCES)
    parser.add_argument("--reconstruct-method", default=settings.DEFAULT_METHOD, choices=settings.METHODS)
    parser.add_argument("--reconstruct-target", default=settings.DEFAULT_TARGET, choices=settings.TARGETS)
    parser.add_argument("--reconstruct-weighting", default=settings.DEFAULT_WEIGHTING, choices=settings.WEIGHTINGS)
    parser.add_argument("--epochs", type=int, default=1, help="distillation epochs over --corpus")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved timing rounds")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--work", default="runs/compression", help="models and per-row results (resumable)")
    parser.add_argument("--json", dest="json_out", default=None, help="also write the table here")
    args = parser.parse_args(argv)
    rows = set(args.rows) & set(ROWS)
    budgets = [float(b) for b in args.budgets.split(",")]
    torch.set_num_threads(args.threads)
    bench = Bench(args)
    scores = bench.scores()

    dense_dir = bench.work / "dense"
    if not dense_dir.is_dir():
        save_model_dir(SentenceEncoder.load(args.model, device="cpu"), dense_dir)
    dense = bench.cached("dense", lambda: {"model_dir": str(dense_dir), **bench.evaluate(dense_dir)})
    table = {b: bench.run_budget(b, scores, rows) for b in budgets}

    # speed: every distinct architecture against the dense model, timed as targets time
    timed = {"dense": str(dense_dir)}
    for b, results in table.items():
        for row in results:
            arch = timed_row(row, results)
            timed.setdefault(f"f{b:g}-{arch}", results[arch]["model_dir"])
    models = {key: SentenceEncoder.load(path, device="cpu") for key, path in timed.items()}
    speed, _, sentences = stsb_speedups(str(dense_dir), {k: p for k, p in timed.items() if k != "dense"},
                                        args.data_dir, args.batch_size, args.threads, args.rounds)
    dense_size = size_report(models["dense"].model)

    lines = [f"all-MiniLM-L6-v2 dense: STS avg {dense['avg_sts']:.2f}; {len(sentences)} distinct STS-B test "
             f"sentences, {args.threads} threads, batch {args.batch_size}; speed-up: the median of {args.rounds} "
             "interleaved rounds' ratios [its interval], timed as targets time",
             "| kept FLOPs | method | STS avg | Δ dense | speed-up | layer FLOPs | params | method time |",
             "|---|---|---|---|---|---|---|---|"]
    out = {"dense": dense, "budgets": {}}
    for b, results in table.items():
        for row, record in results.items():
            key = f"f{b:g}-{timed_row(row, results)}"
            size = size_report(models[key].model)
            flops = size["flops_per_token"] / dense_size["flops_per_token"]
            params = size["parameters"] / dense_size["parameters"]
            timing = speed[key]
            delta = record["avg_sts"] - dense["avg_sts"]
            method_s = record.get("method_s")
            label = LABELS[row] + (f" (sparsity {record['mask']['sparsity']:g})" if row == "a" else "")
            lines.append(f"| {b:g} | {label} | {record['avg_sts']:.2f} | {delta:+.2f} | {timing.speedup:.2f}x "
                         f"[{timing.interval.low:.2f}, {timing.interval.high:.2f}] "
                         f"| {flops:.3f} | {params:.3f} | "
                         f"{'—' if method_s is None else f'{method_s / 60:.1f} min'} |")
            out["budgets"].setdefault(f"{b:g}", {})[row] = {**record, "speedup": timing.speedup,
                                                             "speedup_ci": [timing.interval.low, timing.interval.high],
                                                             "flops_ratio": flops, "params_ratio": params}
    print("\n".join(lines))
    half = out["budgets"].get("0.5", {})
    checks = []
    for row, drop in TARGETS.items():
        if row in half:
            checks.append(f"({row}) {half[row]['avg_sts']:.2f} vs target >= {dense['avg_sts'] - drop:.2f}: "
                          f"{'met' if half[row]['avg_sts'] >= dense['avg_sts'] - drop else 'MISSED'}")
    if "c" in half and half["c"].get("method_s") is not None:
        checks.append(f"(c) reconstruction {half['c']['method_s'] / 60:.1f} min vs target < 5 min")
    if "b" in half:
        checks.append(f"speed-up at 0.5: {half['b']['speedup']:.2f}x vs target >= {SPEEDUP_TARGET}x")
    for b, results in out["budgets"].items():
        if "d" in results and "e" in results:
            checks.append(f"kept FLOPs {b}: (d) {results['d']['avg_sts']:.2f} vs (e) {results['e']['avg_sts']:.2f}: "
                          f"{'(d) above' if results['d']['avg_sts'] > results['e']['avg_sts'] else '(d) NOT above'}")
    print("\n".join(checks))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({**out, "checks": checks, "table": lines}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
