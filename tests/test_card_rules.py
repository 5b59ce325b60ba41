"""What a model card states about its input and its run, in sentence-transformers' layout: ``base_model`` is a hub
id when the input came from a hub name (the embedded default's included) and never a path of this machine; the
framework versions name sentence-transformers and tokenizers; ``language`` and ``license`` come over from the input
model's own card; the rebuild command names the corpus and model as the user named them, or placeholders; the input
model is never timed against itself. (The recipe-run end of these: tests/test_model_card.py.)"""

import re
import shlex
from pathlib import Path

import pytest

from sparsecse.artifacts import model_store
from sparsecse.artifacts.files import library_versions
from sparsecse.artifacts.model_names import DEFAULT_MODEL_NAME, default_model_path
from sparsecse.cards.facts import base_model_name, hub_id, input_metadata, model_facts, portable_path, read_front_matter
from sparsecse.cards.model_card import render_card
from sparsecse.recipes.card import command_line
from sparsecse.recipes.spec import load_recipe
from tests.tiny import make_tiny_model_dir

INPUT_CARD = "---\nlanguage:\n- en\n- de\nlicense: mit\ndatasets:\n- snli\n---\n\n# Input\n"


@pytest.mark.parametrize("named", [None, "default", "all-MiniLM-L6-v2", DEFAULT_MODEL_NAME])
def test_the_embedded_default_has_its_hub_id_however_it_was_named(named):
    assert hub_id(named) == DEFAULT_MODEL_NAME
    assert hub_id(default_model_path()) == DEFAULT_MODEL_NAME  # the directory the name resolves to


def test_a_hub_name_gives_the_id_sentence_transformers_loads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert hub_id("BAAI/bge-small-en-v1.5") == "BAAI/bge-small-en-v1.5"
    assert hub_id("paraphrase-MiniLM-L3-v2") == "sentence-transformers/paraphrase-MiniLM-L3-v2"
    assert hub_id("bert-base-uncased") == "bert-base-uncased"  # an original transformers model keeps its name
    stored = next(iter(model_store.KNOWN_MODELS.values()))
    assert hub_id(stored.name) == f"sentence-transformers/{stored.name}" == stored.hub_id


def test_a_local_copy_in_the_models_folder_is_named_by_its_hub_id_a_users_directory_by_a_placeholder(tmp_path,
                                                                                                     monkeypatch):
    copy = tmp_path / "models" / "paraphrase-MiniLM-L3-v2"
    copy.mkdir(parents=True)
    monkeypatch.setenv("SPARSECSE_MODELS", str(tmp_path / "models"))
    assert hub_id(str(copy)) == "sentence-transformers/paraphrase-MiniLM-L3-v2"
    mine = tmp_path / "runs" / "mine"
    mine.mkdir(parents=True)
    assert hub_id(str(mine)) is None and base_model_name(str(mine)) == "path/to/mine"
    assert hub_id("./runs/mine") is None and hub_id("/no/such/dir") is None


def test_the_framework_versions_name_sentence_transformers_and_tokenizers():
    import sentence_transformers
    import tokenizers

    versions = library_versions()
    assert versions["sentence-transformers"] == sentence_transformers.__version__
    assert versions["tokenizers"] == tokenizers.__version__
    card = render_card({"details": {}, "versions": versions})
    section = card.split("## Framework Versions\n\n")[1].split("\n\n")[0].splitlines()
    assert f"- sentence-transformers: {sentence_transformers.__version__}" in section
    assert f"- tokenizers: {tokenizers.__version__}" in section


def test_language_and_license_come_from_the_input_models_own_card(tmp_path):
    model = make_tiny_model_dir(tmp_path / "m", "bert")
    assert input_metadata(str(model)) == {}  # no card of its own
    (model / "README.md").write_text(INPUT_CARD)
    assert input_metadata(str(model)) == {"language": ["en", "de"], "license": "mit"}  # datasets stay behind
    (model / "README.md").write_text("---\nlicense: [unclosed\n---\n")
    assert input_metadata(str(model)) == {}  # front matter that does not parse carries nothing
    meta = read_front_matter(render_card({"details": {}, "language": ["en", "de"], "license": "mit",
                                          "base_model": DEFAULT_MODEL_NAME}))
    assert list(meta)[:3] == ["language", "license", "base_model"]
    assert meta["language"] == ["en", "de"] and meta["license"] == "mit"


