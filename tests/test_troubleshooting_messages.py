"""Every error message docs/guides/troubleshooting.md quotes is one the code prints: the ones a cheap call can raise
are raised here and compared word for word; each of the others must match one message template of the code (an
f-string of sparsecse/ or cli/) with only short names and numbers where the template has a value."""

from __future__ import annotations

import ast
import functools
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from sparsecse.errors import SparseCSEError

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guides" / "troubleshooting.md"
HOLE = "\x00"  # where a template has a value


def quoted_messages(text: str | None = None) -> list[str]:
    """Each ``Error: ...`` the guide quotes (in a ``text`` block or inline), whitespace made single."""
    text = GUIDE.read_text(encoding="utf-8") if text is None else text
    found = []
    for block in re.findall(r"```text\n(.*?)```", text, re.S):
        for message in re.split(r"(?m)^\s*Error: ", block)[1:]:
            found.append(message)
    found += re.findall(r"`Error: ([^`]*)`", text)
    return [re.sub(r"\s+", " ", m).strip() for m in found]


@functools.lru_cache(maxsize=None)
def _templates() -> tuple[tuple[re.Pattern, int], ...]:
    """Every string template of the code as a pattern (a value: a short run of characters), with its literal length."""
    out = []
    for path in [*(ROOT / "sparsecse").rglob("*.py"), *(ROOT / "cli").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.JoinedStr):
                parts = [str(v.value) if isinstance(v, ast.Constant) else HOLE for v in node.values]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                parts = [node.value]
            else:
                continue
            template = re.sub(r"\s+", " ", "".join(parts))
            literal = len(template.replace(HOLE, ""))
            if literal >= 15:
                pattern = "".join(re.escape(p) if p != HOLE else "([^;]{0,40}?)" for p in re.split(f"({HOLE})", template))
                out.append((re.compile(pattern), literal))
    return tuple(out)


def matches_code(message: str, templates: tuple[tuple[re.Pattern, int], ...]) -> bool:
    """Whether ``message`` is one template of the code with values filled in (the template's own words being at
    least half of the message)."""
    return any(literal >= len(message) / 2 and pattern.fullmatch(message) for pattern, literal in templates)


def _raised(call) -> str:
    with pytest.raises(SparseCSEError) as error:
        call()
    return str(error.value)


@functools.lru_cache(maxsize=None)
def printed_by_code() -> dict[str, str]:
    """The messages a cheap call raises, keyed by their first words: what the guide must quote word for word."""
    from sparsecse.artifacts.export_formats import get_format
    from sparsecse.targets.spec import Target

    found = [_raised(lambda: Target(speedup=0.5).check()), _raised(lambda: Target(speedup=2.0, engine="tensorrt").check()),
             get_format("openvino").missing_packages()]
    try:
        from cli.compress import refuse_missed_target
    except ImportError:  # the command line's module moved: its message is checked against the templates instead
        pass
    else:
        shape = {"metric": "throughput", "batch_size": 128, "threads": 2, "sentences": 2552, "engine": "torch-fp32"}
        reached = {"met": False, "met_speed": False, "speedup": 1.93, "speedup_target": 2.0, "shape": shape}
        run = SimpleNamespace(model=Path("runs/t2x/model"), evaluation={"target": reached})
        found.append(_raised(lambda: refuse_missed_target(run)))
    if os.environ.get("HF_HUB_OFFLINE") == "1":  # as `make test` runs: the hub's own words for a name not cached
        from sparsecse.modeling.encoder import SentenceEncoder

        found.append(_raised(lambda: SentenceEncoder.load("my-encoder")))
    return {" ".join(m.split()[:3]): m for m in found}


def test_the_messages_raised_here_are_all_quoted():
    """No message raised above is left out of the guide (a key that matches nothing would check nothing)."""
    keys = {" ".join(m.split()[:3]) for m in quoted_messages()}
    assert set(printed_by_code()) <= keys


def test_the_guide_quotes_messages():
    assert len(quoted_messages()) >= 15


def test_each_quoted_message_is_what_the_code_prints():
    exact, templates = printed_by_code(), _templates()
    wrong = []
    for message in quoted_messages():
        key = " ".join(message.split()[:3])
        if key in exact:
            if message != exact[key]:
                wrong.append(f"{message!r} where the code prints {exact[key]!r}")
        elif not matches_code(message, templates):
            wrong.append(f"{message!r} matches no message of the code")
    assert wrong == []


def test_a_drifted_message_fails():
    """The check itself: the guide's old out-of-reach message (no shape, no spread) and an engine list without
    torch-cuda are caught."""
    templates, exact = _templates(), printed_by_code()
    old = ("A 50x speed-up on torch-fp32 is out of reach for all-MiniLM-L6-v2: the fastest candidate tried keeps 0.02 of "
           "its layer FLOPs and runs 6.1x (dev 31.20); the candidates are in runs/t50/candidates/candidates.csv.")
    assert not matches_code(old, templates)
    assert exact["Unknown engine 'tensorrt';"] != ("Unknown engine 'tensorrt'; choose one of torch-fp32, onnx, onnx-int8, "
                                                   "openvino, openvino-int8.")
    assert quoted_messages("```text\nError: A b\n  c.\nError: D.\n```\nand `Error: E.`") == ["A b c.", "D.", "E."]
