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
from sparsecse.cli.options import eval_set_file, eval_set_options
from sparsecse.cli.options import SEED, trust_remote_code_option
from sparsecse.evaluation.bootstrap import MAX_REPLICATES


def format_table(results: dict) -> str:
    """Scores one per line (with their bootstrap intervals), then the averages and alignment/uniformity."""
    boot = results.get("bootstrap")
    ci = {**boot["tasks"], **({"avg_sts": boot["avg"]} if "avg" in boot else {})} if boot else {}
    rows = [(task, f"{score:.2f}", task) for task, score in results["scores"].items()]
    for key, label in (("avg_sts", "STS avg"), ("avg_transfer", "transfer avg")):
        if key in results:
            rows.append((label, f"{results[key]:.2f}", key))
    for key in ("alignment", "uniformity"):
        if key in results:
            rows.append((key, f"{results[key]:.4f}", key))
    width = max(len(name) for name, _, _ in rows)
    lines = [f"{name:<{width}}  {value:>8}" + (f"  [{ci[key][0]:.2f}, {ci[key][1]:.2f}]" if key in ci else "")
             for name, value, key in rows]
    if boot:
        lines.insert(0, f"{'':<{width}}  {'score':>8}  {100 * boot['level']:g}% interval ({boot['replicates']} "
                        f"bootstrap replicates, seed {boot['seed']})")
    lines += eval_set_lines(results.get("eval_sets") or {})
    settings = results["settings"]
    lines.append(f"({results['model']}, pooling {results['pooling']}, STS '{settings['sts_aggregation']}', "
                 f"{results['timing']['total_s']:.1f} s)")
    return "\n".join(lines)


def eval_set_lines(eval_sets: dict) -> list[str]:
    """One line per dev/test set: its metric, score and interval (recall@1 as well for positive pairs)."""
    def ci(pair) -> str:
        return f"[{pair[0]:.2f}, {pair[1]:.2f}]" if pair else "[too few pairs for an interval]"

    lines = []
    for role, f in eval_sets.items():
        extra = f", recall@1 {f['recall@1']:.2f} {ci(f['recall@1_ci'])}" if "recall@1" in f else ""
        lines.append(f"{role} {f['name']}: {f['metric']} {f['score']:.2f} {ci(f['ci'])}"
                     f"{extra} ({f['n']} {'pairs' if f['kind'] == 'scored' else 'queries'}, "
                     f"{100 * f['level']:g}% interval, {f['replicates']} replicates)")
    return lines


@click.command("eval")
@trust_remote_code_option
@model_option
@click.option("--mask", "mask_path", default=None, type=click.Path(dir_okay=False),
              help="Mask file from `sparsecse prune`: evaluate the model gated by it (no retraining).")
@data_dir_option
@click.option("--tasks", default="sts", show_default=True, metavar="sts|transfer|all|NAME,..",
              help="Task group or comma-separated names (STS12..STS16, STSBenchmark, SICKRelatedness, MR, CR, "
                   "SUBJ, MPQA, SST2, TREC, MRPC).")
@click.option("--mteb", "mteb_spec", default=None, metavar="NAME|DIR,..",
              help="Also run mteb tasks (pip install 'sparsecse[mteb]'): task or benchmark names as mteb spells "
                   "them, or local task directories (task.json + JSON Lines; see the MTEB tasks guide). Alone "
                   "(without --tasks), only these run; with --out, mteb's own results go to OUT's name + _mteb/.")
@click.option("--mteb-prompt", "mteb_prompts", multiple=True, metavar="NAME=TEXT",
              help="Text put before the inputs of mteb tasks (decoder embedders): NAME is query, document, a task "
                   "type or name, or one of those + '-query'/'-document'; adds to the model's own prompts.")
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
@click.option("--bootstrap", type=click.IntRange(0, MAX_REPLICATES), default=0, show_default=True, metavar="N",
              help="95% intervals from N bootstrap resamples (1000 is usual; 0 = none): per STS task and for "
                   "their average (pairs resampled), and for SST2, TREC and MRPC (test items resampled; without "
                   "--bootstrap those use 1000). MR, CR, SUBJ and MPQA report the spread of their folds instead.")
@click.option("--bootstrap-seed", type=SEED, default=0, show_default=True, help="Seed of the bootstrap resamples.")
@click.option("--out", default=None, type=click.Path(dir_okay=False),
              help="Also write the results with a manifest and the per-pair STS similarities (for "
                   "`sparsecse compare`) to this JSON file.")
