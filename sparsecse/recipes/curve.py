"""The whole curve in one run: ``compress --speedup 1.5,2,3`` runs the target recipe once per speed-up, each into
``OUT/speedup-X`` (its model in ``OUT/speedup-X/model``), the targets sharing what does not depend on them (the
input model's gate scores, the budget searches' speed probes and where the last prune stage's steps ended, in
memory: a smaller budget continues them; the teacher's embeddings through their cache; the comparison model's test
results in ``OUT/eval``), from the smallest speed-up up. It then times the input model, every target's model and a
``--compare-with`` model at the serving shape (each target's figure is its own run's final figure, one figure per
model; the comparison model is timed as those are, served alone), and writes ``OUT/curve.csv``
and ``OUT/curve.png``: dev (and test) quality against the measured speed-up.

Layout of ``OUT``::

    OUT/speedup-1.5/     a recipe run (see :mod:`sparsecse.recipes.runner`), its model in OUT/speedup-1.5/model
    OUT/speedup-2/ ...
    OUT/eval/            the input and comparison models' test results (computed once)
    OUT/curve.csv        one row per model: measured speed-up and spread at the shape, dev and test scores, layers
    OUT/curve.png        the curve
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparsecse.artifacts.files import atomic_file
from sparsecse.errors import SparseCSEError
from sparsecse.artifacts.model_names import model_label, resolve_model
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.recipes.final_figures import shared_reference_results, sts_average
from sparsecse.recipes.run_checks import check_run
from sparsecse.recipes.runner import RecipeResult, finished_run, run_recipe, with_data
from sparsecse.recipes.spec import Data, load_recipe
from sparsecse.modeling.adapters import layer_modules
from sparsecse.targets.candidates import save_png
from sparsecse.training.dev_eval import dev_set
from sparsecse.targets.engines import to_time
from sparsecse.targets.search import SharedSearch, TargetOutOfReach, sharing
from sparsecse.targets.aim import Aim
from sparsecse.targets.timing import engine_threads, target_sentences
from sparsecse.targets.alone import ALONE, served_alone

TABLE = "curve.csv"
PLOT = "curve.png"
# A curve's targets are compared on the 7 STS tasks (its test axis); the 7 transfer tasks, about 3 minutes a model on
# 2 cores, are left to the model you keep (sparsecse eval --tasks transfer), unless evaluation.tasks is set
CURVE_TASKS = ["sts"]


def target_name(speedup: float) -> str:
    """The directory of one target of a curve, e.g. ``speedup-2`` or ``speedup-1.5``."""
    return f"speedup-{speedup:g}"


@dataclass
class CurveResult:
    """The runs of a curve (speed-up to :class:`~sparsecse.recipes.runner.RecipeResult`; a target out of reach
    to its message), its rows and where the table and plot are."""

    out: Path
    runs: dict[float, RecipeResult] = field(default_factory=dict)
    missed: dict[float, str] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    table: Path | None = None
    plot: Path | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: what ``compress --speedup 1.5,2,3 --json`` prints."""
        return {"out": str(self.out), "targets": {f"{k:g}": str(r.model) for k, r in self.runs.items()},
                "missed": {f"{k:g}": v for k, v in self.missed.items()}, "rows": self.rows,
                "table": str(self.table), "plot": str(self.plot), "seconds": self.seconds}


