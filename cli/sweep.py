"""sparsecse sweep: score once, then prune and evaluate (optionally rewind) over sparsity x λ."""

from __future__ import annotations

import json

import click

from sparsecse.cli.options import data_dir_option, device_option, json_option, model_option, pooling_option, seed_option


@click.command("sweep")
@model_option
@click.option("--sparsities", required=True, metavar="GRID",
              help="Sparsities: values and start:stop:step ranges, e.g. 0.01:0.10:0.01,0.2:0.5:0.1.")
@click.option("--lambdas", default="0.25,0.5,0.75", show_default=True, metavar="LIST",
              help="Alignment weights λ in [0, 1] (list or range).")
@click.option("--tasks", default="sts", show_default=True, help="sts, transfer, all, or task names A,B.")
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Sweep directory; an existing one with the same model and scoring settings is resumed.")
@data_dir_option
@click.option("--rewind", is_flag=True, help="Also rewind pruned models (retrain from the initial weights).")
@click.option("--objective", default="simcse", show_default=True, help="Rewinding objective (see `objectives`).")
@click.option("--corpus", type=click.Path(dir_okay=False), default=None, help="Rewinding corpus, one sentence a line.")
@click.option("--rewind-sparsities", default=None, metavar="GRID",
              help="Sparsities to rewind (default: the whole grid); must be in --sparsities.")
@click.option("--rewind-lambda", default="best", show_default=True,
              help="λ to rewind at: best (per sparsity, the best STS average without rewinding) or a list.")
@click.option("--rewind-dense/--no-rewind-dense", default=True, show_default=True,
              help="Also retrain the unpruned model the same way, as a control.")
@click.option("--seeds", default=None, metavar="LIST",
              help="Rewinding seeds, e.g. 0,1,2: every rewound point and the control once per seed (default: "
                   "--seed); the report shows mean ± std and which differences to the control hold.")
@click.option("--init", "rewind_init", default=None, metavar="M",
              help="Checkpoint to rewind to (default: the model's recorded initial checkpoint, else the model).")
@click.option("--max-steps", type=click.IntRange(min=1), default=None, help="Rewinding: training steps.")
@click.option("--rewind-batch-size", type=click.IntRange(min=2), default=None, help="Rewinding: batch size.")
@click.option("--lr", type=float, default=None, help="Rewinding: learning rate.")
@click.option("--max-length", type=click.IntRange(min=4), default=None, help="Rewinding: max tokens per sentence.")
@click.option("--eval-steps", type=click.IntRange(min=0), default=None,
              help="Rewinding: STS-B dev every N steps (0 = never).")
@click.option("--objective-args", default=None, metavar="K=V,..", help="Rewinding: objective parameters.")
@click.option("--split", type=click.Choice(["train", "dev", "test"]), default="train", show_default=True,
              help="STS-B split to score on.")
@click.option("--batch-size", type=click.IntRange(min=2), default=64, show_default=True,
              help="Scoring: positive pairs per batch.")
@click.option("--max-batches", type=click.IntRange(min=1), default=None, help="Scoring: stop after N batches.")
@click.option("--scope", type=click.Choice(["global", "layer"]), default="global", show_default=True,
              help="Rank units across all layers, or within each layer.")
@click.option("--eval-mode", type=click.Choice(["masked", "shrunk"]), default="masked", show_default=True,
              help="Evaluate with gates, or on a physically shrunk copy (same numbers).")
@pooling_option
@device_option
@seed_option
@json_option
def command(model, sparsities, lambdas, tasks, out, data_dir, rewind, objective, corpus, rewind_sparsities,
            rewind_lambda, rewind_dense, seeds, rewind_init, max_steps, rewind_batch_size, lr, max_length,
            eval_steps, objective_args, split, batch_size, max_batches, scope, eval_mode, pooling, device, seed, as_json):
    """Score once, then prune and evaluate every (sparsity, λ); resumable, with a summary and plots."""
    from sparsecse.report import best_points, report
    from sparsecse.sweeping import STS_TASKS, sweep

    rewind_args = {k: v for k, v in dict(max_steps=max_steps, batch_size=rewind_batch_size, lr=lr,
                                         max_length=max_length, eval_steps=eval_steps,
                                         objective_args=objective_args).items() if v is not None}
    result = sweep(model, sparsities, lambdas, out, tasks=tasks, rewind=rewind, objective=objective, corpus=corpus,
                   rewind_sparsities=rewind_sparsities, rewind_lambda=rewind_lambda, rewind_init=rewind_init,
                   rewind_args=rewind_args, rewind_dense=rewind_dense, seeds=seeds, data_dir=data_dir, seed=seed,
                   split=split, batch_size=batch_size, max_batches=max_batches, scope=scope, pooling=pooling, device=device,
                   eval_mode=eval_mode, make_report=False, show_progress=True)
    built = report(result.out)
    table = built["table"]
    sts = [t for t in STS_TASKS if t in set(table["task"])]
    picks = best_points(table, sts) if sts else None
    if as_json:
        click.echo(json.dumps({"out": str(result.out), "computed": len(result.computed), "reused": len(result.reused),
                               "seconds": round(result.seconds, 1), "results_csv": str(built["results_csv"]),
                               "summary": str(built["summary"]),
                               "baseline": picks and picks["baseline"],
                               "best_average": picks and picks["best_average"],
                               "vs_control": [{**c["rows"]["avg_sts"], "config": c["point"], "seeds": c["seeds"]}
                                              for c in built["comparisons"] if "avg_sts" in c["rows"]]}))
        return
    click.echo(f"{len(result.computed)} points computed, {len(result.reused)} reused, {result.seconds / 60:.1f} min")
    click.echo(built["summary_text"])
    click.echo(f"Results: {built['results_csv']}, {built['summary']}, {len(built['figures'])} figure files in "
               f"{result.out / 'figures'}")
