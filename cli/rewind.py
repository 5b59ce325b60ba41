"""sparsecse rewind: reset to the initial weights, remove the mask's units physically, retrain."""

from __future__ import annotations

import click

from sparsecse.cli.options import trust_remote_code_option
from sparsecse.cli.train import report, run_options, training_options


@click.command("rewind")
@trust_remote_code_option
@click.option("--mask", required=True, type=click.Path(dir_okay=False), help="Mask file from `sparsecse prune`.")
@click.option("--init", default=None, metavar="M",
              help="Weights to rewind to (default: the initial checkpoint in the scored model's lineage, "
                   "else the scored model).")
@training_options
def command(mask, init, **kwargs):
    """Retrain a pruned model from its initial weights with any registered objective."""
    from sparsecse.training import rewind

    options, as_json = run_options(kwargs)
    report(rewind(mask, init=init, **options), as_json, "Rewound and trained")