def run_curve(recipe: str | os.PathLike, model, corpus, out, speedups, *, overrides: dict[str, Any] | None = None,
              resume: bool = False, overwrite: bool = False, inputs: dict[str, list[str]] | None = None,
              **run) -> CurveResult:
    """One model per speed-up of ``speedups`` and the curve of them all (see the module docstring).

    Args:
        recipe: the recipe each target runs (a shipped name or a file; it must hold a budget stage).
        model: the input model.
        corpus: the sentences the stages train and reconstruct on.
        out: the run's directory.
        speedups: the speed-ups: an :class:`~sparsecse.targets.aim.Aim`'s, a list, or ``"1.5,2,3"``; each target's
            run is ``OUT/speedup-X``.
        overrides: ``{"STAGE.KEY": value}`` for every target (the shape: ``target.metric``, ...); the recipe's
            comparison model (``evaluation.compare_with``) goes on the curve beside them, timed in the same run.
            ``evaluation.tasks`` defaults to ``CURVE_TASKS`` (the STS tasks only).
        resume: continue an unfinished curve in ``out`` (a finished target is read as it was written, never run
            again; an unfinished one resumes).
        overwrite: start over (``out`` is removed only once every target's checks have passed).
        inputs: other paths the command reads (``{what: [paths]}``, e.g. ``--store``), which neither ``out`` nor
            any ``OUT/speedup-X`` may hold.
        run: :func:`~sparsecse.recipes.runner.run_recipe`'s ``data_dir``, ``show_progress`` and ``data`` (the user's
            dev and test sets).

    Returns:
        A :class:`CurveResult`. A target out of reach is left out (its candidates stay in its directory) and the
        curve is written for the others; :class:`~sparsecse.targets.choice.TargetOutOfReach` is raised after,
        naming it.
    """
    import time

    started = time.perf_counter()
    speedups = Aim.of(speedups).speedups  # an Aim (compress's) as it was parsed; a Python caller's list read here
    out = Path(out)
    overrides = {"evaluation.tasks": CURVE_TASKS, **(overrides or {})}
    data_dir, show_progress, data = run.get("data_dir"), run.get("show_progress", True), run.get("data")
    first = load_recipe(recipe, {**overrides, "target.speedup": speedups[0]})
    compare_with = first.evaluation.compare_with
    if first.target is None or first.target.speedup is None:
        raise SparseCSEError(f"The recipe {first.name} has no speed-up target for a curve.")
    if corpus is None:
        raise SparseCSEError(f"The recipe {first.name} needs a corpus (--corpus FILE, one sentence per line).")
    named = model if model is not None else first.model  # as the user named it: the curve's input row says so
    path = resolve_model(named)
    model = os.path.abspath(path) if os.path.isdir(path) else path
    if out.exists() and not resume and not overwrite:
        raise SparseCSEError(f"{out} already exists; choose another --out, pass --resume to continue its curve, "
                             "or --overwrite to start over.")
    # every check of every target's run, against OUT and each OUT/speedup-X, before anything is removed
    for speedup in speedups:
        recipe_x = with_data(load_recipe(recipe, {**overrides, "target.speedup": speedup}), data)
        check_run(recipe_x, model, Path(corpus), out, data_dir, show_progress, inputs)
        check_run(recipe_x, model, Path(corpus), out / target_name(speedup), data_dir, show_progress, inputs)
    if out.exists() and not resume:
        shutil.rmtree(out) if out.is_dir() and not out.is_symlink() else out.unlink()
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    result = CurveResult(out)
    probes = out / "probes"  # the shared speed probes' copies, timed in a fresh process
    with sharing(SharedSearch(directory=probes)), shared_reference_results(out / "eval"):
        for speedup in speedups:
            run_dir = out / target_name(speedup)
            finished = finished_run(run_dir) if resume else None
            if finished is not None:  # kept as it was written: read, never run again
                result.runs[speedup] = finished
                continue
            try:
                result.runs[speedup] = run_recipe(recipe, model, corpus, run_dir, data_dir=data_dir,
                                                  overrides={**overrides, "target.speedup": speedup},
                                                  resume=run_dir.exists(), show_progress=show_progress, data=data)
            except TargetOutOfReach as exc:
                result.missed[speedup] = str(exc)
            except SparseCSEError:  # refused (or too busy to time) before any target finished: nothing kept
                shutil.rmtree(probes, ignore_errors=True)
                if created and not any(out.iterdir()):
                    shutil.rmtree(out, ignore_errors=True)
                raise
    shutil.rmtree(probes, ignore_errors=True)
    if result.runs:
        result.rows = curve_rows(first, model, result.runs, compare_with, out, data_dir, data, show_progress, corpus)
        result.rows[0]["model"] = str(named)
        result.table = write_curve_table(result.rows, out / TABLE)
        result.plot = write_curve_plot(result.rows, out / PLOT, first.target)
    result.seconds = round(time.perf_counter() - started, 3)
    if result.missed:
        speedup, message = next(iter(result.missed.items()))
        error = TargetOutOfReach(f"The {speedup:g}x target of the curve was not reached ({message.rstrip('.')}); "
                                 f"the curve in {out / TABLE} holds the targets that were.")
        error.curve = result  # the targets that were reached, for the caller to record (compress --store)
        raise error
    return result


