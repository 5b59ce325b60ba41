"""sparsecse sweep: score once, then prune and evaluate (optionally rewind) over sparsity x λ."""

from __future__ import annotations

import dataclasses

import click

from sparsecse.cli.options import (criterion_option, data_dir_option, device_option, echo_json, fasttest_option,
                                   json_option, keep_one_head_option, model_option, overwrite_option, pooling_option,
                                   precision_option, quiet_option, scope_option, scoring_options, seed_option,
                                   trust_remote_code_option)

# flags that only mean something with --rewind (refused without it, rather than silently ignored)
REWIND_ONLY = ("objective", "corpus", "rewind_sparsities", "rewind_lambda", "rewind_dense", "seeds", "rewind_init",
               "max_steps", "batch_size", "lr", "max_length", "eval_steps", "objective_args")


# flags that only mean something with --launcher
LAUNCHER_ONLY = ("launcher_config", "partition", "gpus_per_task", "cpus_per_task", "mem", "time_limit",
                 "array_parallelism", "sbatch", "workers", "poll_seconds", "detach")


def _flag(ctx, name: str) -> str:
    return next(p.opts[0] for p in ctx.command.params if p.name == name)


def _check_rewind_flags(ctx, rewind: bool) -> None:
    from click.core import ParameterSource

    from sparsecse.errors import SparseCSEError

    given = [n for n in REWIND_ONLY if ctx.get_parameter_source(n) not in (ParameterSource.DEFAULT, None)]
    if given and not rewind:
        hint = (" (the scoring batch is --score-batch-size; --batch-size is the rewinding batch, as in train)"
                if "batch_size" in given else "")
        raise SparseCSEError(f"{', '.join(_flag(ctx, n) for n in given)} only apply with --rewind{hint}.")


@click.command("sweep")
@trust_remote_code_option
@model_option
@click.option("--sparsities", default=None, metavar="GRID",
              help="Sparsities: values and start:stop:step ranges, e.g. 0.01:0.10:0.01,0.2:0.5:0.1.")
@click.option("--keep-flops", default=None, metavar="GRID",
              help="Also (or instead) kept-FLOPs budget points, e.g. 0.7,0.5,0.35 (see `prune --keep-flops`).")
@click.option("--reconstruct", default=None, type=click.Path(dir_okay=False), metavar="CORPUS",
              help="Also evaluate every budget point after retraining-free reconstruction on sentences of this "
                   "file (`shrink --reconstruct`'s defaults).")
@click.option("--lambdas", default="0.25,0.5,0.75", show_default=True, metavar="LIST",
              help="Alignment weights λ in [0, 1] (list or range).")
@click.option("--tasks", default="sts", show_default=True, help="sts, transfer, all, or task names A,B.")
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Sweep directory; an existing one with the same model and scoring settings is resumed.")
@overwrite_option
@data_dir_option
@scoring_options("--score-batch-size", "Scoring (as `score` does): ")
@scope_option
@criterion_option("abs_grad for --sparsities, fisher for --keep-flops budgets, at every point; see `prune "
                  "--criterion`")
@keep_one_head_option("on for --sparsities, off for budgets")
@click.option("--eval-mode", type=click.Choice(["masked", "shrunk"]), default="masked", show_default=True,
              help="Evaluate with gates, or on a physically shrunk copy (same numbers).")
@precision_option
@fasttest_option
@click.option("--rewind", is_flag=True, help="Also rewind pruned models (retrain from the initial weights); the "
              "flags below apply only with it and mean what they mean in `rewind`.")
@click.option("--rewind-sparsities", default=None, metavar="GRID",
              help="Sparsities to rewind (default: the whole grid); must be in --sparsities.")
@click.option("--rewind-lambda", default="best", show_default=True,
              help="λ to rewind at: best (per sparsity, the best STS average without rewinding) or a list.")
@click.option("--rewind-dense/--no-rewind-dense", default=True, show_default=True,
              help="Also retrain the unpruned model the same way, as a control.")
@click.option("--seeds", default=None, metavar="LIST",
              help="Rewinding seeds, e.g. 0,1,2: every rewound point and the control once per seed (default: "
                   "--seed); the report shows mean ± std and which differences to the control hold.")
@click.option("--objective", default="simcse", show_default=True, help="Training objective (see `objectives`).")
@click.option("--corpus", type=click.Path(dir_okay=False), default=None, help="Training text, one sentence a line.")
@click.option("--objective-args", default=None, metavar="K=V,..", help="Objective parameters.")
@click.option("--init", "rewind_init", default=None, metavar="M",
              help="Checkpoint to rewind to (default: the model's recorded initial checkpoint, else the model).")
