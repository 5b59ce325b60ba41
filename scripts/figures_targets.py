"""The targets guide's blocks and the README's headline runs: the answer first, the target runs, the corpus sizes,
the busy machine, the curve, the depth cuts and stock against custom.

Each renderer takes the results store (``{id: Entry}``) and returns the values of its block's template (a
``_figures/NAME.md`` beside the page or in docs/_figures); ``scripts/figures_docs.py`` maps block names to them."""

from __future__ import annotations

import re

from sparsecse.reporting.store import Entry
from figures_format import HEADLINES, L3, RECIPE_RUNS, best_run, ci, command, cpu, pm, pm_minutes, shape, than_l3, where, x


def headline_runs(store: dict[str, Entry]) -> dict:
    """The values of the README's table (docs/_figures/headline-runs.md): each headline command's best current
    result, with its machine and date."""
    runs = [(label, best_run(store, has, lacks)) for label, has, lacks in HEADLINES]
    machines = sorted({cpu(e) for _, e in runs})
    threads = ", ".join(str(t) for t in sorted({e.provenance.get("threads") or 0 for _, e in runs}))
    lines = ["| `compress ...` | speed-up | 7-task STS avg | vs paraphrase-MiniLM-L3-v2 | date, wall |",
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
        where_ = "" if len(machines) == 1 else f" ({e.machine})"
        lines.append(f"| {label}{where_} | {speed} | {sts} | {l3} | {e.provenance['date']}{wall} |")
    return {"machine": machines[0] if len(machines) == 1 else {"threads": threads}, "table": "\n".join(lines)}


def targets_answer(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the targets guide's first screen (docs/guides/_figures/targets-answer.md): what a 2x target of
    all-MiniLM-L6-v2 trades against paraphrase-MiniLM-L3-v2, from the best current runs, and what beats L3."""
    # the verdicts need a paired comparison with L3: the newest latency run that made one
    curve, latency = best_run(store, *HEADLINES[3][1:]), best_run(store, *HEADLINES[1][1:], compared=True)
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
    return {"batch_sts": f"{curve.figures['sts_avg']:.2f}", "batch_verdict": verdict(curve),
            "latency_sts": f"{latency.figures['sts_avg']:.2f}", "latency_verdict": verdict(latency, False),
            "latency_pace": pace, "machines": f"both on {cpu(curve)}" if cpu(curve) == cpu(latency) else
            f"the first on {cpu(curve)}, the second on {cpu(latency)}", "teacher_sts": f"{teacher.figures['sts_avg']:.2f}",
            "teacher_verdict": verdict(teacher, False), "teacher_machine": cpu(teacher)}


def targets_table(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the targets guide's table of the three target runs (docs/guides/_figures/targets-table.md)."""
    t2x, ov = store[RECIPE_RUNS["target"]], store["target.t2x-ov.intel-xeon-avx-512-vnni-amx"]
    d03 = store["target.l3-d03.intel-xeon-avx-512-vnni-amx"]

    def probes(f):
        return ", ".join(f"{p['keep_flops']:.3f}: {x(p['speedup'])}" for p in f["probes"])

    a, b, c = t2x.figures, ov.figures, d03.figures
    return {"machine": cpu(t2x),
            "t2x_keep_flops": f"{a['keep_flops']:.3f}", "t2x_probes": probes(a), "t2x_speedup": x(a["target"]["speedup"]),
            "t2x_dev": f"{a['stsb_dev']:.2f}",
            "t2x_dense_dev": f"{a['dense_stsb_dev']:.2f}", "t2x_sts": f"{a['sts_avg']:.2f}", "t2x_ci": ci(a["ci"]),
            "t2x_dense_sts": f"{a['dense_sts_avg']:.2f}", "t2x_minutes": f"{a['minutes']:.1f}",
            "ov_keep_flops": f"{b['keep_flops']:.3f}", "ov_probes": probes(b), "ov_speedup": x(b["target"]["speedup"]),
            "ov_dev": f"{b['stsb_dev']:.2f}", "ov_sts_int8": f"{b['sts_avg_int8']:.2f}",
            "ov_dense_sts_int8": f"{b['dense_sts_avg_int8']:.2f}", "ov_minutes": f"{b['minutes']:.1f}",
            "d03_keep_flops": f"{c['keep_flops']:.3f}", "d03_broke_keep_flops": f"{c['broke_bound']['keep_flops']:.3f}",
            "d03_broke_drop": f"{c['broke_bound']['drop']:.2f}", "d03_dev": f"{c['dev']:.2f}",
            "d03_input_dev": f"{c['input_dev']:.2f}", "d03_sts": f"{c['sts_avg']:.2f}",
            "d03_dense_sts": f"{c['dense_sts_avg']:.2f}", "d03_test": f"{c['test']:.2f}",
            "d03_input_test": f"{c['input_test']:.2f}"}


def targets_intro(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the targets guide's opening figures (docs/guides/_figures/targets-intro.md): what a FLOPs
    fraction ran on one CPU."""
    l6, l3 = store[RECIPE_RUNS["frontier-2x"]], store[RECIPE_RUNS["l3-prune-0.5"]]
    return {"machine": cpu(l6), "l6_speedup": x(l6.figures["speedup"]), "l3_speedup": x(l3.figures["speedup"])}


def targets_flops(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the targets guide's point that a FLOPs fraction does not predict a speed-up, per CPU
    (docs/guides/_figures/targets-flops.md)."""
    avx2, ov = store[RECIPE_RUNS["frontier-2x"]], store["target.t2x-ov.intel-xeon-avx-512-vnni-amx"]
    return {"avx2_speedup": x(avx2.figures["speedup"]), "avx2_machine": cpu(avx2),
            "ov_keep_flops": f"{ov.figures['keep_flops']:.2f}", "ov_machine": cpu(ov)}


CORPUS_SIZES = {"2k": 2000, "10k": 10000, "94k": 94199}


def corpus_size(store: dict[str, Entry]) -> dict:
    """The values of the corpus-size table (docs/guides/_figures/corpus-size.md): the entries ``corpus-2k.*``,
    ``corpus-10k.*``, ``corpus-94k.*`` that ``compress --speedup 2.0 --out runs/corpus-N --store`` writes, one row
    per corpus and machine; until they exist, the passage ``unmeasured``."""
    size = lambda e: CORPUS_SIZES[e.id.split(".")[0][7:]]  # noqa: E731
    rows = sorted((e for e in store.values() if re.match(r"corpus-(2k|10k|94k)\.", e.id)),
                  key=lambda e: (size(e), e.machine))
    if not rows:
        return {"measured": None, "unmeasured": {}}
    lines = ["| corpus | machine | speed-up (the run's own timing) | STS-B dev | 7-task STS avg | wall |",
             "|---|---|---|---|---|---|"]
    for e in rows:
        f = e.figures
        speed = (f.get("target") or {}).get("speedup")
        lines.append(f"| {size(e):,} sentences | {cpu(e)} | {x(speed) if speed else '—'} | {f['stsb_dev']:.2f} | "
                     f"{f['sts_avg']:.2f} {ci(f['ci'])} | {f.get('minutes', 0):.1f} min |")
    full = next((e for e in rows if size(e) == CORPUS_SIZES["94k"]), None)
    against = [{"size": f"{size(e):,}", "difference": pm(e.figures["sts_avg"] - full.figures["sts_avg"]),
                "full_size": f"{size(full):,}", "minutes": f"{e.figures['minutes']:.1f}",
                "full_minutes": f"{full.figures['minutes']:.1f}",
                "overlap": "overlap" if e.figures["ci"][1] >= full.figures["ci"][0] else "do not overlap"}
               for e in rows if full is not None and e is not full]
    return {"measured": {"commits": ", ".join(sorted({e.provenance["commit"] for e in rows})),
                         "table": "\n".join(lines), "against_full": against or None}, "unmeasured": None}


def busy_pair(store: dict[str, Entry]) -> dict:
    """The values of the targets guide's busy-machine pair (docs/guides/_figures/busy-pair.md): one ``--max-drop``
    run on a quiet machine and beside a CPU-heavy process, what each chose or why it stopped, and every candidate's
    timing with its spread."""
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
    note = e.provenance["note"]
    return {"command": command(e), "machine": cpu(e), "date": e.provenance["date"], "hog": e.figures["hog"],
            "quiet_outcome": outcome(quiet), "quiet_candidates": timed(quiet), "busy_outcome": outcome(busy),
            "busy_candidates": timed(busy), "busy_message": {"message": busy["message"]} if busy["message"] else None,
            "note": note[0].upper() + note[1:]}


def aimed_above(runs: dict[str, Entry]) -> float:
    """How far above the speed-up asked the runs' searches aimed (their margin)."""
    margins = {run.figures["target"]["margin"] for run in runs.values()}
    if len(margins) != 1:
        raise SystemExit(f"the curve's runs searched with different margins: {sorted(margins)}")
    return margins.pop()


def against_l3(run: Entry, row: dict, l3: dict) -> dict | None:
    """The values of what the 2x target's paired comparison with L3 says (its interval over the test pairs), beside
    their speeds; None without a comparison."""
    versus = run.figures.get("versus")
    if not versus:
        return None
    low, high = versus["paired_ci"]
    return {"verdict": "level with it" if low <= 0 <= high else "above it" if low > 0 else "below it",
            "difference": pm(versus["difference"]), "paired_ci": ci(versus["paired_ci"], True),
            "than_l3": than_l3(row["speedup"], l3["speedup"])}


def curve_l6(store: dict[str, Entry]) -> dict:
    """The values of the targets guide's curve (docs/guides/_figures/curve-l6.md): each model's speed-up in the
    curve's one interleaved timing, in its own target run, and in an independent sentence-transformers timing at
    batch 128; its dev and 7-task STS scores."""
    curve = next(e for i, e in sorted(store.items()) if i.startswith(f"{L6_CURVE}.curve."))
    slug = curve.id.split(".")[-1]
    timing = store[f"serving-latency.b128.{L6_CURVE}.{slug}"]
    independent = {r["model"]: r for r in timing.figures["rows"]}
    runs = {r["name"]: store[f"{L6_CURVE}.{r['name']}.{slug}"] for r in curve.figures["rows"] if r["kind"] == "target"}
    note = curve.provenance.get("note")
    again_entry = store.get(f"retimed.{L6_CURVE}.{slug}")
    models = {r["name"]: r["model"] for r in curve.figures["rows"]}
    retimed = {r["name"]: r for r in again_entry.figures["rows"]} if again_entry else {}
    lines = ["| model | speed-up in the curve's timing | in its own run | independent (sentence-transformers, "
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
    gap = {"model": widest[0], "gap": f"{widest[1]:+.2f}"}
    minutes = curve.figures["minutes"]
    wall = {"minutes": f"{minutes:.1f}"}
    again_gap = {k: max(abs(independent[models[n]]["p50_speedup"] - v[f"{k}_speedup"]) for n, v in retimed.items()
                        if models.get(n) in independent) for k in ("dev", "test")} if again_entry else {}
    return {"machine": cpu(curve), "command": command(curve), "count": str(len(runs)), "minutes": f"{minutes:.1f}",
            "run_minutes": pm_minutes(runs), "note": {"note": note} if note else None, "table": "\n".join(lines),
            "timing_where": where(timing), "requests": str(timing.figures["requests"]),
            "sentences": str(timing.figures["sentences"]),
            "agrees": gap if abs(widest[1]) <= 0.1 else None, "disagrees": None if abs(widest[1]) <= 0.1 else gap,
            "retimed": {"where": where(again_entry), "dev_gap": f"{again_gap['dev']:.2f}",
                        "test_gap": f"{again_gap['test']:.2f}"} if again_entry else None,
            "met": "; ".join(f"{name} {'met' if run.figures['target'].get('met') else 'not met'} "
                             f"({x(run.figures['target']['speedup'])})" for name, run in runs.items()),
            "margin": f"{aimed_above(runs):.0%}", "l3_sts": f"{l3['test']:.2f}", "l3_speedup": x(l3["speedup"]),
            "two_sts": f"{two.figures['sts_avg']:.2f}", "two_speedup": x(rows["speedup-2"]["speedup"]),
            "first_sts": f"{first.figures['sts_avg']:.2f}", "input_sts": f"{rows['input']['test']:.2f}",
            "against_l3": against_l3(two, rows["speedup-2"], l3),
            "wall_within": wall if minutes <= 40 else None, "wall_missed": None if minutes <= 40 else wall,
            "student": per("student"), "evaluation": per("evaluation")}


L6_CURVE = "l6-curve6"  # the run the targets guide's curve block shows


def layer_choice(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the targets guide's table of depth cuts (docs/guides/_figures/layer-choice.md): the layers each
    layer criterion chooses and the other cuts tried, with their embedding fidelity and STS-B dev right after the cut
    and after a short recovery (the newest ``benchmarks/layer_choice.py`` entry for all-MiniLM-L6-v2)."""
    entry = max((e for i, e in store.items() if i.startswith("layer-choice.all-minilm-l6-v2.")),
                key=lambda e: e.provenance["date"])
    f = entry.figures
    lines = ["| layers removed | chosen by | embedding fidelity | STS-B dev after the cut | after the recovery |",
             "|---|---|---|---|---|"]
    for r in f["rows"]:
        chosen = ", ".join(f"`{name}`" for name in r["chosen_by"]) or "—"
        lines.append(f"| {', '.join(map(str, r['removed']))} | {chosen} | {r['fidelity']:.3f} | "
                     f"{r['dev_after_cut']:.2f} | {r['dev_recovered']:.2f} |")
    return {"where": where(entry), "removed_layers": str(f["removed_layers"]), "steps": str(f["steps"]),
            "batch": str(f["batch_size"]), "lr": f"{f['lr']:g}", "reference_dev": f"{f['reference_dev']:.2f}",
            "table": "\n".join(lines)}


STOCK_VS_CUSTOM = "stock-vs-custom.l6.amd-epyc-avx2-only"


def stock_vs_custom(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the targets guide's stock-against-custom table (docs/guides/_figures/stock-vs-custom.md):
    every target run once per layout on one machine, the run's own figures, the paired STS difference."""
    e = store[STOCK_VS_CUSTOM]
    f = e.figures
    lines = ["| target | layout | layers kept | FFN width per layer | run's speed-up | 7-task STS | STS-B dev | "
             "stock − custom (paired) | minutes |", "|---|---|---|---|---|---|---|---|---|"]
    for r in f["rows"]:
        for layout in ("custom", "stock"):
            s = r[layout]
            diff = f"{pm(r['difference'])} {ci(r['paired_ci'], True)}" if layout == "stock" else ""
            ffn = ", ".join(str(w) for w in s["ffn"]) if len(set(s["ffn"])) > 1 else f"{s['ffn'][0]} (uniform)"
            lines.append(f"| {r['target']} ({s['metric']}, batch {s['batch_size']}) | {layout} | "
                         f"{s['layers']} of {s['source_layers']} | {ffn} | {x(s['speedup'])}{'' if s['met'] else ' (missed)'} | "
                         f"{s['sts_avg']:.2f} "
                         f"{ci(s['ci'])} | {s['stsb_dev']:.2f} | {diff} | {s['minutes']:.1f} |")
    worst = min(r["difference"] for r in f["rows"])
    if f["choice"] is None:
        verdict = (f"Stock − custom is at worst {pm(worst)} STS over the targets paired here; the default is chosen "
                   f"once every target is paired (stock where it costs at most {f['tolerance']}), and until then "
                   "`--layout custom` is the default.")
    elif f["choice"] == "stock":
        verdict = (f"Stock costs at most {max(0.0, -worst):.2f} STS at any of these targets, within the "
                   f"{f['tolerance']} allowed, so `--layout stock` is the default.")
    else:
        verdict = (f"Stock costs {-worst:.2f} STS at a target where at most {f['tolerance']} is allowed, so "
                   "`--layout custom` stays the default; `--layout stock` is the choice where a runtime refuses custom "
                   "code.")
    for r in f["rows"]:
        if r["stock"]["met"] and not r["custom"]["met"]:
            verdict += (f" At {r['target']} only the stock run met its target ({r['stock']['layers']} of "
                        f"{r['stock']['source_layers']} layers kept, against {r['custom']['layers']}).")
    return {"where": where(e), "table": "\n".join(lines), "verdict": verdict}


PLAIN_LOAD = "plain-load.stock.amd-epyc-avx2-only"


def stock_loads(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the shrinking guide's stock-runs table (docs/guides/_figures/stock-loads.md): each real stock
    model loaded with no sparsecse and no remote code (benchmarks/plain_load.py), beside its run's own figures."""
    e = store[PLAIN_LOAD]
    slug = e.id.rsplit(".", 1)[1]
    lines = ["| command | model_type, shape | loaded by `AutoModel` as | sparsecse imported there | "
             "max difference to sparsecse's embeddings | run's speed-up (met) | 7-task STS | minutes |",
             "|---|---|---|---|---|---|---|---|"]
    for r in e.figures["rows"]:
        parts = r["model"].split("/")  # RUN/model, or CURVE/speedup-X/model: the run that made it, if it stored it
        run = store.get(f"{'.'.join(parts[-3:-1])}.{slug}") or store.get(f"{parts[-2]}.{slug}")
        made = (f"`{command(run)}` | " if run else f"`{r['model']}` (its run stored no figures) | ")
        figures = (f"{x(run.figures['target']['speedup'])} ({'met' if run.figures['target']['met'] else 'missed'}) | "
                   f"{run.figures['sts_avg']:.2f} {ci(run.figures['ci'])} | {run.figures['minutes']:.1f} |"
                   if run else "— | — | — |")
        lines.append(f"| {made}`{r['model_type']}`, {r['layers']} layers, FFN {r['ffn']} | "
                     f"`{r['auto_model_class']}` | {'yes' if r['sparsecse_imported'] else 'no'} | "
                     f"{r['max_abs_diff']:.1e} | {figures}")
    return {"where": where(e), "sentences": str(e.figures["rows"][0]["sentences"]), "table": "\n".join(lines),
            "tolerance": f"{e.figures['tolerance']:g}"}
