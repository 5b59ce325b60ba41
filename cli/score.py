"""sparsecse score: per-batch gate gradients of L_align and L_uniform on STS-B -> a score file."""

from __future__ import annotations

import click

from sparsecse.cli.options import (data_dir_option, device_option, echo_json, eval_set_file, eval_set_options,
                                   json_option, model_option, overwrite_option, pooling_option, quiet_option,
                                   scoring_options, seed_option, trust_remote_code_option)


@click.command("score")
@trust_remote_code_option
@model_option
@data_dir_option
@scoring_options()
@eval_set_options(dev="its positive pairs (scored pairs above 0.8 of the score range, or query and positive) and "
                      "its sentences replace STS-B --split's.")
@pooling_option
@device_option
@seed_option
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Score file (.safetensors).")
@overwrite_option
@json_option
@quiet_option
def command(model, data_dir, split, batch_size, max_batches, dev, pooling, device, seed, out, overwrite, as_json,
            quiet):
    """Score every attention head and FFN neuron of a model by E|dL/dgate| on STS-B (or a --dev set)."""
    from sparsecse.artifacts.destinations import check_destination
    from sparsecse.artifacts.inputs import read_inputs
    from sparsecse.scoring.score import ScoringConfig, score

    check_destination(out, overwrite, inputs=read_inputs(model=model, data_dir=data_dir, dev_set=eval_set_file(dev)),
                      sidecar=True)  # fail before the slow part

    config = ScoringConfig(data_dir=data_dir, split=split, batch_size=batch_size, seed=seed, max_batches=max_batches,
                           show_progress=not quiet, dev=dev)
    scores = score(model, config, pooling=pooling, device=device)
    path = scores.save(out, overwrite=overwrite)
    m = scores.manifest
    if as_json:
        echo_json({"scores": str(path), "num_batches": m["num_batches"], "seconds": m["seconds"],
                   "shape": m["shape"], "pooling": m["pooling"]})
        return
    layers, heads, ffn = scores.shape
    click.echo(f"Scored {layers} layers x {heads} heads and {layers} x {ffn} FFN neurons of {m['model']}")
    data = f"dev set {m['params']['dev']['name']}" if dev is not None else f"STS-B {split}"
    click.echo(f"  pooling {m['pooling']} ({m['pooling_source']}), {data}: {m['num_batches']} batches, "
               f"{m['num_positive_pairs']} positive pairs, {m['seconds']:.1f} s")
    click.echo(f"  wrote {path} (+ {path.with_suffix('.json').name})")
