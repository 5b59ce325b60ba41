"""Write the figures of the README, the guides, the results pages and the recipes' ``reached`` blocks from the
results store (docs/results/store): ``make figures`` (or ``python scripts/figures_docs.py``) rewrites every
generated block; ``--check`` only lists the blocks that differ from the store and the speed figures written
outside a block (what tests/test_figures_store.py asserts is empty).

A generated block sits between two marker lines, ``<!-- BEGIN figures: NAME -->`` and ``<!-- END figures: NAME -->``
in Markdown, ``# BEGIN figures: NAME`` and ``# END figures: NAME`` in a recipe's YAML. NAME is a key of ``BLOCKS``
(a recipe's block: ``reached``). Every speed figure names its machine (the store entry's CPU or GPU) and its shape.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sparsecse.errors import SparseCSEError  # noqa: E402
from sparsecse.reporting.store import Entry, load_store  # noqa: E402

STORE = ROOT / "docs" / "results" / "store"
BEGIN = re.compile(r"^(<!-- |# )BEGIN figures: ([\w.-]+)(?: -->| \(.*\))?$")  # YAML: "# BEGIN ... (a note)"
# the documents whose every speed figure must come from the store (history pages and model cards are records)
CHECKED = ["README.md", "docs/getting-started.md", "docs/index.md", "docs/guides/*.md", "docs/results/frontier.md",
           "docs/results/minilm.md", "docs/results/mpnet.md", "docs/results/evidence.md",
           "sparsecse/recipes/shipped/*.yaml"]
# 1.94×, 2.04x, a range 3-5x; not frontier-2x, not a shape (12 × 768)
SPEED = re.compile(r"(?<![\w.=-])\d+(?:\.\d+)?(?:\s?[-–]\s?\d+(?:\.\d+)?)?[×x](?![\w-])")
# the pages a user reads to choose and run (guides, README): no measured figure of any kind outside a block
GUIDES = ["README.md", "docs/getting-started.md", "docs/index.md", "docs/guides/*.md"]
# what else a measurement looks like there: a score or size (78.54, 22.71 M), a time (18.1 min, 73 s), a ratio
TIME_UNIT = r"\s?(?:ms|s|seconds?|min|minutes?|h|hours?)(?![\w])"
MEASURED = {"score": re.compile(r"(?<![\w.\-/+−±])[1-9]\d\.\d{1,2}(?![\w.%])(?!" + TIME_UNIT + ")"),
            "time": re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:\s?[-–]\s?\d+(?:\.\d+)?)?" + TIME_UNIT),
            "ratio": re.compile(r"(?<=ratio )\d+\.\d+")}
SHAPE = "2,552 STS-B test sentences, batch 128, best of 3 interleaved runs"
L6, L3 = "all-MiniLM-L6-v2", "paraphrase-MiniLM-L3-v2"
FRONTIER_ROWS = [(L6, "all-MiniLM-L6-v2", "download"), ("frontier-1.4x", "L6 at 0.7 of its layer FLOPs", None),
                 (L3, "paraphrase-MiniLM-L3-v2 (L3)", "download"), ("frontier-2x", "**L6 at 0.45**", None),
                 ("l3-prune-0.8", "L3 at 0.8", None), ("l3-prune-0.5", "L3 at 0.5", None),
                 ("frontier-3.5x", "L3 at 0.42, distilled", None)]
RECIPE_RUNS = {"frontier-1.4x": "recipe.frontier-1.4x.amd-epyc-avx2-only",
               "frontier-2x": "recipe.frontier-2x.amd-epyc-avx2-only",
               "frontier-3.5x": "recipe.frontier-3.5x.amd-epyc-avx2-only",
               "l3-prune-0.8": "recipe.l3-prune-0.8.amd-epyc-avx2-only",
               "l3-prune-0.5": "recipe.l3-prune-0.5.amd-epyc-avx2-only",
               "mpnet-2x": "recipe.mpnet-2x.nvidia-h100", "target": "target.t2x.intel-xeon-avx-512-vnni-amx"}
TRANSFER = "transfer.intel-xeon-avx-512-vnni-amx"


def x(value: float) -> str:
    """A speed-up as the docs print it."""
    return f"{value:.2f}×"


def pm(value: float) -> str:
    """A signed difference (a true minus sign for negatives)."""
    return f"{value:+.2f}".replace("-", "−")


def ci(pair: list[float], signed: bool = False) -> str:
    """An interval ``[lo, hi]``."""
    lo, hi = (pm(v) for v in pair) if signed else (f"{v:.2f}" for v in pair)
    return f"[{lo}, {hi}]"


def cpu(entry: Entry) -> str:
    """The machine with its threads: ``AMD EPYC (AVX2 only), 2 threads``."""
    p = entry.provenance
    return entry.machine + (f", {p['threads']} threads" if p.get("threads") else "")


def command(entry: Entry) -> str:
    """The command that made ``entry``, a model of ``$SPARSECSE_MODELS`` (``make`` sets it to ../shared/models) named
    by its name, as the user names it: ``--compare-with paraphrase-MiniLM-L3-v2``, not its path on that machine."""
    return re.sub(r"(?<![\w/])(?:\.\./)+shared/models/([\w.-]+)", r"\1", entry.provenance["command"])


def where(entry: Entry) -> str:
    """What measured it, on which machine and when, for a caption."""
    p = entry.provenance
    command = p["command"].split(" --")[0].replace("cd benchmarks && python ", "benchmarks/").replace("python ", "")
    return f"`{command}` on {cpu(entry)}, {p['date']}"


# ------------------------------------------------------------------------------------------------ the blocks
def frontier_table(store: dict[str, Entry]) -> str:
    """The frontier: every recipe-made model in torch fp32 and OpenVINO int8 (one run, one CPU), with transfer."""
    run, transfer = store["frontier-engines.amd-epyc-avx2-only"], store[TRANSFER]
    lines = [f"{where(run)}; {SHAPE}; speed-up over dense L6 in torch fp32. Transfer: {where(transfer)} (rebuilt "
             "models).", "",
             "| model | made by | torch fp32 | OpenVINO int8 | transfer avg (7 tasks) | loses on transfer to L3 / to dense L6 |",
             "|---|---|---|---|---|---|"]
    for key, label, made in FRONTIER_ROWS:
        row = run.get(f"rows/{key}")
        t = transfer.figures["rows"].get(key)
        bold = "**" if key == "frontier-2x" else ""
        cells = [f"{bold}{row[e]['sts_avg']:.2f}, {x(row[e]['speedup'])}{bold}" for e in ("torch-fp32", "openvino-int8")]
        if t:
            lost = " / ".join(["—" if key == L3 else (", ".join(t["loses_to_l3"] or []) or "none"),
                               "—" if key == L6 else (", ".join(t["loses_to_dense"] or []) or "none")])
            tcells = [f"{t['transfer_avg']:.2f}", lost]
        else:
            tcells = ["—", "—"]
        lines.append(f"| {label} | {made or f'`{key}`'} | {cells[0]} | {cells[1]} | {' | '.join(tcells)} |")
    return "\n".join(lines)


def speed_by_cpu(store: dict[str, Entry]) -> str:
    """Every torch fp32 speed-up the store holds for the frontier's models: one row per model, machine and run."""
    lines = [f"torch fp32, {SHAPE}; each row one run on one machine (a run of a recipe times its model against its "
             "input model and, for frontier-2x, L3).", "",
             "| model | machine | measured by | over all-MiniLM-L6-v2 | over paraphrase-MiniLM-L3-v2 |",
             "|---|---|---|---|---|"]
    benches = [("frontier-engines.amd-epyc-avx2-only", "`benchmarks/deploy_speed.py`", "rows/{}/torch-fp32/speedup"),
               ("frontier.amd-epyc-avx2-only", "`benchmarks/frontier.py`", "rows/{}/speedup")]
    runs = [("recipe.{}.amd-epyc-avx2-only", "its recipe run"),
            ("recipe.{}.intel-xeon-avx-512-vnni-amx", "its recipe run, rebuilt")]
    for key in ("frontier-2x", L3, "frontier-3.5x"):
        for ident, how, path in benches:
            lines.append(f"| {key} | {cpu(store[ident])} | {how} | {x(store[ident].get(path.format(key)))} | — |")
        if key == L3:
            deploy = store["deploy-speed.amd-epyc-avx-512-vnni"]
            lines.append(f"| {key} | {cpu(deploy)} | `benchmarks/deploy_speed.py` | "
                         f"{x(deploy.get('rows/' + L3 + '/torch-fp32/speedup'))} | — |")
        for pattern, how in runs:
            for name in ("frontier-2x", "frontier-3.5x"):
                entry = store.get(pattern.format(name))
                if entry is None:
                    continue
                f = entry.figures
                if key == name:
                    over = (x(f["speedup"]), "—") if "speedup_over" not in f else ("—", x(f["speedup"]))
                elif key == L3 and name == "frontier-2x" and f.get("reference_speedup"):
                    over = (x(f["reference_speedup"]), "—")
                else:
                    continue
                lines.append(f"| {key} | {cpu(entry)} | {how} ({name}) | {over[0]} | {over[1]} |")
    return "\n".join(lines)


