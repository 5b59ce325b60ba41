"""The newer surfaces used as a careless or hostile user would: an output over any input a command reads
(dev/test files, teachers, local mteb tasks, the model store, OUT_mteb), names from a user's file used as
paths, checks that must come before the first stage or encoding, pairs files at the edges, mteb options
that would do nothing, SIGTERM in a target's budget stage, a directory given as a recipe."""

import json
import os
import shutil
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from sparsecse.artifacts.destinations import check_destination
from sparsecse.artifacts.inputs import read_inputs
from sparsecse.artifacts.signals import Terminated
from sparsecse.targets.aim import Aim
from sparsecse.data.eval_data import load_eval_data
from sparsecse.data.pairs_files import read_pairs_file
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.eval_sets import EvalSet
from sparsecse.recipes import runner
from sparsecse.recipes.runner import RecipeResult, with_data
from sparsecse.recipes.spec import Data, load_recipe, recipe_path
from sparsecse.targets.spec import Target
from tests.helpers import cli, random_sentences
from tests.tiny import make_tiny_model_dir

SCORED = "sentence1\tsentence2\tscore\nA cat sits.\tA cat is sitting.\t4.5\nA car.\tRain falls.\t0.5\n" \
         "A dog runs.\tA dog is running.\t4\n"


def one_sentence(result, match: str) -> str:
    """The CLI ended with exit status 1 and one 'Error:' sentence containing ``match``, no traceback."""
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and match in errors[0] and "Traceback" not in result.output, result.output
    return errors[0]


@pytest.fixture
def model(tmp_path, tiny_bert_dir):
    return tiny_bert_dir


# ------------------------------------------------------------------------ 1. an output over an input
def test_a_target_run_refuses_an_out_holding_its_dev_file(tmp_path, tiny_bert_dir, corpus):
    data = tmp_path / "data"
    data.mkdir()
    (data / "dev.tsv").write_text(SCORED)
    result = cli("compress", "--model", tiny_bert_dir, "--corpus", corpus, "--speedup", "2", "--dev",
                 data / "dev.tsv", "--out", data, "--overwrite", "--quiet")
    one_sentence(result, "would overwrite the dev set it reads")
    assert (data / "dev.tsv").read_text() == SCORED


def test_a_recipe_run_refuses_an_out_holding_its_test_file_or_teacher(tmp_path, tiny_bert_dir, corpus):
    out = tmp_path / "run"
    out.mkdir()
    (out / "test.tsv").write_text(SCORED)
    result = cli("compress", "--recipe", "l3-prune-0.8", "--model", tiny_bert_dir, "--corpus", corpus,
                 "--test", out / "test.tsv", "--out", out, "--overwrite", "--quiet")
    one_sentence(result, "would overwrite the test set it reads")
    assert (out / "test.tsv").read_text() == SCORED
    teacher = tmp_path / "teacher"
    shutil.copytree(tiny_bert_dir, teacher)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"name: r\nstages:\n  - name: student\n    type: distill\n    teacher: {teacher}\n"
                      "    sentences: 8\n")
    result = cli("compress", "--recipe", recipe, "--model", tiny_bert_dir, "--corpus", corpus, "--out", teacher,
                 "--overwrite", "--quiet")
    one_sentence(result, "would overwrite the teacher it reads")
    assert (teacher / "config.json").is_file()


def test_eval_refuses_an_mteb_results_directory_over_its_model(tmp_path, tiny_bert_dir):
    pytest.importorskip("mteb")
    model = tmp_path / "m_mteb"
    shutil.copytree(tiny_bert_dir, model)
    task = write_task(tmp_path / "task", {"name": "LocalSTS", "type": "STS"}, test=sts_rows())
    result = cli("eval", "--model", model, "--mteb", task, "--out", tmp_path / "m.json", "--overwrite", "--quiet")
    one_sentence(result, "would overwrite the model it reads")
    assert (model / "config.json").is_file() and not (tmp_path / "m.json").exists()
    (tmp_path / "e_mteb").write_text("not a directory")  # an existing OUT_mteb is refused without --overwrite
    result = cli("eval", "--model", tiny_bert_dir, "--mteb", task, "--out", tmp_path / "e.json", "--quiet")
    one_sentence(result, "already exists")


