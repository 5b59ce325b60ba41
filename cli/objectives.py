"""sparsecse objectives: the registered training objectives with their parameters and defaults."""

from __future__ import annotations

import json

import click

from sparsecse.cli.options import json_option


@click.command("objectives")
@json_option
def command(as_json):
    """List the training objectives (built-in and from the `sparsecse.objectives` entry points)."""
    from sparsecse.objectives.registry import available_objectives

    found = available_objectives()
    if as_json:
        click.echo(json.dumps({name: {"description": cls.description, "paper": cls.paper,
                                      "parameters": cls.defaults, "requires": cls.requires,
                                      "training_defaults": getattr(cls, "training_defaults", {}),
                                      "backbone_defaults": getattr(cls, "backbone_defaults", {}),
                                      "backbone_training_defaults": getattr(cls, "backbone_training_defaults", {}),
                                      "module": cls.__module__}
                               for name, cls in sorted(found.items())}, default=str))
        return
    for name, cls in sorted(found.items()):
        click.echo(f"{name}: {cls.description}")
        if cls.paper:
            click.echo(f"    paper: {cls.paper}")
        params = ", ".join(f"{k}={v!r}" for k, v in cls.defaults.items()) or "none"
        click.echo(f"    parameters: {params}")
        for key, what in cls.requires.items():
            click.echo(f"    requires {key}= ({what})")
        shifted = getattr(cls, "training_defaults", None)
        if shifted:
            click.echo(f"    training defaults: {', '.join(f'{k}={v!r}' for k, v in shifted.items())}")
        backbones = {**getattr(cls, "backbone_defaults", {})}
        for backbone, values in (getattr(cls, "backbone_training_defaults", None) or {}).items():
            backbones[backbone] = {**backbones.get(backbone, {}), **values}
        for backbone, values in backbones.items():
            click.echo(f"    on {backbone}: {', '.join(f'{k}={v!r}' for k, v in values.items())}")