def frontier_2x_summary(store: dict[str, Entry]) -> str:
    """What frontier-2x reached against L3, per build and machine."""
    run, rebuilt = store[RECIPE_RUNS["frontier-2x"]], store["recipe.frontier-2x.intel-xeon-avx-512-vnni-amx"]
    seed1 = store["frontier-engines.amd-epyc-avx2-only"].get("rows/frontier-2x.seed-1")
    v, w = run.figures["versus"], rebuilt.figures["versus"]
    return (f"`frontier-2x` beats L3 at its speed by **{pm(v['difference'])}** {ci(v['paired_ci'], True)} (its recipe "
            f"run: {run.figures['minutes']:.0f} min from a cold start on {cpu(run)}; a second seed "
            f"{seed1['torch-fp32']['sts_avg']:.2f}, in OpenVINO int8 {seed1['openvino-int8']['sts_avg']:.2f}). Rebuilt "
            f"on {cpu(rebuilt)}: {rebuilt.figures['sts_avg']:.2f}, {pm(w['difference'])} {ci(w['paired_ci'], True)} "
            f"against L3 — and there, at {x(rebuilt.figures['speedup'])} against L3's "
            f"{x(rebuilt.figures['reference_speedup'])} (throughput at batch {rebuilt.provenance['batch_size']}), "
            f"it is {than_l3(rebuilt.figures['speedup'], rebuilt.figures['reference_speedup'])}.")


def than_l3(speedup: float, l3: float) -> str:
    """How a speed-up compares with L3's, timed side by side (within 3% of each other: as fast)."""
    if abs(speedup - l3) <= 0.03 * l3:
        return "as fast as L3, within 3%"
    return "faster than L3" if speedup > l3 else "not faster than L3"


def mpnet_summary(store: dict[str, Entry]) -> str:
    """mpnet-2x over three seeds on a GPU."""
    run = store[RECIPE_RUNS["mpnet-2x"]]
    seeds = [s for s in run.figures["runs"] if s["run"].startswith("mpnet-2x")]  # not the other settings' run
    first = seeds[0]
    return (f"On a GPU, `mpnet-2x` makes all-mpnet-base-v2 about twice as fast at its quality: "
            f"{', '.join(format(s['sts_avg'], '.2f') for s in seeds)} over three seeds (dense "
            f"{run.figures['versus']['sts_avg']:.2f}) at {', '.join(x(s['speedup']) for s in seeds)} (one "
            f"{run.provenance['gpu']}, {run.figures['minutes']:.0f} min a run; speed on its host's CPU, "
            f"{run.provenance['threads']} threads, torch fp32); only seed 0's gain "
            f"({pm(first['difference'])} {ci(first['paired_ci'], True)}) excludes 0.")


# the README's headline commands: (how the README names it, what its command holds, what it must not hold)
HEADLINES = [("`--speedup 2.0`", ["--model all-MiniLM-L6-v2", "--speedup 2.0"],
              ["--metric", "--engine", "--teacher", "--set", "--max-drop"]),
             ("`--speedup 2.0 --metric latency-p50`", ["--speedup 2.0", "--metric latency-p50"], ["--teacher"]),
             ("`--speedup 2.0 --engine openvino-int8`", ["--speedup 2.0", "--engine openvino-int8"], []),
             ("`--speedup 1.5,2,3` (its 2x)", ["--speedup 1.5,2,3", "--compare-with"], []),
             ("`--max-drop 0.3 --dev --test`", ["--max-drop 0.3", "--dev", "--test"], [])]


def best_run(store: dict[str, Entry], has: list[str], lacks: list[str]) -> Entry:
    """The best current result of a command: of the stored ``sparsecse compress`` runs whose command holds every
    option of ``has`` and none of ``lacks`` (a curve: its 2x target) and that met their target, the newest day's
    best 7-task STS average."""
    def fits(e: Entry) -> bool:
        c, f = e.provenance["command"], e.figures
        target = f.get("target") if isinstance(f.get("target"), dict) else {}
        return (c.startswith("sparsecse compress ") and all(o in c for o in has) and not any(o in c for o in lacks)
                and ("sts_avg" in f or "sts_avg_int8" in f) and target.get("met", True) is not False
                and (".speedup-" not in e.id or ".speedup-2." in e.id))
    runs = [e for e in store.values() if fits(e)]
    newest = max(e.provenance["date"] for e in runs)
    return max((e for e in runs if e.provenance["date"] == newest),
               key=lambda e: e.figures.get("sts_avg", e.figures.get("sts_avg_int8")))


def headline_runs(store: dict[str, Entry]) -> str:
    """The README's table: each headline command's best current result, with its machine and date."""
    runs = [(label, best_run(store, has, lacks)) for label, has, lacks in HEADLINES]
    machines = sorted({cpu(e) for _, e in runs})
    lines = [f"On {', '.join(machines)}, the stored run of each command that met its target with the best 7-task STS "
             "avg on its newest day (speed-up over the input model on the target's engine, batch 128; latency: p50):",
             "", "| `compress ...` | speed-up | 7-task STS avg | vs paraphrase-MiniLM-L3-v2 | date, wall |",
             "|---|---|---|---|---|"]
    for label, e in runs:
        f = e.figures
        target = f.get("target") if isinstance(f.get("target"), dict) else {}
        speed = x(target["speedup"]) if target.get("speedup") else "not timed"
        sts = (f"{f['sts_avg']:.2f}" + (f" {ci(f['ci'])}" if f.get("ci") else "") if "sts_avg" in f
               else f"{f['sts_avg_int8']:.2f} (int8)")
        versus = f.get("versus") or {}
        l3 = f"{pm(versus['difference'])} {ci(versus['paired_ci'], True)}" if versus else "—"
        wall = f", {f['minutes']:.1f} min" if f.get("minutes") else ""
        where_ = "" if len(machines) == 1 else f" ({cpu(e)})"
        lines.append(f"| {label}{where_} | {speed} | {sts} | {l3} | {e.provenance['date']}{wall} |")
    return "\n".join(lines)