def curve_rows(recipe, model: str, runs: dict[float, RecipeResult], compare_with: str | None, out: Path, data_dir,
               data: Data | None, show_progress: bool, corpus=None) -> list[dict[str, Any]]:
    """One row per model (the input, each target's, the comparison model): speed-up, spread, interval and method
    at the recipe target's serving shape (a target's from its run's final figure, so the card and the curve give
    one number; the comparison model served alone as those were), dev score, and test score (the 7 STS tasks'
    average where the runs' evaluation scores them).

    Args:
        recipe: the recipe as the first target ran it (its target's shape, evaluation and data).
        model: the input model.
        runs: speed-up to its run.
        compare_with: the comparison model, or None.
        out: the curve's directory (results under ``out/eval``).
        data_dir: the SentEval data.
        data: the user's dev and test sets.
        show_progress: progress bars.
        corpus: the sentences an int8 engine calibrates on.

    Returns:
        The rows, input first.
    """
    target = recipe.target
    dev = dev_set(data.dev if data and data.dev else recipe.data.dev, data_dir)
    shape = target.shape(engine_threads())
    dense = SentenceEncoder.load(model, device="cpu")
    sentences = target_sentences(target, dev.sentences, dense.tokenizer, dense.max_length)
    figures = {target_name(x): (r.evaluation or {}).get("target") or {} for x, r in runs.items()}
    models = {target_name(x): str(r.model) for x, r in runs.items() if "speedup" not in figures[target_name(x)]}
    if compare_with is not None:
        models[compare_with] = compare_with
    work = out / "eval" / "engine"

    def placed(name: str, path: str):
        return to_time(path, target.engine, work / name.replace("/", "_"), corpus, recipe.seed, shape.threads,
                       shape.loader)

    try:
        reference = placed("input", model)
        timed = {name: t.facts() for name, t in served_alone(  # a target's own figure is its run's: one figure
            reference, {name: placed(name, path) for name, path in models.items()}, sentences, shape, target).items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with_test = recipe.evaluation.test and "sts" in recipe.evaluation.tasks

    def test_score(name: str, path: str, figures: dict | None) -> float | None:
        if not with_test:
            return None
        if figures is not None and figures.get("sts_avg") is not None:
            return float(figures["sts_avg"])
        return sts_average(path, out / "eval" / f"{name.replace('/', '_')}_sts_results.json", data_dir, show_progress)

    common = {"metric": shape.metric, "batch_size": shape.batch_size, "threads": shape.threads, "engine": shape.engine,
              "loader": shape.loader}

    def scored(encoder: SentenceEncoder) -> dict[str, Any]:  # its dev score and layers (depth: fewer than input's)
        return {"dev": round(float(dev.score(encoder)), 4), "layers": len(layer_modules(encoder.model))}

    rows = [{"name": "input", "model": model, "kind": "input", "speedup_target": None, "speedup": 1.0, "spread": 0.0,
             **scored(dense), "test": test_score("input", model, None), **common}]
    timed.update({name: {**f, **(f.get("interval") or {})} for name, f in figures.items() if "speedup" in f})

    def speed_of(name: str) -> dict[str, Any]:  # the figure, its interval and how it was timed
        f = timed[name]
        return {"speedup": round(f["speedup"], 4), "spread": round(f["spread"], 4), "low": f.get("low"),
                "high": f.get("high"), "method": f.get("method") or ALONE}

    for x, run in runs.items():
        name = target_name(x)
        rows.append({"name": name, "model": str(run.model), "kind": "target", "speedup_target": x,
                     **speed_of(name), **scored(SentenceEncoder.load(run.model, device="cpu")),
                     "test": test_score(name, str(run.model), run.evaluation), **common})
    if compare_with is not None:
        rows.append({"name": model_label(compare_with), "model": compare_with, "kind": "compare",  # its name, no path
                     "speedup_target": None,
                     **speed_of(compare_with), **scored(SentenceEncoder.load(compare_with, device="cpu")),
                     "test": test_score("reference", compare_with, None), **common})
    return rows


def write_curve_table(rows: list[dict[str, Any]], path: Path) -> Path:
    """The curve's rows as CSV (replaced)."""
    import pandas as pd

    with atomic_file(path, overwrite=True) as tmp:
        pd.DataFrame(rows).to_csv(tmp, index=False)
    return path


def write_curve_plot(rows: list[dict[str, Any]], path: Path, target) -> Path:
    """Dev (left) and test (right, where scored) quality against the measured speed-up, spreads as bars; the
    input model, the targets' models (joined) and the comparison model marked apart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = ["dev"] + (["test"] if any(r["test"] is not None for r in rows) else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    shape = target.shape(rows[0]["threads"])
    for ax, column in zip(axes[0], panels):
        for kind, style in (("input", dict(marker="*", s=140, c="black")), ("target", dict(marker="o", c="tab:blue")),
                            ("compare", dict(marker="s", c="tab:orange"))):
            picked = [r for r in rows if r["kind"] == kind and r[column] is not None and math.isfinite(r[column])]
            if not picked:
                continue
            xs, ys = [r["speedup"] for r in picked], [r[column] for r in picked]
            ax.errorbar(xs, ys, xerr=[x * r["spread"] / 2 for x, r in zip(xs, picked)], fmt="none", ecolor="grey")
            ax.scatter(xs, ys, label={"input": "input model", "target": "targets", "compare": "compared"}[kind],
                       **style)
            if kind == "target":
                ax.plot(xs, ys, c="tab:blue", linewidth=0.8)
            for x, y, r in zip(xs, ys, picked):
                ax.annotate(r["name"], (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel(f"measured speed-up ({shape.describe()})", fontsize=8)
        ax.set_ylabel(f"{column} score")
        ax.legend(fontsize=7)
    return save_png(fig, path)
