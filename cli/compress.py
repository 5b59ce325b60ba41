"""sparsecse compress: prune to a kept-FLOPs / kept-parameters budget in several steps, with
reconstruction and rescoring between them, and write the shrunk model (K-prune style)."""

from __future__ import annotations

import click

from sparsecse.compress import reconstruction_settings as settings

from sparsecse.cli.options import (data_dir_option, device_option, echo_json, json_option, model_option,
                                   overwrite_option, pooling_option, quiet_option, score_hint, seed_option,
                                   trust_remote_code_option)


@click.command("compress")
@model_option
@trust_remote_code_option
@click.option("--keep-flops", type=float, default=None, metavar="B",
              help="Keep at most B (in (0, 1]) of the transformer layers' FLOPs per token.")
@click.option("--keep-params", type=float, default=None, metavar="B",
              help="Instead of --keep-flops: the budget in transformer-layer parameters.")
@click.option("--steps", type=click.IntRange(min=1), default=3, show_default=True,
              help="Geometric budget steps from the dense model to B (1: one-shot prune + reconstruct).")
@click.option("--reconstruct", "corpus", required=True, type=click.Path(dir_okay=False), metavar="CORPUS",
              help="Sentences (one per line) the kept units are refit on after every step, as `shrink --reconstruct`.")
@click.option("--reconstruct-sentences", type=click.IntRange(min=1), default=settings.DEFAULT_SENTENCES,
              show_default=True, help="How many sentences of CORPUS (a seeded sample) the reconstruction fits on.")
@click.option("--scores", "scores_path", default=None, type=click.Path(dir_okay=False),
              help="Score file of the dense model for the first step (default: scored here).")
@click.option("--criterion", type=click.Choice(["abs_grad", "layer_norm", "fisher"]), default=None,
              help="Importance from the gradients (default: fisher, the budget default of `prune`).")
@click.option("--lambda", "lam", type=click.FloatRange(0, 1), default=0.5, show_default=True,
              help="Alignment weight λ.")
@click.option("--seq-len", type=click.IntRange(min=1), default=128, show_default=True,
              help="Reference sequence length for the FLOPs of attention.")
@click.option("--keep-one-head/--allow-empty-layers", default=None,
              help="Never remove a layer's last attention head (default: off, as for `prune` budgets).")
@data_dir_option
@click.option("--score-batch-size", type=click.IntRange(min=2), default=64, show_default=True,
              help="Rescoring: positive pairs per batch (`score --batch-size`).")
@click.option("--max-batches", type=click.IntRange(min=1), default=None, help="Rescoring: stop after N batches.")
@click.option("--align-ffn", type=click.IntRange(min=1), default=8, show_default=True,
              help="As `shrink --align-ffn`.")
@click.option("--out", required=True, type=click.Path(), help="Directory for the smaller model.")
@pooling_option
@device_option
@seed_option
@overwrite_option
@json_option
@quiet_option
def command(model, keep_flops, keep_params, steps, corpus, reconstruct_sentences, scores_path, criterion, lam,
            seq_len, keep_one_head, data_dir, score_batch_size, max_batches, align_ffn, out, pooling, device, seed,
            overwrite, as_json, quiet):
    """Prune to a budget in steps (K-prune style): score, keep the best units within the step's budget,
    reconstruct, rescore the reconstructed model, and repeat until the budget; then shrink. Meets the budget
    exactly as `prune --keep-flops` does."""
    from sparsecse.compress.iterative import iterative_prune, shrink_iterative
    from sparsecse.artifacts.files import check_destination
    from sparsecse.artifacts.inputs import read_inputs
    from sparsecse.compress.pruning import PruningRule
    from sparsecse.compress.reconstruction import ReconstructionPlan
    from sparsecse.compress.scoring import ScoringConfig

    check_destination(out, overwrite,
                      inputs=read_inputs(model=model, corpus=corpus, scores=scores_path, data_dir=data_dir))
    plan = ReconstructionPlan.prepare(corpus, reconstruct_sentences)
    rule = PruningRule(lam=lam, criterion=criterion, seq_len=seq_len, keep_one_head=keep_one_head)
    scoring = ScoringConfig(data_dir=data_dir, batch_size=score_batch_size, max_batches=max_batches, seed=seed,
                            show_progress=not quiet)
    result = iterative_prune(model, keep_flops=keep_flops, keep_params=keep_params, steps=steps, reconstruct=plan,
                             scores=scores_path, rule=rule, scoring=scoring, pooling=pooling, device=device)
    shrunk = shrink_iterative(result, out=out, seq_len=seq_len, align_ffn=align_ffn, overwrite=overwrite)
    if as_json:
        echo_json({**shrunk.to_dict(), "mask": result.mask.manifest})
        return
    m = result.mask.manifest
    for r in result.steps:
        click.echo(f"step {r['step']}: budget {r['budget']:.4f}, kept {r['heads_kept']} heads, "
                   f"{r['neurons_kept']} neurons (score {r['score_seconds']:.0f} s, "
                   f"reconstruction {r['reconstruction_seconds']:.0f} s)")
    click.echo(f"{m['criterion']}{' (default)' if m.get('criterion_default') else ''}: kept "
               f"{m['kept_flops_ratio']:.4f} of layer FLOPs per token (n={m['seq_len']}), "
               f"{m['kept_params_ratio']:.4f} of layer parameters; {result.seconds:.0f} s")
    click.echo(f"wrote {shrunk.out}")
    click.echo(score_hint(shrunk.out))
