"""Options shared by several commands, so every command spells them the same way."""

from __future__ import annotations

import click

model_option = click.option(
    "--model", "model", default=None, metavar="M",
    help="Hugging Face model name or directory (default: the embedded all-MiniLM-L6-v2).")
data_dir_option = click.option(
    "--data-dir", "data_dir", default=None, metavar="D", type=click.Path(file_okay=False),
    help="SentEval-layout data directory (default: $SPARSECSE_DATA, then ~/.cache/sparsecse/senteval).")
pooling_option = click.option(
    "--pooling", type=click.Choice(["cls", "cls_before_pooler", "mean"]), default=None,
    help="Sentence pooling (default: the model's own config, else cls_before_pooler).")
device_option = click.option("--device", default=None, help="torch device (default: cuda if available, else cpu).")
seed_option = click.option("--seed", type=int, default=0, show_default=True, help="Random seed (recorded).")
overwrite_option = click.option("--overwrite", is_flag=True, help="Replace --out if it exists.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
