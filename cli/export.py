"""sparsecse export: a dense or shrunk model directory as an ONNX graph or OpenVINO IR (fp32, optionally int8)."""

from __future__ import annotations

import json

import click

from sparsecse.cli.options import json_option, model_option, overwrite_option, pooling_option, score_hint
from sparsecse.cli.options import SEED, trust_remote_code_option


def describe(result) -> str:
    """The text report of an export: the files, their sizes and the check against the torch model."""
    lines = []
    for file, size in result.files.items():
        kind = result.kinds.get(file, "fp32")
        cosine = result.verification.get(f"{kind}_min_cosine")
        used = "  <- used by sparsecse" if file == result.file else ""
        lines.append(f"  {file:<44} {kind:<11} {size / 1e6:7.1f} MB  min cosine to torch {cosine:.6f}{used}")
    head = (f"wrote {result.out} ({result.pooling} pooling{', normalized' if result.normalize else ''}, "
            f"{result.seconds:.1f} s)")
    return "\n".join([head, *lines])


@click.command("export")
@trust_remote_code_option
@model_option
@click.option("--format", "fmt", type=click.Choice(["onnx", "openvino"]), default="onnx", show_default=True,
              help="onnx: ONNX graph run by onnxruntime; openvino: OpenVINO IR (pip install 'sparsecse[openvino]').")
@click.option("--quantize", type=click.Choice(["none", "int8"]), default="none", show_default=True,
              help="Also write an int8 model and use it by default. ONNX: dynamic quantization, or static (QDQ) "
                   "with --calibration; OpenVINO: NNCF static quantization, which needs --calibration.")
@click.option("--calibration", default=None, type=click.Path(dir_okay=False), metavar="CORPUS",
              help="Text file, one sentence per line, to calibrate int8 activations on (static quantization).")
@click.option("--calibration-size", type=click.IntRange(min=1), default=300, show_default=True,
              help="Sentences drawn from the calibration corpus.")
@click.option("--calibration-seed", type=SEED, default=0, show_default=True,
              help="Seed of the calibration draw (recorded in the manifest).")
@click.option("--out", required=True, type=click.Path(), help="Output directory.")
@pooling_option
@click.option("--opset", type=int, default=17, show_default=True,
              help="ONNX opset version (14 up to the newest this torch exports).")
@overwrite_option
@json_option
def command(model, fmt, quantize, calibration, calibration_size, calibration_seed, out, pooling, opset, overwrite,
            as_json):
    """Export a dense or shrunk model (encoder + pooling + normalisation) to ONNX or OpenVINO with dynamic batch
    and sequence axes; the directory also holds the tokenizer and loads with `sparsecse eval --model DIR`."""
    import contextlib
    import sys

    from sparsecse.deploy.export_config import ExportConfig
    from sparsecse.deploy.export import export

    from sparsecse.artifacts.files import check_destination
    from sparsecse.artifacts.inputs import read_inputs

    config = ExportConfig(format=fmt, quantize=None if quantize == "none" else quantize, pooling=pooling, opset=opset,
                          calibration=calibration, calibration_size=calibration_size,
                          calibration_seed=calibration_seed).check()
    check_destination(out, overwrite, inputs=read_inputs(model=model, calibration=calibration))
    # NNCF and onnxruntime print progress on stdout; keep stdout for the report (and --json) alone
    with contextlib.redirect_stdout(sys.stderr):
        result = export(model=model, out=out, overwrite=overwrite, config=config)
    if as_json:
        click.echo(json.dumps(result.to_dict()))
    else:
        click.echo(describe(result))
        click.echo(score_hint(result.out))
