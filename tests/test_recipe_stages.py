"""Recipe stages that wrap the real configs: one default per setting (the stage's is the config's), a training
stage with any registered objective (its ``@NAME`` arguments resolved to earlier models), an export stage run end
to end, a budget stage refused without a target and a prune stage refused when it spends a budget no earlier
stage finds; the settings a budget is spent with resolved by the run and handed to the budget stage."""

import json

import pytest
import yaml

from sparsecse.errors import SparseCSEError
from sparsecse.recipes.runner import run_recipe, stage_dir
from sparsecse.recipes.spec import load_recipe, parse_recipe
from sparsecse.recipes.stages import DistillStage, PruneStage
from sparsecse.shrinking.shrink import ShrinkConfig
from sparsecse.training.config import TrainingConfig
from tests.helpers import random_sentences
from tests.tiny import make_tiny_model_dir


def test_a_stage_default_is_its_config_default():
    assert PruneStage(name="p", keep_flops=0.5).reconstruct_sentences == ShrinkConfig().reconstruct_sentences
    assert DistillStage(name="d", teacher="t").eval_steps == TrainingConfig().eval_steps
    assert DistillStage(name="d", teacher="t").patience == TrainingConfig().patience == 0  # train to the end
    # the shipped recipes that ran with 4096 reconstruction sentences still say so
    assert load_recipe("l3-prune-0.8").stages[0].reconstruct_sentences == 4096


@pytest.mark.parametrize("data, words", [
    ({"stages": [{"type": "train", "objective": "no-such"}]}, "objective must be one of"),
    ({"stages": [{"type": "train", "objective": "distill", "objective_args": {"teacher": "@later"}}]},
     "takes a model from @later"),
    ({"stages": [{"type": "budget"}, {"type": "prune", "keep_flops": "@budget"}]}, r"has a budget stage \(budget\) but no target"),
    ({"stages": [{"type": "prune", "keep_flops": "@budget"}]}, "which is not an earlier budget stage"),
    ({"stages": [{"type": "budget"}, {"type": "prune", "keep_flops": "@budget"}], "target": {"speedup": 0}},
     "above 1"),
])
def test_bad_stages_are_refused_in_one_sentence(data, words):
    with pytest.raises(SparseCSEError, match=words) as caught:
        parse_recipe({"name": "bad", **data}, "bad.yaml")
    assert "\n" not in str(caught.value)


def test_the_run_resolves_each_budgets_spending_settings_and_the_budget_stage_reads_only_those(tmp_path):
    """The budget-to-prune hand-off has one declared road: the run resolves the spending stage's settings
    (:func:`~sparsecse.recipes.stages.budget_spending`) into ``StageContext.spending``; the budget stage's module
    names no other stage."""
    import ast
    import inspect

    from sparsecse.recipes import budget_stage
    from sparsecse.recipes.stage_types import StageContext
    from sparsecse.recipes.stages import budget_spending

    (tmp_path / "c.txt").write_text("a sentence\n")
    ctx = StageContext(corpus=tmp_path / "c.txt", work=tmp_path, data_dir=None, seed=0, models={})
    stages = parse_recipe({"name": "t", "target": {"speedup": 2}, "stages": [
        {"type": "budget"}, {"type": "prune", "keep_flops": "@budget", "lam": 0.25, "layout": "stock",
                             "reconstruct_sentences": 7}]}, "t.yaml").stages
    spent = budget_spending(stages, ctx)
    assert set(spent) == {"budget"} and spent["budget"] == stages[1].prune_settings(ctx)
    assert (spent["budget"].pruning.lam, spent["budget"].shrinking.layout) == (0.25, "stock")
    # a budget nothing spends is searched with a prune stage's defaults
    alone = budget_spending(stages[:1], ctx)["budget"]
    assert alone == PruneStage(name="prune", keep_flops="@budget").prune_settings(ctx)
    assert budget_spending(stages[1:], ctx) == {}
    imported = {node.module for node in ast.walk(ast.parse(inspect.getsource(budget_stage)))
                if isinstance(node, ast.ImportFrom)}
    assert "sparsecse.recipes.stages" not in imported
    assert "ctx.spending[self.name]" in inspect.getsource(budget_stage.BudgetStage.run)


def tiny_model_and_corpus(tmp_path):
    model = make_tiny_model_dir(tmp_path / "model", "bert", seed=3, init_range=0.2)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(random_sentences(64, seed=5)) + "\n")
    return model, corpus