@click.option("--max-steps", type=click.IntRange(min=1), default=None, help="Training steps.")
@click.option("--batch-size", type=click.IntRange(min=2), default=None, help="Training batch (as in `rewind`).")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=None, help="Peak learning rate.")
@click.option("--max-length", type=click.IntRange(min=2), default=None, help="Tokens per training sentence.")
@click.option("--eval-steps", type=click.IntRange(min=0), default=None, help="STS-B dev every N steps (0 = never).")
@click.option("--launcher", type=click.Choice(["slurm", "local"]), default=None,
              help="Run every unfinished point as a task: a SLURM job array (submitit), or local processes; "
                   "scoring runs here once. The options below apply only with it.")
@click.option("--launcher-config", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Cluster settings (TOML, YAML or JSON): partition, gpus_per_task, cpus_per_task, mem, time, "
                   "array_parallelism, setup, [sbatch], and [evaluate]/[rewind] overrides; options win over it.")
@click.option("--partition", default=None, help="SLURM partition.")
@click.option("--gpus-per-task", type=click.IntRange(min=0), default=None, help="GPUs per task.")
@click.option("--cpus-per-task", type=click.IntRange(min=1), default=None, help="CPUs per task.")
@click.option("--mem", default=None, metavar="SIZE", help="Memory per task, e.g. 32G.")
@click.option("--time-limit", default=None, metavar="TIME",
              help="Time limit per task: minutes or [D-]HH:MM:SS (default 1 h evaluations, 12 h rewinds); a "
                   "rewind reaching it is requeued and resumes from its checkpoint.")
@click.option("--array-parallelism", type=click.IntRange(min=1), default=None, help="Tasks of an array at once.")
@click.option("--sbatch", multiple=True, metavar="KEY=VALUE", help="Any other sbatch option (repeatable).")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="--launcher local: processes at once.")
@click.option("--poll-seconds", type=click.FloatRange(min=0.1), default=None, hidden=True,
              help="How often the launcher asks the tasks' states (default 30 s on SLURM, 2 s locally).")
@click.option("--detach", is_flag=True, help="--launcher slurm: submit and return; run the same command again "
              "to wait and collect.")
@pooling_option
@device_option
@seed_option
@json_option
@quiet_option
@click.pass_context
def command(ctx, model, sparsities, keep_flops, reconstruct, lambdas, tasks, out, overwrite, data_dir, split,
            score_batch_size, max_batches, scope, criterion, keep_one_head, eval_mode, precision, fasttest, rewind,
            rewind_sparsities, rewind_lambda, rewind_dense, seeds, objective, corpus, objective_args, rewind_init,
            max_steps, batch_size, lr, max_length, eval_steps, launcher, launcher_config,
            partition, gpus_per_task, cpus_per_task, mem, time_limit, array_parallelism, sbatch, workers, poll_seconds,
            detach, pooling, device, seed, as_json, quiet):
    """Score once, then prune and evaluate every (sparsity, λ); resumable, with a summary and plots.

    Several processes (or machines sharing the directory) may run the same sweep: each point is locked
    while it is computed and the others skip it. With --launcher slurm every unfinished point is a task of a
    SLURM job array (the rewinds a second array after it); a failed, cancelled or timed-out task is
    resubmitted by the next run of the same command, and finished points are never recomputed.
    """
    from sparsecse.evaluation.config import EvaluationConfig
    from sparsecse.evaluation.tasks import STS_TASKS
    from sparsecse.pruning.prune import PruningConfig
    from sparsecse.reporting.report import best_points
    from sparsecse.scoring.score import ScoringConfig
    from sparsecse.sweeps.config import RewindConfig, SweepOptions, sweep_spec
    from sparsecse.sweeps.run import sweep

    _check_rewind_flags(ctx, rewind)
    rewind_args = {k: v for k, v in dict(max_steps=max_steps, batch_size=batch_size, lr=lr,
                                         max_length=max_length, eval_steps=eval_steps,
                                         objective_args=objective_args).items() if v is not None}
    arguments = dict(
        keep_flops=keep_flops, reconstruct=reconstruct,
        score=ScoringConfig(data_dir=data_dir, split=split, batch_size=score_batch_size, seed=seed,
                            max_batches=max_batches),
        prune=PruningConfig(scope=scope, criterion=criterion, keep_one_head=keep_one_head),
        evaluate=EvaluationConfig(tasks=tasks, data_dir=data_dir, pooling=pooling, device=device, precision=precision,
                                  fasttest=fasttest, seed=seed),
        rewind=RewindConfig(corpus=corpus, objective=objective, sparsities=rewind_sparsities, lambdas=rewind_lambda,
                            init=rewind_init, args=rewind_args, dense=rewind_dense, seeds=seeds) if rewind else None,
        options=SweepOptions(eval_mode=eval_mode, overwrite=overwrite, show_progress=not quiet))
    _check_launcher_flags(ctx, launcher)
    if launcher:
        spec = sweep_spec(model, sparsities, lambdas, out, **arguments)
        result = _launch(spec, launcher, launcher_config, dict(
            partition=partition, gpus_per_task=gpus_per_task, cpus_per_task=cpus_per_task, mem=mem,
            time=time_limit, array_parallelism=array_parallelism, sbatch=sbatch), workers, detach, as_json,
            poll_seconds)
        if result is None:
            return
    else:
        arguments["options"] = dataclasses.replace(arguments["options"], make_report=False)  # reported below
        result = sweep(model, sparsities, lambdas, out, **arguments)
    built = _report_after(result)
    table = built["table"]
    sts = [t for t in STS_TASKS if t in set(table["task"])]
    picks = best_points(table, sts) if sts else None
    if as_json:
        echo_json({"out": str(result.out), "computed": len(result.computed), "reused": len(result.reused),
                   "busy": len(result.busy), "seconds": round(result.seconds, 1),
                   "results_csv": str(built["results_csv"]), "summary": str(built["summary"]),
                   "baseline": picks and picks["baseline"], "best_average": picks and picks["best_average"],
                   "vs_control": [{**c["rows"]["avg_sts"], "config": c["point"], "seeds": c["seeds"]}
                                  for c in built["comparisons"] if "avg_sts" in c["rows"]],
                   **({"failed": [dict(zip(("point", "reason", "log"), f)) for f in result.failed]}
                      if getattr(result, "failed", None) else {})})
        _raise_failed(result)
        return
    busy = f", {len(result.busy)} left to another process" if result.busy else ""
    click.echo(f"{len(result.computed)} points computed, {len(result.reused)} reused{busy}, "
               f"{result.seconds / 60:.1f} min")
    click.echo(built["summary_text"])
    click.echo(f"Results: {built['results_csv']}, {built['summary']}, {len(built['figures'])} figure files in "
               f"{result.out / 'figures'}")
    _raise_failed(result)


