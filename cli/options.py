"""Options shared by several commands, so every command spells them the same way.

The convention (README, "Common options"): ``--out`` is what a command writes and ``--overwrite``
lets it replace an existing one; ``--json`` prints one JSON object on stdout instead of the text
report; ``--quiet`` drops the progress bars (stderr); ``--seed`` is recorded in every manifest;
``--device`` is checked before anything loads; ``--precision`` is the encoding precision of the
commands that embed sentences; ``--fasttest`` is SentEval's 5-fold transfer protocol.
"""

from __future__ import annotations

import click

class PlainNumber(click.ParamType):
    """A number as users write it: ``float()``/``int()`` alone read ``1_5`` as 15 and ``float()`` reads ``inf``
    and ``nan``; those are refused in one sentence naming the option."""

    def __init__(self, kind: type = float):
        self.kind = kind
        self.name = "integer" if kind is int else "number"

    def convert(self, value, param, ctx):
        """The value as ``kind``; a value with underscores, inf, nan, or not a number is refused."""
        import re

        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return self.kind(value)
        text = str(value).strip()
        pattern = r"^[-+]?[0-9]+$" if self.kind is int else r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$"
        if not re.match(pattern, text):
            name = param.opts[0] if param is not None else "the value"
            self.fail(f"{name} {value!r} is not {'a whole number' if self.kind is int else 'a number'} as written "
                      f"(digits{'' if self.kind is int else ' and one point'}, no underscores).", param, ctx)
        return self.kind(text)


PLAIN_FLOAT, PLAIN_INT = PlainNumber(float), PlainNumber(int)

model_option = click.option(
    "--model", "model", default=None, metavar="M",
    help="Hugging Face model name or directory (default: the embedded all-MiniLM-L6-v2).")
data_dir_option = click.option(
    "--data-dir", "data_dir", default=None, metavar="D", type=click.Path(file_okay=False),
    help="SentEval-layout data directory (default: $SPARSECSE_DATA, then ~/.cache/sparsecse/senteval if it exists, "
         "then the repository's ../shared/data/senteval).")
pooling_option = click.option(
    "--pooling", type=click.Choice(["cls", "cls_before_pooler", "mean", "last"]), default=None,
    help="Sentence pooling (last: the last non-padding token, for decoder embedders; default: the model's own config, else cls_before_pooler).")


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


EVAL_SET_FORMATS = ("a pairs file (.tsv, .csv or .jsonl with columns sentence1, sentence2, score, or query, positive "
                    "[, candidate]) or a task name (STSBenchmark, SICKRelatedness, STS12..STS16)")


def eval_set_options(dev: str | None = None, test: str | None = None):
    """``--dev SPEC`` and/or ``--test SPEC`` (parameters ``dev`` and ``test``): the user's dev and test sets,
    each a pairs file or a task name (:func:`sparsecse.evaluation.eval_sets.load_eval_set`); ``dev`` and
    ``test`` say what the command does with each (an option is left out when its text is None).

    >>> import click
    >>> @click.command()
    ... @eval_set_options(dev="picks the checkpoint")
    ... def run(dev): pass
    >>> [p.name for p in run.params]
    ['dev']
    """
    options = []
    if dev is not None:
        options.append(click.option("--dev", "dev", default=None, metavar="FILE|TASK",
                                    help=f"Dev set, {EVAL_SET_FORMATS}: {dev}"))
    if test is not None:
        options.append(click.option("--test", "test", default=None, metavar="FILE|TASK",
                                    help=f"Test set, {EVAL_SET_FORMATS}: {test}"))
    return option_group(*options)


def eval_set_file(spec):
    """The file a ``--dev``/``--test`` value names (for the inputs an ``--out`` must not overwrite), else None."""
    from sparsecse.data.eval_data import is_pairs_file, known_task

    return spec if spec is not None and known_task(str(spec)) is None and is_pairs_file(spec) else None


# ---------------------------------------------------------------------------- shared option groups
def option_group(*options):
    """One decorator applying several click options, in the order given (as they show in ``--help``)."""

    def decorate(command):
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def scoring_options(batch_size_flag: str = "--batch-size", prefix: str = ""):
    """The scoring group (``score``, ``sweep``, ``compress``): ``--split``, the scoring batch (``batch_size_flag``,
    ``--score-batch-size`` where ``--batch-size`` is the training batch) and ``--max-batches``; ``prefix`` says
    what they set ("Scoring: ")."""

    def text(help_text: str) -> str:
        if not prefix:
            return help_text
        return prefix + (help_text if help_text[1].isupper() else help_text[0].lower() + help_text[1:])

    return option_group(
        click.option("--split", type=click.Choice(["train", "dev", "test"]), default="train", show_default=True,
                     help=text("STS-B split to score on (never test unless you ask).")),
        click.option(batch_size_flag, batch_size_flag.lstrip("-").replace("-", "_"), type=click.IntRange(min=2),
                     default=64, show_default=True, help=text("Positive pairs (and uniformity sentences) per batch.")),
        click.option("--max-batches", type=click.IntRange(min=1), default=None,
                     help=text("Stop after this many batches.")))


