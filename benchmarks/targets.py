"""``docs/figures/frontier/targets.json``: one object per frontier target row, written by the benchmarks that
measure the rows (``frontier.py`` for torch fp32, ``deploy_speed.py`` for OpenVINO int8), never by hand.

Each object: ``target`` (e.g. "2x", "6x-int8"), ``model`` (the row's label), ``model_dir``, ``recipe`` (the
shipped recipe that made the model, from its manifest; None for a download), ``engine``, ``speedup``,
``sts_avg``, ``ci`` [low, high], ``versus`` (the row it claims to beat) and ``paired_ci`` [low, high] (the
paired-bootstrap interval of the difference). A benchmark replaces the objects of the targets it measured
and keeps the others.
"""

from __future__ import annotations

import json
from pathlib import Path

DEFAULT_PATH = Path(__file__).resolve().parents[1] / "docs" / "figures" / "frontier" / "targets.json"
FIELDS = ("target", "model", "model_dir", "recipe", "engine", "speedup", "sts_avg", "ci", "versus", "diff",
          "paired_ci", "measured_by", "cpu")


def add_target_options(parser, example: str) -> None:
    """``--target NAME=ROW:VERSUS`` (repeatable) and ``--targets-json`` on a benchmark's argument parser."""
    parser.add_argument("--target", action="append", default=[], metavar="NAME=ROW:VERSUS",
                        help=f"a target row (repeatable), e.g. {example!r}: its paired interval against the row "
                             "VERSUS goes into --targets-json")
    parser.add_argument("--targets-json", default=str(DEFAULT_PATH), help="the targets file to update")


def parse_target_specs(specs: list[str]) -> list[tuple[str, str, str]]:
    """``NAME=ROW:VERSUS`` strings (e.g. ``2x=L6 f0.45:L3 dense``) as (name, row label, versus label)."""
    out = []
    for spec in specs:
        name, sep, rest = spec.partition("=")
        row, colon, versus = rest.rpartition(":")
        if not sep or not colon or not name.strip() or not row.strip() or not versus.strip():
            raise SystemExit(f"--target takes NAME=ROW:VERSUS (e.g. 2x=L6 f0.45:L3 dense), not {spec!r}")
        out.append((name.strip(), row.strip(), versus.strip()))
    return out


def unknown_target_row(targets: list[tuple[str, str, str]], labels: set[str]) -> str | None:
    """The sentence for the first target whose row or versus row is not among ``labels``, else None (checked
    before a benchmark evaluates anything)."""
    for name, label, versus in targets:
        if label not in labels or versus not in labels:
            return (f"--target {name}: no row called {label if label not in labels else versus!r} "
                    f"(rows: {', '.join(sorted(labels))})")
    return None


def recipe_of(model_dir: str | None) -> str | None:
    """The recipe a model directory was made by (a ``compress --recipe`` run's manifest), else None."""
    if not model_dir:
        return None
    try:
        manifest = json.loads((Path(model_dir) / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("kind") != "recipe_model":
        return None
    return (manifest.get("params") or {}).get("name")


def pairs_record(pairs: dict) -> dict:
    """An evaluation's per-pair results (``evaluate(..., keep_pairs=True)["pairs"]``) as plain JSON lists."""
    return {t: {"similarity": list(map(float, p["similarity"])), "gold": list(map(float, p["gold"])),
                "subsets": dict(p["subsets"])} for t, p in pairs.items()}


def target_record(name: str, row: dict, versus: dict, *, engine: str, speedup: float, measured_by: str,
                  replicates: int = 1000, seed: int = 0) -> dict:
    """The targets-file object of ``row`` claiming ``name`` against ``versus``.

    ``row`` and ``versus``: ``label``, ``model_dir``, ``avg_sts``, ``ci`` and the evaluation's ``scores`` and
    ``pairs`` (:func:`pairs_record`); the paired interval resamples the same pairs for both."""
    from sparsecse.evaluation.bootstrap import paired_comparison
    from sparsecse.evaluation.runner import task_pairs
    from sparsecse.modeling.cpu_features import describe_cpu

    similarities = [{t: p["similarity"] for t, p in r["pairs"].items()} for r in (versus, row)]
    c = paired_comparison(*similarities, task_pairs(row["pairs"]), versus["scores"], row["scores"], replicates,
                          seed, unpaired=False)["avg"]
    return {"target": name, "model": row["label"], "model_dir": row["model_dir"],
            "recipe": recipe_of(row["model_dir"]), "engine": engine, "speedup": round(speedup, 4),
            "sts_avg": round(row["avg_sts"], 4), "ci": [round(x, 4) for x in row["ci"]], "versus": versus["label"],
            "diff": round(c["diff"], 4), "paired_ci": [round(x, 4) for x in c["ci"]], "measured_by": measured_by,
            "cpu": describe_cpu()}


def write_targets(records: list[dict], path: Path = DEFAULT_PATH) -> Path:
    """Merge ``records`` into the targets file (replacing the same target and engine), atomically."""
    try:
        existing = json.loads(path.read_text())
    except (OSError, ValueError):
        existing = []
    replaced = {(r["target"], r["engine"]) for r in records}
    merged = [r for r in existing if (r.get("target"), r.get("engine")) not in replaced] + \
        [{k: r.get(k) for k in FIELDS} for r in records]
    merged.sort(key=lambda r: (str(r.get("engine")), float(r.get("speedup") or 0)))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(merged, indent=1) + "\n")
    tmp.replace(path)
    return path
