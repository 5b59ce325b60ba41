"""Run a recipe end to end: its stages in order, each in its own directory, then the final model with
its evaluation and model card. A killed run resumes where it stopped; a finished stage is never redone.

Layout of ``--out``::

    OUT/run.json              the fingerprint (recipe digest, model, corpus) a resume must match
    OUT/recipe.yaml           the recipe as it ran (overrides applied)
    OUT/corpus/               seeded corpus samples of the stages that train on fewer sentences
    OUT/stages/1-teacher/     each stage's output (a model directory with its manifest), written atomically;
    OUT/stages/1-teacher.partial/   ... or a training run in progress, resumed from its last checkpoint
    OUT/times.jsonl           the wall time of every stage attempt
    OUT/speedup_of.json       a target of another model's speed-up: that model's, measured when the run started
    OUT/eval/                 the reference model's results (for the paired interval); target.json: a target's
                              speed, timed on the pruned model before the training after it (and the model timed)
    OUT/model/                the final model: weights, README.md (model card), manifest.json (the
                              recipe's), recipe.yaml, sts_results.json (per-pair similarities), written last

``OUT/model`` exists only once everything is done, so its presence is what "finished" means.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sparsecse.artifacts.files import atomic_file, hash_path, sha256_file, write_json
from sparsecse.artifacts.destinations import check_destination
from sparsecse.artifacts.locks import FileLock
from sparsecse.artifacts.signals import Terminated
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.encoder import resolve_model
from sparsecse.recipes import card, final_figures
from sparsecse.data.eval_data import known_task
from sparsecse.recipes.repair import near_miss_repair
from sparsecse.recipes.run_checks import check_run, check_text_inputs, run_inputs
# TIMES and TIMED name files of OUT's layout (above), importable from here
from sparsecse.recipes.run_times import TIMES, log, minutes_text, record_time, stage_times  # noqa: F401
from sparsecse.recipes.spec import Data, Recipe, check_sets, load_recipe
from sparsecse.recipes.stage_types import INPUT_REF, Stage, StageContext
from sparsecse.recipes.stages import budget_spending
from sparsecse.recipes.target_timing import (TIMED, TRAINING, budget_sizing, run_deadline,  # noqa: F401
                                             time_before_training, time_limit_facts, timing_point)
from sparsecse.targets import relative
from sparsecse.targets.report import judged, measure_speed, measure_target, timed_shapes_hold
from sparsecse.targets.search import TargetOutOfReach

RUN = "run.json"
MODEL = "model"
LOCK = ".lock"


@dataclass
class RecipeResult:
    """Where the final model is, what each stage did and took, and the final figures."""

    out: Path
    model: Path
    stages: list[dict[str, Any]] = field(default_factory=list)
    evaluation: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def __fspath__(self) -> str:
        return str(self.model)

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data."""
        return {"out": str(self.out), "model": str(self.model), "stages": self.stages,
                "evaluation": self.evaluation, "seconds": self.seconds}


def stage_dir(out: Path, index: int, name: str) -> Path:
    """The directory of a run's ``index``-th stage.

    Args:
        out: the run directory.
        index: the stage's place (1-based).
        name: its name.

    Returns:
        ``out/stages/INDEX-NAME``.
    """
    return out / "stages" / f"{index}-{name}"


def _fingerprint(recipe: Recipe, model: str, corpus: Path) -> dict[str, Any]:
    return {"recipe": recipe.name, "recipe_sha256": recipe.digest(), "model": model,
            "model_sha256": hash_path(model) if os.path.exists(model) else None,
            "corpus": str(corpus.resolve()), "corpus_sha256": sha256_file(corpus), "seed": recipe.seed}


def _check_same_run(out: Path, fingerprint: dict[str, Any]) -> None:
    try:
        stored = json.loads((out / RUN).read_text())["fingerprint"]
    except (OSError, ValueError, KeyError, TypeError):
        raise SparseCSEError(f"{out} is not a recipe run directory (no readable {RUN}); choose another --out or "
                             "pass --overwrite.") from None
    what = {"recipe_sha256": "the recipe's settings", "model_sha256": "the model", "model": "the model",
            "corpus_sha256": "the corpus", "corpus": "the corpus", "seed": "the seed", "recipe": "the recipe"}
    changed = [what[k] for k in what if stored.get(k) != fingerprint.get(k)]
    if changed:
        raise SparseCSEError(f"The unfinished run in {out} was started with other inputs ({', '.join(dict.fromkeys(changed))} "
                             "changed); resume it with the same recipe, model and corpus, or pass --overwrite to start over.")


