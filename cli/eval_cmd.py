"""sparsecse eval: STS12-16, STS-B, SICK-R and the SentEval transfer tasks, for a model or model + mask."""

from __future__ import annotations

import click

from sparsecse.cli.options import (
    data_dir_option,
    device_option,
    echo_json,
    fasttest_option,
    json_option,
    model_option,
    overwrite_option,
    pooling_option,
    precision_option,
    quiet_option,
    seed_option,
)


def format_table(results: dict) -> str:
    """Scores one per line, then the averages and alignment/uniformity."""
    rows = [(task, f"{score:.2f}") for task, score in results["scores"].items()]
    for key, label in (("avg_sts", "STS avg"), ("avg_transfer", "transfer avg")):
        if key in results:
            rows.append((label, f"{results[key]:.2f}"))
    for key in ("alignment", "uniformity"):
        if key in results:
            rows.append((key, f"{results[key]:.4f}"))
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value:>8}" for name, value in rows]
    settings = results["settings"]
    lines.append(f"({results['model']}, pooling {results['pooling']}, STS '{settings['sts_aggregation']}', "
                 f"{results['timing']['total_s']:.1f} s)")
    return "\n".join(lines)


@click.command("eval")
@model_option
@click.option("--mask", "mask_path", default=None, type=click.Path(dir_okay=False),
              help="Mask file from `sparsecse prune`: evaluate the model gated by it (no retraining).")
@data_dir_option
@click.option("--tasks", default="sts", show_default=True, metavar="sts|transfer|all|NAME,..",
              help="Task group or comma-separated names (STS12..STS16, STSBenchmark, SICKRelatedness, MR, CR, "
                   "SUBJ, MPQA, SST2, TREC, MRPC).")
@click.option("--sts-aggregation", type=click.Choice(["all", "mean", "wmean"]), default="all", show_default=True,
              help="STS12-16: one Spearman over all subsets (all), or the (weighted) mean of per-subset ones.")
@click.option("--split", "sts_split", type=click.Choice(["test", "dev"]), default="test", show_default=True,
              help="Split of STS-B and SICK-R (dev = SICK trial) to score.")
@fasttest_option
@click.option("--transfer-protocol", type=click.Choice(["senteval", "fast"]), default="senteval", show_default=True,
              help="Transfer classifier: SentEval's PyTorch logistic regression, as the papers report (senteval), "
                   "or scikit-learn's, several times faster (fast).")
@precision_option
@pooling_option
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Sentences per encoding batch (default 128 on CPU, 512 on GPU; batches are length-sorted).")
@click.option("--align-uniform/--no-align-uniform", default=None,
              help="Alignment and uniformity on STS-B (default: whenever STSBenchmark is evaluated).")
@device_option
@seed_option
@json_option
@click.option("--out", default=None, type=click.Path(dir_okay=False),
              help="Also write the results with a manifest to this JSON file.")
@overwrite_option
@quiet_option
def command(model, mask_path, data_dir, tasks, sts_aggregation, sts_split, fasttest, transfer_protocol, precision,
            pooling, batch_size, align_uniform, device, seed, as_json, out, overwrite, quiet):
    """Evaluate a model (or a model gated by a mask) on STS and SentEval transfer tasks.

    STS: cosine similarity, Spearman x 100 (STS12-16 over all subsets, STS-B and SICK-R on test).
    Transfer: logistic regression on frozen embeddings, accuracy x 100.
    """
    from sparsecse.evaluation import evaluate, resolve_tasks
    from sparsecse.io import atomic_file, check_destination, dumps_json, make_manifest

    resolve_tasks(tasks)  # a bad task list fails before the model loads
    if out:
        check_destination(out, overwrite, inputs={"model": model, "mask": mask_path})
    results = evaluate(model=model, mask=mask_path, tasks=tasks, data_dir=data_dir, pooling=pooling,
                       batch_size=batch_size, device=device, sts_aggregation=sts_aggregation, fasttest=fasttest,
                       precision=precision, show_progress=not quiet, seed=seed, sts_split=sts_split,
                       align_uniform=align_uniform, transfer_protocol=transfer_protocol)
    if out:
        params = {k: v for k, v in results["settings"].items() if k != "data_dir"}
        params.update(tasks=results["tasks"], pooling=results["pooling"])
        manifest = make_manifest("eval", inputs={"model": results["model"], "mask": mask_path},
                                 params={**params, "data_dir": results["settings"]["data_dir"]}, seed=seed)
        with atomic_file(out, overwrite=overwrite) as tmp:
            tmp.write_text(dumps_json({**results, "manifest": manifest}, indent=2) + "\n")
    if as_json:
        echo_json(results)
    else:
        click.echo(format_table(results))
        if out:
            click.echo(f"wrote {out}")
