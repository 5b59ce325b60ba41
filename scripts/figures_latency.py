"""The latency blocks of the targets guide and the latency page: each latency target's run, its finalists and its
independent single-query timing.

Each renderer takes the results store (``{id: Entry}``) and returns the values of its block's template (a
``_figures/NAME.md`` beside the page), or a timing's table (``latency-longer-all``);
``scripts/figures_docs.py`` maps block names to them."""

from __future__ import annotations

import re

from sparsecse.reporting.store import Entry
from figures_format import L3, RECIPE_RUNS, ci, command, cpu, pm, where, x
from figures_frontier import stored_table


def latency_target(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the latency-p50 run (docs/results/_figures/latency-target.md): what it reached, its independent
    single-query timing, its finalists."""
    run = store["target.l6-lat2x.intel-xeon-avx-512-vnni-amx"]
    finalists = store["depth-finalists.l6-lat2x.intel-xeon-avx-512-vnni-amx"]
    f, t = run.figures, run.figures["target"]
    return {"machine": cpu(run), **choice(chosen_finalist(finalists)), "speedup": x(t["speedup"]), "p50_ms": f"{t['latency_ms']['p50']:.2f}",
            "stsb_dev": f"{f['stsb_dev']:.2f}", "input_dev": f"{t['reference_dev']:.2f}", **quality(f),
            "batch_speedup": x(f["speedup"]), "l3_batch_speedup": x(f["reference_speedup"]),
            "note": run.provenance["note"].capitalize(),
            "timing_table": stored_table(store["serving-latency.l6-lat2x.intel-xeon-avx-512-vnni-amx"]),
            "finalists_table": stored_table(finalists)}


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


def choice(chosen: list) -> dict[str, str]:
    """The values of a chosen finalist: its layers removed, the kept FLOPs of the rest, its probe's speed-up."""
    return {"removed": str(chosen[0]), "keep_flops": f"{float(chosen[1]):.3f}", "probed": str(chosen[2])}


def quality(figures: dict) -> dict[str, str]:
    """The values of a run's 7-task STS avg and its paired difference from L3."""
    versus = figures["versus"]
    return {"sts": f"{figures['sts_avg']:.2f}", "ci": ci(figures["ci"]), "difference": pm(versus["difference"]),
            "paired_ci": ci(versus["paired_ci"], True), "l3_sts": f"{versus['sts_avg']:.2f}"}


def latency_facts(run: Entry, finalists: Entry, timing: Entry, name: str) -> tuple:
    """(machine slug, figures, target, the values of its chosen finalist and quality, the model's row of the
    timing)."""
    mine = next(r for r in timing.figures["rows"] if name in r["model"])
    f = run.figures
    values = {"command": command(run), "machine": cpu(run), "minutes": f"{f['minutes']:.1f}",
              "stsb_dev": f"{f['stsb_dev']:.2f}", **choice(chosen_finalist(finalists)), **quality(f)}
    return run.id.split(".")[-1], f, f["target"], values, mine


def latency_tables(timing: Entry, mine: dict, label: str, finalists: Entry) -> dict[str, str]:
    """The independent timing's table (the model named ``label``) and the finalists' table."""
    return {"timing_table": latency_table(timing, {"all-MiniLM-L6-v2": "all-MiniLM-L6-v2 (input)", mine["model"]: label}),
            "finalists_table": stored_table(finalists)}


def latency_teacher(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the latency-p50 run with a teacher ensemble (docs/results/_figures/latency-teacher.md): what it
    chose and reached, its independent single-query timing, its finalists."""
    run, finalists, timing = latency_entries(store, "l6-lat2x-ens", "serving-latency")
    slug, f, t, values, mine = latency_facts(run, finalists, timing, "l6-lat2x-ens")
    self_run = store[f"target.l6-lat2x.{slug}"].figures
    return {**values, "speedup": x(t["speedup"]), "p50_ms": f"{t['latency_ms']['p50']:.2f}",
            "served_speedup": x(mine["p50_speedup"]), "quality_aim": "met" if f["sts_avg"] >= 77.0 else "missed",
            "self_sts": f"{self_run['sts_avg']:.2f}", "self_stsb_dev": f"{self_run['stsb_dev']:.2f}",
            **latency_tables(timing, mine, "the latency-p50 2x model, teacher ensemble", finalists)}


def latency_longer(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the latency-p50 run self-distilled on twice the sentences, timed in a fresh process
    (docs/results/_figures/latency-longer.md): what it chose, its own final figure, the independent single-query
    timing, its quality and its finalists."""
    run, finalists, timing = latency_entries(store, "l6-lat2x-long", "serving-latency.turn100")
    _, f, t, values, mine = latency_facts(run, finalists, timing, "l6-lat2x-long")
    l3 = next(r for r in timing.figures["rows"] if L3 in r["model"])
    return {**values, "quality_aim": "met" if f["sts_avg"] >= 77.0 else "missed",
            "speed_aim": "met" if mine["p50_speedup"] >= 1.9 else "missed", "served_speedup": x(mine["p50_speedup"]),
            "served_p50_ms": f"{mine['p50_ms']:.2f}", "l3_served_speedup": x(l3["p50_speedup"]),
            "speedup": x(t["speedup"]), "note": run.provenance["note"],
            **latency_tables(timing, mine, "the latency-p50 2x model, 2,000 student steps", finalists)}


def latency_longer_all(store: dict[str, Entry]) -> str:
    """The latency-p50 run trained longer (timed in one long-lived process) served one query at a time over every
    distinct STS-B test sentence."""
    run, _, timing = latency_entries(store, "l6-lat2x-long", "serving-latency.turn100-all")
    mine = next(r for r in timing.figures["rows"] if "l6-lat2x-long" in r["model"])
    return latency_table(timing, {"all-MiniLM-L6-v2": "all-MiniLM-L6-v2 (input)",
                                  mine["model"]: "the latency-p50 2x model, 2,000 student steps"})


def latency_served(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the latency-p50 run timed through sentence-transformers (docs/guides/_figures/latency-served.md):
    what it chose, its own final figure, the independent single-query timing over every test sentence, its quality
    against L3, and its finalists (the width-only one at the same latency among them)."""
    run, finalists, timing = latency_entries(store, "l6-lat2x-st", "serving-latency.turn100")
    _, f, t, values, mine = latency_facts(run, finalists, timing, "l6-lat2x-st")
    l3 = next(r for r in timing.figures["rows"] if L3 in r["model"])
    width = next((r for r in finalists.figures["rows"] if r[0] == "0"), None)
    chosen = chosen_finalist(finalists)
    return {**values, "speedup": x(t["speedup"]), "served_speedup": x(mine["p50_speedup"]),
            "speed_aim": "met" if mine["p50_speedup"] >= 1.9 else "missed", "l3_served_speedup": x(l3["p50_speedup"]),
            "quality_aim": ("target 77.0 met, aim 77.5 met" if f["sts_avg"] >= 77.5 else "target 77.0 met, aim 77.5 not"
                            if f["sts_avg"] >= 77.0 else "target 77.0 missed"),
            "width_only": {"keep_flops": f"{float(width[1]):.3f}", "dev": width[4], "chosen_dev": chosen[4]}
            if width else None,
            **latency_tables(timing, mine, "the latency-p50 2x model, timed as served", finalists)}


DEFAULT_LATENCY = ("sparsecse compress --model all-MiniLM-L6-v2 --corpus ../shared/data/unlabeled/train_sentences.txt "
                   "--speedup 2.0 --metric latency-p50")
RUN_PLACES = ("--out", "--store")  # where a run writes: not part of which command it is


def options(text: str) -> tuple[str, dict[str, str]]:
    """A command's words before its first option, and its options (each ``--name``: its value, or "")."""
    words = text.split()
    first = next((i for i, w in enumerate(words) if w.startswith("--")), len(words))
    found, name = {}, None
    for word in words[first:]:
        if word.startswith("--"):
            name, found[word] = word, ""
        elif name is not None:
            found[name], name = word, None
    return " ".join(words[:first]), found


def run_folder(entry: Entry) -> str | None:
    """The ``--out`` folder of a stored run (None for an entry with no command, or none that wrote a folder)."""
    return options(entry.provenance["command"])[1].get("--out") if "command" in entry.provenance else None


def default_latency_run(entry: Entry) -> str | None:
    """The ``--out`` folder of a stored run of the default latency command (:data:`DEFAULT_LATENCY`, in any order,
    wherever it wrote), else None."""
    if entry.id.startswith("serving-") or "command" not in entry.provenance:
        return None
    program, given = options(command(entry))
    mine = (program, {k: v for k, v in given.items() if k not in RUN_PLACES})
    return given.get("--out") if mine == options(DEFAULT_LATENCY) and given.get("--out") else None


def session_order(entry: Entry) -> tuple:
    """The order in which served-alone sessions stand for a model: the newest day's, and on one day the session with
    the most requests (every distinct test sentence over the file's first few hundred, mostly short captions)."""
    return entry.provenance["date"], entry.figures.get("requests", 0), entry.id


def served_alone(store: dict[str, Entry], machine: str, model: str) -> tuple[dict, dict, Entry] | None:
    """``model``'s row, L3's row and the session itself of the served-alone session on ``machine`` that stands for
    it (:func:`session_order`), or None where none served it."""
    sessions = [e for i, e in store.items() if i.startswith("serving-latency.alone.") and e.machine == machine
                and any(r["model"] == model for r in e.figures["rows"])]
    if not sessions:
        return None
    session = max(sessions, key=session_order)
    rows = {r["model"]: r for r in session.figures["rows"]}
    return rows[model], next(r for m, r in rows.items() if L3 in m), session


def latency_default_runs(store: dict[str, Entry]) -> dict[str, str]:
    """The values of every stored run of the default latency command (:data:`DEFAULT_LATENCY`), machine by machine
    (docs/guides/_figures/latency-default-runs.md), each with its own final figure and the independent served-alone
    timing of its model on its machine (:func:`served_alone`, beside L3)."""
    runs = sorted(((e, out) for e in store.values() if (out := default_latency_run(e))),
                  key=lambda r: (r[0].machine, r[0].provenance["date"],
                                 int(re.sub(r"\D", "", r[0].id.split(".")[0]) or 0)))
    lines = ["| machine | run | date | wall | layers removed, kept FLOPs of the rest | the run's p50 speed-up [99%] | "
             "served alone, p50 | L3 there | 7-task STS avg | STS-B dev | met |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    turns = set()
    for e, out in runs:
        f = e.figures
        served, l3, session = served_alone(store, e.machine, f"{out}/model") or (None, None, None)
        if session is not None:
            turns.add(session.figures.get("turn", 1))
        choice, interval = f["target"].get("choice"), f["target"].get("interval")
        chose = f"{choice['layers_removed']}, {choice['keep_flops']:.3f}" if choice else "—"
        within = f" [{interval['low']:.2f}, {interval['high']:.2f}]" if interval else ""
        lines.append(f"| {cpu(e)} | {out.split('/')[-1]} | {e.provenance['date']} | {f['minutes']:.1f} min | {chose} | "
                     f"{x(f['target']['speedup'])}{within} | {x(served['p50_speedup']) if served else '—'} | "
                     f"{x(l3['p50_speedup']) if l3 else '—'} | {f['sts_avg']:.2f} {ci(f['ci'])} | "
                     f"{f['stsb_dev']:.2f} | {'yes' if f['target']['met'] else 'no'} |")
    return {"command": DEFAULT_LATENCY, "turn": " or ".join(str(t) for t in sorted(turns)), "table": "\n".join(lines)}


def latency_recipe(store: dict[str, Entry], recipe: str = "frontier-lat2x") -> dict[str, str]:
    """The values of a batch-1 recipe's run (docs/guides/_figures/latency-recipe.md; its ``RECIPE_RUNS`` entry):
    what it reached against L3, and the independent served-alone timing of its model beside L6 and L3 on the same
    machine (:func:`served_alone`)."""
    run = store[RECIPE_RUNS[recipe]]
    f, versus = run.figures, run.figures["versus"]
    mine, l3, timing = served_alone(store, run.machine, f"{run_folder(run)}/model")
    return {"command": command(run), "machine": cpu(run), "minutes": f"{f['minutes']:.1f}",
            "speedup": x(f["target"]["speedup"]), "sts": f"{f['sts_avg']:.2f} {ci(f['ci'])}",
            "l3_sts": f"{versus['sts_avg']:.2f}",
            "difference": f"{pm(versus['difference'])} {ci(versus['paired_ci'], True)}",
            "dev": f"{f['stsb_dev']:.2f}", "alone": x(mine["p50_speedup"]), "l3_alone": x(l3["p50_speedup"]),
            "timing_where": where(timing), "requests": str(timing.figures["requests"]),
            "above": ("above" if versus["paired_ci"][0] > 0 else "level with" if versus["paired_ci"][1] >= 0
                      else "below")}


def l3speed_recipe(store: dict[str, Entry]) -> dict[str, str]:
    """The values of ``frontier-l3speed``'s run (docs/guides/_figures/l3speed-recipe.md): :func:`latency_recipe`'s,
    and L3's own speed-up in the run's two timings (when it started, what the search aimed at; beside the final
    model)."""
    named = store[RECIPE_RUNS["frontier-l3speed"]].figures["target"]["speedup_of"]
    return {**latency_recipe(store, "frontier-l3speed"), "aimed": x(named["aimed"]), "beside": x(named["speedup"])}
