"""The targets guide's blocks and the README's headline runs: the answer first, the target runs, the corpus sizes, the busy machine and the curve.

Each block renderer takes the results store (``{id: Entry}``) and returns the block's Markdown; ``scripts/figures_docs.py`` maps block names to them."""

from __future__ import annotations

import re

from sparsecse.reporting.store import Entry
from figures_format import HEADLINES, L3, RECIPE_RUNS, best_run, ci, command, cpu, pm, pm_minutes, shape, than_l3, where, x


def headline_runs(store: dict[str, Entry]) -> str:
    """The README's table: each headline command's best current result, with its machine and date."""
    runs = [(label, best_run(store, has, lacks)) for label, has, lacks in HEADLINES]
    machines = sorted({cpu(e) for _, e in runs})
    threads = ", ".join(str(t) for t in sorted({e.provenance.get("threads") or 0 for _, e in runs}))
    lines = [f"On {machines[0] if len(machines) == 1 else f'the CPU each row names, {threads} threads'}, the stored run of each command that met its target with the best 7-task STS "
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
        where_ = "" if len(machines) == 1 else f" ({e.machine})"
        lines.append(f"| {label}{where_} | {speed} | {sts} | {l3} | {e.provenance['date']}{wall} |")
    return "\n".join(lines)


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
            "latency_pace": pace, "machine": cpu(curve), "teacher_sts": f"{teacher.figures['sts_avg']:.2f}",
            "teacher_verdict": verdict(teacher, False), "teacher_machine": cpu(teacher)}


def targets_table(store: dict[str, Entry]) -> str:
    """The targets guide's table: the three target runs."""
    t2x, ov = store[RECIPE_RUNS["target"]], store["target.t2x-ov.intel-xeon-avx-512-vnni-amx"]
    d03, again = store["target.l3-d03.intel-xeon-avx-512-vnni-amx"], store["targets-retimed.intel-xeon-avx-512-vnni-amx"]

    def probes(f):
        return ", ".join(f"{p['keep_flops']:.3f}: {x(p['speedup'])}" for p in f["probes"])

    a, b, c = t2x.figures, ov.figures, d03.figures
    return "\n".join([
        f"Each run on {cpu(t2x)}, from a cold start (an empty sparsecse cache), nothing else running; the speed-up "
        f"first as the run measured it on the STS-B dev sentences, then re-timed by {where(again)} on {shape(again)}.", "",
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


def targets_intro(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the targets guide's opening figures (docs/guides/_figures/targets-intro.md): what a FLOPs
    fraction ran on one CPU."""
    l6, l3 = store[RECIPE_RUNS["frontier-2x"]], store[RECIPE_RUNS["l3-prune-0.5"]]
    return {"machine": cpu(l6), "l6_speedup": x(l6.figures["speedup"]), "l3_speedup": x(l3.figures["speedup"])}


def targets_flops(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the targets guide's point that a FLOPs fraction does not predict a speed-up, per CPU
    (docs/guides/_figures/targets-flops.md)."""
    amx, avx2 = store["recipe.frontier-2x.intel-xeon-avx-512-vnni-amx"], store[RECIPE_RUNS["frontier-2x"]]
    ov = store["target.t2x-ov.intel-xeon-avx-512-vnni-amx"]
    return {"amx_speedup": x(amx.figures["speedup"]), "amx_machine": cpu(amx), "avx2_speedup": x(avx2.figures["speedup"]),
            "avx2_machine": cpu(avx2), "ov_keep_flops": f"{ov.figures['keep_flops']:.2f}", "ov_machine": cpu(ov)}


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


L6_CURVE = "l6-curve5"  # the run the targets guide's curve block shows


def layer_choice(store: dict[str, Entry]) -> str:
    """The targets guide's table of depth cuts: the layers each layer criterion chooses and the other cuts tried,
    with their embedding fidelity and STS-B dev right after the cut and after a short recovery (the newest
    ``benchmarks/layer_choice.py`` entry for all-MiniLM-L6-v2)."""
    entry = max((e for i, e in store.items() if i.startswith("layer-choice.all-minilm-l6-v2.")),
                key=lambda e: e.provenance["date"])
    f = entry.figures
    lines = [f"Measured by {where(entry)}: {f['removed_layers']} of the 6 layers removed at full width, then "
             f"{f['steps']} distillation steps from the input model (batch {f['batch_size']}, lr {f['lr']:g}); the "
             f"input model's STS-B dev is {f['reference_dev']:.2f}.", "",
             "| layers removed | chosen by | embedding fidelity | STS-B dev after the cut | after the recovery |",
             "|---|---|---|---|---|"]
    for r in f["rows"]:
        chosen = ", ".join(f"`{name}`" for name in r["chosen_by"]) or "—"
        lines.append(f"| {', '.join(map(str, r['removed']))} | {chosen} | {r['fidelity']:.3f} | "
                     f"{r['dev_after_cut']:.2f} | {r['dev_recovered']:.2f} |")
    return "\n".join(lines)


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
                         f"{s['layers']} of {s['source_layers']} | {ffn} | {x(s['speedup'])} | {s['sts_avg']:.2f} "
                         f"{ci(s['ci'])} | {s['stsb_dev']:.2f} | {diff} | {s['minutes']:.1f} |")
    worst = min(r["difference"] for r in f["rows"])
    verdict = (f"Stock costs at most {pm(worst)} STS at any of these targets, within the {f['tolerance']} allowed, so "
               "`--layout stock` is the default." if f["choice"] == "stock" else
               f"Stock costs up to {pm(worst)} STS at these targets, more than the {f['tolerance']} allowed, so "
               "`--layout custom` stays the default.")
    return {"where": where(e), "table": "\n".join(lines), "verdict": verdict}
