"""Issue 65, causes 3 to 6 and the store: a target setting meets one check whichever road it comes by
(``--X V`` or ``--set target.X=V``), refused before anything is written; numbers as users write them; the thread
count bounded by the machine; the file named by the option it was given with; ``--depth`` without a target
refused whatever its value; ``--store`` that cannot take the entry refused up front, or the model kept."""

import os

import pytest

from sparsecse.targets.spec import machine_cpus, parse_speedups, Target
from sparsecse.errors import SparseCSEError
from tests.helpers import cli
from tests.test_new_surfaces_robustness import one_sentence

TOO_MANY_THREADS = str(machine_cpus() + 1)

# every target setting: (its option, a bad value, the words both refusals share)
SETTINGS = {
    "speedup": ("--speedup", "1_5", "1_5"),
    "max_drop": ("--max-drop", "-1", "at least 0"),
    "engine": ("--engine", "torch-cuda", "CUDA GPU"),
    "batch_size": ("--batch-size", "0", "whole number of at least 1"),
    "threads": ("--threads", TOO_MANY_THREADS, f"more than this machine's {machine_cpus()} CPUs"),
    "metric": ("--metric", "p50", "Unknown speed metric"),
    "timing_sentences": ("--timing-sentences", "EMPTY", "--timing-sentences"),
    "when_busy": ("--when-busy", "later", "when_busy must be one of"),
    "depth": ("--depth", "-1", "whole number"),
}


@pytest.fixture
def no_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.mark.parametrize("road", ["option", "set"])
@pytest.mark.parametrize("key", sorted(SETTINGS))
def test_a_target_setting_meets_one_check_by_either_road(tmp_path, tiny_bert_dir, corpus, no_gpu, key, road):
    option, value, words = SETTINGS[key]
    if value == "EMPTY":
        value = tmp_path / "empty.txt"
        value.write_text("\n")
    out = tmp_path / "out"
    goal = [] if key in ("speedup", "max_drop") else ["--speedup", "2"]
    given = [option, value] if road == "option" else ["--set", f"target.{key}={value}"]
    if road == "set" and key == "max_drop":
        goal = ["--max-drop", "1", "--set", "target.speedup=null"]
    if road == "set" and key == "speedup":
        goal = ["--speedup", "2"]
    result = cli("compress", "--model", tiny_bert_dir, "--corpus", corpus, *goal, *given, "--out", out, "--quiet")
    assert result.exit_code in (1, 2), result.output  # 2: click's own refusal of a number as written
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and words in errors[0], result.output
    assert not out.exists()  # refused before the budget stage (or anything) started


@pytest.mark.parametrize("value", ["1_5", "1_000", "inf", "nan", "0x2", "1e1_0"])
def test_speedups_are_read_as_users_write_them(value):
    with pytest.raises(SparseCSEError) as caught:
        parse_speedups(value)
    assert "\n" not in str(caught.value)
    assert parse_speedups("1.5,2,3e0") == [1.5, 2.0, 3.0]


@pytest.mark.parametrize("option, value", [("--max-drop", "1_0"), ("--batch-size", "1_6"), ("--threads", "1_0"),
                                           ("--keep-flops", "0.5_0")])
def test_numeric_options_refuse_underscores(tmp_path, tiny_bert_dir, corpus, option, value):
    goal = ["--speedup", "2"] if option != "--max-drop" else []
    result = cli("compress", "--model", tiny_bert_dir, "--corpus", corpus, *goal, option, value,
                 "--out", tmp_path / "out", "--quiet")
    assert result.exit_code == 2 and "no underscores" in result.output, result.output
    assert not (tmp_path / "out").exists()


def test_a_set_value_with_underscores_is_text_not_a_number():
    from sparsecse.recipes.spec import parse_set_options

    assert parse_set_options(["target.speedup=1_5", "student.epochs=2", "x.y=1e-4"]) == {
        "target.speedup": "1_5", "student.epochs": 2, "x.y": 1e-4}
    with pytest.raises(SparseCSEError, match="above 1"):
        Target(speedup="1_5").check()