def targets_answer(store: dict[str, Entry]) -> str:
    """The targets guide's first screen: what a 2x target of all-MiniLM-L6-v2 trades against paraphrase-MiniLM-L3-v2,
    from the best current runs, and what beats L3."""
    curve, latency = best_run(store, *HEADLINES[3][1:]), best_run(store, *HEADLINES[1][1:])
    teacher = store[RECIPE_RUNS["frontier-2x"]]

    def verdict(run: Entry, score: bool = True) -> str:  # L3's own score once: each machine measures it anew
        v = run.figures["versus"]
        low, high = v["paired_ci"]
        side = "level with" if low <= 0 <= high else "above" if low > 0 else "below"
        return (f"{side} L3 ({v['sts_avg']:.2f}; " if score else f"{side} L3 (") + \
            f"{pm(v['difference'])} {ci(v['paired_ci'], True)}, paired)"
    served = store.get(f"serving-latency.turn100.{latency.id}")  # the independent single-query timing, if any
    rows = served.figures["rows"] if served else []
    mine = next((r for r in rows if latency.id.split(".")[0] in r["model"]), None)
    l3 = next((r for r in rows if L3 in r["model"]), None)
    pace = (f"{x(mine['p50_speedup'])} the input's p50 against L3's {x(l3['p50_speedup'])}, served by "
            "sentence-transformers" if mine and l3 else f"{x(latency.figures['target']['speedup'])} the input's p50")
    return (f"**The answer first.** A 2x target of all-MiniLM-L6-v2 at batch 128 scores {curve.figures['sts_avg']:.2f} "
            f"on the 7 STS tasks, {verdict(curve)}; one query at a time (`--metric latency-p50`) "
            f"{latency.figures['sts_avg']:.2f}, {verdict(latency, False)}, at {pace} (both on {cpu(curve)}). "
            f"Self-distillation does not beat L3 at its speed: an outside teacher does, `frontier-2x` scores "
            f"{teacher.figures['sts_avg']:.2f}, {verdict(teacher, False)} on {cpu(teacher)}. A target earns its keep on a "
            "model or data with no smaller sibling to download, and on your own pairs.")


def target_run(store: dict[str, Entry]) -> str:
    """The README's sentence on the --speedup 2.0 run."""
    run, again = store[RECIPE_RUNS["target"]], store["targets-retimed.intel-xeon-avx-512-vnni-amx"]
    f = run.figures
    return (f"On a 2-core {run.machine} the first command took {f['minutes']:.1f} min from a cold start: "
            f"{x(f['target']['speedup'])} on the dev sentences ({x(again.get('rows/t2x/torch-fp32/speedup'))} "
            f"re-timed on {SHAPE}) at {f['keep_flops']:.3f} of the layer FLOPs, STS avg {f['sts_avg']:.2f} (dense "
            f"{f['dense_sts_avg']:.2f}; [figures](docs/guides/targets.md#what-it-reached-here)).")


def targets_table(store: dict[str, Entry]) -> str:
    """The targets guide's table: the three target runs."""
    t2x, ov = store[RECIPE_RUNS["target"]], store["target.t2x-ov.intel-xeon-avx-512-vnni-amx"]
    d03, again = store["target.l3-d03.intel-xeon-avx-512-vnni-amx"], store["targets-retimed.intel-xeon-avx-512-vnni-amx"]

    def probes(f):
        return ", ".join(f"{p['keep_flops']:.3f}: {x(p['speedup'])}" for p in f["probes"])

    a, b, c = t2x.figures, ov.figures, d03.figures
    return "\n".join([
        f"Each run on {cpu(t2x)}, from a cold start (an empty sparsecse cache), nothing else running; the speed-up "
        f"first as the run measured it on the STS-B dev sentences, then re-timed by {where(again)} on {SHAPE}.", "",
        "| run | chosen budget (probes) | speed-up: run / re-timed | dev | 7-task STS avg | wall |",
        "|---|---|---|---|---|---|",
        f"| all-MiniLM-L6-v2, `--speedup 2.0` | {a['keep_flops']:.3f} of the layer FLOPs ({probes(a)}) | "
        f"{x(a['target']['speedup'])} / {x(again.get('rows/t2x/torch-fp32/speedup'))} | STS-B {a['stsb_dev']:.2f} "
        f"(dense {a['dense_stsb_dev']:.2f}) | {a['sts_avg']:.2f} {ci(a['ci'])} (dense {a['dense_sts_avg']:.2f}) | "
        f"{a['minutes']:.1f} min |",
        f"| all-MiniLM-L6-v2, `--speedup 2.0 --engine openvino-int8` | {b['keep_flops']:.3f} ({probes(b)}) | "
        f"{x(b['target']['speedup'])} / "
        f"{x(again.get('rows/t2x-ov/openvino-int8/speedup') / again.get('rows/all-MiniLM-L6-v2/openvino-int8/speedup'))}"
        f" over dense OpenVINO int8 | STS-B {b['stsb_dev']:.2f} | {b['sts_avg_int8']:.2f} in int8 (dense int8 "
        f"{b['dense_sts_avg_int8']:.2f}) | {b['minutes']:.1f} min |",
        f"| paraphrase-MiniLM-L3-v2, `--max-drop 0.3`, SICK-R train/test TSVs | {c['keep_flops']:.3f} "
        f"({c['broke_bound']['keep_flops']:.3f} broke the bound: drop {c['broke_bound']['drop']:.2f}) | not timed "
        f"(other jobs shared the machine) | SICK-R train {c['dev']:.2f} (input {c['input_dev']:.2f}) | {c['sts_avg']:.2f} "
        f"(dense {c['dense_sts_avg']:.2f}); SICK-R test {c['test']:.2f} (input {c['input_test']:.2f}) | — |"])


def headline(store: dict[str, Entry]) -> str:
    """The README's evidence table."""
    mp, ml = store["evidence.mpnet.nvidia-h100"].figures, store["evidence.minilm.amd-epyc-avx2-only"].figures
    m, r, s = mp["masked_s0.2_l0.5"], mp["rewound_vs_control"], ml["masked_s0.04_l0.25"]
    return "\n".join([
        "| result | figure | evidence |", "|---|---|---|",
        f"| all-mpnet-base-v2 pruned 20% (λ 0.5), no retraining | {m['pruned']:.2f} vs {m['dense']:.2f}: "
        f"**{pm(m['difference'])}** {ci(m['paired_ci'], True)} | `docs/figures/evidence/mpnet/` |",
        f"| all-mpnet-base-v2 rewound at 20% vs the SimCSE-retrained control, {r['seeds']} seeds | "
        f"**{pm(r['difference'])}** ± {r['std']:.2f}, {ci(r['paired_ci'], True)}"
        f"{'; holds for every seed' if r['holds_every_seed'] else ''} | same |",
        f"| all-MiniLM-L6-v2 pruned 4% (λ 0.25), no retraining | {s['pruned']:.2f} vs {s['dense']:.2f}: "
        f"**{pm(s['difference'])}** {ci(s['paired_ci'], True)} | `docs/figures/evidence/minilm/` |"])


