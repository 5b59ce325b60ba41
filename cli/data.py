"""sparsecse data: get the SentEval/SimCSE evaluation data every evaluating command reads."""

from __future__ import annotations

import click

from sparsecse.cli.options import json_option, quiet_option


@click.group("data")
def command():
    """The SentEval/SimCSE evaluation data ($SPARSECSE_DATA, else ~/.cache/sparsecse/senteval)."""


@command.command("download")
@click.option("--to", "to", default=None, metavar="DIR", type=click.Path(file_okay=False),
              help="Where to put the data (default: $SPARSECSE_DATA, else ~/.cache/sparsecse/senteval, where every "
                   "command looks without --data-dir).")
@click.option("--source", "sources", multiple=True, metavar="URL",
              help="Download from URL instead (repeatable: tried in order; a mirror of SimCSE's senteval.tar).")
@click.option("--sha256", "sha256", default=None, metavar="HEX",
              help="The archive's expected SHA-256 (default: the one recorded in sparsecse.data.sources).")
@click.option("--force", is_flag=True,
              help="Download again and replace DIR even if it holds the data (or other files).")
@quiet_option
@json_option
def download(to, sources, sha256, force, quiet, as_json):
    """Fetch SimCSE's senteval.tar, check it, and unpack it into the data directory.

    A second run finds the data and downloads nothing; an interrupted download resumes where it stopped.
    """
    from pathlib import Path

    from sparsecse.artifacts.download import install_archive
    from sparsecse.cli.options import echo_json
    from sparsecse.data.paths import ENV_VAR, download_dir
    from sparsecse.data.sources import SENTEVAL
    from sparsecse.errors import SparseCSEError

    _, default = download_dir()
    dest = Path(to).expanduser() if to else default
    if sha256 is not None and (len(sha256) != 64 or any(c not in "0123456789abcdefABCDEF" for c in sha256)):
        raise SparseCSEError(f"--sha256 {sha256} is not a SHA-256 (64 hexadecimal digits).")
    record = install_archive(SENTEVAL.name, sources or SENTEVAL.urls, dest, sha256 or SENTEVAL.sha256,
                             SENTEVAL.required, force=force, progress=not quiet and not as_json,
                             log=None if as_json else lambda msg: click.echo(msg, err=True))
    if as_json:
        echo_json(record)
        return
    if record["already_there"]:
        click.echo(f"The SentEval data is already in {dest}; nothing was downloaded (--force downloads it again).")
    else:
        check = "SHA-256 verified" if record["sha256_verified"] else "no published SHA-256 to compare with"
        click.echo(f"Unpacked {SENTEVAL.description} into {dest} ({record['downloaded_bytes'] / 1e6:.1f} MB "
                   f"downloaded from {record['url']}; sha256 {record['sha256']}, {check}).")
    if dest.resolve() != default.resolve():
        click.echo(f"Commands read it with --data-dir {dest} or with {ENV_VAR}={dest} set.")
