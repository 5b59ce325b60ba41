"""The whole curve in one run (``compress --speedup 1.5,2,3``): bad lists refused in one sentence with nothing
written; a tiny model through two targets writes a model per target, the curve table and plot with the input and
a ``--compare-with`` model timed in the same run, scores the input model once and lets the second target start
from the first one's probes (timing replaced by the latency model of tests/test_targets.py)."""

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from sparsecse.artifacts.model_names import model_label
from sparsecse.cli import main
from sparsecse.reporting.store import load_store
from sparsecse.recipes import budget_stage as stages_module
from sparsecse.targets.candidates import read_table
from tests.test_targets import (FIXED, TINY_STAGES, VARIABLE, fake_clock, rescored, text,  # noqa: F401
                                tiny_dir)  # (fixtures)
from tests.tiny import make_tiny_model_dir


@pytest.mark.parametrize("value, words", [
    ("2,2", "--speedup gives 2 twice"), ("1.5,abc", "--speedup 'abc' is not a number"),
    ("", "--speedup needs one speed-up or a comma-separated list"), ("1.5,,2", "comma-separated list"),
    ("1.5,0.5", "above 1"),
])
def test_bad_speedup_lists_are_refused_in_one_sentence(tmp_path, tiny_dir, text, value, words):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["compress", "--model", str(tiny_dir), "--corpus", str(text), "--out", str(out),
                                       "--speedup", value])
    assert result.exit_code != 0
    message = result.output.strip()
    assert words in message and len(message.splitlines()) == 1, message
    assert not out.exists()


def test_a_curve_writes_a_model_per_target_and_the_curve_sharing_scores_and_probes(tmp_path, tiny_dir, text,
                                                                                   fake_senteval, fake_clock,
                                                                                   monkeypatch):
    calls = []
    real_score = stages_module.score_model
    monkeypatch.setattr(stages_module, "score_model", lambda *a, **k: calls.append(a[0]) or real_score(*a, **k))
    small = make_tiny_model_dir(tmp_path / "small", "bert", layers=1, heads=4, ffn=48, seed=3, init_range=0.2)
    out = tmp_path / "curve"
    result = CliRunner().invoke(main, ["compress", "--model", str(tiny_dir), "--corpus", str(text), "--speedup",
                                       "1.4,1.2", "--compare-with", str(small), "--metric", "latency-p50",
                                       "--data-dir", str(fake_senteval), "--out", str(out), "--quiet", "--store",
                                       str(tmp_path / "store"), *TINY_STAGES])
    assert result.exit_code == 0, result.output
    assert len(calls) == 1  # the input model is scored once for both targets
    # one results-store entry per target, named after the run and the target
    entries = {ident.rsplit(".", 1)[0]: e for ident, e in load_store(tmp_path / "store").items()}  # less the CPU
    assert sorted(entries) == ["curve.curve", "curve.speedup-1.2", "curve.speedup-1.4"]
    curve_entry = entries["curve.curve"]
    for name in ("speedup-1.2", "speedup-1.4"):
        reached = json.loads((out / name / "model" / "manifest.json").read_text())["figures"]["target"]
        assert reached["met"] and reached["shape"]["metric"] == "latency-p50" and reached["shape"]["batch_size"] == 1
        # a latency metric's auto depth, half the tiny model's 2 layers, passed to every target
        assert (reached["depth"], reached["depth_default"], reached["input_layers"]) == (1, True, 2)
        budget = json.loads((out / name / "stages" / "1-budget.summary.json").read_text())
        assert budget["target"]["depth"] == 1
    first = read_table(out / "speedup-1.2" / "model" / "candidates.csv")
    second = read_table(out / "speedup-1.4" / "model" / "candidates.csv")
    # started from every speed probe of the first (its winner's included), in the order they were made; the
    # first's untimed finalists (``planned``) are not probes
    probes = [c.keep_flops for c in first if c.stage == "speed"]
    assert [c.keep_flops for c in second[:len(probes)]] == probes
    curve = pd.read_csv(out / "curve.csv")
    assert list(curve["name"]) == ["input", "speedup-1.2", "speedup-1.4", model_label(str(small))]
    assert list(curve["kind"]) == ["input", "target", "target", "compare"]
    assert set(curve["metric"]) == {"latency-p50"} and set(curve["batch_size"]) == {1}
    rows = curve.set_index("name")
    assert rows.loc["speedup-1.2", "speedup"] >= 1.2 and rows.loc["speedup-1.4", "speedup"] >= 1.4
    assert rows.loc["input", "speedup"] == 1.0 and (curve["spread"] == 0).all()
    assert rows.loc["input", "layers"] == 2 and rows.loc[model_label(str(small)), "layers"] == 1
    # the comparison model on the same latency model: half the dense layers, same widths
    assert rows.loc[model_label(str(small)), "speedup"] == pytest.approx(1 / (FIXED + VARIABLE * 0.5), abs=1e-4)
    assert curve["test"].isna().all()  # evaluation.test is false: no test column values
    assert (out / "curve.png").stat().st_size > 1000
    assert "wrote the curve" in result.output
    assert [r["name"] for r in curve_entry.figures["rows"]] == list(curve["name"])  # the store holds the curve
    assert curve_entry.provenance["batch_size"] == 1 and curve_entry.figures["metric"] == "latency-p50"
    assert curve_entry.figures["minutes"] > 0
    assert not (out / "probes").exists()  # the shared probes' copies go when the curve is done