def deploy_engines(store: dict[str, Entry]) -> str:
    """The export guide's summary of every engine on the AVX-512 VNNI CPU."""
    d = store["deploy-speed.amd-epyc-avx-512-vnni"]
    row = lambda model, engine: d.get(f"rows/{model}/{engine}")  # noqa: E731
    dense8, l38, p8, p5 = (row(m, "openvino-int8") for m in (L6, L3, "l3-0.8", "l3-0.5"))
    return (f"Measured by {where(d)}; {SHAPE}; speed-ups over dense all-MiniLM-L6-v2 in torch fp32:\n\n"
            f"- OpenVINO int8 is the fastest engine by far ({x(dense8['speedup'])} dense, {x(l38['speedup'])} L3), and "
            f"pruning stacks on it: L3 pruned to 0.8 of its layer FLOPs runs at {x(p8['speedup'])} "
            f"({x(p8['cpu_speedup'])} in CPU time) at {p8['sts_avg']:.2f} (L3 in int8: {l38['sts_avg']:.2f}; in torch "
            f"fp32 {x(row('l3-0.8', 'torch-fp32')['speedup'])} against {x(row(L3, 'torch-fp32')['speedup'])}); at 0.5 "
            f"it reaches {x(p5['speedup'])} at {p5['sts_avg']:.2f}.\n"
            f"- Torch bf16 is {x(row(L6, 'torch-bf16')['speedup'])} torch fp32 on dense L6 here, where the CPU has "
            f"`avx512_bf16`.")


def reached(store: dict[str, Entry], recipe: str) -> str:
    """A recipe's ``reached:`` block: what its run measured, the machine that measured it."""
    entry = best_run(store, *HEADLINES[0][1:]) if recipe == "target" else store[RECIPE_RUNS[recipe]]
    f, p = entry.figures, entry.provenance
    transfer = store[TRANSFER].figures["rows"].get(recipe) if recipe != "target" else None
    out = ["reached:", f"  sts_avg: {f['sts_avg']:.2f}"]
    avg = f.get("transfer_avg") or (transfer or {}).get("transfer_avg")
    if avg:
        out.append(f"  transfer_avg: {avg:.2f}")
    out.append(f"  ci: [{f['ci'][0]:.2f}, {f['ci'][1]:.2f}]")
    out.append(f"  stsb_dev: {f['stsb_dev']:.2f}")
    if f.get("versus"):
        v = f["versus"]
        out.append(f"  versus: {{model: {v['model']}, sts_avg: {v['sts_avg']:.2f}, difference: {v['difference']:.2f}, "
                   f"paired_ci: [{v['paired_ci'][0]:.2f}, {v['paired_ci'][1]:.2f}]}}")
    speed = f.get("speedup") or f.get("target", {}).get("speedup")
    out.append(f"  speedup: {speed:.2f}")
    out.append(f"  speedup_over: {f.get('speedup_over', L6 if recipe != 'mpnet-2x' else 'all-mpnet-base-v2')}")
    if f.get("reference_speedup"):
        out.append(f"  reference_speedup: {f['reference_speedup']:.2f}")
    out.append(f"  minutes: {f['minutes']:.1f}")
    where_ = f"one {p['gpu']} (training); speed on its host's CPU, {p['threads']} threads" if p.get("gpu") else \
        f"{cpu(entry)}"
    out.append(f"  machine: {where_}, torch fp32, batch {p['batch_size']}")
    out.append("  seconds: {" + ", ".join(f"{k}: {v}" for k, v in f["seconds"].items()) + "}")
    out.append(f"  store: [{entry.id}" + (f", {TRANSFER}]" if transfer else "]"))  # the entries it was read from
    return "\n".join(out)


def targets_intro(store: dict[str, Entry]) -> str:
    """The targets guide's opening figures: what a FLOPs fraction ran on one CPU."""
    l6, l3 = store[RECIPE_RUNS["frontier-2x"]], store[RECIPE_RUNS["l3-prune-0.5"]]
    return (f"No recipe to copy, no FLOPs fraction to guess: on {cpu(l6)}, 0.45 of all-MiniLM-L6-v2's layer FLOPs ran "
            f"{x(l6.figures['speedup'])} (its `frontier-2x` run), 0.5 of paraphrase-MiniLM-L3-v2's only "
            f"{x(l3.figures['speedup'])} (its `l3-prune-0.5` run), because embeddings, LayerNorms, softmax and "
            "tokenization cost the same however many heads and neurons go.")


def targets_flops(store: dict[str, Entry]) -> str:
    """The targets guide's point that a FLOPs fraction does not predict a speed-up, per CPU."""
    amx, avx2 = store["recipe.frontier-2x.intel-xeon-avx-512-vnni-amx"], store[RECIPE_RUNS["frontier-2x"]]
    ov = store["target.t2x-ov.intel-xeon-avx-512-vnni-amx"]
    return (f"- **A FLOPs fraction does not predict a speed-up.** 0.45 of L6's layer FLOPs ran {x(amx.figures['speedup'])} "
            f"in torch fp32 on {cpu(amx)} and {x(avx2.figures['speedup'])} on {cpu(avx2)}; in OpenVINO int8, where the "
            f"transformer layers are cheap next to tokenization and the rest, the same target needed "
            f"{ov.figures['keep_flops']:.2f} of them on {cpu(ov)}. That is why the search times candidates on the "
            "engine.")


def stored_table(entry: Entry) -> str:
    """An entry that holds a table as its run printed it (``columns``, ``rows``), with its machine and command."""
    f = entry.figures
    return "\n".join([f"Measured by {where(entry)}" + (f" ({entry.provenance['note']})" if entry.provenance.get("note")
                                                        else "") + ":", "",
                      "| " + " | ".join(f["columns"]) + " |", "|" + "---|" * len(f["columns"]),
                      *("| " + " | ".join(row) + " |" for row in f["rows"])])


def assistant_chain(store: dict[str, Entry]) -> str:
    """The budgets guide's sentence on pruning the ensemble-distilled L6 to 0.45."""
    run = store["frontier-assistant.amd-epyc-avx-512-vnni"]
    pruned = run.get("rows/L6 kept FLOPs 0.45 (iterative, from the distilled L6, self-distilled 3 epochs)")
    l3 = run.get("rows/paraphrase-MiniLM-L3-v2 dense")
    return (f"  At 0.45, pruning the ensemble-distilled dense model and distilling the pruned one from it gives "
            f"{pruned['sts_avg']:.2f} at {x(pruned['speedup'])}, above paraphrase-MiniLM-L3-v2 ({l3['sts_avg']:.2f} at "
            f"{x(l3['speedup'])}), both measured by {where(run)}.")


def recipe_levers(store: dict[str, Entry]) -> str:
    """The recipes guide's figures for teacher precision and length bucketing."""
    t, b = store["teacher-precision.amd-epyc-avx2-only"].figures, store["recipe-speed.amd-epyc-avx2-only"]
    tcpu = cpu(store["teacher-precision.amd-epyc-avx2-only"])
    return (f"- Measured on {tcpu}: all-mpnet-base-v2's teacher embeddings ran {t['bf16_slowdown']:.0f}× slower in "
            f"emulated bf16 than in fp32; its OpenVINO int8 graph ran {x(t['int8_speedup'])} as fast as torch fp32, "
            f"but its smallest cosine to fp32 was {t['int8_min_cosine']:.2f} (mean {t['int8_mean_cosine']:.3f}), so "
            f"`teacher_precision: int8` refuses it at the 0.99 bound and no shipped recipe uses it. Length-bucketed "
            f"batches ran {b.figures['steps_per_second']['bucketed']:.2f} steps/s against "
            f"{b.figures['steps_per_second']['unbucketed']:.2f} unbucketed ({x(b.figures['speedup'])}; {where(b)}, "
            f"distilling all-MiniLM-L6-v2, batch {b.provenance['batch_size']}, rounds interleaved).")


