"""The frontier's blocks: the frontier table, the speed-ups per CPU, the recipes' summaries and reached blocks, the evidence headline and the export guide's engines.

Each block renderer takes the results store (``{id: Entry}``) and returns the block's Markdown; ``scripts/figures_docs.py`` maps block names to them."""

from __future__ import annotations

from sparsecse.reporting.store import Entry
from figures_format import FRONTIER_ROWS, HEADLINES, L3, L6, RECIPE_RUNS, TRANSFER, best_run, ci, cpu, pm, shape, than_l3, where, x


def frontier_table(store: dict[str, Entry]) -> str:
    """The frontier: every recipe-made model in torch fp32 and OpenVINO int8 (one run, one CPU), with transfer."""
    run, transfer = store["frontier-engines.amd-epyc-avx2-only"], store[TRANSFER]
    lines = [f"{where(run)}; {shape(run)}; speed-up over dense L6 in torch fp32. Transfer: {where(transfer)} (rebuilt "
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
    lines = [f"torch fp32, {shape(store['frontier.amd-epyc-avx2-only'])}; each row one run on one machine (a run of a recipe times its model against its "
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


def deploy_engines(store: dict[str, Entry]) -> dict[str, str]:
    """The values of the export guide's summary of every engine on the AVX-512 VNNI CPU
    (docs/guides/_figures/deploy-engines.md)."""
    d = store["deploy-speed.amd-epyc-avx-512-vnni"]
    row = lambda model, engine: d.get(f"rows/{model}/{engine}")  # noqa: E731
    dense8, l38, p8, p5 = (row(m, "openvino-int8") for m in (L6, L3, "l3-0.8", "l3-0.5"))
    cpu_time = f" ({x(p8['cpu_speedup'])} in CPU time)" if "cpu_speedup" in p8 else ""  # timed best of N
    return {"where": where(d), "shape": shape(d), "dense8": x(dense8["speedup"]), "l38": x(l38["speedup"]),
            "p8": x(p8["speedup"]), "p8_cpu_time": cpu_time, "p8_sts": f"{p8['sts_avg']:.2f}",
            "l38_sts": f"{l38['sts_avg']:.2f}", "p8_torch": x(row("l3-0.8", "torch-fp32")["speedup"]),
            "l3_torch": x(row(L3, "torch-fp32")["speedup"]), "p5": x(p5["speedup"]), "p5_sts": f"{p5['sts_avg']:.2f}",
            "bf16": x(row(L6, "torch-bf16")["speedup"])}


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