def test_a_curves_smaller_budget_continues_the_larger_ones_pruning_steps(tmp_path, tiny_dir, text, fake_senteval,
                                                                          fake_clock, rescored):
    from sparsecse.shrinking import iterative

    out = tmp_path / "curve"
    stages = [x if x != "prune.steps=1" else "prune.steps=3" for x in TINY_STAGES]
    result = CliRunner().invoke(main, ["compress", "--model", str(tiny_dir), "--corpus", str(text), "--speedup",
                                       "1.2,1.6", "--data-dir", str(fake_senteval), "--out", str(out), "--quiet",
                                       *stages])
    assert result.exit_code == 0, result.output
    first, second = (json.loads((out / f"speedup-{x}" / "stages" / "2-prune.summary.json").read_text())
                     for x in ("1.2", "1.6"))
    assert first["layers_removed"] == second["layers_removed"] == []  # throughput: width only, one path
    assert (first["continued_from"], first["prune_steps"]) == (None, 3)
    assert second["continued_from"] == round(first["kept_flops_ratio"], 4)
    assert second["kept_flops_ratio"] < first["kept_flops_ratio"]
    steps = iterative.continued_budgets(first["kept_flops_ratio"], second["kept_flops_ratio"], 3)
    # the first target's first step reuses the budget stage's scores; every other step rescores
    assert second["prune_steps"] == len(rescored) - 2 and len(rescored) == 2 + len(steps)
    made = json.loads((out / "speedup-1.6" / "model" / "sparsecse_config.json").read_text())["manifest"]
    assert made["mask_manifest"]["iterative"]["continued_after"] == 3
    card = (out / "speedup-1.6" / "model" / "README.md").read_text()
    assert "on from where a larger budget's steps ended" in card


@pytest.mark.parametrize("depth, words", [("2", "would remove every layer of"), ("-1", "--depth must be a whole"),
                                          ("abc", "--depth must be a whole")])
def test_a_depth_the_model_cannot_lose_is_refused_before_anything_is_written(tmp_path, tiny_dir, text, depth, words):
    for speedups in ("2", "1.5,2"):  # one target, and a curve, which passes the depth to each target
        out = tmp_path / f"run{len(speedups)}"
        result = CliRunner().invoke(main, ["compress", "--model", str(tiny_dir), "--corpus", str(text), "--out",
                                           str(out), "--speedup", speedups, "--depth", depth])
        message = result.output.strip()
        assert result.exit_code != 0 and words in message and len(message.splitlines()) == 1, message
        assert not out.exists()


def test_an_existing_curve_directory_is_refused(tmp_path, tiny_dir, text):
    out = tmp_path / "curve"
    out.mkdir()
    result = CliRunner().invoke(main, ["compress", "--model", str(tiny_dir), "--corpus", str(text), "--out", str(out),
                                       "--speedup", "1.5,2"])
    assert result.exit_code != 0 and "already exists" in result.output
    assert list(out.iterdir()) == []


def test_runs_sharing_reference_results_evaluate_the_comparison_model_once(tmp_path, tiny_dir, fake_senteval,
                                                                           monkeypatch):
    """A curve's targets run inside ``shared_reference_results``: the second target reads the comparison model's
    STS results the first one computed, and gets the same paired figures as if it had computed them itself."""
    from sparsecse.recipes import final_figures as card
    from sparsecse.recipes.spec import load_recipe

    small = make_tiny_model_dir(tmp_path / "small", "bert", layers=1, heads=4, ffn=48, seed=3, init_range=0.2)
    recipe = load_recipe("target", {"evaluation.compare_with": str(small), "evaluation.tasks": ["sts"],
                                    "evaluation.bootstrap": 20})
    evaluated = []
    real = card._evaluate
    monkeypatch.setattr(card, "_evaluate", lambda model, *a, **k: evaluated.append(model) or real(model, *a, **k))
    with card.shared_reference_results(tmp_path / "shared"):
        first = card._test_figures(recipe, str(tiny_dir), tmp_path / "a", fake_senteval, False)
        second = card._test_figures(recipe, str(tiny_dir), tmp_path / "b", fake_senteval, False)
    assert evaluated == [str(tiny_dir), str(small), str(tiny_dir)]  # the comparison model once
    assert (tmp_path / "shared" / card.REFERENCE_RESULTS).is_file() and not (tmp_path / "a" / card.REFERENCE_RESULTS).exists()
    alone = card._test_figures(recipe, str(tiny_dir), tmp_path / "c", fake_senteval, False)  # outside: its own copy
    assert (tmp_path / "c" / card.REFERENCE_RESULTS).is_file()
    assert first["versus"] == second["versus"] == alone["versus"]


