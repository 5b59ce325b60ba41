"""Options shared by several commands, so every command spells them the same way.

The convention (README, "Common options"): ``--out`` is what a command writes and ``--overwrite``
lets it replace an existing one; ``--json`` prints one JSON object on stdout instead of the text
report; ``--quiet`` drops the progress bars (stderr); ``--seed`` is recorded in every manifest;
``--device`` is checked before anything loads; ``--precision`` is the encoding precision of the
commands that embed sentences; ``--fasttest`` is SentEval's 5-fold transfer protocol.
"""

from __future__ import annotations

import click

model_option = click.option(
    "--model", "model", default=None, metavar="M",
    help="Hugging Face model name or directory (default: the embedded all-MiniLM-L6-v2).")
data_dir_option = click.option(
    "--data-dir", "data_dir", default=None, metavar="D", type=click.Path(file_okay=False),
    help="SentEval-layout data directory (default: $SPARSECSE_DATA, then ~/.cache/sparsecse/senteval if it exists, "
         "then the repository's ../shared/data/senteval).")
pooling_option = click.option(
    "--pooling", type=click.Choice(["cls", "cls_before_pooler", "mean"]), default=None,
    help="Sentence pooling (default: the model's own config, else cls_before_pooler).")


def _check_device(ctx, param, value):
    from sparsecse.modeling.encoder import check_device
    from sparsecse.errors import SparseCSEError

    try:
        check_device(value)
    except SparseCSEError as exc:
        raise click.ClickException(str(exc)) from None
    return value


def _set_trust(ctx, param, value):
    from sparsecse.artifacts.remote_code import set_remote_code_trust

    set_remote_code_trust(value)
    return value


trust_remote_code_option = click.option(
    "--trust-remote-code", is_flag=True, expose_value=False, callback=_set_trust,
    help="Let a model directory run its own Python code (auto_map + *.py); off by default, recorded in the "
         "manifest. sparsecse's own shrunk models never need it.")
device_option = click.option("--device", default=None, metavar="DEV", callback=_check_device,
                             help="torch device: cpu, cuda, cuda:N (default: cuda if available, else cpu).")
SEED = click.IntRange(0, 2**32 - 1)  # what numpy accepts; checked before any work
seed_option = click.option("--seed", type=SEED, default=0, show_default=True, help="Random seed (recorded).")
overwrite_option = click.option("--overwrite", is_flag=True, help="Replace --out if it exists.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
quiet_option = click.option("--quiet", is_flag=True, help="No progress bars.")
precision_option = click.option(
    "--precision", type=click.Choice(["fp32", "bf16", "fp16", "auto"]), default="fp32", show_default=True,
    help="Encoding precision (bf16/fp16 via autocast). auto: bf16 on GPUs that support it and on CPUs with native "
         "bf16 (avx512_bf16/amx_bf16), else fp32.")
fasttest_option = click.option("--fasttest", is_flag=True, help="Transfer tasks with 5 instead of 10 folds (and, "
                               "with the senteval classifier, SimCSE's fast settings).")


def score_hint(out) -> str:
    """The line a command that writes a model ends with: the evals that give the README tables' numbers.

    >>> score_hint("small").startswith("Score it: `sparsecse eval --model small --tasks STSBenchmark --split dev`")
    True
    """
    import shlex

    model = shlex.quote(str(out))
    return (f"Score it: `sparsecse eval --model {model} --tasks STSBenchmark --split dev` (STS-B dev, the tables' "
            f"model-selection score); `sparsecse eval --model {model}` (the 7 STS tasks on test, the 'STS avg').")


def echo_json(obj) -> None:
    """One JSON object on stdout; NaN and infinities become null (valid for strict parsers)."""
    from sparsecse.artifacts.files import dumps_json

    click.echo(dumps_json(obj))