def test_threads_above_the_machines_cpus_are_refused():
    with pytest.raises(SparseCSEError, match=f"give at most {machine_cpus()}"):
        Target(speedup=2, threads=10**9).check()
    assert Target(speedup=2, threads=machine_cpus()).check().threads == machine_cpus()


@pytest.mark.parametrize("depth", ["auto", "1", "0"])
def test_depth_on_a_plain_pruning_run_is_refused_whatever_its_value(tmp_path, tiny_bert_dir, corpus, depth):
    result = cli("compress", "--model", tiny_bert_dir, "--reconstruct", corpus, "--keep-flops", "0.5", "--depth",
                 depth, "--out", tmp_path / "out", "--quiet")
    one_sentence(result, "--depth goes with a target")
    assert not (tmp_path / "out").exists()


def test_an_empty_timing_file_is_named_by_its_option(tmp_path, tiny_bert_dir, corpus):
    empty = tmp_path / "ts.txt"
    empty.write_text("")
    result = cli("compress", "--model", tiny_bert_dir, "--corpus", corpus, "--speedup", "2", "--timing-sentences",
                 empty, "--out", tmp_path / "out", "--quiet")
    line = one_sentence(result, f"--timing-sentences {empty}")
    assert "corpus" not in line


@pytest.mark.parametrize("kind", ["model", "read-only"])
def test_a_store_that_cannot_take_the_entry_is_refused_up_front(tmp_path, tiny_bert_dir, corpus, kind):
    store = tmp_path / "store"
    if kind == "model":
        import shutil

        shutil.copytree(tiny_bert_dir, store)
    else:
        store.mkdir()
        store.chmod(0o555)
        if os.access(store, os.W_OK) and os.geteuid() == 0:
            probe = store / "probe"
            try:
                probe.write_text("")
                probe.unlink()
                pytest.skip("root writes into a read-only folder here")
            except OSError:
                pass
    try:
        result = cli("compress", "--model", tiny_bert_dir, "--corpus", corpus, "--speedup", "2", "--store", store,
                     "--out", tmp_path / "out", "--quiet")
    finally:
        store.chmod(0o755)
    one_sentence(result, "--store")
    assert not (tmp_path / "out").exists()


def test_a_store_given_as_a_file_is_refused(tmp_path, tiny_bert_dir, corpus):
    store = tmp_path / "store.json"
    store.write_text("{}")
    result = cli("compress", "--model", tiny_bert_dir, "--corpus", corpus, "--speedup", "2", "--store", store,
                 "--out", tmp_path / "out", "--quiet")
    assert result.exit_code == 2 and "is a file" in result.output
    assert store.read_text() == "{}" and not (tmp_path / "out").exists()


def test_the_command_line_ends_in_one_aim_that_compress_receives_whole(tmp_path, tiny_bert_dir, corpus, monkeypatch):
    """Issue 63: --speedup and its shape are parsed once, where the command line ends; compress() gets that object,
    not a bag of keywords it renames and parses again."""
    import sparsecse.compression as compression
    from sparsecse.targets.aim import Aim

    received = {}

    def fake_compress(model, out, **run):
        received.update(run)
        raise SparseCSEError("stopped here.")

    monkeypatch.setattr(compression, "compress", fake_compress)
    timing = tmp_path / "ts.txt"
    timing.write_text("one sentence\nanother one\n")
    result = cli("compress", "--model", tiny_bert_dir, "--corpus", corpus, "--speedup", "2,1.5", "--metric",
                 "latency-p50", "--batch-size", "2", "--depth", "auto", "--timing-sentences", timing,
                 "--compare-with", tiny_bert_dir, "--out", tmp_path / "out", "--quiet")
    one_sentence(result, "stopped here")
    aim = received["target"]
    assert isinstance(aim, Aim) and aim.speedups == (1.5, 2.0) and aim.curve
    assert aim.settings == {"metric": "latency-p50", "batch_size": 2, "timing_sentences": str(timing)}
    assert aim.compare_with == str(tiny_bert_dir) and aim.teacher is None
    assert not {"speedup", "metric", "timing_batch_size", "batch_size", "depth"} & set(received)