CORPUS_SIZES = {"2k": 2000, "10k": 10000, "94k": 94199}
CORPUS_COMMANDS = """```bash
shuf -n 2000 --random-source=<(yes) ../shared/data/unlabeled/train_sentences.txt > runs/corpus-2k.txt
shuf -n 10000 --random-source=<(yes) ../shared/data/unlabeled/train_sentences.txt > runs/corpus-10k.txt
cp ../shared/data/unlabeled/train_sentences.txt runs/corpus-94k.txt      # all 94,199 sentences
for n in 2k 10k 94k; do   # each from a cold cache (an empty SPARSECSE_CACHE)
  sparsecse compress --model all-MiniLM-L6-v2 --corpus runs/corpus-$n.txt --speedup 2.0 --out runs/corpus-$n \\
      --store docs/results/store
done
make figures
```"""


def corpus_size(store: dict[str, Entry]) -> str:
    """The corpus-size table: the entries ``corpus-2k.*``, ``corpus-10k.*``, ``corpus-94k.*`` that
    ``compress --speedup 2.0 --out runs/corpus-N --store`` writes, one row per corpus and machine; until they exist,
    the slot says so and gives the commands."""
    size = lambda e: CORPUS_SIZES[e.id.split(".")[0][7:]]  # noqa: E731
    rows = sorted((e for e in store.values() if re.match(r"corpus-(2k|10k|94k)\.", e.id)),
                  key=lambda e: (size(e), e.machine))
    if not rows:
        return ("**Not measured yet.** This table is written from the results store by `make figures` once the three "
                "runs below have stored their final measurements:\n\n" + CORPUS_COMMANDS)
    commits = sorted({e.provenance["commit"] for e in rows})
    lines = ["all-MiniLM-L6-v2, `--speedup 2.0` (torch fp32, batch 128), the same seeded samples of the 94,199 "
             f"training sentences; each row one run from a cold cache, at commit {', '.join(commits)}:", "",
             "| corpus | machine | speed-up (the run's own timing) | STS-B dev | 7-task STS avg | wall |",
             "|---|---|---|---|---|---|"]
    for e in rows:
        f = e.figures
        speed = (f.get("target") or {}).get("speedup")
        lines.append(f"| {size(e):,} sentences | {cpu(e)} | {x(speed) if speed else '—'} | {f['stsb_dev']:.2f} | "
                     f"{f['sts_avg']:.2f} {ci(f['ci'])} | {f.get('minutes', 0):.1f} min |")
    full = next((e for e in rows if size(e) == CORPUS_SIZES["94k"]), None)
    if full is not None:
        lines += [""] + [f"- {size(e):,} sentences: {pm(e.figures['sts_avg'] - full.figures['sts_avg'])} on the 7-task "
                         f"average against all {size(full):,} (their 95% intervals "
                         f"{'overlap' if e.figures['ci'][1] >= full.figures['ci'][0] else 'do not overlap'}), in "
                         f"{e.figures['minutes']:.1f} min against {full.figures['minutes']:.1f}."
                         for e in rows if e is not full]
    return "\n".join(lines + ["", "Rebuilt by:", "", CORPUS_COMMANDS])


def latency_target(store: dict[str, Entry]) -> str:
    """The targets guide's latency-p50 run: what it reached, its independent single-query timing, its finalists."""
    run = store["target.l6-lat2x.intel-xeon-avx-512-vnni-amx"]
    finalists = store["depth-finalists.l6-lat2x.intel-xeon-avx-512-vnni-amx"]
    f, t = run.figures, run.figures["target"]
    versus = f["versus"]
    chosen = chosen_finalist(finalists)
    return "\n".join([
        f"On {cpu(run)}, `--speedup 2.0 --metric latency-p50` (batch 1) chose {chosen[0]} layers removed and "
        f"{float(chosen[1]):.3f} of the rest's FLOPs: the run measured {x(t['speedup'])} at p50 ({t['latency_ms']['p50']:.2f} ms), STS-B dev "
        f"{f['stsb_dev']:.2f} (input {t['reference_dev']:.2f}), 7-task STS avg {f['sts_avg']:.2f} {ci(f['ci'])}, "
        f"{pm(versus['difference'])} {ci(versus['paired_ci'], True)} against paraphrase-MiniLM-L3-v2 "
        f"({versus['sts_avg']:.2f}). At batch 128 the same model is {x(f['speedup'])} the input "
        f"(L3: {x(f['reference_speedup'])}). {run.provenance['note'].capitalize()}.", "",
        stored_table(store["serving-latency.l6-lat2x.intel-xeon-avx-512-vnni-amx"]), "",
        stored_table(finalists)])


L6_CURVE = "l6-curve5"  # the run the targets guide's curve block shows


def aimed_above(runs: dict[str, Entry]) -> float:
    """How far above the speed-up asked the runs' searches aimed (their margin)."""
    margins = {run.figures["target"]["margin"] for run in runs.values()}
    if len(margins) != 1:
        raise SystemExit(f"the curve's runs searched with different margins: {sorted(margins)}")
    return margins.pop()


def against_l3(run: Entry, row: dict, l3: dict) -> str:
    """What the 2x target's paired comparison with L3 says (its interval over the test pairs), beside their speeds."""
    versus = run.figures.get("versus")
    if not versus:
        return ""
    low, high = versus["paired_ci"]
    verdict = ("level with it" if low <= 0 <= high else "above it" if low > 0 else "below it")
    return (f" Paired over the test pairs, the 2x target is {verdict} ({pm(versus['difference'])} "
            f"{ci(versus['paired_ci'], True)}) and {than_l3(row['speedup'], l3['speedup'])} in the curve's timing.")


