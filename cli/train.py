"""sparsecse train: a pretrained LM + a corpus + an objective -> a trained model directory."""

from __future__ import annotations

import click

from sparsecse.cli.options import (data_dir_option, device_option, echo_json, json_option, model_option,
                                   overwrite_option, pooling_option, quiet_option, score_hint, seed_option)
from sparsecse.cli.options import eval_set_options, trust_remote_code_option


def training_options(func):
    """The flags `train` and `rewind` share (the DESIGN contract plus run control)."""
    options = [
        click.option("--corpus", required=True, type=click.Path(dir_okay=False),
                     help="Training text, one sentence per line."),
        click.option("--objective", default="simcse", show_default=True,
                     help="Training objective (see `sparsecse objectives`)."),
        click.option("--objective-args", default=None, metavar="K=V,...",
                     help="Objective parameters, e.g. temperature=0.05,mlp=true."),
        click.option("--out", required=True, type=click.Path(file_okay=False), help="Output model directory."),
        click.option("--resume", is_flag=True, help="Continue the unfinished run in OUT.partial."),
        click.option("--max-steps", type=click.IntRange(min=1), default=None,
                     help="Stop after N optimizer steps (default: --epochs over the corpus)."),
        click.option("--epochs", type=click.IntRange(min=1), default=None, help="Passes over the corpus (recipe: 1)."),
        click.option("--batch-size", type=click.IntRange(min=2), default=None,
                     help="Global batch over all processes (recipe: 64 BERT, 512 RoBERTa-base)."),
        click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Peak learning rate, linear decay (recipe: 3e-5 BERT-base, 1e-5 RoBERTa-base)."),
        click.option("--max-length", type=click.IntRange(min=2), default=None,
                     help="Tokens per training sentence (recipe: 32)."),
        click.option("--eval-steps", type=click.IntRange(min=0), default=125, show_default=True,
                     help="STS-B dev (or --dev) every N steps; the best checkpoint is kept (0: keep the last "
                          "weights)."),
        eval_set_options(dev="the checkpoint is chosen on its score (Spearman, or MRR@10 for positive pairs) "
                             "instead of STS-B dev's."),
        click.option("--save-steps", type=click.IntRange(min=0), default=None,
                     help="Checkpoint every N steps (default: --eval-steps; 0: never)."),
        click.option("--mixed-precision", type=click.Choice(["no", "fp16", "bf16"]), default=None,
                     help="GPU mixed precision (default: bf16 where supported, else fp16; CPU: no)."),
        click.option("--tensorboard", is_flag=True, help="Also log to OUT/tensorboard."),
        click.option("--gather-negatives/--no-gather-negatives", default=True, show_default=True,
                     help="Several processes: in-batch negatives over the whole global batch, as in one process "
                          "(--no-gather-negatives: each process's own part only)."),
        click.option("--bucket-by-length", is_flag=True,
                     help="Batches of sentences of similar token length (less padding; each epoch holds the same "
                          "sentences). Recipes turn it on."),
        data_dir_option, pooling_option, device_option, seed_option, overwrite_option, json_option, quiet_option,
    ]
    for option in reversed(options):
        func = option(func)
    return func


def run_options(kwargs: dict) -> tuple[dict, bool]:
    """Click's keyword arguments -> (the Python API's keyword arguments with the run's one
    :class:`~sparsecse.training.config.TrainingConfig`, --json)."""
    from sparsecse.stage_config import field_names
    from sparsecse.training.config import TrainingConfig

    as_json, quiet = kwargs.pop("as_json"), kwargs.pop("quiet")
    fields = {k: kwargs.pop(k) for k in field_names(TrainingConfig) if k in kwargs}
    return {**kwargs, "config": TrainingConfig(**fields, show_progress=not quiet)}, as_json


def report(result, as_json: bool, verb: str) -> None:
    """The text report of a training run: the best dev score, its step, where the model is."""
    if not getattr(result, "main_process", True):  # the first process of a data-parallel run reports
        return
    if as_json:
        echo_json(result.to_dict())
        return
    h = result.hyperparameters
    from sparsecse.training.api import dev_label

    chosen = (f"best {dev_label(h)} {result.best_score:.2f} at step {result.best_step}"
              if result.best_step else f"last step ({result.steps})")
    click.echo(f"{verb} {h['objective']} for {result.steps} steps (batch {h['batch_size']}, lr {h['lr']:g}, "
               f"max length {h['max_length']}, {h['processes']} process(es), {result.steps_per_second:.2f} steps/s, "
               f"{result.seconds / 60:.1f} min in all)")
    click.echo(f"  saved the {chosen} to {result.out}")
    if not result.best_step:  # no STS-B dev score was measured while training
        click.echo(score_hint(result.out))


@click.command("train")
@trust_remote_code_option
@model_option
@training_options
def command(model, **kwargs):
    """Train a sentence encoder with a contrastive objective (unsupervised SimCSE by default)."""
    from sparsecse.training import train

    options, as_json = run_options(kwargs)
    report(train(model, **options), as_json, "Trained")
