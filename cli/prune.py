"""sparsecse prune: a score file + sparsities (or a kept-FLOPs / kept-parameters budget) + lambdas -> mask
files (no model run)."""

from __future__ import annotations

from pathlib import Path

import click

from sparsecse.cli.options import (criterion_option, echo_json, json_option, keep_one_head_option, overwrite_option,
                                   scope_option, seq_len_option)


def describe(mask) -> str:
    """The text report of one mask: its target, λ, criterion and scope, what it removes and what it keeps."""
    m = mask.manifest
    layers, heads, ffn = mask.shape
    heads_text = "; ".join(f"layer {layer}: head{'s' if len(hs) > 1 else ''} {', '.join(map(str, hs))}"
                           for layer, hs in mask.pruned_heads().items())
    from sparsecse.pruning.prune import target_name

    lines = [
        f"{target_name(mask)}, lambda {m['lambda']:g}, {m.get('criterion', 'abs_grad')}"
        f"{' (default)' if m.get('criterion_default') else ''} ({m['scope']}): "
        f"{mask.heads_pruned}/{layers * heads} heads, {mask.neurons_pruned}/{layers * ffn} FFN neurons removed"
        + (f", {100 * m['encoder_param_sparsity']:.2f}% of encoder-layer parameters" if "encoder_param_sparsity" in m
           else ""),
        f"  heads removed              {heads_text or 'none'}",
        "  neurons removed per layer  " + " ".join(f"L{i}:{n}" for i, n in enumerate(mask.neurons_pruned_per_layer())),
    ]
    if "kept_flops_ratio" in m:
        lines.append(f"  kept                       {m['kept_flops_ratio']:.4f} of layer FLOPs per token "
                     f"(n={m['seq_len']}), {m['kept_params_ratio']:.4f} of layer parameters")
    return "\n".join(lines)


@click.command("prune")
@click.option("--scores", "scores_path", required=True, type=click.Path(dir_okay=False),
              help="Score file written by `sparsecse score`.")
@click.option("--sparsity", default=None, help="Fraction of heads and of neurons to remove: 0.02, a list "
              "0.02,0.05 or ranges 0.01:0.10:0.01.")
@click.option("--keep-flops", default=None, metavar="B",
              help="Instead of --sparsity: keep the most important heads and neurons, chosen jointly, within B "
              "(in (0, 1], list or range) of the transformer layers' FLOPs per token.")
@click.option("--keep-params", default=None, metavar="B",
              help="Instead of --sparsity: the same budget in transformer-layer parameters.")
@criterion_option("abs_grad for --sparsity, as in the paper; fisher for --keep-flops/--keep-params, which "
                  "measured best there")
@seq_len_option
@click.option("--lambda", "lambdas", default="0.5", show_default=True,
              help="Alignment weight λ in [0, 1] (list or range as for --sparsity).")
@scope_option
@keep_one_head_option("on for --sparsity, off for budgets")
@click.option("--out", required=True, type=click.Path(),
              help="Mask file for one sparsity and λ; a directory of mask files for a grid.")
@click.option("--layout", default="custom", show_default=True, metavar="stock|custom",
              help="stock (budgets only): the same number of neurons (and, where the config states a head size, "
                   "heads) in every layer, so `shrink --layout stock` gives the input's own architecture.")
@click.option("--heatmap", type=click.Path(dir_okay=False), default=None,
              help="Also save a layers x heads importance heat map (PNG or SVG), for the first λ.")
@overwrite_option
@json_option
def command(scores_path, sparsity, keep_flops, keep_params, criterion, seq_len, lambdas, scope, keep_one_head, out,
            layout, heatmap, overwrite, as_json):
    """Turn a score file into masks: remove the lowest-scored heads and FFN neurons (--sparsity), or keep
    the most important ones within a FLOPs or parameter budget (--keep-flops, --keep-params)."""
    from sparsecse.artifacts.files import atomic_dir
    from sparsecse.artifacts.destinations import check_destination
    from sparsecse.artifacts.inputs import read_inputs
    from sparsecse.reporting.plots import check_figure_path
    from sparsecse.pruning.prune import PruningConfig, mask_filename, prune_grid
    from sparsecse.pruning.uniform import check_layout
    from sparsecse.scoring.scores import GateScores

    check_layout(layout)
    check_destination(out, overwrite, inputs=read_inputs(scores=scores_path))
    if heatmap:
        check_figure_path(heatmap, overwrite, inputs={**read_inputs(scores=scores_path), "--out": out})
    scores = GateScores.load(scores_path)
    masks = prune_grid(scores, sparsity, lambdas, keep_flops=keep_flops, keep_params=keep_params,
                       config=PruningConfig(criterion=criterion, seq_len=seq_len, scope=scope,
                                            keep_one_head=keep_one_head, layout=layout))
    kind = "sparsity" if sparsity is not None else "keep_flops" if keep_flops is not None else "keep_params"
    if scores.batch_sizes is None and not as_json:
        click.echo(f"Note: {scores_path} weighs its scoring batches equally ({scores.weighting}).", err=True)
    written = []
    if len(masks) == 1:
        (mask,) = masks.values()
        written.append(mask.save(out, overwrite=overwrite))
    else:
        with atomic_dir(out, overwrite=overwrite) as tmp:
            for (v, lam), mask in masks.items():
                mask.save(Path(tmp) / mask_filename(v, lam, kind))
        written = [Path(out) / mask_filename(v, lam, kind) for v, lam in masks]
    if heatmap:
        from sparsecse.reporting.plots import head_importance_heatmap
        from sparsecse.pruning.prune import target_name

        (s0, lam0), first = next(iter(masks.items()))
        head_importance_heatmap(scores.head_scores(lam0, first.manifest["criterion"]), heatmap,
                                pruned=~first.head_mask if len(masks) == 1 else None,
                                title=f"Head importance (λ={lam0:g})"
                                + (f", {target_name(first)}" if len(masks) == 1 else ""))
    if as_json:
        echo_json({"masks": [
            {"path": str(p), **{k: m.manifest.get(k) for k in (
                "sparsity", "budget", "lambda", "criterion", "criterion_default", "scope", "heads_pruned", "neurons_pruned",
                "heads_pruned_per_layer", "neurons_pruned_per_layer", "pruned_heads", "encoder_param_sparsity",
                "kept_flops_ratio", "kept_params_ratio", "seq_len")}}
            for p, m in zip(written, masks.values())], "heatmap": heatmap})
        return
    for path, mask in zip(written, masks.values()):
        click.echo(describe(mask))
        click.echo(f"  wrote {path}")
    if heatmap:
        click.echo(f"Head importance heat map: {heatmap}")
