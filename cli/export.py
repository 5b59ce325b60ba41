"""sparsecse export: a dense or shrunk model directory as the files of a registered export format (ONNX graph,
OpenVINO IR, ...; fp32, optionally quantized). The format and quantization choices and their help come from
:mod:`sparsecse.artifacts.export_formats`."""

from __future__ import annotations

import json
from typing import Callable, Sequence

import click

from sparsecse.artifacts.export_formats import format_names, quantization_names, registered_formats
from sparsecse.cli.options import data_dir_option, json_option, model_option, overwrite_option, pooling_option
from sparsecse.cli.options import quiet_option, score_hint
from sparsecse.cli.options import SEED, trust_remote_code_option
from sparsecse.exporting.config import CALIBRATION_SEED, CALIBRATION_SIZE, MIN_OPSET, OPSET


class RegisteredChoice(click.Choice):
    """A choice among the names a registry holds when the command runs, so a format registered after this
    module was imported is offered too.

    Args:
        names: returns the names to offer.
    """

    def __init__(self, names: Callable[[], Sequence[str]]):
        self.names = names
        super().__init__(names())

    @property
    def choices(self) -> tuple[str, ...]:
        """The registry's names now."""
        return tuple(self.names())

    @choices.setter
    def choices(self, value) -> None:  # click.Choice.__init__ assigns the names it was given; they are read live
        pass


def format_help() -> str:
    """The --format help: each registered format's summary and the extra that installs it."""
    return "; ".join(f"{f.name}: {f.summary}" + (f" (pip install 'sparsecse[{f.extra}]')" if f.extra else "")
                     for f in registered_formats()) + "."


def quantize_help() -> str:
    """The --quantize help: what each format does for each quantization it accepts."""
    return "Also write a quantized model and use it by default. " + "; ".join(
        f"{f.title} {q.name}: {q.summary}" for f in registered_formats() for q in f.quantizations) + "."


def describe(result) -> str:
    """The text report of an export: the files, their sizes, the check against the torch model and, where the
    graphs were timed (:func:`~sparsecse.targets.backend_speed.time_backends`), their speed-ups."""
    lines = []
    for file, size in result.files.items():
        kind = result.kinds.get(file, "fp32")
        cosine = result.verification.get(f"{kind}_min_cosine")
        used = "  <- used by sparsecse" if file == result.file else ""
        lines.append(f"  {file:<44} {kind:<11} {size / 1e6:7.1f} MB  min cosine to torch {cosine:.6f}{used}")
        for r in result.speed.get("rows", []):
            if r["file"] == file:
                lines.append(f"    {r['metric']} at batch {r['batch']}: {r['speedup']:.2f}x "
                             f"[{r['interval'][0]:.2f}, {r['interval'][1]:.2f}] over the torch model")
    head = (f"wrote {result.out} ({result.pooling} pooling{', normalized' if result.normalize else ''}, "
            f"{result.seconds:.1f} s)")
    return "\n".join([head, *lines])


def backend_timer(model_dir, data_dir, rounds: int, show_progress: bool):
    """What ``export_into_model`` calls to time the graphs it wrote (the STS-B test sentences read first, so
    missing data stops the export before any work)."""
    from sparsecse.data.paths import resolve_data_dir
    from sparsecse.errors import SparseCSEError
    from sparsecse.data.sts import read_sts_benchmark
    from sparsecse.targets.backend_speed import time_backends

    try:
        data_dir = resolve_data_dir(data_dir)
        read_sts_benchmark(data_dir, "test")
    except SparseCSEError as exc:
        raise SparseCSEError(f"{exc} (the backends' timing reads the STS-B test sentences; pass --data-dir, or "
                             "--no-timing to export without it)") from None
    return lambda export_dir, result: time_backends(model_dir, export_dir, result.kinds, data_dir, rounds,
                                                    show_progress=show_progress)


@click.command("export")
@trust_remote_code_option
@model_option
@click.option("--format", "fmt", type=RegisteredChoice(format_names), default="onnx", show_default=True,
              help=format_help())
@click.option("--quantize", type=RegisteredChoice(lambda: ("none", *quantization_names())), default="none",
              show_default=True, help=quantize_help())
@click.option("--calibration", default=None, type=click.Path(dir_okay=False), metavar="CORPUS",
              help="Text file, one sentence per line, to calibrate int8 activations on (static quantization).")
@click.option("--calibration-size", type=click.IntRange(min=1), default=CALIBRATION_SIZE, show_default=True,
              help="Sentences drawn from the calibration corpus.")
@click.option("--calibration-seed", type=SEED, default=CALIBRATION_SEED, show_default=True,
              help="Seed of the calibration draw (recorded in the manifest).")
@click.option("--out", default=None, type=click.Path(),
              help="Output directory. Without it, a stock model (compress --layout stock) gets the graphs inside its "
                   "own directory, in sentence-transformers' backend layout (onnx/, openvino/).")
@click.option("--timing/--no-timing", default=True, show_default=True,
              help="Without --out: time each graph written into the stock model against its torch model at batch 1 and "
                   "128 (the STS-B test sentences of --data-dir) and put the speed-ups in its card's Backends section.")
@click.option("--rounds", type=click.IntRange(min=5), default=5, show_default=True,
              help="Interleaved rounds of that timing (more narrow the intervals).")
@data_dir_option
@quiet_option
@pooling_option
@click.option("--opset", type=int, default=OPSET, show_default=True,
              help=f"ONNX opset version ({MIN_OPSET} up to the newest this torch exports).")
@overwrite_option
@json_option
def command(model, fmt, quantize, calibration, calibration_size, calibration_seed, out, timing, rounds, data_dir,
            quiet, pooling, opset, overwrite, as_json):
    """Export a dense or shrunk model (encoder + pooling + normalisation) to ONNX, OpenVINO or another registered
    format, with dynamic batch and sequence axes; the directory also holds the tokenizer and loads with
    `sparsecse eval --model DIR`. Without --out, a stock model gets the graphs in its own directory, where
    `SentenceTransformer(DIR, backend="onnx")` or `backend="openvino"` loads them, and its card lists them with
    their speed-ups over the torch model at batch 1 and 128."""
    import contextlib
    import sys

    from sparsecse.exporting.config import ExportConfig
    from sparsecse.exporting.export import export

    from sparsecse.artifacts.destinations import check_destination
    from sparsecse.artifacts.inputs import read_inputs

    config = ExportConfig(format=fmt, quantize=None if quantize == "none" else quantize, pooling=pooling, opset=opset,
                          calibration=calibration, calibration_size=calibration_size,
                          calibration_seed=calibration_seed).check()
    measure = None
    if out is None:  # into the stock model's own directory (checked before any work)
        from sparsecse.exporting.backends import check_stock_dir, export_into_model

        path = check_stock_dir(model)
        if timing:
            measure = backend_timer(path, data_dir, rounds, not quiet)
    else:
        check_destination(out, overwrite, inputs=read_inputs(model=model, calibration=calibration))
    # NNCF and onnxruntime print progress on stdout; keep stdout for the report (and --json) alone
    with contextlib.redirect_stdout(sys.stderr):
        result = (export(model=model, out=out, overwrite=overwrite, config=config) if out is not None
                  else export_into_model(model, config, overwrite, measure))
    from sparsecse.artifacts.model_dir import CARD

    card = result.out / CARD
    if out is None and card.is_file() and not as_json:  # export_into_model rewrote its Backends section
        click.echo(f"its card's Backends section: {card}")
    if as_json:
        click.echo(json.dumps(result.to_dict()))
    else:
        click.echo(describe(result))
        click.echo(score_hint(result.out))