def _check_launcher_flags(ctx, launcher) -> None:
    from click.core import ParameterSource

    from sparsecse.errors import SparseCSEError

    given = [n for n in LAUNCHER_ONLY if ctx.get_parameter_source(n) not in (ParameterSource.DEFAULT, None)]
    if given and not launcher:
        raise SparseCSEError(f"{', '.join(_flag(ctx, n) for n in given)} only apply with --launcher slurm|local.")


def _launch(spec, launcher, config, overrides, workers, detach, as_json, poll):
    """Run the sweep's points as cluster tasks; the SweepResult of what they did, None when detached."""
    import sys

    from sparsecse.errors import SparseCSEError

    try:
        from sparsecse.sweeps.cluster.config import load_resources, parse_sbatch_args
        from sparsecse.sweeps.cluster.launch import check_launcher, launch_sweep
    except ImportError as exc:
        raise SparseCSEError(f"--launcher needs the cluster extra ({exc.name} is missing): "
                             "pip install 'sparsecse[cluster]'.") from None
    check_launcher(launcher, detach)  # before scoring: a missing sbatch submits nothing
    overrides["sbatch"] = parse_sbatch_args(overrides["sbatch"]) or None
    resources = load_resources(config, overrides)
    confirm = (lambda question: click.confirm(question, default=False, err=True)) if sys.stdin.isatty() else None
    import time

    started = time.time()
    launched = launch_sweep(spec, launcher, resources, workers=workers, detach=detach,
                            poll=poll, echo=lambda msg: click.echo(msg, err=True), confirm=confirm)
    if launched.detached:
        if as_json:
            echo_json({"out": str(launched.out), "submitted": len(launched.tasks), "jobs": launched.job_ids})
        return None
    from sparsecse.sweeps.points import SweepResult

    result = SweepResult(launched.out, computed=[t.point.label for t in launched.tasks if t.status == "done"],
                         reused=launched.reused, busy=[t.point.label for t in launched.tasks if t.status == "busy"],
                         seconds=time.time() - started)
    result.failed = [(t.point.label, t.reason, str(t.log)) for t in launched.failed]
    return result


def _report_after(result) -> dict:
    """The sweep's report; when points failed and the report cannot be built either, one error says both."""
    from sparsecse.errors import SparseCSEError
    from sparsecse.reporting.report import report

    try:
        return report(result.out)
    except SparseCSEError as exc:
        if not getattr(result, "failed", None):
            raise
        _raise_failed(result, also=f" The report could not be built either: {exc}")


def _raise_failed(result, also: str = "") -> None:
    failed = getattr(result, "failed", None)
    if failed:
        from sparsecse.errors import SparseCSEError

        lines = "; ".join(f"{label} ({reason}; log {log})" for label, reason, log in failed)
        raise SparseCSEError(f"{len(failed)} sweep points failed: {lines}. Run the same sweep again to retry them."
                             + also)