@eval_set_options(dev="scored beside the tasks (written with --out, so `sparsecse compare` pairs it).",
                  test="scored beside the tasks (written with --out, so `sparsecse compare` pairs it).")
@overwrite_option
@quiet_option
def command(model, mask_path, data_dir, tasks, mteb_spec, mteb_prompts, sts_aggregation, sts_split, fasttest,
            transfer_protocol, precision, pooling, batch_size, align_uniform, device, seed, bootstrap, bootstrap_seed,
            as_json, out, dev, test,
            overwrite, quiet):
    """Evaluate a model (or a model gated by a mask) on STS and SentEval transfer tasks.

    STS: cosine similarity, Spearman x 100 (STS12-16 over all subsets, STS-B and SICK-R on test).
    Transfer: logistic regression on frozen embeddings, accuracy x 100.
    """
    from sparsecse.evaluation import evaluate
    from sparsecse.evaluation.config import EvaluationConfig
    from sparsecse.evaluation.results_file import save_results, without_pairs
    from sparsecse.artifacts.files import make_manifest
    from sparsecse.artifacts.destinations import check_destination
    from sparsecse.artifacts.inputs import read_inputs

    config = EvaluationConfig(  # checked here: a bad task list fails before the model loads
        tasks=tasks, data_dir=data_dir, pooling=pooling, batch_size=batch_size, device=device,
        sts_aggregation=sts_aggregation, fasttest=fasttest, precision=precision, show_progress=not quiet, seed=seed,
        sts_split=sts_split, align_uniform=align_uniform, transfer_protocol=transfer_protocol, bootstrap=bootstrap,
        bootstrap_seed=bootstrap_seed, keep_pairs=bool(out), dev=dev, test=test).check()
    run_tasks, mteb_tasks, prompts = True, [], {}
    if mteb_spec is not None:  # names, prompts, local files and each task's data checked before any work
        from sparsecse.evaluation import mteb_run

        prompts = mteb_run.parse_prompts(mteb_prompts)
        mteb_tasks = mteb_run.prepare_mteb(mteb_spec, prompts)
        run_tasks = click.get_current_context().get_parameter_source("tasks").name != "DEFAULT" or bool(dev or test)
    if out:  # every path written (OUT and mteb's OUT_mteb) against every input
        check_destination(out, overwrite, inputs=read_inputs(
            model=model, mask=mask_path, data_dir=data_dir, default_model=mask_path is None, dev=eval_set_file(dev),
            test=eval_set_file(test), mteb=mteb_run.local_directories(mteb_tasks) if mteb_tasks else None),
            also=[mteb_run.mteb_results_dir(out)] if mteb_spec is not None else ())
    results = evaluate(model=model, mask=mask_path, config=config) if run_tasks else None
    if mteb_spec is not None:
        results = mteb_run.with_mteb(results, mteb_run.evaluate_mteb(model, mask_path, mteb_run.MtebConfig(
            tasks=mteb_tasks, results_dir=mteb_run.mteb_results_dir(out) if out else None, overwrite=overwrite,
            prompts=prompts, pooling=pooling, batch_size=batch_size, device=device, precision=precision,
            show_progress=not quiet, bootstrap=bootstrap, bootstrap_seed=bootstrap_seed)))
    if out:
        params = {k: v for k, v in results["settings"].items() if k != "data_dir"}
        params.update(tasks=results["tasks"], pooling=results["pooling"], bootstrap=bootstrap,
                      bootstrap_seed=bootstrap_seed)
        sets = {role: f["set"] for role, f in (results.get("eval_sets") or {}).items()}
        params["eval_sets"] = sets
        if mteb_spec is not None:
            params["mteb"] = {"tasks": list(results["mteb"]["tasks"]), "prompts": results["mteb"]["prompts"]}
        manifest = make_manifest("eval", inputs={"model": results["model"], "mask": mask_path,
                                                 **{f"{role}_set": f.get("path") for role, f in sets.items()}},
                                 params={**params, "data_dir": results["settings"]["data_dir"]}, seed=seed)
        save_results(out, results, manifest, overwrite=overwrite)
    results = without_pairs(results)
    if mteb_spec is not None:
        results = mteb_run.without_items(results)
    if as_json:
        echo_json(results)
    else:
        click.echo("\n".join(([format_table(results)] if run_tasks else []) +
                              (mteb_run.mteb_lines(results["mteb"]) if mteb_spec is not None else [])))
        if out:
            click.echo(f"wrote {out}")