def curve_l6(store: dict[str, Entry]) -> str:
    """The targets guide's curve: each model's speed-up in the curve's one interleaved timing, in its own target
    run, and in an independent sentence-transformers timing at batch 128; its dev and 7-task STS scores."""
    curve = next(e for i, e in sorted(store.items()) if i.startswith(f"{L6_CURVE}.curve."))
    slug = curve.id.split(".")[-1]
    timing = store[f"serving-latency.b128.{L6_CURVE}.{slug}"]
    independent = {r["model"]: r for r in timing.figures["rows"]}
    runs = {r["name"]: store[f"{L6_CURVE}.{r['name']}.{slug}"] for r in curve.figures["rows"] if r["kind"] == "target"}
    note = curve.provenance.get("note")
    again_entry = store.get(f"retimed.{L6_CURVE}.{slug}")
    models = {r["name"]: r["model"] for r in curve.figures["rows"]}
    retimed = {r["name"]: r for r in again_entry.figures["rows"]} if again_entry else {}
    lines = [f"On {cpu(curve)} (throughput at batch 128, torch fp32), `{command(curve)}` made "
             f"{len(runs)} models and the curve in {curve.figures['minutes']:.1f} min from a cold cache "
             f"({pm_minutes(runs)})" + (f"; {note}." if note else "."), "",
             "| model | speed-up in the curve's timing | in its own run | independent (sentence-transformers, "
             "batch 128) | STS-B dev | 7-task STS avg | sentence-transformers − sparsecse |"
             + (" timed again today: dev sentences | test sentences |" if retimed else ""),
             "|---|---|---|---|---|---|---|" + ("---|---|" if retimed else "")]
    gaps = {}
    for r in curve.figures["rows"]:
        run = runs.get(r["name"])
        own = x(run.figures["target"]["speedup"]) if run else "—"
        timed = independent.get(r["model"]) or independent.get(r["name"]) or {}
        sts = f"{run.figures['sts_avg']:.2f} {ci(run.figures['ci'])}" if run else f"{r['test']:.2f}"
        indep, diff = ((x(timed["p50_speedup"]), f"{timed['max_abs_diff_vs_sparsecse']:.1e}") if timed
                       else ("—", "—"))
        if run and timed:
            gaps[r["name"]] = timed["p50_speedup"] - run.figures["target"]["speedup"]
        again = retimed.get(r["name"])
        lines.append(f"| {r['name']} | {x(r['speedup'])} ±{r['spread']:.0%} | {own} | {indep} | {r['dev']:.2f} | "
                     f"{sts} | {diff} |" + ((f" {x(again['dev_speedup'])} ±{again['dev_spread']:.0%} | "
                                             f"{x(again['test_speedup'])} ±{again['test_spread']:.0%} |" if again
                                             else " — | — |") if retimed else ""))
    rows = {r["name"]: r for r in curve.figures["rows"]}
    l3 = next(r for r in curve.figures["rows"] if r["kind"] == "compare")
    two, first = runs["speedup-2"], next(iter(runs.values()))
    secs = {name: run.figures["seconds"] for name, run in runs.items()}
    per = lambda stage: ", ".join(f"{v[stage] / 60:.1f}" for v in secs.values())  # noqa: E731
    widest = max(gaps.items(), key=lambda kv: abs(kv[1]))
    agreement = (f"- **Each model's independent figure is within 0.1 of its own run's** (the widest gap: {widest[0]}, "
                 f"{widest[1]:+.2f})." if abs(widest[1]) <= 0.1 else
                 f"- **Not every model's independent figure is within 0.1 of its own run's**: {widest[0]} differs by "
                 f"{widest[1]:+.2f}.")
    minutes = curve.figures["minutes"]
    wall = (f"- **The wall time**: {minutes:.1f} min from a cold cache, within the 40 minutes aimed at." if minutes <= 40
            else f"- **The wall time missed the 40 minutes aimed at**: {minutes:.1f} min from a cold cache.")
    return "\n".join(lines + [
        "", f"The independent timing: {where(timing)}, {timing.figures['requests']} requests per model, each "
        f"{timing.figures['sentences']}; its figure is the ratio of the median round times (a round is one encoding "
        "of the whole set). The models were loaded by sentence-transformers from copies without their Python "
        "files.", "",
        agreement + " The runs time as a server runs a model: the candidates' copies on disk are loaded by a fresh "
        "process that only times, and each model encodes its whole round of requests in its turn. Timed in the "
        "run's own long-lived process, with the models taking turns batch by batch, the pruned models measured "
        "lower than an independent timing finds, the smallest by the most, while a plain BERT agreed."
        + (f" The last two columns time the same models again after the run, a new process for every timing "
           f"({where(again_entry)}), on the dev sentences the run timed on and on the test sentences the independent "
           "timing encodes. Against the independent figures, their widest gaps are "
           + " and ".join(f"{max(abs(independent[models[n]]['p50_speedup'] - v[f'{k}_speedup']) for n, v in retimed.items() if models.get(n) in independent):.2f} on the {k} sentences" for k in ("dev", "test"))
           + "." if again_entry else ""),
        "- **Met in their own runs**: " + "; ".join(
            f"{name} {'met' if run.figures['target'].get('met') else 'not met'} ({x(run.figures['target']['speedup'])})"
            for name, run in runs.items()) + ". A target is met when its run's own final figure reaches it; the "
        f"search aims {aimed_above(runs):.0%} above it, and the final figure varies by a few percent from the probe's.",
        "",
        "What it shows, on this CPU and at this shape:", "",
        f"- At batch 128, paraphrase-MiniLM-L3-v2 scores {l3['test']:.2f} at {x(l3['speedup'])}; the 2x target keeps "
        f"{two.figures['sts_avg']:.2f} at {x(rows['speedup-2']['speedup'])}. The 1.5x target keeps "
        f"{first.figures['sts_avg']:.2f} (input {rows['input']['test']:.2f})." + against_l3(two, rows["speedup-2"], l3),
        wall + f" Per target the student ({per('student')} min) and the evaluation ({per('evaluation')} min) cost "
        "the most: the evaluation tests the 7 STS tasks (a curve leaves the transfer tasks to the model you keep) "
        "and times the serving table (the target's figure is its judged row). The comparison model's test results "
        "are computed once per curve."])


def latency_table(entry: Entry, names: dict[str, str]) -> str:
    """A ``benchmarks/serving_latency.py`` entry as a table: p50/p95 latency and speed-ups per model (``names``
    gives each model's label), and the largest difference from sparsecse's loader."""
    turn = entry.figures.get("turn", 1)
    lines = [f"Measured by {where(entry)}, {entry.figures['requests']} requests per model, interleaved"
             + (f" in turns of {turn} requests" if turn > 1 else "") + ":", "",
             "| model | p50 ms | p95 ms | p50 speed-up | p95 speed-up | sentence-transformers − sparsecse |",
             "|---|---|---|---|---|---|"]
    for r in entry.figures["rows"]:
        lines.append(f"| {names.get(r['model'], r['model'])} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} | "
                     f"{x(r['p50_speedup'])} | {x(r['p95_speedup'])} | {r['max_abs_diff_vs_sparsecse']:.1e} |")
    return "\n".join(lines)


def latency_entries(store: dict[str, Entry], name: str, timing_prefix: str) -> tuple[Entry, Entry, Entry]:
    """A latency run's entry ``NAME.MACHINE``, its finalists and its independent timing ``TIMING_PREFIX.NAME.MACHINE``."""
    run = next(e for i, e in sorted(store.items()) if i.startswith(f"{name}."))
    slug = run.id.split(".")[-1]
    return run, store[f"depth-finalists.{name}.{slug}"], store[f"{timing_prefix}.{name}.{slug}"]


def chosen_finalist(finalists: Entry) -> list:
    """The chosen row of a depth-finalists entry (layers removed, kept FLOPs of the rest, ...)."""
    return next(r for r in finalists.figures["rows"] if r[-1] == "chosen")


def latency_facts(run: Entry, finalists: Entry, timing: Entry, name: str) -> tuple:
    """(machine slug, figures, target, versus, the chosen finalist's row, the model's row of the timing)."""
    chosen = chosen_finalist(finalists)
    mine = next(r for r in timing.figures["rows"] if name in r["model"])
    f = run.figures
    return run.id.split(".")[-1], f, f["target"], f["versus"], chosen, mine


def latency_tables(timing: Entry, mine: dict, label: str, finalists: Entry) -> list[str]:
    """The independent timing's table (the model named ``label``) and the finalists' table, as lines."""
    return [latency_table(timing, {"all-MiniLM-L6-v2": "all-MiniLM-L6-v2 (input)", mine["model"]: label}), "",
            stored_table(finalists)]