def _input_model(model) -> str:
    path = resolve_model(model)
    return os.path.abspath(path) if os.path.isdir(path) else path


def run_recipe(recipe: str | os.PathLike | Recipe, model=None, corpus=None, out=None, *, data_dir=None,
               overrides: dict[str, Any] | None = None, resume: bool = False, overwrite: bool = False,
               show_progress: bool = True, data: Data | None = None) -> RecipeResult:
    """Run ``recipe`` (a shipped name, a file, or a :class:`~sparsecse.recipes.spec.Recipe`) on ``model``
    (default: the recipe's own, else all-MiniLM-L6-v2) with ``corpus`` (one sentence per line) into ``out``.

    ``overrides``: ``{"STAGE.KEY": value}`` settings replacing the recipe's (recorded with it). ``resume``
    continues an unfinished run in ``out`` with the same recipe, model and corpus (refused otherwise);
    ``overwrite`` starts over. ``data`` (a :class:`~sparsecse.recipes.spec.Data`: its dev and test sets, each a
    pairs file relative to the working directory or a task name) replaces the recipe's ``data:`` block where it
    names a set. Returns a :class:`RecipeResult`; the final model is ``out/model``.

    Example::

        run_recipe("frontier-2x", "all-MiniLM-L6-v2", "train_sentences.txt", "runs/f2x").evaluation["sts_avg"]
    """
    started = time.perf_counter()
    recipe = recipe if isinstance(recipe, Recipe) else load_recipe(recipe, overrides)
    recipe = with_data(recipe, data)
    if out is None:
        raise SparseCSEError("A recipe run needs an output directory (--out).")
    if corpus is None:
        raise SparseCSEError(f"The recipe {recipe.name} needs a corpus (--corpus FILE, one sentence per line).")
    corpus = Path(corpus)
    out = Path(out)
    named = model if model is not None else recipe.model  # as the user named it: the card's rebuild command says so
    model = _input_model(named)
    check_text_inputs(recipe, corpus)
    check_destination(out, True, inputs=run_inputs(recipe, model, corpus, data_dir))
    fingerprint = _fingerprint(recipe, model, corpus)
    continuing = _inspect(out, fingerprint, resume, overwrite)
    if not continuing:  # before anything is written
        check_run(recipe, model, corpus, out, data_dir, show_progress)
    lock = _take(out, continuing, overwrite)
    refused = False
    try:
        if not continuing:
            write_json(out / RUN, {"fingerprint": fingerprint, "started": time.strftime("%Y-%m-%dT%H:%M:%S")})
        # on a resume too: the fingerprint matched, and what differs (evaluation.test) is the run that finishes
        _write_recipe(out / "recipe.yaml", recipe)
        return _run(recipe, model, corpus, out, data_dir, show_progress, started, named)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated, exit status 143): which one stays
        stopped = "Terminated (SIGTERM)" if isinstance(exc, Terminated) else "Interrupted"
        raise type(exc)(f"{stopped}; the finished stages and the last checkpoint are kept in {out}: rerun the same "
                        "command with --resume to continue.") from None
    except TargetOutOfReach:  # the candidates it tried stay for inspection
        raise
    except SparseCSEError:  # an input refused mid-way (a bug or a crash keeps the directory to look at)
        refused = True
        raise
    finally:
        lock.release()
        if refused and not continuing:
            _discard_if_nothing_done(out)


