"""No drift: the README and the documentation only show commands and options that exist."""

from pathlib import Path

from sparsecse.cli import main
from tests.docs_commands import command_lines, problems

ROOT = Path(__file__).resolve().parents[1]
README_LIMIT = 12 * 1024


def documented_files() -> list[Path]:
    docs = [p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts and "generated" not in p.parts]
    return [ROOT / "README.md", *sorted(docs)]


def test_every_documented_command_parses():
    assert problems(documented_files(), main) == []


def test_the_checker_catches_a_bad_option_and_an_unknown_command(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Text with `sparsecse prune --sparsity 0.02 --lambda 0.5`.\n\n```bash\n"
                    "sparsecse prune --scores s.safetensors --sparsty 0.02 \\\n    --out m.safetensors\n"
                    "sparsecse frobnicate --model x\n"
                    "sparsecse models install all-mpnet-base-v2\n"
                    "# sparsecse prune --no-such-option (a comment)\n```\n")
    assert [n for n, _ in command_lines(page)] == [1, 4, 6, 7]
    found = problems([page], main)
    assert len(found) == 2
    assert "has no option --sparsty" in found[0] and ":4:" in found[0]
    assert "unknown command 'sparsecse frobnicate'" in found[1]


def test_readme_is_short():
    assert (ROOT / "README.md").stat().st_size <= README_LIMIT