def test_an_aim_gives_a_recipe_only_the_settings_given():
    from sparsecse.targets.aim import Aim

    one = Aim.parse(speedup=2, metric="latency-p50", teacher="t")
    assert one.overrides() == {"target.max_drop": None, "target.speedup_of": None, "target.speedup": 2.0,
                               "target.batch_size": None,
                               "target.metric": "latency-p50", "student.teacher": "t"}
    curve = Aim.parse(speedup=[3, 1.5], depth=1)
    assert "target.speedup" not in curve.overrides() and curve.overrides(3.0)["target.speedup"] == 3.0
    assert curve.target(3.0) == Target(speedup=3.0, depth=1)
    assert Aim.of(curve) is curve and Aim.of(Target(speedup=2.0, threads=1)).settings == {"threads": 1}
    assert Aim.of("1.5,2").speedups == (1.5, 2.0) and Aim.of({"max_drop": 0.5}).target() == Target(max_drop=0.5)
    with pytest.raises(SparseCSEError, match="^--threads goes with a target: add --speedup"):
        from sparsecse.targets.aim import option_name

        Aim.parse(option_name, threads=1)
    with pytest.raises(TypeError, match="a target has no setting 'speed'"):
        Aim.parse(speed=2)


@pytest.mark.parametrize("obstacle", ["folder", "link", "corrupt neighbour"])
def test_a_store_entry_that_cannot_be_written_at_the_end_keeps_the_model_and_says_why(tmp_path, tiny_bert_dir,
                                                                                     corpus, monkeypatch, obstacle):
    """The run has finished and its model is written; the entry ``OUT.MACHINE.json`` meets a folder, a link to a
    user's file, or a corrupt entry beside it. The model stays, the user's file is untouched, and the run either
    writes the entry (a link is replaced as a link, never followed) or ends in one sentence naming the model kept."""
    import json

    import sparsecse.compression as compression
    from cli.compress import store_id
    from sparsecse.recipes.runner import RecipeResult

    out = tmp_path / "run"
    model = out / "model"

    def finished(model_name, out_dir, **run):
        model.mkdir(parents=True)
        (model / "manifest.json").write_text(json.dumps({"figures": {"sts_avg": 78.1, "stsb_dev": 85.0},
                                                          "seconds": {"budget": 60.0}}))
        return RecipeResult(out=out, model=model, evaluation={"sts_avg": 78.1, "stsb_dev": 85.0})

    monkeypatch.setattr(compression, "compress", finished)
    store = tmp_path / "store"
    store.mkdir()
    entry = store / f"{store_id('run')}.json"
    users = tmp_path / "users-file.txt"
    users.write_text("mine")
    if obstacle == "folder":
        entry.mkdir()
    elif obstacle == "link":
        entry.symlink_to(users)
    else:
        (store / "other.json").write_text("{not json")
    result = cli("compress", "--model", tiny_bert_dir, "--corpus", corpus, "--speedup", "2", "--store", store,
                 "--out", out, "--quiet")
    assert (model / "manifest.json").is_file() and users.read_text() == "mine"
    if obstacle == "folder":
        line = one_sentence(result, f"The model is kept in {model}, but the --store entry was not written in {store}")
        assert entry.is_dir()
    else:
        assert result.exit_code == 0, result.output
        assert not entry.is_symlink() and json.loads(entry.read_text())["id"] == store_id("run")
        assert (store / "other.json").exists() == (obstacle == "corrupt neighbour")
