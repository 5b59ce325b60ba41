"""A speed target's own timing within a run: after the last prune stage, before the training stages that follow it
(they change a model's weights, not the shapes its speed depends on), with a near miss repaired there; and a
time-limited run's deadline for its last training stage."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from sparsecse.artifacts.files import write_json
from sparsecse.recipes.repair import near_miss_repair
from sparsecse.recipes.run_times import log, minutes_text, record_time, stage_times
from sparsecse.recipes.spec import Recipe
from sparsecse.recipes.stage_types import StageContext
from sparsecse.training import time_limit

TIMED = "target.json"  # under OUT/eval: the target's speed, timed before the training after the prune stage
TRAINING = ("distill", "train")  # stage types that change a model's weights, not its shapes


def time_limit_facts(recipe: Recipe, records: list[dict[str, Any]]) -> dict[str, Any]:
    """``time_limit``: a time-limited run's limit and where its last training stage ended (``time_limited``: the
    limit brought its schedule's end nearer, to ``fitted_steps``; ``steps_run_to``: the step it stopped at;
    ``best_step``); nothing without a limit."""
    trained = [r for r in records if r.get("type") in TRAINING]
    if recipe.target is None or recipe.target.minutes is None or not trained:
        return {}
    last = trained[-1]
    return {"time_limit": {"minutes": recipe.target.minutes, **{
        k: last.get(k) for k in ("time_limited", "fitted_steps", "steps_run_to", "best_step")}}}


def budget_sizing(records: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, int] | None:
    """The A/A timing's facts and the rounds it sized, from the run's budget stage (its search timed the input
    against itself at the target's shape), for the target's own timing at that shape; None without one."""
    for record in records:
        searched = record.get("target") if record.get("type") == "budget" else None
        if isinstance(searched, dict) and searched.get("aa") and searched.get("rounds"):
            return searched["aa"], int(searched["rounds"])
    return None


def timing_point(recipe: Recipe) -> int | None:
    """The stage (1-based) after which a speed target is timed: the last prune stage, where only training stages
    follow it (they change the weights, not the shapes the speed depends on); None (timed at the end) otherwise."""
    if recipe.target is None or (recipe.target.speedup is None and recipe.target.speedup_of is None):
        return None
    prunes = [i for i, s in enumerate(recipe.stages, 1) if s.type == "prune"]
    after = recipe.stages[prunes[-1]:] if prunes else []
    return prunes[-1] if after and all(s.type in TRAINING for s in after) else None


def time_before_training(recipe: Recipe, ctx: StageContext, out: Path, current: str, measured_speed,
                         quiet: bool) -> tuple[str, dict[str, Any]]:
    """The model the training stages take and its target speed, timed now (``OUT/eval/target.json``, read back by
    a resumed run); a near miss is repaired here (:func:`~sparsecse.recipes.repair.near_miss_repair`), so the
    training that follows recovers the repaired model."""
    path = out / "eval" / TIMED
    if path.is_file():
        timed = json.loads(path.read_text())
        return timed["model"], timed["figures"]
    log(f"timing the pruned model against the target ({recipe.target.describe()}) before the training ...", quiet)
    t0 = time.perf_counter()
    model, figures = near_miss_repair(recipe, ctx, current, measured_speed(current), measured_speed)
    figures["timed_before_training"] = True
    if figures.get("repair"):
        figures["repair"]["before_training"] = True
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {"model": model, "figures": figures})
    record_time(out, {"stage": "evaluation", "seconds": round(time.perf_counter() - t0, 3), "finished": True})
    repair = figures.get("repair") or {}
    note = (", a near miss repaired" if repair.get("met") else ", a near miss not mended by one more step") if repair \
        else ""
    log(f"the pruned model: {figures['speedup']:.2f}x{note}, timed in {minutes_text(time.perf_counter() - t0)}", quiet)
    return model, figures


def run_deadline(recipe: Recipe, out: Path) -> float | None:
    """When a run with a time limit (``target.minutes``) must end its last training stage: the limit less the time
    its stages (and timings) have taken so far, from now; None without a limit."""
    minutes = recipe.target.minutes if recipe.target is not None else None
    if minutes is None:
        return None
    return time_limit.clock() + float(minutes) * 60 - sum(stage_times(out).values())
