"""How the figure blocks print a figure (a speed-up, a signed difference, an interval, a machine, a command) and which stored runs they read (the recipes' runs, the README's headline commands and their best current run).

The block renderers (``figures_frontier.py``, ``figures_targets.py``, ``figures_latency.py``) take the results store
(``{id: Entry}``) and return the values of their block's template; ``scripts/figures_docs.py`` maps block names to
them."""

from __future__ import annotations

import re

from sparsecse.reporting.store import Entry


def shape(entry: Entry) -> str:
    """The sentences, batch and timing method of a benchmark entry's speed-ups, read from the entry: the median of
    its interleaved rounds' ratios, the one timing of every speed figure."""
    f = entry.figures
    return (f"{f['sentences']:,} STS-B test sentences, batch {entry.provenance['batch_size']}, the median of "
            f"{f['rounds']} interleaved rounds' ratios")


L6, L3 = "all-MiniLM-L6-v2", "paraphrase-MiniLM-L3-v2"


FRONTIER_ROWS = [(L6, "all-MiniLM-L6-v2", "download"), ("frontier-1.4x", "L6 at 0.7 of its layer FLOPs", None),
                 (L3, "paraphrase-MiniLM-L3-v2 (L3)", "download"), ("frontier-2x", "**L6 at 0.45**", None),
                 ("l3-prune-0.8", "L3 at 0.8", None), ("l3-prune-0.5", "L3 at 0.5", None),
                 ("frontier-3.5x", "L3 at 0.42, distilled", None)]


# each recipe's quiet run from a cold cache, named after its --out folder as docs/results/frontier.md types it
RECIPE_RUNS = {"frontier-1.4x": "f14.amd-epyc-avx2-only", "frontier-2x": "f2x.amd-epyc-avx2-only",
               "frontier-3.5x": "f35.amd-epyc-avx2-only", "l3-prune-0.8": "l3-08.amd-epyc-avx2-only",
               "l3-prune-0.5": "l3-05.amd-epyc-avx2-only", "frontier-lat2x": "flat2x.intel-xeon-avx-512-vnni-amx",
               "mpnet-2x": "recipe.mpnet-2x.nvidia-h100",
               "frontier-l3speed": "l3speed.intel-xeon-avx-512-vnni-amx",
               "target": "target.t2x.intel-xeon-avx-512-vnni-amx"}


# runs whose speed-up was timed best of 3 per batch, before every figure took the one timing of targets: a GPU
# run's, rebuilt when a GPU is lent (docs/results/frontier.md's command); no block gives their speed
BEST_OF_TIMED = {"recipe.mpnet-2x.nvidia-h100"}
TRANSFER = "transfer.intel-xeon-avx-512-vnni-amx"
ENGINES = "frontier-engines.amd-epyc-avx2-only"  # deploy_speed.py: every frontier row in torch fp32 and OpenVINO int8


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


def vnni(entry: Entry) -> str:
    """Whether the entry's CPU has a fast path for int8 matrix products (AVX-512 VNNI, AVX-VNNI or AMX), as a
    sentence says it: ``with`` or ``without``."""
    return "with" if {"avx512_vnni", "avx_vnni", "amx_int8"} & set(entry.provenance["cpu_features"]) else "without"


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


# the README's headline commands: (how the README names it, what its command holds, what it must not hold)
HEADLINES = [("`--speedup 2.0`", ["--model all-MiniLM-L6-v2", "--speedup 2.0"],
              ["--metric", "--engine", "--teacher", "--set", "--max-drop"]),
             ("`--speedup 2.0 --metric latency-p50`", ["--speedup 2.0", "--metric latency-p50"], ["--teacher"]),
             ("`--speedup 2.0 --engine openvino-int8`", ["--speedup 2.0", "--engine openvino-int8"], []),
             ("`--speedup 1.5,2,3` (its 2x)", ["--speedup 1.5,2,3", "--compare-with"], []),
             ("`--max-drop 0.3 --dev --test`", ["--max-drop 0.3", "--dev", "--test"], [])]


def best_run(store: dict[str, Entry], has: list[str], lacks: list[str], compared: bool = False) -> Entry:
    """The best current result of a command: of the stored ``sparsecse compress`` runs whose command holds every
    option of ``has`` and none of ``lacks`` (a curve: its 2x target) and that met their target (``compared``: and
    that were compared with another model, ``--compare-with``), the newest day's best 7-task STS average."""
    def fits(e: Entry) -> bool:
        c, f = e.provenance["command"], e.figures
        target = f.get("target") if isinstance(f.get("target"), dict) else {}
        return (c.startswith("sparsecse compress ") and all(o in c for o in has) and not any(o in c for o in lacks)
                and ("sts_avg" in f or "sts_avg_int8" in f) and target.get("met", True) is not False
                and (".speedup-" not in e.id or ".speedup-2." in e.id) and (f.get("versus") or not compared))
    runs = [e for e in store.values() if fits(e)]
    newest = max(e.provenance["date"] for e in runs)
    return max((e for e in runs if e.provenance["date"] == newest),
               key=lambda e: e.figures.get("sts_avg", e.figures.get("sts_avg_int8")))


def than_l3(speedup: float, l3: float) -> str:
    """How a speed-up compares with L3's, timed side by side (within 3% of each other: as fast)."""
    if abs(speedup - l3) <= 0.03 * l3:
        return "as fast as L3, within 3%"
    return "faster than L3" if speedup > l3 else "not faster than L3"


def pm_minutes(runs: dict[str, Entry]) -> str:
    """Each target run's wall time, e.g. ``speedup-1.5 22.1 min, ...``."""
    return ", ".join(f"{name} {run.figures['minutes']:.1f} min" for name, run in runs.items())
