"""The results pages: the frontier page leads with the current frontier (its table, the figure it shows, the
command that rebuilds each recipe row), then what did not work; the rounds live on one archive page (history: out of the
table of contents, linked from the changelog), and every
figure file either page names exists; every model card kept in docs/figures/cards has its rebuild command (with no
machine path) in scripts/rebuild_cards.sh, and none times its input against itself or reads "0.0 KiB" of memory; no
doc names a path of the machine that made it."""

from __future__ import annotations

import re
from pathlib import Path


DOCS = Path(__file__).resolve().parents[1] / "docs"
RECIPES = Path(__file__).resolve().parents[1] / "sparsecse" / "recipes" / "shipped"


def _sections(text: str) -> list[str]:
    return [s.split("\n", 1)[0] for s in text.split("\n## ")[1:]]


def test_the_frontier_page_leads_with_the_current_frontier_then_how_to_rebuild_then_what_did_not_work():
    text = (DOCS / "results" / "frontier.md").read_text()
    assert _sections(text) == ["The current frontier", "How to rebuild each row", "What did not work"]
    assert "figures/frontier/engines.md" in text and "results store" in text
    assert not re.search(r"[Rr]ound \d|[Ii]ssue \d", text), "the results page is not a log of rounds"


def test_every_recipe_row_of_the_frontier_has_its_rebuild_command():
    text = (DOCS / "results" / "frontier.md").read_text()
    current = text.split("\n## ")[1]
    rebuild = text.split("\n## How to rebuild each row")[1].split("\n## ")[0]
    rows = set(re.findall(r"\| `([a-z0-9.-]+)` \|", current))
    assert rows == {"frontier-1.4x", "frontier-2x", "l3-prune-0.8", "l3-prune-0.5", "frontier-3.5x"}
    for recipe in rows | {"mpnet-2x"}:
        assert (RECIPES / f"{recipe}.yaml").is_file(), recipe
        assert f"sparsecse compress --recipe {recipe} --corpus" in rebuild, recipe


def test_the_archive_is_history_out_of_the_table_of_contents_and_linked_from_the_changelog():
    assert "results/archive" not in (DOCS / "index.md").read_text()
    assert (DOCS / "results" / "archive.md").read_text().startswith("---\norphan: true\n---\n")
    assert "(results/archive.md)" in (DOCS / "changelog.md").read_text()


def test_the_archive_holds_the_rounds_and_every_named_figure_exists():
    archive = (DOCS / "results" / "archive.md").read_text()
    assert archive.index("## Round 8") < archive.index("## Round 7") < archive.index("## Round 6") \
        < archive.index("## Round 5") < archive.index("## Round 4")
    for page in ("frontier.md", "archive.md"):
        text = (DOCS / "results" / page).read_text()
        for figure in re.findall(r"\.\./figures/(frontier/[\w./-]+\.(?:md|png))", text):
            assert (DOCS / "figures" / figure).is_file(), (page, figure)
    shown = (DOCS / "results" / "frontier.md").read_text() + (DOCS / "results" / "mpnet.md").read_text() \
        + (DOCS.parent / "README.md").read_text()
    for path in (DOCS / "figures" / "frontier").iterdir():
        if path.is_file() and path.suffix in (".md", ".png"):
            assert f"frontier/{path.name}" in shown, f"{path.name}: a figure the current docs do not show belongs in archive/"


CARDS = DOCS / "figures" / "cards"
REBUILD = DOCS.parent / "scripts" / "rebuild_cards.sh"


def _card_faults(text: str) -> list[str]:
    """A kept card's figures that today's code no longer writes: the input model timed against itself (a second
    speed-up, about 1.00x, of the model the line compares with) and a peak memory read as the parent process's
    ("0.0 KiB above the runtime")."""
    faults = []
    for line in text.splitlines():
        over = re.match(r"- \*\*Encode speed-up over `([^`]+)`:\*\* [\d.]+x(.*)", line)
        if over:
            base = over.group(1).rsplit("/", 1)[-1]
            faults += [f"{name} timed against itself: {x}x" for name, x in re.findall(r"`([^`]+)`: ([\d.]+)x", over.group(2))
                       if name.rsplit("/", 1)[-1] == base]
        if "0.0 KiB" in line:
            faults.append(line[:80])
    return faults