def test_the_model_store_and_model_folders_are_inputs_of_every_command(tmp_path, tiny_bert_dir, monkeypatch):
    monkeypatch.setenv("SPARSECSE_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "models"
    (folder / "mine").mkdir(parents=True)
    monkeypatch.setenv("SPARSECSE_MODELS", str(folder))
    store = tmp_path / "cache" / "models"
    (store / "installed").mkdir(parents=True)
    inputs = read_inputs(model=tiny_bert_dir)
    for out, kind in ((store, "model store"), (tmp_path / "cache", "model store"), (store / "installed", "model store"),
                      (folder, "model folder"), (tmp_path, "model store")):
        with pytest.raises(SparseCSEError, match=f"would overwrite the {kind} it reads"):
            check_destination(out, True, inputs=inputs)
    check_destination(store / "new", True, inputs=inputs)  # a new model beside the installed ones
    check_destination(folder / "mine", True, inputs=inputs)  # one's own folder of models holds outputs


def test_a_recipe_out_over_an_existing_file_is_replaced_without_a_traceback(tmp_path, tiny_bert_dir, corpus,
                                                                           tiny_stsb_dir, monkeypatch):
    out = tmp_path / "out"
    out.write_text("an old file")
    monkeypatch.setattr(runner, "_run", lambda recipe, model, corpus, out, *a: RecipeResult(out, out / "model"))
    result = runner.run_recipe("l3-prune-0.8", tiny_bert_dir, corpus, out, data_dir=tiny_stsb_dir, overwrite=True,
                               show_progress=False)
    assert out.is_dir() and (out / "run.json").is_file() and result.out == out


# ------------------------------------------------------------------------ 2. names from a user's file
def write_task(directory: Path, spec: dict, **files) -> Path:
    directory.mkdir(parents=True)
    (directory / "task.json").write_text(json.dumps(spec))
    for name, rows in files.items():
        (directory / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return directory


def sts_rows(n: int = 6) -> list[dict]:
    sentences = random_sentences(2 * n, seed=5)
    return [{"sentence1": sentences[2 * i], "sentence2": sentences[2 * i + 1], "score": i % 5} for i in range(n)]


def retrieval_rows() -> dict:
    return {"corpus": [{"id": "d0", "text": "a document"}, {"id": "d1", "text": "another one"}],
            "queries": [{"id": "q0", "text": "a query"}],
            "qrels": [{"query-id": "q0", "corpus-id": "d0", "score": 1}]}


@pytest.mark.parametrize("name", ["../../../../x", "/tmp/x", "a/b", "..", "a\\b"])
def test_a_local_task_name_must_be_a_plain_file_name(tmp_path, name):
    pytest.importorskip("mteb")
    from sparsecse.evaluation.mteb_local import local_task

    task = write_task(tmp_path / "t", {"name": name, "type": "STS"}, test=sts_rows())
    with pytest.raises(SparseCSEError, match="must be a plain file name"):
        local_task(task)


# ------------------------------------------------------------------------ 3. checks that came late
@pytest.mark.parametrize("kind,change,match", [
    ("Retrieval", {"qrels": [{"query-id": "q0", "corpus-id": "d0", "score": None}]}, "score must be a whole number"),
    ("Retrieval", {"qrels": [{"query-id": "q0", "corpus-id": "d0", "score": "high"}]}, "score must be a whole"),
    ("Retrieval", {"corpus": [{"id": "d0", "text": None}]}, "text must be text"),
    ("STS", {"test": [{"sentence1": "a", "sentence2": "b", "score": "x"}]}, "score must be a finite number"),
    ("STS", {"test": [{"sentence1": "a", "sentence2": "b", "score": None}]}, "score must be a finite number"),
    ("Retrieval", {"spec": {"settings": {"k_values": "10"}}}, "k_values must be a non-empty list"),
    ("Retrieval", {"spec": {"settings": {"ignore_identical_ids": "no"}}}, "must be true or false"),
    ("Retrieval", {"spec": {"main_score": "ndcg_at_7"}}, "is not a score mteb reports"),
    ("STS", {"spec": {"main_score": "accuracy"}}, "is not a score mteb reports"),
    ("STS", {"spec": {"min_score": 5, "max_score": 5}}, "must be below"),
    ("STS", {"spec": {"min_score": 5, "max_score": 0}}, "must be below"),
    ("STS", {"spec": {"max_score": "5"}}, "must be a finite number"),
])
def test_local_task_files_are_checked_whole_before_any_encoding(tmp_path, kind, change, match):
    pytest.importorskip("mteb")
    from sparsecse.evaluation.mteb_local import local_task

    files = retrieval_rows() if kind == "Retrieval" else {"test": sts_rows()}
    spec = {"name": "T", "type": kind, **change.pop("spec", {})}
    task = write_task(tmp_path / "t", spec, **{**files, **change})
    with pytest.raises(SparseCSEError, match=match):
        local_task(task)


def test_a_dev_set_with_a_stage_that_chooses_no_checkpoint_is_refused_before_the_first_stage(tmp_path):
    dev = tmp_path / "dev.tsv"
    dev.write_text(SCORED)
    recipe = load_recipe("frontier-2x", {"student.eval_steps": 0})
    with pytest.raises(SparseCSEError, match="student has eval_steps 0"):
        with_data(recipe, Data(dev=str(dev)))
    with pytest.raises(SparseCSEError, match="student has eval_steps 0"):
        load_recipe("frontier-2x", {"student.eval_steps": 0, "data.dev": str(dev)})


def test_a_target_needs_a_recipe_with_a_budget_stage():
    with pytest.raises(SparseCSEError, match="has no budget stage"):
        load_recipe("frontier-2x", Aim.parse(speedup=2.0).overrides())
    assert load_recipe("target", Aim.parse(speedup=2.0).overrides()).target.speedup == 2.0


def test_speedup_and_max_drop_together_are_refused_up_front(tmp_path, tiny_bert_dir, corpus):
    with pytest.raises(SparseCSEError, match="not both"):
        Target(speedup=2.0, max_drop=1.0).check()
    with pytest.raises(SparseCSEError, match="not both"):
        Aim.parse(speedup=2.0, max_drop=1.0)
    assert Target(max_drop=1.0).check().max_drop == 1.0


def test_a_missed_target_with_json_exits_non_zero_after_printing_the_json(tmp_path, corpus, monkeypatch):
    import sparsecse.compression

    reached = {"met": False, "met_speed": False, "speedup": 1.5, "speedup_target": 2.0, "engine": "torch-fp32",
               "batch_size": 128, "dev_score": 80.0, "drop": 1.0, "max_drop": None}
    result = RecipeResult(tmp_path / "o", tmp_path / "o" / "model", evaluation={"target": reached})
    monkeypatch.setattr(sparsecse.compression, "compress", lambda *a, **k: result)
    run = cli("compress", "--speedup", "2", "--corpus", corpus, "--out", tmp_path / "o", "--json")
    assert run.exit_code == 1, run.output
    assert "short of 2x" in run.output and '"target"' in run.output


# ------------------------------------------------------------------------ 4. pairs files at the edges
def test_a_pairs_path_that_is_no_file_is_said_for_what_it_is(tmp_path):
    (tmp_path / "d.tsv").mkdir()
    with pytest.raises(SparseCSEError, match="is a directory"):
        read_pairs_file(tmp_path / "d.tsv")
    os.mkfifo(tmp_path / "f.tsv")
    with pytest.raises(SparseCSEError, match="is a named pipe"):
        read_pairs_file(tmp_path / "f.tsv")
    (tmp_path / "null.tsv").symlink_to("/dev/null")
    with pytest.raises(SparseCSEError, match="is a character device"):
        read_pairs_file(tmp_path / "null.tsv")
    with pytest.raises(SparseCSEError, match="does not exist"):
        read_pairs_file(tmp_path / "missing.tsv")


def test_jsonl_keys_differing_only_in_case_are_refused_as_tsv_headers_are(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"query": "a", "Query": "b", "positive": "c"}) + "\n")
    with pytest.raises(SparseCSEError, match=r"p.jsonl:1: the line names the column 'query' twice"):
        read_pairs_file(path)
    tsv = tmp_path / "p.tsv"
    tsv.write_text("query\tQuery\tpositive\na\tb\tc\n")
    with pytest.raises(SparseCSEError, match="names the column 'query' twice"):
        read_pairs_file(tsv)


