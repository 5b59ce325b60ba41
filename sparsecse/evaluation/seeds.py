"""Several seeds of one configuration: mean +- standard deviation, and differences to a control.

A rewound point of a sweep is trained once per seed; its points are named ``<name>-seed<k>``. Against
the control (the unpruned model retrained the same way, same seeds), a difference *holds* when

- **across seeds**: with at least two seeds, B - A has the same sign for every seed (seed k of the
  point against seed k of the control: same data order and dropout draws), and
- **under the paired test**: the paired-bootstrap 95% interval of the difference of the seed means
  excludes 0. Each replicate resamples the pairs once and rescores every seed of both on them, so
  the interval covers the test-set sampling of the seed-mean difference (pooled over seeds, not one
  test per seed).
"""

from __future__ import annotations

import re
from typing import Callable, Mapping, Sequence

import numpy as np

from sparsecse.evaluation.bootstrap import LEVEL, TaskPairs, difference, replicate_scores
from sparsecse.evaluation.sts import spearman100

SEED_SUFFIX = re.compile(r"-seed(-?\d+)$")


def config_name(point: str) -> str:
    """A point's name without its ``-seed<k>`` suffix (the configuration its seeds share)."""
    return SEED_SUFFIX.sub("", point)


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (ddof 1; None for a single value)."""
    x = np.asarray(values, dtype=np.float64)
    return float(x.mean()), (float(x.std(ddof=1)) if len(x) > 1 else None)


def seed_differences(point: Mapping[int, float], control: Mapping[int, float]) -> dict:
    """Per-seed B - A over the seeds both have; whether all share the sign of their mean."""
    seeds = sorted(set(point) & set(control))
    diffs = [point[s] - control[s] for s in seeds]
    mean, std = mean_std(diffs) if diffs else (None, None)
    same_sign = len(diffs) > 1 and (all(d > 0 for d in diffs) or all(d < 0 for d in diffs))
    return {"seeds": seeds, "per_seed": diffs, "mean": mean, "std": std, "same_sign": same_sign}


def paired_seed_test(point: Mapping[int, Mapping[str, dict]], control: Mapping[int, Mapping[str, dict]],
                     tasks: Sequence[str], replicates: int = 1000, seed: int = 0, aggregation: str = "all",
                     level: float = LEVEL) -> dict:
    """Paired bootstrap of (mean over seeds of the point) - (mean over seeds of the control).

    ``point``/``control``: {seed: {task: {"similarity", "gold", "subsets"}}} for the common seeds.
    Returns {task: {"diff", "ci", "p"}} plus "avg" (the mean over ``tasks``).
    """
    seeds = sorted(set(point) & set(control))
    out, reps_a, reps_b = {}, [], []
    for task in tasks:
        pairs = TaskPairs.of(point[seeds[0]][task]["gold"], list(point[seeds[0]][task]["subsets"].values()))
        sims = [control[s][task]["similarity"] for s in seeds] + [point[s][task]["similarity"] for s in seeds]
        reps = replicate_scores(sims, pairs, replicates, seed, task, aggregation)
        a, b = reps[:len(seeds)].mean(0), reps[len(seeds):].mean(0)
        observed = float(np.mean([_spearman(point[s][task], pairs) for s in seeds])
                         - np.mean([_spearman(control[s][task], pairs) for s in seeds]))
        out[task] = difference(a, b, observed, level)
        reps_a.append(a)
        reps_b.append(b)
    out["avg"] = difference(np.mean(reps_a, 0), np.mean(reps_b, 0), float(np.mean([out[t]["diff"] for t in tasks])),
                            level)
    return out


def _spearman(pairs: dict, task: TaskPairs) -> float:
    """The observed score from stored pairs, aggregated as the replicates are ('all': one Spearman)."""

    return spearman100(pairs["similarity"], task.gold)


def compare_to_control(points: Sequence[dict], control: Sequence[dict], tasks: Sequence[str],
                       load_pairs: Callable[[str], dict | None], replicates: int = 1000, seed: int = 0,
                       level: float = LEVEL) -> dict:
    """One configuration's seeds against the control's: per task and for ``avg_sts``, the point and control
    mean +- std, the per-seed differences (sign agreement) and the paired test of the seed means.

    ``points``/``control``: point records with ``seed``, ``scores``, ``avg_sts`` and ``point`` (their
    name); ``load_pairs(name)`` gives a point's stored per-pair similarities, or None (then no paired test).
    """
    by_seed = {int(p["seed"]): p for p in points}
    ctrl = {int(p["seed"]): p for p in control}
    seeds = sorted(set(by_seed) & set(ctrl))
    rows: dict[str, dict] = {}
    for key in [*tasks, "avg_sts"]:
        get = (lambda p: p.get("avg_sts")) if key == "avg_sts" else (lambda p, k=key: p.get("scores", {}).get(k))
        b = {s: get(by_seed[s]) for s in seeds if get(by_seed[s]) is not None}
        a = {s: get(ctrl[s]) for s in seeds if get(ctrl[s]) is not None}
        if not (set(a) & set(b)):
            continue
        common = sorted(set(a) & set(b))
        rows[key] = {"point": mean_std([b[s] for s in common]), "control": mean_std([a[s] for s in common]),
                     "seeds": seed_differences(b, a), "paired": None}
    stored = {s: (load_pairs(by_seed[s]["point"]), load_pairs(ctrl[s]["point"])) for s in seeds}
    testable = [t for t in tasks if t in rows and seeds and all(
        p is not None and c is not None and t in p and t in c for p, c in stored.values())]
    if testable and len(testable) == len([t for t in tasks if t in rows]):
        test = paired_seed_test({s: stored[s][0] for s in seeds}, {s: stored[s][1] for s in seeds}, testable,
                                replicates, seed, level=level)
        for key in testable:
            rows[key]["paired"] = test[key]
        if "avg_sts" in rows:
            rows["avg_sts"]["paired"] = test["avg"]
    for row in rows.values():
        paired = row["paired"]
        row["paired_excludes_zero"] = bool(paired and (paired["ci"][0] > 0 or paired["ci"][1] < 0))
        row["holds"] = bool(row["seeds"]["same_sign"] and row["paired_excludes_zero"]
                            and np.sign(paired["diff"]) == np.sign(row["seeds"]["mean"]))
    return {"seeds": seeds, "rows": rows}