def latency_teacher(store: dict[str, Entry]) -> str:
    """The targets guide's latency-p50 run with a teacher ensemble: what it chose and reached, its independent
    single-query timing, its finalists."""
    run, finalists, timing = latency_entries(store, "l6-lat2x-ens", "serving-latency")
    slug, f, t, versus, chosen, mine = latency_facts(run, finalists, timing, "l6-lat2x-ens")
    aim = "met" if f["sts_avg"] >= 77.0 else "missed"
    self_run = store[f"target.l6-lat2x.{slug}"]
    return "\n".join([
        f"The same target with a teacher better than the input, `{command(run)}`, on {cpu(run)}: it "
        f"chose {chosen[0]} layers removed and {float(chosen[1]):.3f} of the rest's FLOPs. The run measured "
        f"{x(t['speedup'])} at p50 ({t['latency_ms']['p50']:.2f} ms); the independent single-query timing below "
        f"{x(mine['p50_speedup'])}. 7-task STS avg **{f['sts_avg']:.2f}** {ci(f['ci'])} ({aim}: at least 77.0 was "
        f"asked), {pm(versus['difference'])} {ci(versus['paired_ci'], True)} against paraphrase-MiniLM-L3-v2 "
        f"({versus['sts_avg']:.2f}); STS-B dev {f['stsb_dev']:.2f}; {f['minutes']:.1f} min. Self-distilled, the run "
        f"above reached {self_run.figures['sts_avg']:.2f} (STS-B dev {self_run.figures['stsb_dev']:.2f}).", "",
        *latency_tables(timing, mine, "the latency-p50 2x model, teacher ensemble", finalists)])


def latency_longer(store: dict[str, Entry]) -> str:
    """The targets guide's latency-p50 run self-distilled on twice the sentences, timed in a fresh process: what it
    chose, its own final figure, the independent single-query timing, its quality and its finalists."""
    run, finalists, timing = latency_entries(store, "l6-lat2x-long", "serving-latency.turn100")
    _, f, t, versus, chosen, mine = latency_facts(run, finalists, timing, "l6-lat2x-long")
    l3 = next(r for r in timing.figures["rows"] if L3 in r["model"])
    speed_aim = "met" if mine["p50_speedup"] >= 1.9 else "missed"
    quality_aim = "met" if f["sts_avg"] >= 77.0 else "missed"
    return "\n".join([
        f"`{command(run)}`, on {cpu(run)}, {f['minutes']:.1f} min: the search chose {chosen[0]} layers "
        f"removed and {float(chosen[1]):.3f} of the rest's FLOPs, probed at {chosen[2]}. Its 7-task STS avg is "
        f"**{f['sts_avg']:.2f}** {ci(f['ci'])} ({quality_aim}: at least 77.0 was asked), {pm(versus['difference'])} "
        f"{ci(versus['paired_ci'], True)} against paraphrase-MiniLM-L3-v2 ({versus['sts_avg']:.2f}); STS-B dev "
        f"{f['stsb_dev']:.2f}. Its speed **{speed_aim}** the 1.9× asked of the independent timing: "
        f"sentence-transformers serves it at **{x(mine['p50_speedup'])}** the input's p50 ({mine['p50_ms']:.2f} ms; "
        f"L3 {x(l3['p50_speedup'])}), and the run's own final figure was {x(t['speedup'])} "
        f"({run.provenance['note']}), so the run ended non-zero: the target not met.", "",
        *latency_tables(timing, mine, "the latency-p50 2x model, 2,000 student steps", finalists)])


def latency_longer_all(store: dict[str, Entry]) -> str:
    """The latency-p50 run trained longer (timed in one long-lived process) served one query at a time over every
    distinct STS-B test sentence."""
    run, _, timing = latency_entries(store, "l6-lat2x-long", "serving-latency.turn100-all")
    mine = next(r for r in timing.figures["rows"] if "l6-lat2x-long" in r["model"])
    return latency_table(timing, {"all-MiniLM-L6-v2": "all-MiniLM-L6-v2 (input)",
                                  mine["model"]: "the latency-p50 2x model, 2,000 student steps"})


def latency_served(store: dict[str, Entry]) -> str:
    """The targets guide's latency-p50 run timed through sentence-transformers: what it chose, its own final figure,
    the independent single-query timing over every test sentence, its quality against L3, and its finalists (the
    width-only one at the same latency among them)."""
    run, finalists, timing = latency_entries(store, "l6-lat2x-st", "serving-latency.turn100")
    _, f, t, versus, chosen, mine = latency_facts(run, finalists, timing, "l6-lat2x-st")
    l3 = next(r for r in timing.figures["rows"] if L3 in r["model"])
    width = next((r for r in finalists.figures["rows"] if r[0] == "0"), None)
    speed_aim = "met" if mine["p50_speedup"] >= 1.9 else "missed"
    quality_aim = ("target 77.0 met, aim 77.5 met" if f["sts_avg"] >= 77.5 else "target 77.0 met, aim 77.5 not"
                   if f["sts_avg"] >= 77.0 else "target 77.0 missed")
    return "\n".join([
        f"`{command(run)}`, on {cpu(run)}, {f['minutes']:.1f} min: the search chose {chosen[0]} layers "
        f"removed and {float(chosen[1]):.3f} of the rest's FLOPs, probed at {chosen[2]}; the run's own final figure "
        f"is {x(t['speedup'])}. The independent single-query timing: sentence-transformers serves "
        f"it at **{x(mine['p50_speedup'])}** the input's p50 (target at least 1.9×: {speed_aim}; L3 "
        f"{x(l3['p50_speedup'])}). Its 7-task STS avg is **{f['sts_avg']:.2f}** {ci(f['ci'])} ({quality_aim}), "
        f"{pm(versus['difference'])} {ci(versus['paired_ci'], True)} against paraphrase-MiniLM-L3-v2 "
        f"({versus['sts_avg']:.2f}); STS-B dev {f['stsb_dev']:.2f}."
        + (f" The width-only candidate at the same latency kept {float(width[1]):.3f} of the FLOPs and scored "
           f"{width[4]} on dev after 100 recovery steps, against {chosen[4]} for the chosen one." if width else ""), "",
        *latency_tables(timing, mine, "the latency-p50 2x model, timed as served", finalists)])


def busy_pair(store: dict[str, Entry]) -> str:
    """The targets guide's busy-machine pair: one ``--max-drop`` run on a quiet machine and beside a CPU-heavy
    process, what each chose or why it stopped, and every candidate's timing with its spread."""
    e = next(e for i, e in sorted(store.items()) if i.startswith("busy-pair.l3-drop1."))
    quiet, busy = e.figures["quiet"], e.figures["busy"]

    def timed(side: dict) -> str:
        return ", ".join(f"{c['keep_flops']:g}: {x(c['speedup'])} ±{c['spread']:.0%}" + (" (timed again)" if
                         c["retimed"] else "") for c in side["candidates"]) or "none"

    def outcome(side: dict) -> str:
        if side["chosen"] is None:
            return "stopped before choosing: the machine is too busy to time" if side["message"] else side["outcome"]
        same = "" if side is quiet else (" (the quiet run's choice)" if side["chosen"]["keep_flops"] ==
                                         quiet["chosen"]["keep_flops"] else " (not the quiet run's choice)")
        return f"chose {side['chosen']['keep_flops']:g}{same}"
    lines = [f"The same `--max-drop 1.0` run on paraphrase-MiniLM-L3-v2, `{command(e)}`, on {cpu(e)}, "
             f"{e.provenance['date']} (throughput at batch 128):", "",
             "| machine | outcome | candidates (kept FLOPs: speed-up ± spread) |", "|---|---|---|",
             f"| quiet | {outcome(quiet)} | {timed(quiet)} |", f"| beside {e.figures['hog']} | {outcome(busy)} | "
             f"{timed(busy)} |"]
    if busy["message"]:
        lines += ["", "The busy run ended with:", "", "```text", busy["message"], "```"]
    return "\n".join(lines + ["", e.provenance["note"][0].upper() + e.provenance["note"][1:] + "."])


