"""Each stage takes one frozen config, never its fields as loose keywords; a sweep and compress take one config per
stage, and nothing else."""

import dataclasses
import json

import pytest

import sparsecse
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.config import EvaluationConfig
from sparsecse.pruning.prune import PruningConfig
from sparsecse.scoring.score import ScoringConfig
from sparsecse.shrinking.shrink import ShrinkConfig
from sparsecse.stage_config import record
from sparsecse.sweeps import run as sweep_mod
from sparsecse.sweeps.config import RewindConfig, SweepOptions, sweep_spec
from sparsecse.training.config import TrainingConfig
from tests.helpers import evaluation, scoring


def test_configs_are_frozen_and_record_as_json():
    config = EvaluationConfig(tasks="STSBenchmark", bootstrap=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.tasks = "sts"
    assert json.loads(json.dumps(record(config)))["bootstrap"] == 10


@pytest.mark.parametrize("call", [
    lambda: sparsecse.evaluate("m", tasks="sts"),
    lambda: sparsecse.compare("a.json", "b.json", replicates=10),
    lambda: sparsecse.train("m", "c.txt", "out", max_steps=5),
    lambda: sparsecse.rewind("mask.safetensors", "c.txt", "out", lr=1e-5),
    lambda: sparsecse.shrink("m", "mask.safetensors", align_ffn=8),
    lambda: sparsecse.export("m", "out", quantize="int8"),
    lambda: sparsecse.compress("m", "out", keep_flops=0.5, lam=0.5),
    lambda: sparsecse.compress("m", "out", keep_flops=0.5, reconstruct="c.txt"),
])
def test_a_configs_field_is_not_a_keyword_of_its_stage(call):
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        call()


@pytest.mark.parametrize("call, message", [
    (lambda: sparsecse.evaluate("m", config=ScoringConfig()), "evaluate\\(\\)'s config must be an EvaluationConfig"),
    (lambda: sparsecse.compare("a.json", "b.json", config=EvaluationConfig()),
     "compare\\(\\)'s config must be a ComparisonConfig"),
    (lambda: sparsecse.train("m", "c.txt", "out", config={"max_steps": 5}),
     "train\\(\\)'s config must be a TrainingConfig, not a dict"),
    (lambda: sparsecse.rewind("m.safetensors", "c.txt", "out", config=EvaluationConfig()),
     "rewind\\(\\)'s config must be a TrainingConfig"),
    (lambda: sparsecse.shrink("m", "mask.safetensors", config=PruningConfig()),
     "shrink\\(\\)'s config must be a ShrinkConfig"),
    (lambda: sparsecse.export("m", "out", config=ShrinkConfig()), "export\\(\\)'s config must be an ExportConfig"),
    (lambda: sparsecse.compress("m", "out", keep_flops=0.5, prune=ScoringConfig()),
     "compress\\(\\)'s prune must be a PruningConfig"),
])
def test_a_stage_refuses_another_stages_config_before_any_work(call, message):
    with pytest.raises(TypeError, match=message):
        call()


def test_compress_takes_recipe_keywords_only_with_a_recipe_and_configs_only_without():
    with pytest.raises(SparseCSEError, match="speed-up target must be a finite number above 1"):
        sparsecse.compress("m", "out", target=0.5, corpus="c.txt")  # the target is checked as it arrives
    with pytest.raises(SparseCSEError, match="^batch_size goes with a target"):
        sparsecse.compress("m", "out", target={"batch_size": 8}, corpus="c.txt")
    with pytest.raises(TypeError, match="speedup is a target setting: pass target="):
        sparsecse.compress("m", "out", speedup=2.0, corpus="c.txt")
    with pytest.raises(SparseCSEError, match="No shipped recipe is called 'no-such-recipe'"):
        sparsecse.compress("m", "out", recipe="no-such-recipe", corpus="c.txt")
    with pytest.raises(TypeError, match="takes 'corpus' with a recipe or a target"):
        sparsecse.compress("m", "out", keep_flops=0.5, corpus="c.txt")
    with pytest.raises(SparseCSEError, match="shrink sets the single pruning stage"):
        sparsecse.compress("m", "out", recipe="frontier-2x", shrink=ShrinkConfig(reconstruct="c.txt"))
    with pytest.raises(SparseCSEError, match="prune configures the single pruning stage"):
        sparsecse.compress("m", "out", target=2.0, prune=PruningConfig(lam=0.25))
    with pytest.raises(SparseCSEError, match="same seq_len"):
        sparsecse.compress("m", "out", keep_flops=0.5, prune=PruningConfig(seq_len=64),
                           shrink=ShrinkConfig(reconstruct="c.txt"))


@pytest.mark.parametrize("call", [
    lambda: sparsecse.score("m", batch=8),
    lambda: sparsecse.prune("scores.safetensors", 0.1, criteria="fisher"),
    lambda: sparsecse.prune_grid("scores.safetensors", "0.1", scopes="layer"),
    lambda: sparsecse.compress("m", "out", keep_flops=0.5, lamda=0.5),
    lambda: sparsecse.evaluate(tasks="sts", task="STS12"),
    lambda: sparsecse.train("m", "c.txt", "out", learning_rate=1e-5),
    lambda: sparsecse.shrink("m", "mask.safetensors", align=8),
    lambda: sparsecse.compare("a.json", "b.json", replicate=10),
    lambda: sparsecse.sweep("m", "0.1", "0.5", "out", task="sts"),
    lambda: sparsecse.export("m", "out", quantise="int8"),
])
def test_every_stage_refuses_a_misspelt_keyword_before_any_work(call):
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        call()


def test_bad_settings_are_refused_by_the_config():
    with pytest.raises(SparseCSEError, match="Unknown STS split 'train'"):
        EvaluationConfig(sts_split="train").check()
    with pytest.raises(SparseCSEError, match="Unknown task"):
        EvaluationConfig(tasks="STS99").check()
    with pytest.raises(SparseCSEError, match="only serves --quantize int8"):
        sparsecse.ExportConfig(calibration="corpus.txt").check()
    with pytest.raises(SparseCSEError, match="Unknown export format 'tflite'"):
        sparsecse.export("m", "out", "tflite")


def test_a_sweep_takes_one_config_per_stage_and_its_options_as_one():
    spec = sweep_spec("m", "0.1", "0.5", "o", keep_flops="0.5",
                      score=ScoringConfig(data_dir="d", seed=3, split="dev", batch_size=8),
                      prune=PruningConfig(criterion="fisher"),
                      evaluate=EvaluationConfig(tasks="STSBenchmark", data_dir="d", seed=3, precision="bf16"),
                      rewind=RewindConfig(corpus="c.txt", sparsities="0.1", seeds="0,1", args={"max_steps": 5}),
                      options=SweepOptions(overwrite=True))
    assert spec.run == SweepOptions(overwrite=True) and spec.keep_flops == "0.5"
    assert (spec.score.split, spec.prune.criterion, spec.rewind.seeds) == ("dev", "fisher", "0,1")
    assert json.loads(json.dumps(spec.record()))["rewind"]["seeds"] == "0,1"
    assert sweep_spec("m").rewind is None
    for flat in (dict(tasks="sts"), dict(batch_size=8), dict(criterion="fisher"), dict(corpus="c.txt"),
                 dict(run=SweepOptions())):  # a stage's setting goes in its config
        with pytest.raises(TypeError, match="unexpected keyword argument"):
            sweep_spec("m", **flat)
    with pytest.raises(TypeError, match="takes a RewindConfig"):
        sweep_spec("m", rewind=True)
    with pytest.raises(TypeError, match="prune must be a PruningConfig, not a ScoringConfig"):
        sweep_spec("m", prune=ScoringConfig())
    with pytest.raises(TypeError, match="options must be a SweepOptions, not a dict"):
        sweep_spec("m", options={"overwrite": True})


def _fake_evaluation(model, mask, tasks, data_dir, seed, **options):
    return {"scores": {t: 50.0 + (mask.heads_pruned if mask is not None else 0) for t in tasks}}


def test_a_sweep_resumes_with_equal_configs_and_records_them(tiny_bert_dir, tiny_stsb_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_mod, "run_evaluation", _fake_evaluation)
    out = tmp_path / "sweep"
    first = sparsecse.sweep(tiny_bert_dir, "0.25", "0.5", out, keep_flops="0.7", score=scoring(tiny_stsb_dir),
                            evaluate=evaluation(tiny_stsb_dir),
                            options=SweepOptions(show_progress=False, make_report=False))
    assert sorted(first.computed) == ["budget/f0.7-l0.5", "dense", "masked/s0.25-l0.5"]
    again = sparsecse.sweep(tiny_bert_dir, "0.25", "0.5", out, keep_flops="0.7",
                            score=ScoringConfig(data_dir=tiny_stsb_dir, max_batches=2, batch_size=8),
                            prune=PruningConfig(scope="global"),
                            evaluate=EvaluationConfig(tasks="STSBenchmark", data_dir=tiny_stsb_dir, device="cpu"),
                            options=SweepOptions(show_progress=False, make_report=False))
    assert again.computed == [] and sorted(again.reused) == sorted(first.computed)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["configs"]["score"]["batch_size"] == 8
    assert manifest["configs"]["prune"] == record(PruningConfig())
    assert manifest["configs"]["evaluate"]["tasks"] == "STSBenchmark"
    assert manifest["params"]["keep_flops"] == [0.7]
    with pytest.raises(SparseCSEError, match="different model or scoring settings"):
        sparsecse.sweep(tiny_bert_dir, "0.25", "0.5", out, score=ScoringConfig(data_dir=tiny_stsb_dir, batch_size=4),
                        evaluate=EvaluationConfig(tasks="STSBenchmark", data_dir=tiny_stsb_dir),
                        options=SweepOptions(show_progress=False, make_report=False))


def test_a_sweep_refuses_a_stage_setting_it_would_not_apply():
    with pytest.raises(SparseCSEError, match="does not apply EvaluationConfig.sts_split"):
        sweep_spec("m", evaluate=EvaluationConfig(sts_split="dev"))
    with pytest.raises(SparseCSEError, match="does not apply ScoringConfig.show_progress"):
        sweep_spec("m", score=ScoringConfig(show_progress=True))
    with pytest.raises(SparseCSEError, match="does not apply PruningConfig.lam"):  # λ: the grid
        sweep_spec("m", prune=PruningConfig(lam=0.25))
    assert sweep_spec("m", evaluate=EvaluationConfig(tasks="all", precision="bf16")).evaluate.precision == "bf16"


def test_iterative_pruning_applies_every_field_of_its_pruning_config(tiny_bert_dir, tiny_stsb_dir, tmp_path):
    from sparsecse.shrinking.iterative import iterative_prune

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a short sentence\nanother one here\n" * 10)
    with pytest.raises(SparseCSEError, match="scope must be global"):  # a budget ranks units across layers
        iterative_prune(tiny_bert_dir, keep_flops=0.5, steps=1, reconstruct=corpus, prune=PruningConfig(scope="layer"),
                        device="cpu", score=ScoringConfig(data_dir=tiny_stsb_dir, batch_size=8))
