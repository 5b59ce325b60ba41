"""sparsecse report: rebuild a sweep's tables, summary and figures without recomputing anything."""

from __future__ import annotations

import click


@click.command("report")
@click.argument("sweep_dir", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--no-figures", is_flag=True, help="Only the tables and the summary.")
def command(sweep_dir, no_figures):
    """Rebuild results.csv/json, summary.md and figures/ of the sweep in DIR from its finished points."""
    from sparsecse.reporting.report import report

    built = report(sweep_dir, figures=not no_figures)
    click.echo(built["summary_text"])
    click.echo(f"Wrote {built['results_csv']}, {built['results_json']}, {built['summary']} and "
               f"{len(built['figures'])} figure files.")