@pytest.mark.parametrize("suffix", [".tsv", ".csv", ".jsonl"])
def test_one_field_limit_for_every_format(tmp_path, suffix):
    def write(name, long):
        path = tmp_path / f"{name}{suffix}"
        rows = [("A cat.", "A cat sits.", "4"), (long, "Rain.", "0.5")]
        if suffix == ".jsonl":
            path.write_text("".join(json.dumps({"sentence1": a, "sentence2": b, "score": float(c)}) + "\n"
                                    for a, b, c in rows))
        else:
            sep = "\t" if suffix == ".tsv" else ","
            path.write_text(sep.join(("sentence1", "sentence2", "score")) + "\n"
                            + "".join(sep.join(r) + "\n" for r in rows))
        return path

    assert len(read_pairs_file(write("ok", "w" * 131_072)).scored) == 2
    line = 2 if suffix == ".jsonl" else 3  # JSONL has no header row
    with pytest.raises(SparseCSEError, match=rf"{suffix}:{line}: a field holds more than 131,072 characters"):
        read_pairs_file(write("long", "w" * 131_073))


def test_a_huge_jsonl_sentence_is_refused_in_bounded_memory(tmp_path):
    path = tmp_path / "huge.jsonl"
    path.write_text(json.dumps({"sentence1": "w " * 2_500_000, "sentence2": "b", "score": 1}) + "\n"
                    + json.dumps({"sentence1": "a", "sentence2": "c", "score": 2}) + "\n")
    tracemalloc.start()
    try:
        with pytest.raises(SparseCSEError, match="more than 131,072 characters"):
            read_pairs_file(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * path.stat().st_size  # a few copies of the 5 MB file, not gigabytes


def test_identity_checks_see_sentences_as_the_evaluation_encodes_them(tmp_path):
    spaced = tmp_path / "spaced.tsv"
    spaced.write_text("query\tpositive\nA cat sits.\tA  cat sits. \n")
    with pytest.raises(SparseCSEError, match="the positive is the query itself"):
        read_pairs_file(spaced)
    path = tmp_path / "pos.tsv"
    path.write_text("query\tpositive\tcandidate\nq one\tp one\tp  one\nq two\tp two\tother\n")
    data = load_eval_data(path)
    assert data.candidates == ["p one", "p two", "other"]
    groups = {"q one": 0, "p one": 0, "q two": 1, "p two": 1, "other": 2}

    def embed(sentences):
        return np.eye(3)[[groups[" ".join(s.split())] for s in sentences]]

    result = EvalSet(data).evaluate_embed(embed, replicates=10)
    assert result["recall@1"] == 100.0 and result["candidates"] == 3


def test_too_few_pairs_for_an_interval_are_said_so(tmp_path):
    path = tmp_path / "two.tsv"
    path.write_text("sentence1\tsentence2\tscore\na b\tc d\t1\ne f\tg h\t2\n")
    rng = np.random.default_rng(0)
    vectors = {}

    def embed(sentences):
        return np.stack([vectors.setdefault(s, rng.normal(size=4)) for s in sentences])

    result = EvalSet(load_eval_data(path)).evaluate_embed(embed, replicates=200)
    assert result["ci"] is None and result["ci_note"] == "too few pairs for an interval"
    from sparsecse.cli.eval_cmd import eval_set_lines

    assert "[too few pairs for an interval]" in eval_set_lines({"dev": result})[0]


# ------------------------------------------------------------------------ 5. mteb options that did nothing
def test_two_local_tasks_with_one_name_are_refused(tmp_path):
    pytest.importorskip("mteb")
    from sparsecse.evaluation.mteb_run import resolve_mteb_tasks

    a = write_task(tmp_path / "a", {"name": "Same", "type": "STS"}, test=sts_rows())
    b = write_task(tmp_path / "b", {"name": "Same", "type": "STS"}, test=sts_rows(4))
    with pytest.raises(SparseCSEError, match="Two mteb tasks of --mteb are named 'Same'"):
        resolve_mteb_tasks(f"{a},{b}")
    assert len(resolve_mteb_tasks(f"{a},{a}")) == 1  # the same directory twice is one task


def test_an_mteb_prompt_that_matches_nothing_is_refused_listing_the_names(tmp_path, tiny_bert_dir):
    pytest.importorskip("mteb")
    task = write_task(tmp_path / "t", {"name": "LocalSTS", "type": "STS"}, test=sts_rows())
    result = cli("eval", "--model", tiny_bert_dir, "--mteb", task, "--mteb-prompt", "Retrival=find: ", "--out",
                 tmp_path / "o" / "e.json", "--quiet")
    message = one_sentence(result, "'Retrival' names no role, task type or task")
    assert "query, document, STS, LocalSTS, STS-query" in message and not (tmp_path / "o").exists()


# ------------------------------------------------------------------------ 6. signals
def test_sigterm_in_a_target_budget_stage_exits_143(tmp_path, tiny_bert_dir, corpus, tiny_stsb_dir, monkeypatch):
    def terminated(stage, *args):
        raise Terminated()

    monkeypatch.setattr(runner, "run_stage", terminated)
    result = cli("compress", "--model", tiny_bert_dir, "--corpus", corpus, "--speedup", "2", "--data-dir",
                 tiny_stsb_dir, "--out", tmp_path / "o", "--quiet")
    assert result.exit_code == 143, result.output
    assert "Terminated (SIGTERM)" in result.output


# ------------------------------------------------------------------------ 7. a directory as --recipe
def test_a_directory_given_as_a_recipe_is_called_a_directory(tmp_path):
    (tmp_path / "r.yaml").mkdir()
    with pytest.raises(SparseCSEError, match="r.yaml is a directory"):
        recipe_path(tmp_path / "r.yaml")
    result = cli("compress", "--recipe", tmp_path, "--corpus", tmp_path / "c.txt", "--out", tmp_path / "o")
    one_sentence(result, "is a directory")