def test_a_curve_with_a_missed_target_ends_non_zero_naming_it(tmp_path):
    from types import SimpleNamespace

    from sparsecse.cli.compress import refuse_missed_target
    from sparsecse.errors import SparseCSEError
    from sparsecse.recipes.curve import CurveResult

    shape = {"metric": "throughput", "batch_size": 128, "threads": 2, "sentences": "dev", "engine": "torch-fp32"}

    def run(name, speedup, target):
        reached = {"met": speedup >= target, "met_speed": speedup >= target, "speedup": speedup,
                   "speedup_target": target, "shape": shape}
        return SimpleNamespace(model=tmp_path / name / "model", evaluation={"target": reached})

    curve = CurveResult(tmp_path, runs={1.5: run("speedup-1.5", 1.47, 1.5), 2.0: run("speedup-2", 2.17, 2.0)})
    with pytest.raises(SparseCSEError, match=r"speedup-1.5/model runs 1.47x, short of 1.5x at throughput") as info:
        refuse_missed_target(curve)
    assert len(str(info.value).splitlines()) == 1
    curve.runs[1.5] = run("speedup-1.5", 1.52, 1.5)
    refuse_missed_target(curve)  # every target met: nothing raised


def test_a_curve_stopped_by_an_unreachable_target_still_stores_the_targets_it_reached(tmp_path, tiny_dir, text,
                                                                                      monkeypatch):
    import sparsecse.cli.compress as compress_command
    import sparsecse.compression as compression
    from sparsecse.recipes.curve import CurveResult
    from sparsecse.targets.choice import TargetOutOfReach

    reached = CurveResult(tmp_path / "out", runs={1.5: object()})

    def unreachable(*args, **kwargs):
        error = TargetOutOfReach("The 3x target of the curve was not reached (out of reach).")
        error.curve = reached
        raise error

    stored = []
    monkeypatch.setattr(compression, "compress", unreachable)
    monkeypatch.setattr(compress_command, "store_entries", lambda store, out, result: stored.append((store, result)))
    result = CliRunner().invoke(main, ["compress", "--model", str(tiny_dir), "--corpus", str(text), "--speedup",
                                       "1.5,3", "--out", str(tmp_path / "out"), "--store", str(tmp_path / "store")])
    assert result.exit_code != 0 and "3x target of the curve was not reached" in result.output
    assert stored == [(str(tmp_path / "store"), reached)]  # the reached target's entries, before the error


@pytest.mark.parametrize("speedup, steps", [("1.1", 1), ("1.2", 2), ("1.8", 3)])
def test_steps_auto_prunes_in_as_many_steps_as_the_cut_needs(tmp_path, tiny_dir, text, fake_senteval, fake_clock,
                                                             rescored, speedup, steps):
    from sparsecse.shrinking import iterative

    out = tmp_path / "run"
    stages = [x if x != "prune.steps=1" else "prune.steps=auto" for x in TINY_STAGES]
    result = CliRunner().invoke(main, ["compress", "--model", str(tiny_dir), "--corpus", str(text), "--speedup",
                                       speedup, "--data-dir", str(fake_senteval), "--out", str(out), "--quiet",
                                       *stages])
    assert result.exit_code == 0, result.output
    pruned = json.loads((out / "stages" / "2-prune.summary.json").read_text())
    budget = json.loads((out / "stages" / "1-budget.summary.json").read_text())["keep_flops"]
    # on the fake engine's clock 1.1x keeps above 0.7 of the FLOPs (one step), 1.2x about 0.66 (two), 1.8x below 0.49
    assert pruned["prune_steps"] == iterative.sized_steps(budget) == steps, budget
    assert len(rescored) == pruned["prune_steps"] - 1  # the first step reuses the budget stage's scores
    assert "in steps sized by the cut" in (out / "model" / "README.md").read_text()