def test_the_card_check_finds_a_self_comparison_and_a_parents_memory():
    stale = ("- **Encode speed-up over `paraphrase-MiniLM-L3-v2`:** 1.17x; `paraphrase-MiniLM-L3-v2`: 1.01x (torch fp32)\n"
             "- **Peak memory while encoding:** 3543.4 MiB, 0.0 KiB above the Python and torch runtime\n")
    assert len(_card_faults(stale)) == 2
    fine = ("- **Encode speed-up over `sentence-transformers/all-MiniLM-L6-v2`:** 1.84x; `paraphrase-MiniLM-L3-v2`: "
            "1.89x (throughput at batch 128, torch fp32, 2 threads)\n- **Peak memory while encoding:** 552.2 MiB, "
            "152.5 MiB above the Python and torch runtime\n")
    assert _card_faults(fine) == []


def test_no_kept_card_times_its_input_against_itself_or_reads_the_parents_memory():
    faults = {card.name: _card_faults(card.read_text()) for card in sorted(CARDS.glob("*.md"))}
    assert {name: found for name, found in faults.items() if found} == {}


def _one_figure_per_shape(text: str) -> list[str]:
    """A target card's speed figures stated twice for its own shape: a throughput line beside the serving table, or
    a target figure other than the table's judged row."""
    judged = re.search(r"^\| \d+ \| \d+ \| ([\d.]+)x ±\d+% \|.*\*\*judged by\*\*", text, re.M)
    if not judged:
        return []
    faults = [line[:80] for line in text.splitlines() if line.startswith("- **Encode speed-up over")]
    measured = re.search(r"^- \*\*Measured speed-up:\*\* ([\d.]+)x", text, re.M)
    if measured and measured.group(1) != judged.group(1):
        faults.append(f"the target's {measured.group(1)}x beside the judged row's {judged.group(1)}x")
    return faults


def test_the_shape_check_finds_a_second_figure_for_the_judged_shape():
    table = "| 2 | 128 | 2.10x ±1% | 78.6 / 189.1 ms | 151.3 / 424.0 ms | **judged by** (throughput) |\n"
    stale = "- **Encode speed-up over `m`:** 2.11x (throughput at batch 128)\n- **Measured speed-up:** 2.17x ±3%\n"
    assert len(_one_figure_per_shape(stale + table)) == 2
    assert _one_figure_per_shape("- **Measured speed-up:** 2.10x ±1% (torch-fp32)\n" + table) == []


def test_a_kept_target_card_has_one_figure_for_its_judged_shape():
    faults = {card.name: _one_figure_per_shape(card.read_text()) for card in sorted(CARDS.glob("*.md"))}
    assert {name: found for name, found in faults.items() if found} == {}


def test_every_kept_card_has_its_rebuild_command_with_no_machine_path():
    script = REBUILD.read_text()
    for card in sorted(CARDS.glob("*.md")):
        assert f"[{card.stem}]=" in script, card.name
    commands = re.findall(r"\[[\w.-]+\]=\"([^\"]+)\"", script)
    assert len(commands) == len(list(CARDS.glob("*.md")))
    for command in commands:
        model = command.split("--model ")[1].split()[0]
        assert model.count("/") == 1 and not model.startswith((".", "/", "~")), command  # a hub id
        assert "../" not in command and "/work" not in command and "/home" not in command, command


MACHINE_PATH = re.compile(r"(?:^|[\s\"'`(=])(/(?:work|tmp|root|home|Users)/[^\s\"'`),]*)")


def test_the_docs_name_no_path_of_the_machine_that_made_them():
    """Cards, summaries and figure files record how a result was made: commands and files as the user named
    them (a corpus, ``runs/...``), never the absolute paths of the machine that ran them."""
    root = DOCS.parent
    found = {}
    for path in [root / "README.md", *(p for p in DOCS.rglob("*") if p.suffix in {".md", ".json", ".csv", ".yaml"}
                                        and "_build" not in p.parts)]:
        hits = MACHINE_PATH.findall(path.read_text(encoding="utf-8", errors="replace"))
        if hits:
            found[str(path.relative_to(root))] = hits[:3]
    assert found == {}
    assert MACHINE_PATH.findall('"model": "/work/wt55d/.venv/x/model", corpus `/tmp/dd/wiki.txt`') == [
        "/work/wt55d/.venv/x/model", "/tmp/dd/wiki.txt"]