def criterion_option(default: str):
    """``--criterion``: its choices and their meaning from the registry of :mod:`sparsecse.scoring.criteria`
    (which loads without torch); ``default`` says what happens when it is left out."""
    from sparsecse.scoring.criteria import CRITERIA, criterion_names

    meanings = ", ".join(f"{name} {CRITERIA[name].summary}" for name in criterion_names("gate"))
    return click.option("--criterion", type=click.Choice(list(criterion_names("gate"))), default=None,
                        help=f"Importance from the stored gradients g: {meanings} (default: {default}; the "
                             "manifest records which).")


def keep_one_head_option(default: str):
    """``--keep-one-head/--allow-empty-layers`` (default None: the target kind decides, as ``default`` says)."""
    return click.option("--keep-one-head/--allow-empty-layers", default=None,
                        help=f"Never remove a layer's last attention head (default: {default}).")


scope_option = click.option("--scope", type=click.Choice(["global", "layer"]), default="global", show_default=True,
                            help="Rank units across all layers, or within each layer.")
align_ffn_option = click.option(
    "--align-ffn", type=click.IntRange(min=1), default=8, show_default=True,
    help="Round each layer's FFN width up to a multiple of N with zero neurons, which change no output but let CPU "
         "matrix kernels run at full speed; 1 keeps exactly the mask's neurons.")
seq_len_option = click.option("--seq-len", type=click.IntRange(min=1), default=128, show_default=True,
                              help="Reference sequence length for the FLOPs of attention.")


def reconstruction_options(corpus_help: str, required: bool = False):
    """The reconstruction group (``shrink``, ``compress``): ``--reconstruct CORPUS`` (parameter ``corpus``) and
    the settings of :meth:`~sparsecse.shrinking.reconstruction.ReconstructionPlan.prepare`; pass them to
    :func:`reconstruction_plan`."""
    from sparsecse.shrinking import reconstruction_settings as settings  # torch-free

    return option_group(
        click.option("--reconstruct", "corpus", required=required, default=None, type=click.Path(dir_okay=False),
                     metavar="CORPUS", help=corpus_help),
        click.option("--reconstruct-sentences", type=click.IntRange(min=1), default=settings.DEFAULT_SENTENCES,
                     show_default=True, help="How many sentences of CORPUS (a seeded sample) the reconstruction "
                                             "fits on."),
        click.option("--reconstruct-method", type=click.Choice(settings.METHODS), default=settings.DEFAULT_METHOD,
                     show_default=True,
                     help="scales: one factor per kept head/neuron (Kwon et al. 2022); full: the whole output "
                          "projection over the kept units (ridge; falls back to scales if ill-conditioned)."),
        click.option("--reconstruct-target", type=click.Choice(settings.TARGETS), default=settings.DEFAULT_TARGET,
                     show_default=True, help="Match the pre-LayerNorm residual sum (residual) or the sublayer "
                                             "output."),
        click.option("--reconstruct-ridge", type=click.FloatRange(min=0), default=settings.DEFAULT_RIDGE,
                     show_default=True, help="Ridge weight (relative to the mean diagonal of the normal equations)."),
        click.option("--reconstruct-weighting", type=click.Choice(settings.WEIGHTINGS),
                     default=settings.DEFAULT_WEIGHTING, show_default=True,
                     help="layernorm: weigh each token by 1/σ² of the dense pre-LayerNorm sum, so the fit is on "
                          "what the following LayerNorm passes on."))


def reconstruction_plan(corpus, reconstruct_sentences, reconstruct_method, reconstruct_target, reconstruct_ridge,
                        reconstruct_weighting):
    """The :class:`~sparsecse.shrinking.reconstruction.ReconstructionPlan` the reconstruction options ask for
    (None without ``--reconstruct``)."""
    if corpus is None:
        return None
    from sparsecse.shrinking.reconstruction import ReconstructionPlan

    return ReconstructionPlan.prepare(corpus, reconstruct_sentences, reconstruct_method, reconstruct_target,
                                      reconstruct_ridge, weighting=reconstruct_weighting)
