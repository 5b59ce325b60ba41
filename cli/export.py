"""sparsecse export: a dense or shrunk model directory as an ONNX graph (fp32, optionally int8)."""

from __future__ import annotations

import json

import click

from sparsecse.cli.options import json_option, model_option, overwrite_option, pooling_option
from sparsecse.cli.options import trust_remote_code_option


def describe(result) -> str:
    lines = []
    for file, size in result.files.items():
        kind = "int8" if "qint8" in file else "fp32"
        cosine = result.verification.get(f"{kind}_min_cosine")
        used = "  <- used by sparsecse" if file == result.file else ""
        lines.append(f"  {file:<24} {kind}  {size / 1e6:7.1f} MB  min cosine to torch {cosine:.6f}{used}")
    head = (f"wrote {result.out} ({result.pooling} pooling{', normalized' if result.normalize else ''}, "
            f"{result.seconds:.1f} s)")
    return "\n".join([head, *lines])


@click.command("export")
@trust_remote_code_option
@model_option
@click.option("--format", "fmt", type=click.Choice(["onnx"]), default="onnx", show_default=True,
              help="Export format.")
@click.option("--quantize", type=click.Choice(["none", "int8"]), default="none", show_default=True,
              help="Also write an int8 graph (ONNX Runtime dynamic quantization) and use it by default.")
@click.option("--out", required=True, type=click.Path(), help="Output directory.")
@pooling_option
@click.option("--opset", type=click.IntRange(min=14), default=17, show_default=True, help="ONNX opset version.")
@overwrite_option
@json_option
def command(model, fmt, quantize, out, pooling, opset, overwrite, as_json):
    """Export a dense or shrunk model (encoder + pooling + normalisation) to ONNX with dynamic batch and
    sequence axes; the directory also holds the tokenizer and loads with `sparsecse eval --model DIR`."""
    from sparsecse.exporting import export

    result = export(model=model, out=out, format=fmt, quantize=None if quantize == "none" else quantize,
                    pooling=pooling, overwrite=overwrite, opset=opset)
    click.echo(json.dumps(result.to_dict()) if as_json else describe(result))
