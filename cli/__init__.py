"""The ``sparsecse`` command line: one click group, one small module per command.

Commands are imported lazily so ``sparsecse --help`` is quick. A :class:`~sparsecse.errors.SparseCSEError` anywhere
ends the command with its one-sentence message and exit status 1, never a traceback.
"""

from __future__ import annotations

import importlib
import sys

import click

from sparsecse import __version__

COMMANDS = ("data", "train", "score", "prune", "rewind", "eval", "compare", "shrink", "compress", "export", "sweep", "report",
            "objectives", "models")  # help order


class LazyGroup(click.Group):
    """The command group: each command's module is imported only when that command runs (or its help shows)."""
    def list_commands(self, ctx):
        """The commands in help order (those whose module is installed)."""
        return [name for name in COMMANDS if importlib.util.find_spec(f"sparsecse.cli.{_module(name)}")]

    def get_command(self, ctx, name):
        """The command ``name``, imported now (None for an unknown name)."""
        if name not in COMMANDS:
            return None
        try:
            module = importlib.import_module(f"sparsecse.cli.{_module(name)}")
        except ModuleNotFoundError as exc:
            if exc.name == f"sparsecse.cli.{_module(name)}":
                return None
            raise
        command = module.command
        if command.short_help is None and command.help:  # the whole first paragraph, never cut at "..."
            command.short_help = " ".join(command.help.split("\n\n")[0].split())
        return command

    def invoke(self, ctx):
        """Run the command; a SparseCSEError ends it with its one sentence, Ctrl-C (or SIGTERM) with what was kept."""
        from sparsecse.artifacts.signals import Terminated, interrupts_as_keyboard
        from sparsecse.errors import SparseCSEError

        try:
            with interrupts_as_keyboard():  # SIGTERM cleans up as Ctrl-C does
                return super().invoke(ctx)
        except SparseCSEError as exc:
            if getattr(exc, "quiet", False):  # a process of a multi-process run; another one says why
                sys.exit(1)
            raise click.ClickException(str(exc)) from None
        except KeyboardInterrupt as exc:  # a command that keeps resumable work says so in the exception
            stopped = "Terminated (SIGTERM)" if isinstance(exc, Terminated) else "Interrupted"
            click.echo(str(exc) or f"{stopped}; nothing half-written was left behind.", err=True)
            sys.exit(143 if isinstance(exc, Terminated) else 130)


def _module(name: str) -> str:
    return {"eval": "eval_cmd"}.get(name, name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="sparsecse")
def main():
    """SparseCSE: find and remove the heads and neurons that hurt a sentence encoder, then retrain."""
