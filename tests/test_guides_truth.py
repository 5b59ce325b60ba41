"""The guides and the README say what is: no history (it goes to docs/changelog.md), no machine's path as a model's
name (in the docs, the kept cards or the results store), and the settings they quote are the code's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# words that tell a story of how the code or a run came to be, not what it is
HISTORY = ["since fixed", "before that change", "after that change", "earlier run", "was asked", "aimed at too",
           "now", "no longer", "used to", "previously", "formerly", "originally", "ran beside", "at first",
           "anymore", "this time", "last time", "was changed", "has changed", "went from"]
HISTORY_RE = re.compile(r"\b(" + "|".join(re.escape(w) for w in HISTORY) + r")\b", re.I)
# a model named by where it lies on one machine: ../shared/models/NAME, /work/shared/models/NAME
MODEL_PATH = re.compile(r"(?:\.\./|/)\S*?shared/models/[\w.-]+")


def user_pages() -> list[Path]:
    """The pages a user reads to choose and run: the README and the guides."""
    return [ROOT / "README.md", *sorted((ROOT / "docs" / "guides").glob("*.md"))]


def prose(text: str) -> str:
    """``text`` without code fences and inline code (commands and messages quote what the code prints)."""
    text = re.sub(r"(?ms)^( *)(```+).*?^\1\2\s*$", "", text)
    return re.sub(r"`[^`\n]*`", "", text)


def history_words(text: str) -> list[str]:
    """Each history word or phrase in ``text``'s prose, with a little of its line."""
    return [f"{m.group(1)!r}: {line.strip()[:90]}" for line in prose(text).split("\n") for m in HISTORY_RE.finditer(line)]


@pytest.mark.parametrize("page", user_pages(), ids=lambda p: p.name)
def test_a_guide_states_what_is(page):
    assert history_words(page.read_text(encoding="utf-8")) == []


def test_a_history_word_is_caught():
    assert history_words("The search now counts it (a bug since fixed).\n\n```\nnow in a command\n```\n") == [
        "'now': The search now counts it (a bug since fixed).",
        "'since fixed': The search now counts it (a bug since fixed)."]
    assert history_words("It knows `now` and snow.") == []


def documents_naming_models() -> list[Path]:
    """Every page, kept card and store entry that names models; the history pages (the changelog, the archives)
    keep their commands as they were run."""
    docs = [p for p in (ROOT / "docs").rglob("*.md")
            if "_build" not in p.parts and "archive" not in p.parts and p.name not in ("changelog.md", "archive.md")]
    return [ROOT / "README.md", *sorted(docs), *sorted((ROOT / "docs" / "results" / "store").glob("*.json"))]


def model_paths(path: Path) -> list[str]:
    """The models ``path`` names by a path of the machine that ran it (a store entry: outside its command)."""
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        data["provenance"] = {k: v for k, v in data["provenance"].items() if k != "command"}
        data.pop("title", None)  # the command again
        return MODEL_PATH.findall(json.dumps(data))
    return MODEL_PATH.findall(path.read_text(encoding="utf-8"))


def test_no_model_is_named_by_its_path():
    found = {str(p.relative_to(ROOT)): model_paths(p) for p in documents_naming_models()}
    assert {k: v for k, v in found.items() if v} == {}


def test_a_model_path_is_caught_and_a_label_is_its_name(tmp_path):
    from sparsecse.artifacts.model_names import model_label

    page = tmp_path / "p.md"
    page.write_text("Against `../shared/models/paraphrase-MiniLM-L3-v2` (78.67); `make` sets `../shared/models`.")
    assert model_paths(page) == ["../shared/models/paraphrase-MiniLM-L3-v2"]
    assert model_label("../shared/models/paraphrase-MiniLM-L3-v2") == "paraphrase-MiniLM-L3-v2"


def test_the_targets_guide_quotes_the_targets_margin():
    from sparsecse.targets.spec import Target

    text = (ROOT / "docs" / "guides" / "targets.md").read_text(encoding="utf-8")
    quoted = re.findall(r"\(`margin`, default `([\d.]+)`", text)
    assert quoted == [format(Target(speedup=2.0).margin, "g")]


def test_the_targets_guide_quotes_the_near_miss_repair_s_and_the_time_limit_s_settings():
    from sparsecse.recipes.spec import load_recipe
    from sparsecse.recipes.stage_types import TAIL_EVALUATIONS
    from sparsecse.targets.repair import REPAIR_KEEP
    from sparsecse.training.time_limit import FIT_AFTER_STEPS

    text = " ".join((ROOT / "docs" / "guides" / "targets.md").read_text(encoding="utf-8").split())
    assert f"(to {REPAIR_KEEP:g} of its own layer FLOPs" in text
    assert f"`minutes: {load_recipe('target').target.minutes:g}` in its `target` block" in text
    assert f"It times its first {FIT_AFTER_STEPS} steps and a dev evaluation after them" in text
    assert f"({TAIL_EVALUATIONS:g} of its own dev evaluations" in text


def test_the_targets_guide_quotes_the_prune_stage_s_sized_steps():
    from sparsecse.recipes.spec import load_recipe
    from sparsecse.shrinking.iterative import AUTO_STEPS, DEFAULT_STEPS, STEP_KEEPS, sized_steps

    text = " ".join((ROOT / "docs" / "guides" / "targets.md").read_text(encoding="utf-8").split())
    assert f"each step keeps at least {STEP_KEEPS:g} of the FLOPs it starts from, three at most" in text
    assert DEFAULT_STEPS == 3 and (sized_steps(0.45), sized_steps(0.72)) == (3, 1)  # the guide's two examples
    prune = next(s for s in load_recipe("target").stages if s.type == "prune")
    assert prune.steps == AUTO_STEPS and f"(`steps: {AUTO_STEPS}`)" in text
