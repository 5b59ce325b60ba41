"""sparsecse prune: a score file + sparsities + lambdas -> mask files (no model run)."""

from __future__ import annotations

from pathlib import Path

import click

from sparsecse.cli.options import echo_json, json_option, overwrite_option


def describe(mask) -> str:
    m = mask.manifest
    layers, heads, ffn = mask.shape
    heads_text = "; ".join(f"layer {layer}: head{'s' if len(hs) > 1 else ''} {', '.join(map(str, hs))}"
                           for layer, hs in mask.pruned_heads().items())
    lines = [
        f"sparsity {m['sparsity']:g}, lambda {m['lambda']:g} ({m['scope']}): "
        f"{mask.heads_pruned}/{layers * heads} heads, {mask.neurons_pruned}/{layers * ffn} FFN neurons removed"
        + (f", {100 * m['encoder_param_sparsity']:.2f}% of encoder-layer parameters" if "encoder_param_sparsity" in m
           else ""),
        f"  heads removed              {heads_text or 'none'}",
        "  neurons removed per layer  " + " ".join(f"L{i}:{n}" for i, n in enumerate(mask.neurons_pruned_per_layer())),
    ]
    return "\n".join(lines)


@click.command("prune")
@click.option("--scores", "scores_path", required=True, type=click.Path(dir_okay=False),
              help="Score file written by `sparsecse score`.")
@click.option("--sparsity", required=True, help="Fraction of heads and of neurons to remove: 0.02, a list "
              "0.02,0.05 or ranges 0.01:0.10:0.01.")
@click.option("--lambda", "lambdas", default="0.5", show_default=True,
              help="Alignment weight λ in [0, 1] (list or range as for --sparsity).")
@click.option("--scope", type=click.Choice(["global", "layer"]), default="global", show_default=True,
              help="Rank units across all layers, or within each layer.")
@click.option("--keep-one-head/--allow-empty-layers", default=True, show_default=True,
              help="Never remove a layer's last attention head.")
@click.option("--out", required=True, type=click.Path(),
              help="Mask file for one sparsity and λ; a directory of mask files for a grid.")
@click.option("--heatmap", type=click.Path(dir_okay=False), default=None,
              help="Also save a layers x heads importance heat map (PNG or SVG), for the first λ.")
@overwrite_option
@json_option
def command(scores_path, sparsity, lambdas, scope, keep_one_head, out, heatmap, overwrite, as_json):
    """Turn a score file into masks that remove the lowest-scored heads and FFN neurons."""
    from sparsecse.io import atomic_dir, check_destination, write_json
    from sparsecse.plots import check_figure_path
    from sparsecse.pruning import mask_filename, prune_grid
    from sparsecse.scoring import GateScores

    check_destination(out, overwrite, inputs={"score file": scores_path})
    if heatmap:
        check_figure_path(heatmap, overwrite, inputs={"score file": scores_path, "--out": out})
    scores = GateScores.load(scores_path)
    masks = prune_grid(scores, sparsity, lambdas, scope=scope, keep_one_head=keep_one_head)
    written = []
    if len(masks) == 1:
        (mask,) = masks.values()
        written.append(mask.save(out, overwrite=overwrite))
    else:
        with atomic_dir(out, overwrite=overwrite) as tmp:
            for (s, lam), mask in masks.items():
                mask.save(Path(tmp) / mask_filename(s, lam))
            write_json(Path(tmp) / "index.json", [
                {"file": mask_filename(s, lam), "sparsity": s, "lambda": lam, "heads_pruned": m.heads_pruned,
                 "neurons_pruned": m.neurons_pruned} for (s, lam), m in masks.items()])
        written = [Path(out) / mask_filename(s, lam) for s, lam in masks]
    if heatmap:
        from sparsecse.plots import head_importance_heatmap

        (s0, lam0), first = next(iter(masks.items()))
        head_importance_heatmap(scores.head_scores(lam0), heatmap, pruned=~first.head_mask if len(masks) == 1 else None,
                                title=f"Head importance (λ={lam0:g})" + (f", {s0:g} pruned" if len(masks) == 1 else ""))
    if as_json:
        echo_json({"masks": [
            {"path": str(p), **{k: m.manifest.get(k) for k in (
                "sparsity", "lambda", "scope", "heads_pruned", "neurons_pruned", "heads_pruned_per_layer",
                "neurons_pruned_per_layer", "pruned_heads", "encoder_param_sparsity")}}
            for p, m in zip(written, masks.values())], "heatmap": heatmap})
        return
    for path, mask in zip(written, masks.values()):
        click.echo(describe(mask))
        click.echo(f"  wrote {path}")
    if heatmap:
        click.echo(f"Head importance heat map: {heatmap}")
