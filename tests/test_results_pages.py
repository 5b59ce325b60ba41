"""The results pages: the frontier page leads with the current frontier (its table, the figure it shows, the
command that rebuilds each recipe row), then what did not work; the rounds live on one archive page (history: out of the
table of contents, linked from the changelog), and every
figure file either page names exists."""

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