def test_a_train_stage_with_simcse_then_an_export_stage_run_end_to_end(tmp_path, fake_senteval):
    model, corpus = tiny_model_and_corpus(tmp_path)
    recipe = tmp_path / "train-export.yaml"
    recipe.write_text(yaml.safe_dump({"name": "train-export", "seed": 1, "stages": [
        {"name": "simcse", "type": "train", "objective": "simcse", "objective_args": {"temperature": 0.1},
         "lr": 1e-4, "batch_size": 8, "max_steps": 3, "eval_steps": 0},
        {"name": "student", "type": "train", "objective": "distill",
         "objective_args": {"teacher": "@input", "loss": "mse"}, "lr": 1e-4, "batch_size": 8, "max_steps": 2,
         "eval_steps": 1, "patience": 1, "min_delta": 0.5},
        {"name": "onnx", "type": "export", "format": "onnx", "quantize": None},
    ], "evaluation": {"bootstrap": 0, "speed": False, "test": False}}))
    result = run_recipe(str(recipe), str(model), corpus, tmp_path / "run", data_dir=fake_senteval,
                        show_progress=False)
    assert [s["stage"] for s in result.stages] == ["simcse", "student", "onnx"]
    trained = json.loads((stage_dir(result.out, 1, "simcse") / "manifest.json").read_text())["params"]
    assert trained["objective"] == "simcse" and trained["objective_params"]["temperature"] == 0.1
    assert trained["max_steps"] == 3 and trained["lr"] == 1e-4
    distilled = json.loads((stage_dir(result.out, 2, "student") / "manifest.json").read_text())["params"]
    assert distilled["objective"] == "distill"
    assert (distilled["patience"], distilled["min_delta"], distilled["steps_run_to"]) == (1, 0.5, 2)  # the stage's
    assert str(model) in json.dumps(distilled["objective_params"])  # @input resolved to the input model
    exported = stage_dir(result.out, 3, "onnx")
    from sparsecse.serving.loading import load_encoder

    encoder = load_encoder(exported)
    assert encoder.encode(["a man is playing a guitar"]).shape == (1, 32)


def test_a_one_stage_prune_recipe_makes_the_model_compress_makes(tmp_path, fake_senteval):
    """``compress --keep-flops`` and a recipe's prune stage run one routine (prune_and_shrink): same weights."""
    import torch
    from safetensors.torch import load_file

    import sparsecse
    from sparsecse.scoring.score import ScoringConfig

    model, corpus = tiny_model_and_corpus(tmp_path)
    recipe = tmp_path / "prune.yaml"
    recipe.write_text(yaml.safe_dump({"name": "prune-only", "seed": 1, "stages": [
        {"name": "prune", "type": "prune", "keep_flops": 0.5, "steps": 2, "reconstruct_sentences": 64}],
        "evaluation": {"bootstrap": 0, "speed": False, "test": False}}))
    staged = run_recipe(str(recipe), str(model), corpus, tmp_path / "run", data_dir=fake_senteval,
                        show_progress=False)
    single = sparsecse.compress(str(model), tmp_path / "single", keep_flops=0.5, steps=2,
                                score=ScoringConfig(data_dir=fake_senteval, seed=1, show_progress=False),
                                shrink=ShrinkConfig(reconstruct=str(corpus), reconstruct_sentences=64))
    from_recipe = load_file(stage_dir(staged.out, 1, "prune") / "model.safetensors")
    from_compress = load_file(single.out / "model.safetensors")
    assert from_recipe.keys() == from_compress.keys()
    assert all(from_recipe[k].shape == from_compress[k].shape for k in from_recipe)
    assert all(torch.allclose(from_recipe[k], from_compress[k], atol=1e-6) for k in from_recipe)
    assert single.mask.heads_pruned > 0  # the budget removed something: the comparison is not of two dense models


@pytest.fixture
def copy_stage():
    """A stage type defined here alone (one class, nothing else registered or edited): it copies the model it takes
    into its directory, and the card lists it with its own note and loss."""
    import shutil
    from dataclasses import dataclass

    from sparsecse.recipes.stage_types import STAGE_TYPES, CardSection, Stage, check_text

    @dataclass(frozen=True)
    class CopyStage(Stage):
        name: str
        note: str = "as is"
        type: str = "copy"

        def check(self, where):
            check_text("note", self.note, where)
            return self

        def describe(self):
            return f"copy the model ({self.note})"

        def run(self, index, model, out, ctx):
            shutil.copytree(model, out)
            return {"copied_from": str(model)}

        def card_section(self, record, figures):
            return CardSection(self.card_line(f"from stage {record['copied_from'].rsplit('/', 1)[-1]}"),
                               losses=(f"{self.name}: none, a copy",))

    yield CopyStage
    del STAGE_TYPES["copy"]


def test_a_stage_class_defined_in_a_test_alone_runs_in_a_recipe_and_shows_on_the_card(tmp_path, fake_senteval,
                                                                                      copy_stage):
    from sparsecse.modeling.encoder import SentenceEncoder

    model, corpus = tiny_model_and_corpus(tmp_path)
    with pytest.raises(SparseCSEError, match="note must be a non-empty text"):
        parse_recipe({"name": "bad", "stages": [{"type": "copy", "note": " "}]}, "bad.yaml")
    recipe = tmp_path / "copy.yaml"
    recipe.write_text(yaml.safe_dump({"name": "copy-then-prune", "seed": 1, "stages": [
        {"name": "mirror", "type": "copy", "note": "before pruning"},
        {"name": "prune", "type": "prune", "keep_flops": 0.6, "steps": 1, "reconstruct_sentences": 32}],
        "evaluation": {"bootstrap": 0, "speed": False, "test": False}}))
    result = run_recipe(str(recipe), str(model), corpus, tmp_path / "run", data_dir=fake_senteval,
                        show_progress=False)
    mirror = stage_dir(result.out, 1, "mirror")
    assert result.stages[0]["copied_from"] == str(model) and (mirror / "model.safetensors").is_file()
    lineage = json.loads((stage_dir(result.out, 2, "prune") / "sparsecse_config.json").read_text())["lineage"]
    assert lineage["shrunk_from"] == str(mirror)  # the next stage took the copy: the new stage makes a model
    card = (result.model / "README.md").read_text()
    assert "`mirror`: copy the model (before pruning) (from stage model)" in card
    assert "mirror: none, a copy" in card
    assert SentenceEncoder.load(result.model, device="cpu").encode(["a man plays a guitar"]).shape == (1, 32)
