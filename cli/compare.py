"""sparsecse compare: B - A on the STS tasks, with paired-bootstrap intervals and p-values."""

from __future__ import annotations

import json

import click

from sparsecse.cli.options import data_dir_option, device_option, json_option, pooling_option
from sparsecse.cli.options import SEED, trust_remote_code_option
from sparsecse.evaluation.bootstrap import MAX_REPLICATES


def format_table(result: dict) -> str:
    """One row per task and the average: A, B, B - A, its interval and p-value."""
    pct = f"{100 * result['level']:g}%"
    header = ("task", "A", "B", "B - A", f"{pct} interval", "p")
    rows = [(t, f"{r['a']:.2f}", f"{r['b']:.2f}", f"{r['diff']:+.2f}", f"[{r['ci'][0]:+.2f}, {r['ci'][1]:+.2f}]",
             f"{r['p']:.3f}") for t, r in [*result["tasks"].items(),
                                            *([("STS avg", result["avg_sts"])] if result["tasks"] else []),
                                            *((f"{t} (mteb {r.get('metric', 'main score')})", r)
                                              for t, r in (result.get("mteb") or {}).items()),
                                            *((f"{role} {r['name']} ({r['metric']})", r)
                                              for role, r in (result.get("eval_sets") or {}).items())]]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = ["  ".join(f"{x:<{w}}" if i == 0 else f"{x:>{w}}" for i, (x, w) in enumerate(zip(line, widths)))
             for line in (header, *rows)]
    a, b = result["a"], result["b"]
    lines += [f"A: {a['source']}" + (f" + mask {a['mask']}" if a["mask"] else ""),
              f"B: {b['source']}" + (f" + mask {b['mask']}" if b["mask"] else ""),
              f"Spearman x 100 (MRR@10 x 100 for positive pairs); {result['replicates']} paired bootstrap replicates (seed {result['seed']}), "
              f"percentile interval of B - A; p: two-sided paired bootstrap test."]
    return "\n".join(lines)


@click.command("compare")
@trust_remote_code_option
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@click.option("--mask-a", default=None, type=click.Path(dir_okay=False), help="Mask file gating model A.")
@click.option("--mask-b", default=None, type=click.Path(dir_okay=False), help="Mask file gating model B.")
@click.option("--tasks", default=None, metavar="sts|NAME,..",
              help="STS tasks to compare (default: those of the result files, else all 7).")
@data_dir_option
@click.option("--split", "sts_split", type=click.Choice(["test", "dev"]), default="test", show_default=True,
              help="Split of STS-B and SICK-R, when both sides are models.")
@click.option("--sts-aggregation", type=click.Choice(["all", "mean", "wmean"]), default="all", show_default=True,
              help="STS12-16 aggregation, when both sides are models.")
@click.option("--bootstrap", "replicates", type=click.IntRange(1, MAX_REPLICATES), default=1000, show_default=True,
              metavar="N", help="Paired bootstrap replicates.")
@click.option("--bootstrap-seed", "seed", type=SEED, default=0, show_default=True, help="Seed of the resamples.")
@pooling_option
@click.option("--batch-size", type=click.IntRange(min=1), default=None, help="Sentences per encoding batch.")
@device_option
@json_option
@click.option("--quiet", is_flag=True, help="No progress bar.")
def command(a, b, mask_a, mask_b, tasks, data_dir, sts_split, sts_aggregation, replicates, seed, pooling,
            batch_size, device, as_json, quiet):
    """B - A per STS task and on average, with a paired-bootstrap 95% interval and p-value.

    A and B are models (a Hugging Face name or a directory, with --mask-a/--mask-b) or result files
    written by `sparsecse eval --out`. Every bootstrap replicate resamples the pairs once and scores
    both on that resample; two result files must come from the same data and tasks.
    """
    from sparsecse.evaluation.compare import ComparisonConfig, compare

    config = ComparisonConfig(tasks=tasks, data_dir=data_dir, replicates=replicates, seed=seed, sts_split=sts_split,
                              sts_aggregation=sts_aggregation, pooling=pooling, batch_size=batch_size, device=device,
                              show_progress=not quiet)
    result = compare(a, b, mask_a=mask_a, mask_b=mask_b, config=config)
    click.echo(json.dumps(result) if as_json else format_table(result))
