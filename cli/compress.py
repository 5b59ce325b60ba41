"""sparsecse compress: prune to a kept-FLOPs / kept-parameters budget in several steps, with
reconstruction and rescoring between them, and write the shrunk model (K-prune style)."""

from __future__ import annotations

import click

from sparsecse.cli.options import (align_ffn_option, criterion_option, data_dir_option, device_option, echo_json,
                                   json_option, keep_one_head_option, model_option, overwrite_option, pooling_option,
                                   quiet_option, reconstruction_options, reconstruction_plan, score_hint, scoring_options,
                                   seed_option,
                                   seq_len_option, trust_remote_code_option)


@click.command("compress")
@model_option
@trust_remote_code_option
@click.option("--keep-flops", type=float, default=None, metavar="B",
              help="Keep at most B (in (0, 1]) of the transformer layers' FLOPs per token.")
@click.option("--keep-params", type=float, default=None, metavar="B",
              help="Instead of --keep-flops: the budget in transformer-layer parameters.")
@click.option("--steps", type=click.IntRange(min=1), default=3, show_default=True,
              help="Geometric budget steps from the dense model to B (1: one-shot prune + reconstruct).")
@reconstruction_options("Sentences (one per line) the kept units are refit on after every step, as "
                        "`shrink --reconstruct`.", required=True)
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
@click.option("--out", required=True, type=click.Path(), help="Directory for the smaller model.")
@pooling_option
@device_option
@seed_option
@overwrite_option
@json_option
@quiet_option
def command(model, keep_flops, keep_params, steps, corpus, reconstruct_sentences, reconstruct_method,
            reconstruct_target, reconstruct_ridge, reconstruct_weighting, scores_path, criterion, lam, seq_len,
            keep_one_head, data_dir, split, score_batch_size, max_batches, align_ffn, out, pooling, device, seed,
            overwrite, as_json, quiet):
    """Prune to a budget in steps (K-prune style): score, keep the best units within the step's budget,
    reconstruct, rescore the reconstructed model, and repeat until the budget; then shrink. Meets the budget
    exactly as `prune --keep-flops` does."""
    from sparsecse.compression import compress

    plan = reconstruction_plan(corpus, reconstruct_sentences, reconstruct_method, reconstruct_target,
                               reconstruct_ridge, reconstruct_weighting)
    result = compress(model, out, keep_flops=keep_flops, keep_params=keep_params, steps=steps, scores=scores_path,
                      overwrite=overwrite, reconstruct=plan, lam=lam, criterion=criterion, seq_len=seq_len,
                      keep_one_head=keep_one_head, data_dir=data_dir, split=split, batch_size=score_batch_size,
                      max_batches=max_batches, seed=seed, align_ffn=align_ffn, pooling=pooling, device=device,
                      show_progress=not quiet)
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
