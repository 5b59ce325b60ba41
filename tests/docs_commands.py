"""Every ``sparsecse ...`` command line written in the README and the docs, checked against the real click
commands: an unknown command, subcommand or option is reported with its file and line."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click

FENCE = re.compile(r"^\s*(```|~~~)")


def command_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, command) for each ``sparsecse ...`` line inside a code block (continuations joined,
    comments dropped) and each inline ```sparsecse ...``` span outside code blocks."""
    found, in_code, pending, start = [], False, "", 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(raw):
            in_code = not in_code
            continue
        if in_code:
            line = raw.split(" #")[0].rstrip() if not raw.lstrip().startswith("#") else ""
            if pending:
                pending += " " + line.strip().rstrip("\\").strip()
                if not line.endswith("\\"):
                    found.append((start, pending))
                    pending = ""
                continue
            match = re.search(r"(?:^|\$ |&& |\| )\s*(sparsecse(?: .*)?)$", line.strip())
            if match:
                if line.endswith("\\"):
                    pending, start = match.group(1).rstrip("\\").strip(), number
                else:
                    found.append((number, match.group(1)))
        else:
            for span in re.findall(r"`(sparsecse [^`]+)`", raw):
                found.append((number, span))
    return found


def check_command(root: click.Group, line: str) -> str | None:
    """None when every command and option of ``line`` exists, else what does not."""
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    words = words[1:]
    command, ctx = root, click.Context(root, info_name="sparsecse")
    path = ["sparsecse"]
    while isinstance(command, click.Group) and words and not words[0].startswith("-"):
        if words[0] in ("...", "…") or not re.fullmatch(r"[a-z][a-z0-9-]*", words[0]):
            return None  # a placeholder such as COMMAND: nothing to check
        sub = command.get_command(ctx, words[0])
        if sub is None:
            return f"unknown command '{' '.join(path + [words[0]])}'"
        path.append(words.pop(0))
        command, ctx = sub, click.Context(sub, info_name=path[-1], parent=ctx)
    known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    known |= {"--help", "-h"}
    for word in words:
        if word.startswith("--") or re.fullmatch(r"-[a-zA-Z]", word):
            name = word.split("=", 1)[0]
            if name not in known and name != "--":
                return f"'{' '.join(path)}' has no option {name}"
    return None


def problems(paths: list[Path], root: click.Group) -> list[str]:
    out = []
    for path in paths:
        for number, line in command_lines(path):
            problem = check_command(root, line)
            if problem:
                out.append(f"{path}:{number}: {problem} ({line})")
    return out
