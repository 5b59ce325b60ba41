"""The model card's sections with tables (:mod:`sparsecse.cards.model_card`): Evaluation (STS, transfer, the
user's dev/test files, MTEB), Compression (with its Target) and Training Details, each rendered from its facts;
a value that is missing, None or nan is left out, never printed."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

STS_LABEL = "STS avg (7 tasks)"


def known(value: Any) -> bool:
    """Whether a fact is worth printing.

    Args:
        value: the fact.

    Returns:
        False for None, nan or infinity and an empty container or string, else True.
    """
    if value is None:
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    if isinstance(value, (list, tuple, dict, str, set)) and not value:
        return False
    return True


def interval(ci, signed: bool = False) -> str:
    """An interval as text, ``[lo, hi]`` to two decimals after a space, or "" for a missing or partial one.

    Args:
        ci: the interval's two ends.
        signed: print a sign on both ends (for differences).

    Returns:
        The text, led by a space.
    """
    if not ci or len(ci) != 2 or not all(known(x) for x in ci):
        return ""
    return f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if signed else f" [{ci[0]:.2f}, {ci[1]:.2f}]"


def size_text(n: int) -> str:
    """Bytes as KiB or MiB to one decimal.

    Args:
        n: bytes.

    Returns:
        The text.
    """
    return f"{n / 2 ** 20:.1f} MiB" if n >= 2 ** 20 else f"{n / 2 ** 10:.1f} KiB"


def count_text(n: int) -> str:
    """A parameter count: millions to two decimals from one million, else the whole number.

    Args:
        n: the count.

    Returns:
        The text.
    """
    return f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n:,}"


def _memory(memory: dict[str, Any], peak: str, runtime: str) -> str:
    text = size_text(memory[peak])
    if known(memory.get(runtime)):
        text += f", {size_text(max(0, memory[peak] - memory[runtime]))} above the Python and torch runtime"
    return text


def evaluation_section(ev: dict[str, Any]) -> list[str]:
    """The Evaluation section: STS (or STS-B dev alone), transfer, the user's sets, MTEB, a note.

    Args:
        ev: the card's ``evaluation`` facts.

    Returns:
        Its markdown lines; none when there is nothing to report.
    """
    lines: list[str] = []
    sts = {t: s for t, s in (ev.get("sts") or {}).items() if known(s)}
    if sts:
        boot = f"{ev['bootstrap']} " if known(ev.get("bootstrap")) else ""
        lines += ["### Semantic textual similarity", "",
                  f"Spearman x 100 of cosine similarities (SentEval protocol); 95% intervals from {boot}bootstrap "
                  "resamples of the test pairs (`sts_results.json`, where present, holds the per-pair similarities: "
                  "`sparsecse compare` recomputes them).", "", "| task | score |", "|---|---:|"]
        lines += [f"| {task} | {score:.2f} |" for task, score in sts.items()]
        if known(ev.get("sts_avg")):
            lines.append(f"| **{STS_LABEL}** | **{ev['sts_avg']:.2f}**{interval(ev.get('sts_avg_ci'))} |")
        if known(ev.get("stsb_dev")):
            lines.append(f"| STS-B dev (the checkpoint choice) | {ev['stsb_dev']:.2f} |")
        versus = ev.get("versus") or {}
        if known(versus.get("difference")):
            lines += ["", f"Against `{versus['model']}` ({versus['sts_avg']:.2f}): **{versus['difference']:+.2f}**"
                          f"{interval(versus.get('paired_ci'), signed=True)} (paired bootstrap, this model minus it)."]
        lines.append("")
    elif known(ev.get("stsb_dev")):
        lines += [f"STS-B dev (Spearman x 100, the checkpoint choice): {ev['stsb_dev']:.2f}.", ""]
    lines += _transfer(ev)
    lines += _user_sets(ev)
    lines += _mteb(ev.get("mteb") or [])
    if known(ev.get("note")):
        lines += [ev["note"], ""]
    return ["## Evaluation", "", *lines] if lines else []


def _transfer_cell(d: dict[str, Any]) -> str:
    cell = f"{d['acc']:.2f}"
    if known(d.get("ci")):
        cell += interval(d["ci"])
    elif known(d.get("fold_std")):
        cell += f" ± {d['fold_std']:.2f} (folds)"
    if known(d.get("f1")):
        cell += f" (F1 {d['f1']:.2f})"
    return cell


def _diff_cell(d: dict[str, Any] | None) -> str:
    if not d or not known(d.get("diff")):
        return "—"
    if known(d.get("ci")):
        return f"{d['diff']:+.2f}{interval(d['ci'], signed=True)}"
    spread = f" ± {d['fold_std']:.2f}" if known(d.get("fold_std")) else ""
    agree = f" ({d['folds_agree']} folds agree)" if known(d.get("folds_agree")) else ""
    return f"{d['diff']:+.2f}{spread}{agree}"


def _transfer(ev: dict[str, Any]) -> list[str]:
    tasks = {t: d for t, d in (ev.get("transfer") or {}).items() if known((d or {}).get("acc"))}
    if not tasks:
        return []
    versus = ev.get("transfer_versus") or {}
    paired = versus.get("tasks") or {}
    settings = f" ({ev['transfer_settings']})" if known(ev.get("transfer_settings")) else ""
    lines = ["### Transfer tasks (SentEval)", "",
             f"Accuracy x 100 of a logistic regression on the frozen embeddings{settings}. MR, CR, SUBJ and MPQA are "
             "cross-validated: ± is the spread (standard deviation) of the outer folds; SST2, TREC and MRPC have a "
             "test set: a 95% bootstrap interval over its items."
             + (f" The last column is this model minus `{versus['model']}` on the same folds or test items "
                "(paired)." if paired else ""), "",
             "| task | accuracy |" + (" difference |" if paired else ""), "|---|---:|" + ("---:|" if paired else "")]
    for task, d in tasks.items():
        lines.append(f"| {task} | {_transfer_cell(d)} |" + (f" {_diff_cell(paired.get(task))} |" if paired else ""))
    if known(ev.get("transfer_avg")):
        avg_diff = f" {versus['avg_diff']:+.2f} |" if paired and known(versus.get("avg_diff")) else (
            " — |" if paired else "")
        lines.append(f"| **average ({len(tasks)} tasks)** | **{ev['transfer_avg']:.2f}** |" + avg_diff)
    return lines + [""]


def _user_sets(ev: dict[str, Any]) -> list[str]:
    sets = [(key, ev[key]) for key in ("dev_set", "test_set") if known((ev.get(key) or {}).get("score"))]
    if not sets:
        return []
    lines = ["### Your data", "", "| split | file | kind | metric | score | pairs or queries | recall@1 | MRR@10 |",
             "|---|---|---|---|---:|---:|---:|---:|"]
    for key, s in sets:
        extra = [f"{s[k]:.2f}" if known(s.get(k)) else "—" for k in ("recall@1", "mrr@10")]
        n = f"{s['n']:,}" if known(s.get("n")) else "—"
        lines.append(f"| {key.split('_')[0]} | {s.get('name') or '—'} | {s.get('kind') or '—'} | {s.get('metric') or '—'} "
                     f"| {s['score']:.2f}{interval(s.get('ci'))} | {n} | {extra[0]} | {extra[1]} |")
    return lines + [""]


def _mteb(tasks: list[dict[str, Any]]) -> list[str]:
    rows = [t for t in tasks if known(t.get("main_score"))]
    if not rows:
        return []
    lines = ["### MTEB", "", "| task | main score |", "|---|---:|"]
    for t in rows:
        lines.append(f"| {t.get('task')} | {t['main_score']:.4f}{interval(t.get('ci'))} |")
    return lines + [""]


def compression_section(c: dict[str, Any], base: str | None) -> list[str]:
    """The Compression section: kept units per layer, sizes, speed, peak memory and the Target subsection.

    Args:
        c: the card's ``compression`` facts.
        base: the base model's name (what speed and memory are compared with).

    Returns:
        Its markdown lines; none when there is nothing to report.
    """
    lines: list[str] = []
    layers = c.get("layers") or []
    if layers:
        lines += ["Kept units per layer (the rest were removed; FFN widths leave out inert zero padding):", "",
                  "| layer | attention heads kept | FFN neurons kept |", "|---:|---:|---:|"]
        lines += [f"| {r['layer']} | {r['heads']} / {r['heads_total']} | {r['ffn']} / {r['ffn_total']} |" for r in layers]
        lines.append("")
    sizes = []
    if known(c.get("parameters")):
        b, a = c["parameters"]
        sizes.append(f"- **Parameters:** {count_text(a)} of {count_text(b)} ({a / b:.3f} kept)")
    if known(c.get("flops_per_token")):
        b, a = c["flops_per_token"]
        seq = f" at {c['seq_len']} tokens" if known(c.get("seq_len")) else ""
        sizes.append(f"- **Layer FLOPs per token{seq}:** {a / b:.3f} of the source model's")
    if known(c.get("file_size_bytes")):
        sizes.append(f"- **Weight files:** {size_text(c['file_size_bytes'])}")
    speed = c.get("speed") or {}
    if known(speed.get("speedup")):
        ref = f"; `{speed['reference']}`: {speed['reference_speedup']:.2f}x" if known(
            speed.get("reference_speedup")) and known(speed.get("reference")) else ""
        threads = f", {speed['threads']} threads" if known(speed.get("threads")) else ""
        sentences = f", {speed['sentences']}" if known(speed.get("sentences")) else ""
        batch = f"throughput at batch {speed['batch_size']}, " if known(speed.get("batch_size")) else ""
        loader = f" via {speed['loader']}" if speed.get("loader") not in (None, "sparsecse") else ""
        sizes.append(f"- **Encode speed-up over `{base or 'the input model'}`:** {speed['speedup']:.2f}x{ref} "
                     f"({batch}{speed.get('engine', 'torch fp32')}{loader}{threads}{sentences}); CPU: "
                     f"{speed.get('cpu', 'not recorded')}")
    memory = c.get("memory") or {}
    if known(memory.get("peak_rss_bytes")):
        sizes.append(f"- **Peak memory while encoding:** {_memory(memory, 'peak_rss_bytes', 'runtime_rss_bytes')}"
                     + (f"; `{base or 'the input model'}`: "
                        f"{_memory(memory, 'input_peak_rss_bytes', 'input_runtime_rss_bytes')}"
                        if known(memory.get("input_peak_rss_bytes")) else "")
                     + f" ({memory.get('method', 'peak resident set size of the encoding process')})")
    if sizes:
        lines += sizes + [""]
    lines += _target(c.get("target") or {})
    return ["## Compression", "", *lines] if lines else []


def target_speedups(t: dict[str, Any]) -> tuple[Any, Any]:
    """(asked, measured) speed-up of a target's facts, in either spelling: ``speedup_target`` asked and
    ``speedup`` measured (what ``compress --speedup`` records), or ``speedup`` asked and ``measured_speedup``.

    Args:
        t: the ``target`` facts.

    Returns:
        The two values (None where missing).
    """
    if "speedup_target" in t:
        return t.get("speedup_target"), t.get("speedup")
    return t.get("speedup"), t.get("measured_speedup")


def _latency(latency: dict[str, Any] | None) -> str | None:
    latency = latency or {}
    return f"{latency['p50']:.1f} / {latency['p95']:.1f} ms" if known(latency.get("p50")) and known(
        latency.get("p95")) else None


def _beside(value: str | None, reference: str | None) -> str | None:
    return f"{value} (input model: {reference})" if value and reference else value


def _repair(repair: dict[str, Any] | None) -> str | None:
    """The card's line on a near miss's repair (:mod:`sparsecse.recipes.repair`), or None where there was none."""
    if not repair:
        return None
    if repair.get("tried") is False:
        return ("the first figure fell short of the target, its interval covering it; no smaller step was pruned "
                f"({repair.get('why')})")
    before = repair.get("before_interval") or {}
    # three places: a first figure of 1.9985 is not "2.00x" beside a 2x target
    first = f"{repair['before']:.3f}x" + (f" ({before['low']:.2f}-{before['high']:.2f}x)"
                                          if known(before.get("low")) and known(before.get("high")) else "")
    when = ", before the training" if repair.get("before_training") else ""
    outcome = "kept" if repair.get("met") else "short again, so the run's own model is kept"
    return (f"the first figure, {first}, fell short of the target with its interval covering it: pruned one more "
            f"step to {repair['keep']:g} of its layer FLOPs{when}, then timed again: {repair['after']:.2f}x, "
            f"{outcome}")


def _timed_on(t: dict[str, Any]) -> str | None:
    """Which model the target's figure was timed on: the pruned one before the training (which keeps its shapes), or
    the final model itself."""
    timed = t.get("timed_model")
    if not known(timed):
        return None
    name = "/".join(Path(str(timed)).parts[-2:])
    return f"`{name}`" + (", before the training that followed it (training keeps its shapes)"
                          if t.get("timed_before_training") else "")


def _time_limit(limit: dict[str, Any] | None) -> str | None:
    """The card's line on a run's time limit: where its last training stage ended and why."""
    if not limit or not known(limit.get("minutes")):
        return None
    minutes = f"{limit['minutes']:g} minutes"
    if known(limit.get("fitted_steps")):
        where = f"the student's schedule was fitted to {limit['fitted_steps']} steps"
        ran = limit.get("steps_run_to")
        if known(ran) and ran < limit["fitted_steps"]:
            where += f"; it stopped at step {ran}, where its dev score stopped rising"
        return f"{minutes}: {where}"
    return f"{minutes}, not reached by the student"


def _target(t: dict[str, Any]) -> list[str]:
    if not t:
        return []
    asked_speedup, measured = target_speedups(t)
    asked = []
    named = t.get("speedup_of") or {}
    if named.get("model") and known(asked_speedup):  # another model's speed-up, timed beside the final model
        asked.append(f"{named['model']}'s speed-up ({asked_speedup:.2f}x in the same timing; "
                     f"{named['aimed']:.2f}x when the run started, the search aiming above it by the margin)")
    elif known(asked_speedup):
        asked.append(f"a {asked_speedup:g}x speed-up")
    if known(t.get("max_drop")):
        asked.append(f"at most {t['max_drop']:g} points lost on dev")
    shape = t.get("shape") or {}
    engine = ", ".join(str(x) for x in (t.get("engine"), shape.get("metric"), f"batch {t['batch_size']}" if known(
        t.get("batch_size")) else None, f"{shape['threads']} threads" if known(shape.get("threads")) else None,
        f"via {shape['loader']}" if shape.get("loader") not in (None, "sparsecse") else None) if known(x))
    lines = ["### Target", ""]
    if asked:
        met = {True: "met", False: "**not met**"}.get(t.get("met"), "")
        lines += [f"Asked for {' and '.join(asked)}" + (f" on {engine}" if engine else "") + (f": {met}." if met else "."),
                  ""]
    dev = None
    if known(t.get("dev_score")) and known(t.get("reference_dev")):
        dev = (f"{t['dev_score']:.2f} against the input model's {t['reference_dev']:.2f}"
               + (f" on {t['dev_set']}" if known(t.get("dev_set")) else "")
               + (f" (drop {t['drop']:.2f})" if known(t.get("drop")) else ""))
    throughput = f"{t['throughput']:.1f} sentences/s" if known(t.get("throughput")) else None
    reference_throughput = f"{t['reference_throughput']:.1f}" if known(t.get("reference_throughput")) else None
    spread = f" ±{t['spread']:.0%} (the spread of {t.get('rounds', 'its')} interleaved rounds)" if known(
        t.get("spread")) else ""
    iv = t.get("interval") or {}
    if known(iv.get("low")) and known(iv.get("high")):  # a figure with its interval names how it was timed
        spread = (f" ({iv.get('confidence', 0.99):.0%} interval {iv['low']:.2f}-{iv['high']:.2f}x over "
                  f"{iv.get('rounds', t.get('rounds'))} rounds; {t.get('method') or 'interleaved rounds'})")
    threads = f", {shape['threads']} threads" if known(shape.get("threads")) else ""
    rows = [("Measured speed-up", f"{measured:.2f}x{spread}" + (f" ({engine})" if engine else "")
             if known(measured) else None),
            ("Near miss", _repair(t.get("repair"))),
            ("Timed on", _timed_on(t)),
            ("Time limit", _time_limit(t.get("time_limit"))),
            ("Dev score", dev),
            (f"Latency p50 / p95 of one sentence (batch 1{threads})",
             _beside(_latency(t.get("latency_ms")), _latency(t.get("reference_latency_ms")))),
            (f"Throughput at batch {t['batch_size']}{threads}" if known(t.get("batch_size")) else "Throughput",
             _beside(throughput, reference_throughput)),
            ("Layers", f"{t['layers']} of the input model's {t['input_layers']} (candidates could remove up to "
                       f"{t['depth']}{', auto' if t.get('depth_default') else ''})"
             if known(t.get("layers")) and known(t.get("input_layers")) and known(t.get("depth")) else None),
            ("Parameters", count_text(t["params"]) if known(t.get("params")) else None),
            ("File size", size_text(t["file_size_bytes"]) if known(t.get("file_size_bytes")) else None),
            ("CPU features", " ".join(t["cpu_features"]) if known(t.get("cpu_features")) else None),
            ("Candidates", f"`{t['candidates_table']}`" + (f", plotted in `{t['candidates_plot']}`"
                                                            if known(t.get("candidates_plot")) else "")
             if known(t.get("candidates_table")) else None)]
    lines += [f"- **{name}:** {value}" for name, value in rows if known(value)]
    return lines + [""] + serving_lines(t.get("serving") or {})


def serving_lines(serving: dict[str, Any]) -> list[str]:
    """The serving table: one speed figure per shape (threads x batch), the model's and the input model's latency
    per request, the row the target was judged by marked.

    Args:
        serving: the target's ``serving`` facts (:func:`~sparsecse.targets.serving.serving_table`).

    Returns:
        Its markdown lines; none without rows.
    """
    rows = serving.get("rows") or []
    if not rows:
        return []
    lines = ["#### Serving", "", f"{serving.get('method', 'measured side by side')}.", "",
             "| threads | batch | speed-up | latency p50 / p95 | input p50 / p95 | |",
             "|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        mark = f"**judged by** ({serving.get('metric', 'the target')})" if r.get("judged") else ""
        lines.append(f"| {r['threads']} | {r['batch']} | {r['speedup']:.2f}x ±{r['spread']:.0%} | "
                     f"{r['p50_ms']:.1f} / {r['p95_ms']:.1f} ms | {r['input_p50_ms']:.1f} / {r['input_p95_ms']:.1f} ms "
                     f"| {mark} |")
    return lines + [""]


def training_section(t: dict[str, Any]) -> list[str]:
    """The Training Details section: recipe, command, corpus, losses, steps, stages, wall time, the recipe.

    Args:
        t: the card's ``training`` facts.

    Returns:
        Its markdown lines; none when there is nothing to report.
    """
    rows = [("Recipe", f"`{t['recipe']}`" if known(t.get("recipe")) else None),
            ("Made by", f"`{t['made_by']}`" if known(t.get("made_by")) else None),
            ("Corpus", f"`{t['corpus']}`" if known(t.get("corpus")) else None),
            ("Corpus sentences", f"{t['corpus_sentences']:,}" if known(t.get("corpus_sentences")) else None),
            ("Losses", ", ".join(t["losses"]) if known(t.get("losses")) else None),
            ("Steps", t.get("steps")), ("Batch size", t.get("batch_size")), ("Learning rate", t.get("lr")),
            ("Final loss", f"{t['final_loss']:.4f}" if known(t.get("final_loss")) else None),
            ("Checkpoint", t.get("selected"))]
    lines = [f"- **{name}:** {value}" for name, value in rows if known(value)]
    if known(t.get("stages")):
        lines += ["", "Stages:", "", *[f"{i}. {s}" for i, s in enumerate(t["stages"], 1)]]
    seconds = {k: v for k, v in (t.get("seconds") or {}).items() if known(v)}
    if seconds:
        lines += ["", "| stage | wall time |", "|---|---:|", *[f"| {k} | {v / 60:.1f} min |" for k, v in seconds.items()],
                  f"| total | {sum(seconds.values()) / 60:.1f} min |"]
    if known(t.get("command")):
        lines += ["", "The command that rebuilds it:", "", "```bash", t["command"], "```"]
    if known(t.get("recipe_yaml")):
        lines += ["", "The recipe as it ran (`recipe.yaml`):", "", "```yaml", t["recipe_yaml"].rstrip(), "```"]
    return ["## Training Details", "", *lines, ""] if lines else []
