"""The frontier's blocks: the frontier table, the speed-ups per CPU, the recipes' summaries and reached blocks, the
evidence headline, the export guide's engines, the budgets guide's chain and the recipes guide's levers.

Each renderer takes the results store (``{id: Entry}``) and returns the values of its block's template (a
``_figures/NAME.md`` beside the page or in docs/_figures), or a table's Markdown (``reached``, ``stored_table``);
``scripts/figures_docs.py`` maps block names to them."""

from __future__ import annotations

from sparsecse.reporting.store import Entry
from figures_format import (BEST_OF_TIMED, ENGINES, FRONTIER_ROWS, HEADLINES, L3, L6, RECIPE_RUNS, TRANSFER,
                            best_run, ci, cpu, pm, shape, than_l3, vnni, where, x)


def frontier_table(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the frontier table (docs/_figures/frontier-table.md): every recipe-made model in torch fp32 and
    OpenVINO int8 (one run, one CPU), with transfer."""
    run, transfer = store[ENGINES], store[TRANSFER]
    lines = ["| model | made by | torch fp32 | OpenVINO int8 | transfer avg (7 tasks) | loses on transfer to L3 / to dense L6 |",
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
    return {"where": where(run), "shape": shape(run), "transfer_where": where(transfer), "table": "\n".join(lines)}


def speed_by_cpu(store: dict[str, Entry]) -> str:
    """The table of every torch fp32 speed-up the store holds for the frontier's models: one row per model and run,
    each run timing its models side by side with the one method of targets."""
    lines = ["| model | machine | measured by | over all-MiniLM-L6-v2 | over paraphrase-MiniLM-L3-v2 |",
             "|---|---|---|---|---|"]
    engines = store[ENGINES]
    for key, _, _ in FRONTIER_ROWS[1:]:  # every row but the 1x
        lines.append(f"| {key} | {cpu(engines)} | `benchmarks/deploy_speed.py` | "
                     f"{x(engines.get(f'rows/{key}/torch-fp32/speedup'))} | — |")
        # a recipe's run times its model over its input model; frontier-2x's run times L3 over L6 too
        runs = [(key, "speedup")] if key in RECIPE_RUNS else [("frontier-2x", "reference_speedup")] if key == L3 else []
        for name, field in runs:
            entry = store[RECIPE_RUNS[name]]
            speed = x(entry.figures[field])
            over_l3 = field == "speedup" and entry.figures.get("speedup_over", L6).endswith(L3)
            over = ("—", speed) if over_l3 else (speed, "—")
            lines.append(f"| {key} | {cpu(entry)} | its recipe run (`{name}`) | {over[0]} | {over[1]} |")
    return "\n".join(lines)


def speed_by_cpu_values(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the speed-ups per run (docs/results/_figures/speed-by-cpu.md): their shape and their table."""
    return {"shape": shape(store[ENGINES]), "table": speed_by_cpu(store)}


def frontier_2x_summary(store: dict[str, Entry]) -> dict[str, str]:
    """The values of what frontier-2x reached against L3, its run and its rebuild on another machine
    (docs/_figures/frontier-2x-summary.md)."""
    run, rebuilt = store[RECIPE_RUNS["frontier-2x"]], store["recipe.frontier-2x.intel-xeon-avx-512-vnni-amx"]
    v, w, f, r = run.figures["versus"], rebuilt.figures["versus"], run.figures, rebuilt.figures
    return {"difference": pm(v["difference"]), "paired_ci": ci(v["paired_ci"], True),
            "minutes": f"{f['minutes']:.0f}", "machine": cpu(run), "speedup": x(f["speedup"]),
            "l3_speedup": x(f["reference_speedup"]), "batch": str(run.provenance["batch_size"]),
            "than_l3": than_l3(f["speedup"], f["reference_speedup"]),
            "rebuilt_machine": cpu(rebuilt), "rebuilt_sts": f"{r['sts_avg']:.2f}", "rebuilt_difference": pm(w["difference"]),
            "rebuilt_paired_ci": ci(w["paired_ci"], True)}


def frontier_notes(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the frontier page's notes under its table (docs/results/_figures/frontier-notes.md):
    frontier-3.5x against L3 (its run), and what OpenVINO int8 costs and gains on every row of the engines' run."""
    f35, engines = store[RECIPE_RUNS["frontier-3.5x"]].figures, store[ENGINES]
    pairs = [(r["torch-fp32"], r["openvino-int8"]) for r in engines.figures["rows"].values()
             if "torch-fp32" in r and "openvino-int8" in r]
    gains = [int8["speedup"] / fp32["speedup"] for fp32, int8 in pairs]
    return {"f35_speedup": x(f35["speedup"]), "f35_difference": pm(f35["versus"]["difference"]),
            "f35_ci": ci(f35["versus"]["paired_ci"], True),
            "int8_cost": f"{max(fp32['sts_avg'] - int8['sts_avg'] for fp32, int8 in pairs):.2f}",
            "int8_low": x(min(gains)), "int8_high": x(max(gains)), "machine": cpu(engines),
            "vnni": vnni(engines)}


def mpnet_summary(store: dict[str, Entry]) -> dict[str, str]:
    """The values of mpnet-2x over three seeds on a GPU (docs/_figures/mpnet-summary.md); its speed-up, timed best of
    3 on its host's CPU, waits for a rebuild (``BEST_OF_TIMED``)."""
    run = store[RECIPE_RUNS["mpnet-2x"]]
    seeds = [s for s in run.figures["runs"] if s["run"].startswith("mpnet-2x")]  # not the other settings' run
    first = seeds[0]
    return {"seeds_sts": ", ".join(format(s["sts_avg"], ".2f") for s in seeds),
            "dense_sts": f"{run.figures['versus']['sts_avg']:.2f}", "gpu": run.provenance["gpu"],
            "minutes": f"{run.figures['minutes']:.0f}",
            "seed0_difference": pm(first["difference"]), "seed0_paired_ci": ci(first["paired_ci"], True)}


def headline(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the README's evidence table (docs/_figures/headline.md)."""
    mp, ml = store["evidence.mpnet.nvidia-h100"].figures, store["evidence.minilm.amd-epyc-avx2-only"].figures
    m, r, s = mp["masked_s0.2_l0.5"], mp["rewound_vs_control"], ml["masked_s0.04_l0.25"]
    values = {"rewound_seeds": str(r["seeds"]), "rewound_difference": pm(r["difference"]), "rewound_std": f"{r['std']:.2f}",
              "rewound_ci": ci(r["paired_ci"], True), "every_seed": {} if r["holds_every_seed"] else None}
    for name, row in (("mpnet", m), ("minilm", s)):
        values |= {f"{name}_pruned": f"{row['pruned']:.2f}", f"{name}_dense": f"{row['dense']:.2f}",
                   f"{name}_difference": pm(row["difference"]), f"{name}_ci": ci(row["paired_ci"], True)}
    return values


def deploy_engines(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the export guide's summary of OpenVINO int8 against torch fp32, pruned and not
    (docs/guides/_figures/deploy-engines.md), from the frontier's run of every row in both engines."""
    d = store[ENGINES]
    row = lambda model, engine: d.get(f"rows/{model}/{engine}")  # noqa: E731
    dense8, l38, p8, p5 = (row(m, "openvino-int8") for m in (L6, L3, "l3-prune-0.8", "l3-prune-0.5"))
    return {"where": where(d), "shape": shape(d), "dense8": x(dense8["speedup"]), "l38": x(l38["speedup"]),
            "l3_torch": x(row(L3, "torch-fp32")["speedup"]), "p8": x(p8["speedup"]), "p8_sts": f"{p8['sts_avg']:.2f}",
            "l38_sts": f"{l38['sts_avg']:.2f}", "p8_torch": x(row("l3-prune-0.8", "torch-fp32")["speedup"]),
            "p5": x(p5["speedup"]), "p5_sts": f"{p5['sts_avg']:.2f}",
            "vnni": vnni(d)}


def reached(store: dict[str, Entry], recipe: str) -> str:
    """A recipe's ``reached:`` block: what its run measured, the machine that measured it."""
    entry = best_run(store, *HEADLINES[0][1:]) if recipe == "target" else store[RECIPE_RUNS[recipe]]
    f, p = entry.figures, entry.provenance
    transfer = store[TRANSFER].figures["rows"].get(recipe) if recipe != "target" else None
    out = ["reached:", f"  sts_avg: {f['sts_avg']:.2f}"]
    own = f.get("transfer_avg")  # the run's own evaluation, else the transfer benchmark's row
    avg = own or (transfer or {}).get("transfer_avg")
    transfer = None if own else transfer
    if avg:
        out.append(f"  transfer_avg: {avg:.2f}")
    out.append(f"  ci: [{f['ci'][0]:.2f}, {f['ci'][1]:.2f}]")
    out.append(f"  stsb_dev: {f['stsb_dev']:.2f}")
    if f.get("versus"):
        v = f["versus"]
        out.append(f"  versus: {{model: {v['model']}, sts_avg: {v['sts_avg']:.2f}, difference: {v['difference']:.2f}, "
                   f"paired_ci: [{v['paired_ci'][0]:.2f}, {v['paired_ci'][1]:.2f}]}}")
    speed = f.get("speedup") or f.get("target", {}).get("speedup")
    if entry.id not in BEST_OF_TIMED:
        out.append(f"  speedup: {speed:.2f}")
        out.append(f"  speedup_over: {f.get('speedup_over', L6)}")
        if f.get("reference_speedup"):
            out.append(f"  reference_speedup: {f['reference_speedup']:.2f}")
    out.append(f"  minutes: {f['minutes']:.1f}")
    if entry.id in BEST_OF_TIMED:
        out.append(f"  machine: one {p['gpu']}")
    else:
        out.append(f"  machine: {cpu(entry)}, torch fp32, batch {p['batch_size']}")
    out.append("  seconds: {" + ", ".join(f"{k}: {v}" for k, v in f["seconds"].items()) + "}")
    out.append(f"  store: [{entry.id}" + (f", {TRANSFER}]" if transfer else "]"))  # the entries it was read from
    return "\n".join(out)


def stored_table(entry: Entry) -> str:
    """An entry that holds a table as its run printed it (``columns``, ``rows``), with its machine and command."""
    f = entry.figures
    return "\n".join([f"Measured by {where(entry)}" + (f" ({entry.provenance['note']})" if entry.provenance.get("note")
                                                        else "") + ":", "",
                      "| " + " | ".join(f["columns"]) + " |", "|" + "---|" * len(f["columns"]),
                      *("| " + " | ".join(row) + " |" for row in f["rows"])])


def assistant_chain(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the budgets guide's sentence on pruning the ensemble-distilled L6 to 0.45, the chain of the
    ``frontier-2x`` recipe (docs/guides/_figures/assistant-chain.md), from that recipe's run."""
    run = store[RECIPE_RUNS["frontier-2x"]]
    f = run.figures
    return {"pruned_sts": f"{f['sts_avg']:.2f}", "pruned_speedup": x(f["speedup"]),
            "l3_sts": f"{f['versus']['sts_avg']:.2f}", "l3_speedup": x(f["reference_speedup"]),
            "difference": pm(f["versus"]["difference"]), "paired_ci": ci(f["versus"]["paired_ci"], True),
            "where": f"`sparsecse compress --recipe frontier-2x` on {cpu(run)}, {run.provenance['date']}"}


def recipe_levers(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the recipes guide's figures for teacher precision and length bucketing
    (docs/guides/_figures/recipe-levers.md)."""
    t, b = store["teacher-precision.amd-epyc-avx2-only"], store["recipe-speed.amd-epyc-avx2-only"]
    tf, steps = t.figures, b.figures["steps_per_second"]
    return {"machine": cpu(t), "bf16_slowdown": f"{tf['bf16_slowdown']:.0f}", "int8_speedup": x(tf["int8_speedup"]),
            "int8_min_cosine": f"{tf['int8_min_cosine']:.2f}", "int8_mean_cosine": f"{tf['int8_mean_cosine']:.3f}",
            "bucketed": f"{steps['bucketed']:.2f}", "unbucketed": f"{steps['unbucketed']:.2f}",
            "bucketed_speedup": x(b.figures["speedup"]), "where": where(b), "batch": str(b.provenance["batch_size"])}
