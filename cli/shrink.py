"""sparsecse shrink: remove a mask's heads and neurons for real, writing a smaller model directory."""

from __future__ import annotations

import click

from sparsecse.cli.options import (align_ffn_option, device_option, echo_json, json_option, model_option, overwrite_option, pooling_option,
                                   reconstruction_options, reconstruction_plan, score_hint, trust_remote_code_option)


def _mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f} MB"


def describe(result) -> str:
    """The text report of a shrink: sizes before and after, the layers' shapes, the reconstruction."""
    before, after, ratios = result.before, result.after, result.ratios()
    rows = [
        ("parameters", f"{before['parameters']:,}", f"{after['parameters']:,}", ratios.get("parameters")),
        ("layer parameters", f"{before['layer_parameters']:,}", f"{after['layer_parameters']:,}",
         ratios.get("layer_parameters")),
        ("weights file", _mb(before.get("weights_bytes")), _mb(after.get("weights_bytes")), ratios.get("weights_bytes")),
        (f"FLOPs/token ({after['flops_seq_len']} tok)", f"{before['flops_per_token'] / 1e6:,.2f} M",
         f"{after['flops_per_token'] / 1e6:,.2f} M", ratios.get("flops_per_token")),
    ]
    lines = [f"{'':28} {'before':>16} {'after':>16} {'ratio':>7}"]
    lines += [f"{name:28} {b:>16} {a:>16} {f'{r:.2f}x' if r else '-':>7}" for name, b, a, r in rows]
    lines.append("heads per layer   " + " ".join(map(str, after["heads_per_layer"])))
    padding = result.encoder.extra_config["shape"]["ffn_zero_padding"]
    lines.append("FFN per layer     " + " ".join(f"{n - p}+{p}" if p else str(n)
                                                 for n, p in zip(after["ffn_per_layer"], padding))
                 + ("   (kept+zero padding)" if any(padding) else ""))
    if result.reconstruction:
        rec = result.reconstruction
        lines.append(f"reconstructed on {rec['sentences']} sentences ({rec['tokens']} tokens) of {rec['corpus']}, "
                     f"{rec['method']}, {rec['seconds']:.0f} s; relative error before -> after per layer:")
        lines += [f"  layer {r['layer']}: attention {r['attention']['error_before']:.3f} -> "
                  f"{r['attention']['error_after']:.3f}, FFN {r['ffn']['error_before']:.3f} -> {r['ffn']['error_after']:.3f}"
                  for r in rec["layers"]]
    if result.out:
        lines.append(f"wrote {result.out}")
    return "\n".join(lines)


@click.command("shrink")
@trust_remote_code_option
@model_option
@click.option("--mask", "mask_path", required=True, type=click.Path(dir_okay=False),
              help="Mask file written by `sparsecse prune` (without --model: applied to the model it was made for).")
@click.option("--out", required=True, type=click.Path(), help="Directory for the smaller model.")
@pooling_option
@click.option("--seq-len", type=click.IntRange(min=1), default=128, show_default=True,
              help="Sequence length at which FLOPs per token are counted.")
@align_ffn_option
@click.option("--layout", default="custom", show_default=True, metavar="stock|custom",
              help="stock: the input's own architecture class, loadable with no custom code (the mask must keep one "
                   "shape in every layer: `prune --layout stock`); custom: each layer its own width.")
@reconstruction_options("Refit the kept heads and neurons so each layer matches the dense model on sentences of "
                        "this file (one per line), layer by layer, before removing the rest (no retraining).")
@device_option
@overwrite_option
@json_option
def command(model, mask_path, out, pooling, seq_len, align_ffn, layout, corpus, reconstruct_sentences,
            reconstruct_method, reconstruct_target, reconstruct_ridge, reconstruct_weighting, device, overwrite,
            as_json):
    """Physically remove the pruned heads and FFN neurons: a smaller, faster model directory that
    loads with sparsecse, transformers (AutoModel) and sentence-transformers (trust_remote_code=True)."""
    from sparsecse.artifacts.destinations import check_destination
    from sparsecse.artifacts.inputs import read_inputs
    from sparsecse.pruning.uniform import check_layout
    from sparsecse.shrinking.shrink import ShrinkConfig, shrink

    check_layout(layout)
    # without --model the mask's own model is read (read_inputs adds it), not the default one
    check_destination(out, overwrite, inputs=read_inputs(model=model, mask=mask_path, corpus=corpus,
                                                         default_model=model is not None))
    plan = reconstruction_plan(corpus, reconstruct_sentences, reconstruct_method, reconstruct_target,
                               reconstruct_ridge, reconstruct_weighting)
    config = ShrinkConfig(pooling=pooling, device=device, seq_len=seq_len, align_ffn=align_ffn, reconstruct=plan,
                          show_progress=True, layout=layout)
    result = shrink(model=model, mask=mask_path, out=out, overwrite=overwrite, config=config)
    if as_json:
        echo_json(result.to_dict())
    else:
        click.echo(describe(result))
        click.echo(score_hint(result.out))