def finished_run(out: str | os.PathLike) -> RecipeResult | None:
    """The result of the finished run in ``out`` as its ``out/model/manifest.json`` records it (read only: a
    finished run is never rewritten), or None where ``out`` holds no finished run."""
    out = Path(out)
    try:
        manifest = json.loads((out / MODEL / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict):
        return None
    seconds = manifest.get("seconds") if isinstance(manifest.get("seconds"), dict) else {}
    return RecipeResult(out=out, model=out / MODEL, stages=list(manifest.get("stages") or []),
                        evaluation=dict(manifest.get("figures") or {}),
                        seconds=round(sum(v for v in seconds.values() if isinstance(v, (int, float))), 3))


def with_data(recipe: Recipe, data: Data | None = None) -> Recipe:
    """``recipe`` with its ``data:`` block's dev and/or test set replaced by those ``data`` names (files made
    absolute, from the working directory), checked as the recipe file's would be."""
    dev, test = (data.dev, data.test) if data is not None else (None, None)
    if dev is None and test is None:
        return recipe
    import dataclasses

    def place(spec):
        return os.path.abspath(spec) if spec is not None and known_task(str(spec)) is None else spec

    data = Data(place(dev) if dev is not None else recipe.data.dev, place(test) if test is not None else recipe.data.test)
    data = check_sets(recipe.stages, data.check(f"The recipe {recipe.name}'s --dev/--test"), recipe.name)
    return dataclasses.replace(recipe, data=data)


def _inspect(out: Path, fingerprint: dict[str, Any], resume: bool, overwrite: bool) -> bool:
    """True to continue the unfinished run in ``out``; refuses what must not be touched."""
    if not out.exists():
        return False
    if overwrite:
        return False
    if (out / MODEL).exists():
        raise SparseCSEError(f"{out} holds a finished recipe run; choose another --out or pass --overwrite.")
    if not resume:
        if (out / RUN).exists():
            raise SparseCSEError(f"An unfinished recipe run is in {out}; pass --resume to continue it or --overwrite "
                                 "to start over.")
        raise SparseCSEError(f"{out} already exists; choose another --out or pass --overwrite.")
    _check_same_run(out, fingerprint)
    return True


def _discard_if_nothing_done(out: Path) -> None:
    """Remove a new run's directory refused before any stage left an output or a checkpoint: it holds
    only its bookkeeping (and regenerable corpus samples), and a rerun should not have to pass --resume."""
    stages = out / "stages"
    if stages.is_dir() and any(stages.iterdir()):
        return
    shutil.rmtree(out, ignore_errors=True)


def _take(out: Path, continuing: bool, overwrite: bool) -> FileLock:
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists() and not continuing and overwrite:
        holder = FileLock(out / LOCK)
        if (out / LOCK).exists() and not holder.is_stale():
            raise SparseCSEError(f"{out} is being written by another process ({holder.holder()}).")
        shutil.rmtree(out) if out.is_dir() and not out.is_symlink() else out.unlink()
    out.mkdir(exist_ok=True)
    lock = FileLock(out / LOCK)
    if not lock.acquire():
        raise SparseCSEError(f"{out} is being written by another process ({lock.holder()}); wait for it to end.")
    return lock


def _write_recipe(path: Path, recipe: Recipe) -> None:
    import yaml

    with atomic_file(path, overwrite=True) as tmp:
        tmp.write_text(yaml.safe_dump(recipe.to_dict(), sort_keys=False), encoding="utf-8")


def _expected(recipe: Recipe, name: str) -> str:
    seconds = (recipe.reached.get("seconds") or {}).get(name) if isinstance(recipe.reached, dict) else None
    return f"; about {minutes_text(float(seconds))} on the machine its figures come from" if seconds else ""


def run_stage(stage: Stage, index: int, model: str, out: Path, ctx: StageContext) -> dict[str, Any]:
    """Run ``stage`` (the ``index``-th, 1-based) on ``model`` into ``out``: its own
    :meth:`~sparsecse.recipes.stage_types.Stage.run`.

    Args:
        stage: the stage; index: its place; model: the model it takes; out: its directory; ctx: the run's context.

    Returns:
        A summary of what it did.
    """
    return stage.run(index, model, out, ctx)


def _run(recipe: Recipe, model: str, corpus: Path, out: Path, data_dir, show_progress: bool,
         started: float, named) -> RecipeResult:
    quiet = not show_progress
    ctx = StageContext(corpus=corpus, work=out, data_dir=data_dir, seed=recipe.seed,
                       models={INPUT_REF[1:]: model}, show_progress=show_progress, target=recipe.target,
                       dev=recipe.data.dev, test=recipe.data.test)
    if recipe.target is not None and recipe.target.speedup_of is not None:
        log(f"timing {recipe.target.speedup_of} against the input model ({recipe.target.describe()}) ...", quiet)
        t0 = time.perf_counter()
        timed_now = relative.measured_earlier(out, recipe.target.speedup_of) is None
        target, facts = relative.resolve(recipe.target, model, ctx.dev_set(), out, corpus, recipe.seed)
        if timed_now:  # the card's minutes hold this timing too
            record_time(out, {"stage": "speedup_of", "seconds": round(time.perf_counter() - t0, 3),
                              "finished": True})
        log(f"the target: {facts['speedup']:.2f}x, {recipe.target.speedup_of}'s speed-up over the input model", quiet)
        recipe, ctx.target = replace(recipe, target=target), target
    ctx.spending = budget_spending(recipe.stages, ctx)  # what each budget stage's candidates are pruned with
    current, records = model, []
    n = len(recipe.stages)
    timed_after, timed = timing_point(recipe), None
    last_training = max((i for i, s in enumerate(recipe.stages, 1) if s.type in TRAINING), default=None)

    def measured_speed(model_dir: str) -> dict:  # the rounds the budget stage's A/A timing sized, where it made one
        return measure_speed(recipe.target, model, model_dir, ctx.dev_set(), out / "eval" / "engine", corpus,
                             recipe.seed, show_progress=show_progress, serving=recipe.evaluation.speed,
                             sized=budget_sizing(records))

    for i, stage in enumerate(recipe.stages, 1):
        target = stage_dir(out, i, stage.name)
        ctx.deadline = run_deadline(recipe, out) if i == last_training else None
        label = f"[{i}/{n}] {stage.name}"
        if target.exists():
            summary = _read_summary(target)
            log(f"{label}: done earlier ({stage.describe()})", quiet)
        else:
            log(f"{label}: {stage.describe()}{_expected(recipe, stage.name)}", quiet)
            t0 = time.perf_counter()
            try:
                summary = run_stage(stage, i, current, target, ctx)
            finally:
                record_time(out, {"stage": stage.name, "seconds": round(time.perf_counter() - t0, 3),
                                  "finished": target.exists()})
            write_json(target.with_name(target.name + ".summary.json"), summary)
            log(f"{label}: done in {minutes_text(time.perf_counter() - t0)}", quiet)
        records.append({"stage": stage.name, "type": stage.type, "dir": str(target), **summary})
        if stage.makes_model:
            current = str(target)
            ctx.models[stage.name] = current
        handed = stage.hand_on(summary)
        if handed is not None:
            ctx.handed[stage.name] = handed
        if i == timed_after:  # timed now, so that a repair is trained by the stages after it
            current, timed = time_before_training(recipe, ctx, out, current, measured_speed, quiet)
    result = RecipeResult(out=out, model=out / MODEL, stages=records)
    t0 = time.perf_counter()
    timing_seconds = stage_times(out).get("evaluation", 0.0)  # the target's timing before the training
    if recipe.target is not None:
        log(f"measuring the model against the target ({recipe.target.describe()}) ...", quiet)
        dev = ctx.dev_set()
        if timed is not None and timed_shapes_hold(timed["timed_model"], current):
            figures_target = judged(recipe.target, timed, model, current, dev)
        elif timed is not None:  # the training changed the shapes (a projection to a teacher's width): time it again
            figures_target = measure_target(recipe.target, model, current, dev, out / "eval" / "engine", corpus,
                                            recipe.seed, show_progress=show_progress, serving=recipe.evaluation.speed)
        else:  # nothing trains after the prune stage: a repair is kept as reconstruction left it
            def measured(model_dir: str) -> dict:
                return judged(recipe.target, measured_speed(model_dir), model, model_dir, dev)

            current, figures_target = near_miss_repair(recipe, ctx, current, measured(current), measured)
    figures = final_figures.evaluate_final(recipe, model, current, out / "eval", data_dir, show_progress)
    if recipe.target is not None:
        figures["target"] = {**figures_target, **time_limit_facts(recipe, records)}
    result.evaluation = card.finish(recipe, model, corpus, out, current, records, figures,
                                    lambda: {**stage_times(out),
                                             "evaluation": round(timing_seconds + time.perf_counter() - t0, 3)},
                                    named_model=named)
    record_time(out, {"stage": "evaluation", "seconds": round(time.perf_counter() - t0, 3), "finished": True})
    result.seconds = round(time.perf_counter() - started, 3)
    times = stage_times(out)
    for record in result.stages:
        record["seconds"] = round(times.get(record["stage"], 0.0), 1)
    log("time per stage: " + ", ".join(f"{k} {minutes_text(v)}" for k, v in times.items())
         + f"; total {minutes_text(sum(times.values()))}", quiet)
    return result


def _read_summary(target: Path) -> dict[str, Any]:
    try:
        return json.loads(target.with_name(target.name + ".summary.json").read_text())
    except (OSError, ValueError):
        return {}
