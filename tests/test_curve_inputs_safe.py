"""Issue 65, causes 1 and 2: every path a target run or a curve reads goes through the one list
(:func:`sparsecse.recipes.run_checks.run_inputs`, the CLI's ``--store``) and is checked against ``--out`` and every
``OUT/speedup-X`` before anything is removed; a curve refused for any reason removes nothing."""

import shutil
from pathlib import Path

import pytest

from sparsecse.recipes.run_checks import run_inputs
from sparsecse.recipes.spec import load_recipe, recipe_path
from tests.helpers import cli
from tests.test_new_surfaces_robustness import SCORED, one_sentence


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def data(tmp_path, tiny_bert_dir, corpus):
    """A user's folder holding one of every input a target run reads."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "dev.tsv").write_text(SCORED)
    (folder / "test.tsv").write_text(SCORED)
    (folder / "ts.txt").write_text("One sentence to time.\nAnother one.\n")
    shutil.copy(recipe_path("target"), folder / "target.yaml")
    shutil.copytree(tiny_bert_dir, folder / "teacher")
    shutil.copytree(tiny_bert_dir, folder / "model")
    shutil.copy(corpus, folder / "corpus.txt")
    (folder / "store").mkdir()
    (folder / "store" / "old.json").write_text("{}")
    return folder


# each input, given the way a user gives it, and the word the refusal names it by
INPUTS = {
    "dev": (lambda d: ["--dev", d / "dev.tsv"], "dev set"),
    "test": (lambda d: ["--test", d / "test.tsv"], "test set"),
    "timing sentences": (lambda d: ["--timing-sentences", d / "ts.txt"], "timing sentences"),
    "set timing sentences": (lambda d: ["--set", f"target.timing_sentences={d / 'ts.txt'}"], "timing sentences"),
    "recipe": (lambda d: ["--recipe", d / "target.yaml"], "recipe"),
    "teacher": (lambda d: ["--teacher", d / "teacher"], "teacher"),
    "set teacher": (lambda d: ["--set", f"student.teacher={d / 'teacher'}"], "teacher"),
    "compare with": (lambda d: ["--compare-with", d / "teacher"], "comparison model"),
    "store": (lambda d: ["--store", d / "store"], "store"),
}


def run_over(data, tiny_bert_dir, corpus, speedups, extra, out=None):
    return cli("compress", "--model", tiny_bert_dir, "--corpus", corpus, "--speedup", speedups, *extra,
               "--out", out or data, "--overwrite", "--quiet")


@pytest.mark.parametrize("speedups", ["1.1", "1.1,1.2"])
@pytest.mark.parametrize("name", sorted(INPUTS))
def test_an_out_holding_any_input_is_refused_and_nothing_is_removed(data, tiny_bert_dir, corpus, name, speedups):
    before = snapshot(data)
    given, words = INPUTS[name]
    result = run_over(data, tiny_bert_dir, corpus, speedups, given(data))
    one_sentence(result, f"would overwrite the {words}")
    assert snapshot(data) == before


@pytest.mark.parametrize("name", ["model", "corpus"])
def test_a_curve_out_holding_its_model_or_corpus_removes_nothing(data, tiny_bert_dir, corpus, name):
    before = snapshot(data)
    model, text = (data / "model", corpus) if name == "model" else (tiny_bert_dir, data / "corpus.txt")
    result = cli("compress", "--model", model, "--corpus", text, "--speedup", "1.1,1.2", "--out", data,
                 "--overwrite", "--quiet")
    one_sentence(result, f"would overwrite the {name}")
    assert snapshot(data) == before


def test_a_curves_target_folder_holding_an_input_is_refused(tmp_path, data, tiny_bert_dir, corpus):
    out = tmp_path / "curve"
    (out / "speedup-1.2").mkdir(parents=True)
    shutil.move(data / "ts.txt", out / "speedup-1.2" / "ts.txt")
    before = snapshot(out)
    result = run_over(data, tiny_bert_dir, corpus, "1.1,1.2", ["--timing-sentences", out / "speedup-1.2" / "ts.txt"],
                      out=out)
    one_sentence(result, "would overwrite the timing sentences")
    assert snapshot(out) == before


@pytest.mark.parametrize("extra, words", [
    (["--dev", "/nonexistent/dev.tsv"], "/nonexistent/dev.tsv"),
    (["--set", "target.timing_sentences=/nonexistent/ts.txt"], "/nonexistent/ts.txt"),
    (["--teacher", "/nonexistent/teacher"], "/nonexistent/teacher"),
])
def test_a_curve_refused_for_a_missing_input_keeps_the_out_it_would_overwrite(tmp_path, tiny_bert_dir, corpus,
                                                                              extra, words):
    out = tmp_path / "old"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    result = run_over(None, tiny_bert_dir, corpus, "1.1,1.2", extra, out=out)
    one_sentence(result, words)
    assert (out / "notes.txt").read_text() == "mine"


def test_the_one_list_names_every_path_a_target_run_reads(tmp_path, data, tiny_bert_dir):
    recipe = load_recipe(data / "target.yaml", {"target.speedup": 1.5, "target.timing_sentences": str(data / "ts.txt"),
                                                "student.teacher": str(data / "teacher"),
                                                "evaluation.compare_with": str(data / "model")})
    from sparsecse.recipes.runner import with_data
    from sparsecse.recipes.spec import Data

    recipe = with_data(recipe, Data(str(data / "dev.tsv"), str(data / "test.tsv")))
    listed = run_inputs(recipe, str(data / "model"), data / "corpus.txt", None)
    paths = {Path(p).resolve() for ps in listed.values() for p in ps}
    for name in ("dev.tsv", "test.tsv", "ts.txt", "target.yaml", "teacher", "model", "corpus.txt"):
        assert (data / name).resolve() in paths, name