def pm_minutes(runs: dict[str, Entry]) -> str:
    """Each target run's wall time, e.g. ``speedup-1.5 22.1 min, ...``."""
    return ", ".join(f"{name} {run.figures['minutes']:.1f} min" for name, run in runs.items())


BLOCKS = {"corpus-size": corpus_size, "assistant-chain": assistant_chain, "recipe-levers": recipe_levers, "targets-intro": targets_intro, "targets-flops": targets_flops, "frontier-table": frontier_table, "speed-by-cpu": speed_by_cpu, "frontier-2x-summary": frontier_2x_summary,
          "mpnet-summary": mpnet_summary, "target-run": target_run, "headline-runs": headline_runs, "targets-answer": targets_answer, "targets-table": targets_table,
          "headline": headline, "deploy-engines": deploy_engines, "latency-target": latency_target,
          "curve-l6": curve_l6, "busy-pair": busy_pair, "latency-longer": latency_longer,
          "latency-served": latency_served, "latency-longer-all": latency_longer_all,
          "latency-teacher": latency_teacher}


# ------------------------------------------------------------------------------------------------ the files
def documents(root: Path = ROOT) -> list[Path]:
    """Every file under ``root`` that may hold a generated block: the Markdown docs, the README and the shipped
    recipes."""
    return sorted({root / "README.md", *(root / "docs").rglob("*.md"),
                   *(root / "sparsecse" / "recipes" / "shipped").glob("*.yaml")} - set((root / "docs" / "_build").rglob("*")))


def render(path: Path, text: str, store: dict[str, Entry]) -> str:
    """``text`` with every generated block rewritten from ``store``.

    Raises:
        ValueError: a block names no known renderer, or has no END line.
    """
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        out.append(lines[i])
        m = BEGIN.match(lines[i])
        i += 1
        if not m:
            continue
        name = m.group(2)
        end = f"<!-- END figures: {name} -->" if m.group(1) == "<!-- " else f"# END figures: {name}"
        try:
            j = lines.index(end, i)
        except ValueError:
            raise ValueError(f"{path}: the block {name} has no line {end!r}") from None
        if path.suffix == ".yaml":
            if name != "reached":
                raise ValueError(f"{path}: a recipe's only generated block is 'reached', not {name}")
            body = reached(store, path.stem)
        elif name.startswith("table.") and name[6:] in store:
            body = stored_table(store[name[6:]])
        elif name in BLOCKS:
            body = BLOCKS[name](store)
            body = body.replace("](docs/", "](") if path.parent.name in ("guides", "results") and \
                path.name != "README.md" else body
        else:
            raise ValueError(f"{path}: no generated block is called {name}")
        out += body.split("\n") + [end]
        i = j + 1
    return "\n".join(out)


def outside_blocks(text: str) -> str:
    """``text`` without its generated blocks and code fences (commands, and a command's output shown as an
    example of its format)."""
    text = re.sub(r"(?ms)^(?:<!-- |# )BEGIN figures: ([\w.-]+).*?^(?:<!-- |# )END figures: \1(?: -->)?$", "", text)
    return re.sub(r"(?ms)^( *)(```+).*?^\1\2\s*$", "", text)


def recipe_settings(root: Path = ROOT) -> set[str]:
    """Every number a shipped recipe's stages set (``0.45``, ``3.0e-4`` as ``0.0003``): settings, not figures."""
    import yaml

    found: set[str] = set()
    for path in (root / "sparsecse" / "recipes" / "shipped").glob("*.yaml"):
        for stage in yaml.safe_load(path.read_text(encoding="utf-8")).get("stages", []):
            found |= {format(v, "g") for v in stage.values() if isinstance(v, float)}
    return found


def _first_changed_block(old: str, new: str) -> str:
    """The name of the first generated block whose lines differ between ``old`` and ``new``."""
    name = "?"
    for a, b in zip(old.split("\n"), new.split("\n")):
        m = BEGIN.match(a)
        name = m.group(2) if m else name
        if a != b:
            return name
    return name


def problems(root: Path = ROOT) -> list[str]:
    """Each generated block under ``root`` that differs from its results store (``root/docs/results/store``), and
    each speed figure of a checked document written outside a block (a figure with no entry behind it)."""
    store, found = load_store(root / STORE.relative_to(ROOT)), []
    for path in documents(root):
        text = path.read_text(encoding="utf-8")
        try:
            same = "BEGIN figures:" not in text or render(path, text, store) == text
        except (KeyError, ValueError, SparseCSEError) as error:  # a block whose entry or figure is missing
            found.append(f"{path.relative_to(root)}: {error}")
            continue
        if not same:
            found.append(f"{path.relative_to(root)}: the block {_first_changed_block(text, render(path, text, store))} "
                         "differs from the results store (run `make figures`)")
    settings = recipe_settings(root)
    readme = re.sub(r"`[^`]*`", "", outside_blocks((root / "README.md").read_text(encoding="utf-8")))
    for number in re.findall(r"(?<![\w.])\d+\.\d+", readme):
        if number not in settings:  # the README quotes no figure outside a block, only the recipes' settings
            found.append(f"README.md: the figure {number} has no entry in the results store (outside a generated "
                         "block)")
    checked = {p for pattern in CHECKED for p in root.glob(pattern)}
    guides = {p for pattern in GUIDES for p in root.glob(pattern)}
    for path in sorted(checked):
        for line in outside_blocks(path.read_text(encoding="utf-8")).split("\n"):
            kinds = {"speed figure": SPEED.findall(line)}
            if path in guides:  # a value in backticks is a setting or a command, not a measurement
                kinds |= {kind: rx.findall(re.sub(r"`[^`]*`", "", line)) for kind, rx in MEASURED.items()
                          if not (kind == "score" and path.name == "README.md")}  # the README's own check above
            for kind, figures in kinds.items():
                found += [f"{path.relative_to(root)}: the {kind} {figure!r} has no entry in the results store "
                          f"(outside a generated block): {line.strip()[:100]}" for figure in figures]
    return found


def main(argv: list[str] | None = None) -> int:
    """``--check``: list the problems and exit 1 if any; else rewrite every generated block."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; list what differs from the store")
    args = parser.parse_args(argv)
    if args.check:
        found = problems()
        print("\n".join(found) or "every figure comes from the results store")
        return 1 if found else 0
    store = load_store(STORE)
    for path in documents():
        text = path.read_text(encoding="utf-8")
        if "BEGIN figures:" in text:
            new = render(path, text, store)
            if new != text:
                path.write_text(new, encoding="utf-8")
                print(f"rewrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
