"""Write the figures of the README, the guides, the results pages and the recipes' ``reached`` blocks from the
results store (docs/results/store): ``make figures`` (or ``python scripts/figures_docs.py``) rewrites every
generated block; ``--check`` only lists the blocks that differ from the store and the speed figures written
outside a block (what tests/test_figures_store.py asserts is empty).

A generated block sits between two marker lines, ``<!-- BEGIN figures: NAME -->`` and ``<!-- END figures: NAME -->``
in Markdown, ``# BEGIN figures: NAME`` and ``# END figures: NAME`` in a recipe's YAML. Every speed figure names its
machine (the store entry's CPU or GPU) and its shape.

A block's words live in a template, its figures in the store. NAME in ``TEMPLATED``: the template
``_figures/NAME.md`` beside the page, else ``docs/_figures/NAME.md`` (the README's blocks, and the blocks the README
shares with the results pages: one template for every page, so it holds no relative link), is filled with
``str.format`` from the values its function reads from the store. A value is a string (a figure as the docs print
it, a machine, a command, a table whose rows vary, a phrase the figures choose: met or missed); ``None`` leaves its
placeholder out (with the blank line after it when it is a paragraph of its own, else with the space before it); a
dict fills the passage of that name (the template's text after a line ``<!-- passage: NAME -->``), a list of dicts
fills it once per item, a line each. Sphinx builds no template (docs/conf.py's ``exclude_patterns``). The blocks
with no words of their own stay functions: a recipe's ``reached`` YAML, ``table.ID`` (a stored entry's table,
``stored_table``) and ``BLOCKS`` (a latency timing's table, ``latency_table``).

The renderers live beside this script, split by what they render: ``figures_format.py`` (how a figure is printed
and which stored runs a block reads), ``figures_frontier.py``, ``figures_targets.py`` and ``figures_latency.py``;
this script holds the markers, the templates' filling, the checks and the map of block names to renderers.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sparsecse.errors import SparseCSEError  # noqa: E402
from sparsecse.reporting.store import Entry, load_store  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the block renderers beside this script
from figures_frontier import (assistant_chain, deploy_engines, frontier_2x_summary, frontier_notes,  # noqa: E402
                              frontier_table, headline, mpnet_summary, reached, recipe_levers, speed_by_cpu_values,
                              stored_table)
from figures_frontier import speed_by_cpu  # noqa: E402, F401  (the table alone, for tests/test_figures_store.py)
from figures_targets import (busy_pair, corpus_size, curve_l6, headline_runs, layer_choice,  # noqa: E402
                             stock_loads, stock_vs_custom, targets_answer, targets_flops, targets_intro, targets_table)
from figures_latency import (l3speed_recipe, latency_default_runs, latency_longer, latency_longer_all,  # noqa: E402
                             latency_recipe, latency_served, latency_target, latency_teacher)

STORE = ROOT / "docs" / "results" / "store"
BEGIN = re.compile(r"^(<!-- |# )BEGIN figures: ([\w.-]+)(?: -->| \(.*\))?$")  # YAML: "# BEGIN ... (a note)"
# the documents whose every speed figure must come from the store (history pages and model cards are records)
CHECKED = ["README.md", "docs/getting-started.md", "docs/index.md", "docs/guides/*.md", "docs/results/frontier.md",
           "docs/results/minilm.md", "docs/results/mpnet.md", "docs/results/evidence.md",
           "sparsecse/recipes/shipped/*.yaml"]
# 1.94×, 2.04x, a range 3-5x; not frontier-2x, not a shape (12 × 768)
SPEED = re.compile(r"(?<![\w.=-])\d+(?:\.\d+)?(?:\s?[-–]\s?\d+(?:\.\d+)?)?[×x](?![\w-])")
# the pages a user reads to choose and run (guides, README): no measured figure of any kind outside a block
GUIDES = ["README.md", "docs/getting-started.md", "docs/index.md", "docs/guides/*.md"]
# what else a measurement looks like there: a score or size (78.54, 22.71 M), a time (18.1 min, 73 s), a ratio
TIME_UNIT = r"\s?(?:ms|s|seconds?|min|minutes?|h|hours?)(?![\w])"
MEASURED = {"score": re.compile(r"(?<![\w.\-/+−±])[1-9]\d\.\d{1,2}(?![\w.%])(?!" + TIME_UNIT + ")"),
            "time": re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:\s?[-–]\s?\d+(?:\.\d+)?)?" + TIME_UNIT),
            "ratio": re.compile(r"(?<=ratio )\d+\.\d+")}


# blocks with no words of their own: a function writes the block's Markdown
BLOCKS = {"latency-longer-all": latency_longer_all}

# blocks written from a template (see above) and the values a function reads from the store
TEMPLATED = {"targets-answer": targets_answer, "targets-intro": targets_intro, "targets-flops": targets_flops,
             "deploy-engines": deploy_engines, "stock-vs-custom": stock_vs_custom, "corpus-size": corpus_size,
             "assistant-chain": assistant_chain, "recipe-levers": recipe_levers, "frontier-table": frontier_table,
             "speed-by-cpu": speed_by_cpu_values, "frontier-2x-summary": frontier_2x_summary,
             "frontier-notes": frontier_notes,
             "mpnet-summary": mpnet_summary, "headline-runs": headline_runs, "targets-table": targets_table,
             "headline": headline, "latency-target": latency_target, "curve-l6": curve_l6, "busy-pair": busy_pair,
             "latency-longer": latency_longer, "latency-served": latency_served, "latency-teacher": latency_teacher,
             "layer-choice": layer_choice, "latency-default-runs": latency_default_runs, "stock-loads": stock_loads,
             "latency-recipe": latency_recipe, "l3speed-recipe": l3speed_recipe}
PASSAGE = re.compile(r"^<!-- passage: ([\w.-]+) -->$", re.M)


# ------------------------------------------------------------------------------------------------ the templates
def template(page: Path, name: str) -> str:
    """The template of the block ``name`` on ``page``: beside the page, else in docs/_figures.

    Raises:
        ValueError: neither exists.
    """
    docs = page.parent / "docs" if page.name == "README.md" else next(p for p in page.parents if p.name == "docs")
    for path in (page.parent / "_figures" / f"{name}.md", docs / "_figures" / f"{name}.md"):
        if path.is_file():
            return path.read_text(encoding="utf-8")
    raise ValueError(f"{page}: the block {name} has no template _figures/{name}.md beside it or in docs/_figures")


def fill(text: str, values: dict, passages: dict[str, str]) -> str:
    """``text`` with ``values`` in its placeholders: ``None`` leaves one out, a dict fills the passage of that name,
    a list of dicts fills it once per item (see the module's docstring)."""
    for key, value in values.items():
        if value is None:  # its paragraph with the blank line after it, or the space before it
            text = re.sub(rf"(?m)^\{{{key}\}}\n\n| ?\{{{key}\}}", "", text)
    filled = {key: fill(passages[key], value, passages) if isinstance(value, dict) else
              "\n".join(fill(passages[key], item, passages) for item in value) if isinstance(value, list) else value
              for key, value in values.items() if value is not None}
    return text.format(**filled)


def templated(page: Path, name: str, store: dict[str, Entry]) -> str:
    """The block ``name`` of ``page``: its template filled with the values its function reads from ``store``."""
    main, *rest = PASSAGE.split(template(page, name))
    passages = {key: text.strip("\n") for key, text in zip(rest[::2], rest[1::2])}
    return fill(main.strip("\n"), TEMPLATED[name](store), passages)


# ------------------------------------------------------------------------------------------------ the files
def documents(root: Path = ROOT) -> list[Path]:
    """Every file under ``root`` that may hold a generated block: the Markdown docs, the README and the shipped
    recipes."""
    return sorted({root / "README.md", *(root / "docs").rglob("*.md"),
                   *(root / "sparsecse" / "recipes" / "shipped").glob("*.yaml")} - set((root / "docs" / "_build").rglob("*")))


def render(path: Path, text: str, store: dict[str, Entry]) -> str:
    """``text`` with every generated block rewritten from ``store``.

    Raises:
        ValueError: a block names no known renderer, or has no END line.
    """
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        out.append(lines[i])
        m = BEGIN.match(lines[i])
        i += 1
        if not m:
            continue
        name = m.group(2)
        end = f"<!-- END figures: {name} -->" if m.group(1) == "<!-- " else f"# END figures: {name}"
        try:
            j = lines.index(end, i)
        except ValueError:
            raise ValueError(f"{path}: the block {name} has no line {end!r}") from None
        if path.suffix == ".yaml":
            if name != "reached":
                raise ValueError(f"{path}: a recipe's only generated block is 'reached', not {name}")
            body = reached(store, path.stem)
        elif name.startswith("table.") and name[6:] in store:
            body = stored_table(store[name[6:]])
        elif name in TEMPLATED:  # the block's words in a template, its values from the store
            body = templated(path, name, store)
        elif name in BLOCKS:
            body = BLOCKS[name](store)
            body = body.replace("](docs/", "](") if path.parent.name in ("guides", "results") and \
                path.name != "README.md" else body
        else:
            raise ValueError(f"{path}: no generated block is called {name}")
        out += body.split("\n") + [end]
        i = j + 1
    return "\n".join(out)


def outside_blocks(text: str) -> str:
    """``text`` without its generated blocks and code fences (commands, and a command's output shown as an
    example of its format)."""
    text = re.sub(r"(?ms)^(?:<!-- |# )BEGIN figures: ([\w.-]+).*?^(?:<!-- |# )END figures: \1(?: -->)?$", "", text)
    return re.sub(r"(?ms)^( *)(```+).*?^\1\2\s*$", "", text)


def recipe_settings(root: Path = ROOT) -> set[str]:
    """Every number a shipped recipe's stages set (``0.45``, ``3.0e-4`` as ``0.0003``): settings, not figures."""
    import yaml

    found: set[str] = set()
    for path in (root / "sparsecse" / "recipes" / "shipped").glob("*.yaml"):
        for stage in yaml.safe_load(path.read_text(encoding="utf-8")).get("stages", []):
            found |= {format(v, "g") for v in stage.values() if isinstance(v, float)}
    return found


def _first_changed_block(old: str, new: str) -> str:
    """The name of the first generated block whose lines differ between ``old`` and ``new``."""
    name = "?"
    for a, b in zip(old.split("\n"), new.split("\n")):
        m = BEGIN.match(a)
        name = m.group(2) if m else name
        if a != b:
            return name
    return name


def problems(root: Path = ROOT) -> list[str]:
    """Each generated block under ``root`` that differs from its results store (``root/docs/results/store``), and
    each speed figure of a checked document written outside a block (a figure with no entry behind it)."""
    store, found = load_store(root / STORE.relative_to(ROOT)), []
    for path in documents(root):
        text = path.read_text(encoding="utf-8")
        try:
            same = "BEGIN figures:" not in text or render(path, text, store) == text
        except (KeyError, ValueError, SparseCSEError) as error:  # a block whose entry or figure is missing
            found.append(f"{path.relative_to(root)}: {error}")
            continue
        if not same:
            found.append(f"{path.relative_to(root)}: the block {_first_changed_block(text, render(path, text, store))} "
                         "differs from the results store (run `make figures`)")
    settings = recipe_settings(root)
    readme = re.sub(r"`[^`]*`", "", outside_blocks((root / "README.md").read_text(encoding="utf-8")))
    for number in re.findall(r"(?<![\w.])\d+\.\d+", readme):
        if number not in settings:  # the README quotes no figure outside a block, only the recipes' settings
            found.append(f"README.md: the figure {number} has no entry in the results store (outside a generated "
                         "block)")
    checked = {p for pattern in CHECKED for p in root.glob(pattern)}
    guides = {p for pattern in GUIDES for p in root.glob(pattern)}
    for path in sorted(checked):
        for line in outside_blocks(path.read_text(encoding="utf-8")).split("\n"):
            kinds = {"speed figure": SPEED.findall(line)}
            if path in guides:  # a value in backticks is a setting or a command, not a measurement
                kinds |= {kind: rx.findall(re.sub(r"`[^`]*`", "", line)) for kind, rx in MEASURED.items()
                          if not (kind == "score" and path.name == "README.md")}  # the README's own check above
            for kind, figures in kinds.items():
                found += [f"{path.relative_to(root)}: the {kind} {figure!r} has no entry in the results store "
                          f"(outside a generated block): {line.strip()[:100]}" for figure in figures]
    return found


def main(argv: list[str] | None = None) -> int:
    """``--check``: list the problems and exit 1 if any; else rewrite every generated block."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; list what differs from the store")
    args = parser.parse_args(argv)
    if args.check:
        found = problems()
        print("\n".join(found) or "every figure comes from the results store")
        return 1 if found else 0
    store = load_store(STORE)
    for path in documents():
        text = path.read_text(encoding="utf-8")
        if "BEGIN figures:" in text:
            new = render(path, text, store)
            if new != text:
                path.write_text(new, encoding="utf-8")
                print(f"rewrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