def test_a_shrunk_models_card_takes_its_sources_hub_id_language_and_license(tmp_path):
    from sparsecse.shrinking.shrink import shrink
    from tests.helpers import make_mask

    source = make_tiny_model_dir(tmp_path / "source", "bert")
    (source / "README.md").write_text(INPUT_CARD)
    out = tmp_path / "small"
    shrink(str(source), make_mask(source, source)[0], str(out))
    facts = model_facts(out)
    assert facts["language"] == ["en", "de"] and facts["license"] == "mit"
    assert "base_model" not in facts and facts["input_name"] == "path/to/source"
    card = (out / "README.md").read_text()
    assert str(tmp_path) not in card and read_front_matter(card)["license"] == "mit"


def test_the_rebuild_command_has_no_path_of_this_machine(tmp_path):
    recipe = load_recipe("l3-prune-0.8", {"evaluation.compare_with": str(tmp_path / "teacher")})
    mine = tmp_path / "runs" / "mine"
    mine.mkdir(parents=True)
    words = shlex.split(command_line(recipe, str(mine), tmp_path / "data" / "corpus.txt", tmp_path / "out"))
    assert str(tmp_path) not in " ".join(words)
    assert words[words.index("--model") + 1] == "path/to/mine"
    assert words[words.index("--corpus") + 1] == "path/to/corpus.txt"
    assert words[words.index("--out") + 1] == "path/to/out"
    assert "evaluation.compare_with=path/to/teacher" in words
    named = shlex.split(command_line(load_recipe("frontier-2x"), None, Path("data/corpus.txt"), Path("runs/f2x")))
    assert named[named.index("--model") + 1] == DEFAULT_MODEL_NAME  # the recipe's default, by its hub id
    assert named[named.index("--corpus") + 1] == "data/corpus.txt" and named[-1] == "runs/f2x"  # as the user named them
    assert portable_path("../shared/data/train.txt") == "path/to/train.txt"


def test_the_input_model_is_never_timed_against_itself(tmp_path, monkeypatch, fake_senteval):
    """A recipe comparing with its own input (l3-prune-0.8 with paraphrase-MiniLM-L3-v2) times two models, not
    three: the input's second 1.00x says nothing; the card prints one speed-up."""
    from sparsecse.cards.sections import compression_section
    from sparsecse.recipes import final_figures as card
    from sparsecse.targets import report
    from sparsecse.targets.timing import Timing

    timed = []

    def fake_measure(reference, candidates, sentences, shape, rounds, show_progress):
        timed.append(sorted(["input", *candidates]))
        assert (shape.metric, shape.batch_size) == ("throughput", card.SPEED_BATCH)  # the target's method and shape
        return {name: Timing.of([2.0] * rounds) for name in candidates}

    monkeypatch.setattr(report, "measure", fake_measure)  # the one timing behind cards and benchmarks
    model = make_tiny_model_dir(tmp_path / "model", "bert")
    other = make_tiny_model_dir(tmp_path / "other", "bert", seed=1)
    speed = card.measure_speed(str(model), str(model), str(model), fake_senteval, False)
    assert timed == [["input", "model"]] and speed["reference_speedup"] is None
    lines = compression_section({"speed": {**speed, "reference": str(model)}}, "path/to/model")
    line = next(line for line in lines if line.startswith("- **Encode speed-up"))
    assert re.findall(r"\d+\.\d+x", line) == ["2.00x"]
    card.measure_speed(str(model), str(model), str(other), fake_senteval, False)
    assert timed[-1] == ["input", "model", "reference"]
