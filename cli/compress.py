"""sparsecse compress: prune to a kept-FLOPs / kept-parameters budget in several steps, with
reconstruction and rescoring between them, and write the shrunk model (K-prune style); or, with
``--recipe``, run a whole recipe (distil, prune, distil, evaluate) as one command."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import click

from sparsecse.errors import SparseCSEError
from sparsecse.cli.options import (PLAIN_FLOAT, PLAIN_INT, align_ffn_option, criterion_option, data_dir_option, device_option, echo_json,
                                   eval_set_file, eval_set_options,
                                   json_option, keep_one_head_option, model_option, overwrite_option, pooling_option,
                                   quiet_option, reconstruction_options, reconstruction_plan, score_hint, scoring_options,
                                   seed_option,
                                   seq_len_option, trust_remote_code_option)


@click.command("compress")
@model_option
@trust_remote_code_option
@click.option("--keep-flops", type=PLAIN_FLOAT, default=None, metavar="B",
              help="Keep at most B (in (0, 1]) of the transformer layers' FLOPs per token.")
@click.option("--keep-params", type=PLAIN_FLOAT, default=None, metavar="B",
              help="Instead of --keep-flops: the budget in transformer-layer parameters.")
@click.option("--steps", type=click.IntRange(min=1), default=3, show_default=True,
              help="Geometric budget steps from the dense model to B (1: one-shot prune + reconstruct).")
@reconstruction_options("Sentences (one per line) the kept units are refit on after every step, as "
                        "`shrink --reconstruct` (required without --recipe).")
@click.option("--scores", "scores_path", default=None, type=click.Path(dir_okay=False),
              help="Score file of the dense model for the first step (default: scored here).")
@criterion_option("fisher, the budget default of `prune`")
@click.option("--lambda", "lam", type=click.FloatRange(0, 1), default=0.5, show_default=True,
              help="Alignment weight λ.")
@seq_len_option
@keep_one_head_option("off, as for `prune` budgets")
@data_dir_option
@scoring_options("--score-batch-size", "Rescoring (as `score` does): ")
@align_ffn_option
@click.option("--layout", default=None, metavar="stock|custom",
              help="stock: a model of the input's own architecture class, loadable with no custom code (one FFN width "
                   "for every layer, heads kept where the config has no head size); custom (default): each layer "
                   "its own width. With --recipe or a target it sets every prune stage's layout.")
@click.option("--out", default=None, type=click.Path(),
              help="Directory for the smaller model (with --recipe: the run's directory; the model is OUT/model).")
@click.option("--recipe", default=None, metavar="NAME|FILE",
              help="Run a recipe (a shipped name or a .yaml/.toml file) on --model and --corpus instead of one "
                   "pruning stage; see --list-recipes.")
@click.option("--corpus", "recipe_corpus", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="With --recipe: the sentences (one per line) its stages train and reconstruct on.")
@click.option("--set", "overrides", multiple=True, metavar="STAGE.KEY=VALUE",
              help="With --recipe: replace one of its settings (repeatable), e.g. --set student.epochs=2.")
@click.option("--resume", is_flag=True, help="With --recipe: continue the unfinished run in --out.")
@click.option("--list-recipes", is_flag=True, help="Print the shipped recipes and what they reached, then exit.")
@click.option("--speedup", default=None, metavar="X[,X...]",
              help="Instead of a budget: a speed-up over --model to reach, measured on --engine at the serving shape "
                   "(runs the shipped `target` recipe with --corpus: find the budget by timing candidates, prune, "
                   "distil, choose on dev); several, e.g. 1.5,2,3, make one model each in OUT/speedup-X/model and "
                   "the curve OUT/curve.csv / curve.png (a curve's models are tested on the 7 STS tasks; "
                   "--set evaluation.tasks=[sts,transfer] adds the transfer tasks).")
@click.option("--speedup-of", default=None, metavar="MODEL",
              help="Instead of --speedup: as fast as MODEL (e.g. the smaller model you would download instead), its "
                   "speed-up over --model measured at the serving shape when the run starts; the final model is "
                   "timed beside it and meets the target when it is at least as fast.")
@click.option("--max-drop", type=PLAIN_FLOAT, default=None, metavar="D",
              help="The largest drop of the dev score below --model's own (points); alone: the fastest candidate "
                   "within it.")
@click.option("--engine", default=None, metavar="ENGINE",
              help="Where speed is measured: torch-fp32 (default), or an export format with its quantization: onnx, "
                   "onnx-int8, openvino, openvino-int8.")
@click.option("--batch-size", "timing_batch_size", type=PLAIN_INT, default=None, metavar="N",
              help="With a target: sentences per batch (throughput) or per request (latency) when timing (default "
                   "128 for a throughput, 1 for a latency).")
@click.option("--threads", type=PLAIN_INT, default=None, metavar="N",
              help="With a target: the engine's intra-op threads while timing (default: the engine's default on "
                   "this machine, recorded).")
@click.option("--metric", default=None, metavar="METRIC",
              help="With a target: what the speed-up compares: throughput (default), latency-p50 or latency-p95 (the "
                   "time of one request of --batch-size sentences).")
@click.option("--timing-sentences", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="With a target: time on these sentences (one per line) instead of the dev set's.")
@click.option("--depth", default=None, metavar="N|auto",
              help="With --speedup: the most whole layers a candidate may remove, besides heads and neurons (0: width "
                   "only). Default auto: half the layers for a latency metric, 0 for throughput.")
@click.option("--minutes", default=None, metavar="M",
              help="With a target: the most minutes the run may take; its last training stage ends in time, its "
                   "learning-rate schedule fitted to the steps that fit (the target recipe's default: 20). 'none': "
                   "no limit.")
@click.option("--when-busy", default=None, metavar="stop|wait",
              help="With a target: when a timing's spread stays too wide, stop (default) or wait for a quieter "
                   "machine and time again.")
@eval_set_options(dev="with --recipe or a target, where candidates, scoring pairs and checkpoints are chosen "
                      "(default STS-B dev).",
                  test="with --recipe or a target, scored in the final evaluation and the model card.")
@click.option("--compare-with", "compare_with", default=None, metavar="MODEL",
              help="With a target: a model compared on the card and, for several speed-ups, timed and drawn on the "
                   "curve beside them (e.g. paraphrase-MiniLM-L3-v2).")
@click.option("--teacher", default=None, metavar="MODEL",
              help="With a target: the student's teacher (default: --model itself; A+B for an ensemble).")
@click.option("--store", default=None, type=click.Path(file_okay=False), metavar="DIR",
              help="With --recipe or a target: also write the run's final measurement as one entry of this results "
                   "store (docs/results/store), named after --out's folder and this machine.")
@pooling_option
@device_option
@seed_option
@overwrite_option
@json_option
@quiet_option
def command(model, keep_flops, keep_params, steps, corpus, reconstruct_sentences, reconstruct_method,
            reconstruct_target, reconstruct_ridge, reconstruct_weighting, scores_path, criterion, lam, seq_len,
            keep_one_head, data_dir, split, score_batch_size, max_batches, align_ffn, layout, out, recipe,
            recipe_corpus, overrides, resume, list_recipes, speedup, speedup_of, max_drop, engine, timing_batch_size,
            threads, metric, timing_sentences, depth, minutes, when_busy, dev, test, compare_with, teacher, store,
            pooling, device, seed, overwrite, as_json, quiet):
    """Prune to a budget in steps (K-prune style): score, keep the best units within the step's budget,
    reconstruct, rescore the reconstructed model, and repeat until the budget; then shrink. Meets the budget
    exactly as `prune --keep-flops` does.

    With --recipe, run a whole recipe instead: e.g. `sparsecse compress --recipe frontier-2x --corpus FILE --out
    DIR` distils, prunes, distils again, evaluates, and writes DIR/model with its model card.
    """
    ctx = click.get_current_context()
    if list_recipes:
        return print_recipes(as_json)
    aim = target_aim(ctx, dict(speedup=speedup, speedup_of=speedup_of, max_drop=max_drop, engine=engine,
                               batch_size=timing_batch_size, teacher=teacher, threads=threads, metric=metric,
                               timing_sentences=timing_sentences, when_busy=when_busy, compare_with=compare_with,
                               depth=depth, minutes=minutes))
    sets = {"dev": dev, "test": test, "store": store}
    overrides = with_layout(layout, recipe, aim is not None, overrides)  # a bad layout refused before anything is read
    if aim is not None:
        if recipe_corpus is None:
            raise SparseCSEError("A target needs --corpus FILE (the sentences it reconstructs and distils on).")
        return run_recipe_command(recipe or "target", model, recipe_corpus, out, data_dir, overrides, resume,
                                  overwrite, as_json, quiet, aim=aim, sets=sets)
    if recipe is not None:
        given = [p.opts[0] for p in ctx.command.params if p.name in SINGLE_STAGE_ONLY
                 and ctx.get_parameter_source(p.name) == click.core.ParameterSource.COMMANDLINE]
        if given:
            raise SparseCSEError(f"{given[0]} sets the single pruning stage; a recipe sets its own stages (change one "
                                 f"with --set STAGE.KEY=VALUE).")
        return run_recipe_command(recipe, model, recipe_corpus, out, data_dir, overrides, resume, overwrite, as_json,
                                  quiet, sets=sets)
    for name, flag in (("recipe_corpus", "--corpus"), ("overrides", "--set"), ("resume", "--resume")):
        if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE:
            raise SparseCSEError(f"{flag} goes with --recipe; the single pruning stage takes --reconstruct CORPUS.")
    if store is not None:
        raise SparseCSEError("--store goes with --recipe or a target; the single pruning stage measures nothing.")
    if test is not None:
        raise SparseCSEError("--test goes with --recipe or a target; the single pruning stage evaluates nothing "
                             "(run `sparsecse eval --test` on its model).")
    if corpus is None:
        raise SparseCSEError("compress needs --reconstruct CORPUS (or --recipe NAME to run a recipe).")
    if out is None:
        raise SparseCSEError("compress needs an output directory (--out).")
    from sparsecse.artifacts.destinations import check_destination
    from sparsecse.artifacts.inputs import read_inputs
    from sparsecse.compression import compress
    from sparsecse.pruning.prune import PruningConfig
    from sparsecse.scoring.score import ScoringConfig
    from sparsecse.pruning.uniform import DEFAULT_LAYOUT
    from sparsecse.shrinking.shrink import ShrinkConfig

    # before the corpus is read (compress checks again, for its Python callers)
    check_destination(out, overwrite,
                      inputs=read_inputs(model=model, corpus=corpus, scores=scores_path, data_dir=data_dir,
                                         dev=eval_set_file(dev)))
    plan = reconstruction_plan(corpus, reconstruct_sentences, reconstruct_method, reconstruct_target,
                               reconstruct_ridge, reconstruct_weighting)
    scoring = ScoringConfig(data_dir=data_dir, split=split, batch_size=score_batch_size, max_batches=max_batches,
                            seed=seed, show_progress=not quiet, dev=dev)
    pruning = PruningConfig(lam=lam, criterion=criterion, seq_len=seq_len, keep_one_head=keep_one_head,
                            layout=layout or DEFAULT_LAYOUT)
    shrinking = ShrinkConfig(reconstruct=plan, seq_len=seq_len, align_ffn=align_ffn, pooling=pooling, device=device,
                             show_progress=not quiet, layout=layout or DEFAULT_LAYOUT)
    result = compress(model, out, keep_flops=keep_flops, keep_params=keep_params, steps=steps, scores=scores_path,
                      score=scoring, prune=pruning, shrink=shrinking, overwrite=overwrite)
    if as_json:
        echo_json(result.to_dict())
        return
    m = result.mask.manifest
    for r in result.steps:
        click.echo(f"step {r['step']}: budget {r['budget']:.4f}, kept {r['heads_kept']} heads, "
                   f"{r['neurons_kept']} neurons (score {r['score_seconds']:.0f} s, "
                   f"reconstruction {r['reconstruction_seconds']:.0f} s)")
    click.echo(f"{m['criterion']}{' (default)' if m.get('criterion_default') else ''}: kept "
               f"{m['kept_flops_ratio']:.4f} of layer FLOPs per token (n={m['seq_len']}), "
               f"{m['kept_params_ratio']:.4f} of layer parameters; {result.seconds:.0f} s")
    click.echo(f"wrote {result.out}")
    click.echo(score_hint(result.out))


# options that configure the single pruning stage; a recipe refuses them
SINGLE_STAGE_ONLY = ("keep_flops", "keep_params", "steps", "corpus", "reconstruct_sentences", "reconstruct_method",
                     "reconstruct_target", "reconstruct_ridge", "reconstruct_weighting", "scores_path", "criterion",
                     "lam", "seq_len", "keep_one_head", "split", "score_batch_size", "max_batches", "align_ffn",
                     "pooling", "device", "seed")


def print_recipes(as_json: bool) -> None:
    """The shipped recipes: name, stages and what a run of each reached."""
    from sparsecse.recipes.spec import load_recipe, shipped_recipes

    recipes = [load_recipe(name) for name in shipped_recipes()]
    if as_json:
        echo_json({"recipes": [{"name": r.name, "file": r.source, "model": r.model, "description": r.description,
                                "stages": [s.describe() for s in r.stages], "reached": r.reached} for r in recipes]})
        return
    for r in recipes:
        click.echo(f"{r.name}  (model {r.model}; {r.source})")
        click.echo(f"  {r.description}")
        for i, stage in enumerate(r.stages, 1):
            click.echo(f"  {i}. {stage.name}: {stage.describe()}")
        reached = r.reached or {}
        if reached.get("sts_avg") is not None:
            click.echo(f"  reached: STS avg {reached['sts_avg']:.2f}"
                       + (f", {reached['speedup']:.2f}x" if reached.get("speedup") else "")
                       + (f" over {reached['speedup_over']}" if reached.get("speedup") and reached.get("speedup_over")
                          else "")
                       + (f", transfer avg {reached['transfer_avg']:.2f}" if reached.get("transfer_avg") else "")
                       + (f", {reached['minutes']:.0f} min" if reached.get("minutes") else "")
                       + (f" ({reached['machine']})" if reached.get("machine") else ""))
        else:
            click.echo("  reached: not yet recorded")


def target_aim(ctx, given: dict):
    """The target the options name (:class:`~sparsecse.targets.aim.Aim`, parsed and checked once, here where the
    command line ends), or None without any target option; one sentence for a target option without a goal, a bad
    value, or an option of the single pruning stage beside a target."""
    from sparsecse.targets.aim import Aim, option_name

    if all(v is None for v in given.values()):
        return None
    aim = Aim.parse(option_name, **given)  # "--depth goes with a target" before any other refusal
    single = [p.opts[0] for p in ctx.command.params if p.name in SINGLE_STAGE_ONLY
              and ctx.get_parameter_source(p.name) == click.core.ParameterSource.COMMANDLINE]
    if single:
        raise SparseCSEError(f"{single[0]} sets the single pruning stage; with --speedup or --max-drop the search "
                             "finds the budget (give one or the other).")
    return aim


def with_layout(layout: str | None, recipe: str | None, targeted: bool, overrides: tuple) -> tuple:
    """``--set`` items with ``--layout`` put on every prune stage of the recipe a run uses (with a target: the
    ``target`` recipe unless ``recipe`` names one), after checking the layout (one sentence for a bad one);
    a stage whose layout ``--set`` gives already keeps that."""
    if layout is None:
        return overrides
    from sparsecse.pruning.uniform import check_layout

    check_layout(layout)
    if recipe is None and not targeted:
        return overrides
    from sparsecse.recipes.spec import load_recipe

    name = recipe or "target"
    stages = [s.name for s in load_recipe(name).stages if s.type == "prune"]
    if not stages:
        raise SparseCSEError(f"--layout sets the prune stages, and the recipe {name} has none.")
    given = {item.partition("=")[0].strip() for item in overrides}
    return (*(f"{stage}.layout={layout}" for stage in stages if f"{stage}.layout" not in given), *overrides)


def run_recipe_command(recipe, model, corpus, out, data_dir, overrides, resume, overwrite, as_json, quiet,
                       aim=None, sets: dict | None = None) -> None:
    """``compress --recipe``: run it (:func:`sparsecse.compress` with ``recipe``) and report its final figures."""
    from sparsecse.compression import compress
    from sparsecse.recipes.spec import parse_set_options
    from sparsecse.targets.choice import TargetOutOfReach

    if out is None:
        raise SparseCSEError("compress --recipe needs an output directory (--out).")
    sets = dict(sets or {})
    store = sets.pop("store", None)
    if store is not None:
        check_store(store, out, overwrite)
    try:
        result = compress(model, out, recipe=recipe, corpus=corpus, data_dir=data_dir,
                          overrides=parse_set_options(overrides), resume=resume, overwrite=overwrite,
                          show_progress=not quiet, target=aim, **{k: v for k, v in sets.items() if v is not None})
    except TargetOutOfReach as exc:  # a curve keeps the targets it reached: their entries are written first
        if store is not None and getattr(exc, "curve", None) is not None and exc.curve.runs:
            store_entries(store, out, exc.curve)
        raise
    if store is not None:
        store_entries(store, out, result)
    if as_json:
        echo_json(result.to_dict())
        return refuse_missed_target(result)
    from sparsecse.recipes.curve import CurveResult

    if isinstance(result, CurveResult):
        for row in result.rows:
            click.echo(f"{row['name']}: {row['speedup']:.2f}x ±{row['spread']:.0%}, dev {row['dev']:.2f}"
                       + (f", STS avg {row['test']:.2f}" if row.get("test") is not None else "")
                       + (f" ({row['model']})" if row["kind"] == "target" else ""))
        click.echo(f"wrote the curve {result.table} and {result.plot} in {result.seconds / 60:.1f} min")
        return refuse_missed_target(result)
    figures = result.evaluation
    if figures.get("sts_avg") is not None:
        ci = figures.get("sts_avg_ci")
        click.echo(f"STS avg {figures['sts_avg']:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
                   + f", STS-B dev {figures['stsb_dev']:.2f}")
    elif figures.get("stsb_dev") is not None:
        click.echo(f"STS-B dev {figures['stsb_dev']:.2f} (evaluation.test is false: no test figures)")
    versus = figures.get("versus")
    if versus:
        lo, hi = versus["paired_ci"]
        click.echo(f"vs {versus['model']} ({versus['sts_avg']:.2f}): {versus['difference']:+.2f} [{lo:+.2f}, {hi:+.2f}]")
    if figures.get("speed"):
        click.echo(f"speed-up over the input model: {figures['speed']['speedup']:.2f}x (throughput at batch "
                   f"{figures['speed'].get('batch_size', 128)}, torch fp32, this machine)")
    click.echo(f"wrote {result.model} (model card: {result.model / 'README.md'}) in {result.seconds / 60:.1f} min")
    reached = figures.get("target")
    if reached:
        named = reached.get("speedup_of")
        beside = f" ({named['model']} {named['speedup']:.2f}x beside it)" if named else ""
        click.echo(f"target: {reached['speedup']:.2f}x ±{reached.get('spread', 0):.0%}{beside} at "
                   f"{shape_text(reached)}, dev {reached['dev_score']:.2f} (drop {reached['drop']:+.2f}); candidates: "
                   f"{result.model / 'candidates.csv'}")
    refuse_missed_target(result)


def store_entries(store, out, result) -> None:
    """One results-store entry per model a run made (a curve makes one per target reached, and one of the curve's
    rows); one sentence where an entry could not be written (the models stay)."""
    curve = hasattr(result, "runs")
    made = [r.model for r in result.runs.values()] if curve else [result.model]
    try:
        for model_dir in made:
            write_store_entry(store, Path(out).name + (f".{model_dir.parent.name}" if curve else ""), model_dir)
        if curve and result.rows:
            write_curve_entry(store, Path(out).name, result.rows, result.seconds)
    except (OSError, ValueError, SparseCSEError) as exc:  # the model stays; the user learns why the entry did not
        reason = str(exc).rstrip(".") or type(exc).__name__
        raise SparseCSEError(f"The model is kept in {', '.join(map(str, made))}, but the --store entry was not "
                             f"written in {store} ({reason}).") from None


def check_store(store, out, overwrite: bool) -> None:
    """``--store DIR``, before the run: a writable folder (click refuses a file) that is no model directory, and
    that ``--out`` (which ``--overwrite`` may remove, a curve's ``OUT/speedup-X`` included) does not hold."""
    from sparsecse.artifacts.destinations import check_destination
    from sparsecse.artifacts.inputs import read_inputs

    if any((Path(store) / name).exists() for name in ("config.json", "modules.json", "model.safetensors")):
        raise SparseCSEError(f"--store {store} is a model directory; give the results store's folder (e.g. "
                             "docs/results/store).")
    check_destination(Path(store) / "entry.json", overwrite=True, option="--store")
    if out is not None:
        check_destination(out, True, inputs=read_inputs(store=[store]))


def refuse_missed_target(result) -> None:
    """A run whose final model misses its target ends non-zero (after its figures, printed or as JSON); so does a
    curve with a target whose model does, naming the first (the curve is written first)."""
    runs = list(result.runs.values()) if hasattr(result, "runs") else [result]
    missing = [(r, reached) for r in runs if (reached := (getattr(r, "evaluation", None) or {}).get("target"))
               and not reached["met"]]
    if missing:
        run, reached = missing[0]
        interval, repaired = reached.get("interval") or {}, reached.get("repair") or {}
        within = (f" ({interval['low']:.2f}-{interval['high']:.2f}x, each model served alone)"
                  if "low" in interval else "")
        tried = (f"; one more prune step and a short recovery ran {repaired['after']:.2f}x, short too"
                 if repaired.get("after") is not None else "")
        named = (reached.get("speedup_of") or {}).get("model")
        goal = f"{named}'s {reached['speedup_target']:.2f}x in the same timing" if named else \
            f"{reached['speedup_target']:g}x"
        missed = (f"runs {reached['speedup']:.2f}x{within}, short of {goal}{tried}"
                  if not reached["met_speed"] else
                  f"drops {reached['drop']:.2f} on dev, more than {reached['max_drop']:g}")
        more = f" ({len(missing) - 1} more target{'s' if len(missing) > 2 else ''} missed)" if len(missing) > 1 else ""
        raise SparseCSEError(f"The model in {run.model} {missed} at {shape_text(reached)}{more}; its card and "
                             "candidates table say what was tried.")


def store_id(name: str) -> str:
    """A results-store id: ``name`` and this machine, lower-case, other characters made dashes."""
    from sparsecse.reporting.store import machine_slug

    return re.sub(r"[^a-z0-9.]+", "-", f"{name}.{machine_slug()}".lower()).strip("-.")


def write_store_entry(store, name, model_dir) -> None:
    """The run's final measurement as one entry of the results store ``store`` (id: ``name``, the --out folder's
    name, or ``NAME.speedup-X`` for a curve's target, and this machine)."""
    from sparsecse.reporting.store import run_entry, write_entry

    manifest = json.loads((Path(model_dir) / "manifest.json").read_text())
    command = typed_command(click.get_current_context())
    ident = store_id(name)
    click.echo(f"wrote {write_entry(store, run_entry(ident, manifest, command))}")


def write_curve_entry(store, name: str, rows: list[dict], seconds: float) -> None:
    """A curve's rows (every model's speed-up and spread from its one interleaved timing, dev and test scores) and
    its wall time ``seconds`` as the results-store entry ``NAME.curve.MACHINE``."""
    from sparsecse.reporting.store import Entry, provenance, write_entry

    shape = rows[0]
    prov = provenance(typed_command(click.get_current_context()), threads=shape["threads"],
                      batch_size=shape["batch_size"], engine=shape["engine"])
    ident = store_id(f"{name}.curve")
    figures = {"metric": shape["metric"], "rows": rows, "minutes": round(seconds / 60, 1)}
    entry = Entry(ident, f"the curve of {prov['command']}", figures, prov)
    click.echo(f"wrote {write_entry(store, entry)}")


def typed_command(ctx: click.Context) -> str:
    """The command line as the user gave it: ``sparsecse COMMAND`` and each option set on the command line."""
    words = ["sparsecse", ctx.info_name]
    for param in ctx.command.params:
        if ctx.get_parameter_source(param.name) != click.core.ParameterSource.COMMANDLINE:
            continue
        value = ctx.params[param.name]
        if getattr(param, "is_flag", False):
            words += [param.opts[0]] if value else []
            continue
        for item in (value if getattr(param, "multiple", False) else [value]):
            words += [param.opts[0], str(item)]
    return shlex.join(words)


def shape_text(reached: dict) -> str:
    """The serving shape a target's figures were measured at, e.g. ``throughput at batch 128 on 2 threads,
    torch-fp32``."""
    from sparsecse.targets.spec import Shape

    shape = reached.get("shape")
    if not shape:
        return f"batch {reached['batch_size']} on {reached['engine']}"
    return Shape(shape["metric"], shape["batch_size"], shape["threads"], shape["sentences"], shape["engine"],
                 loader=shape.get("loader", "sparsecse")).describe()
