"""The targets guide's latency blocks: each latency target's run, its finalists and its independent single-query timing.

Each block renderer takes the results store (``{id: Entry}``) and returns the block's Markdown; ``scripts/figures_docs.py`` maps block names to them."""

from __future__ import annotations

import re

from sparsecse.reporting.store import Entry
from figures_format import L3, ci, command, cpu, pm, where, x
from figures_frontier import stored_table


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


def latency_default_runs(store: dict[str, Entry]) -> str:
    """The default latency command's stored runs on one machine side by side (``lat2x-N.MACHINE``), each with its own
    final figure and the independent served-alone timing of its model (the last ``serving-latency.alone.lat2x.*.MACHINE``
    session that served it, beside L3)."""
    timing = max((e for i, e in store.items() if i.startswith("serving-latency.alone.lat2x.")),
                 key=lambda e: e.provenance["date"])
    slug = timing.id.split(".")[-1]
    runs = sorted((e for i, e in store.items() if re.fullmatch(rf"lat2x-\d+\.{re.escape(slug)}", i)),
                  key=lambda e: int(e.id.split(".")[0].split("-")[1]))
    sessions = sorted((e for i, e in store.items() if i.startswith("serving-latency.alone.lat2x.") and i.endswith(slug)),
                      key=lambda e: (e.provenance["date"], e.id))  # each run's model as last served alone
    alone = {r["model"]: (r, next(q for q in e.figures["rows"] if L3 in q["model"]))
             for e in sessions for r in e.figures["rows"]}
    lines = [f"`{command(runs[0]).replace(' --out runs/' + runs[0].id.split('.')[0], '')}` from a cold cache, "
             f"on {cpu(runs[0])}; served alone: {where(timing)}, each model in a process of its "
             f"own, in turns of {timing.figures.get('turn', 1)} requests, beside paraphrase-MiniLM-L3-v2 in the same "
             "session:", "",
             "| run | date | wall | the run's p50 speed-up | served alone, p50 | L3 there | 7-task STS avg | STS-B dev | "
             "met |", "|---|---|---|---|---|---|---|---|---|"]
    for e in runs:
        f, name = e.figures, e.id.split(".")[0]
        served, l3 = alone.get(f"runs/{name}/model", (None, None))
        lines.append(f"| {name} | {e.provenance['date']} | {f['minutes']:.1f} min | {x(f['target']['speedup'])} | "
                     f"{x(served['p50_speedup']) if served else '—'} | {x(l3['p50_speedup']) if l3 else '—'} | "
                     f"{f['sts_avg']:.2f} {ci(f['ci'])} | {f['stsb_dev']:.2f} | {'yes' if f['target']['met'] else 'no'} |")
    return "\n".join(lines)
