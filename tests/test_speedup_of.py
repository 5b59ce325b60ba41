"""A target of another model's speed-up (``--speedup-of MODEL``, :mod:`sparsecse.targets.relative`): refused beside
another goal, measured once when the run starts (and read back on a resume), refused when the named model is not
faster, and judged at the end against the named model timed in the same session as the final model."""

import json

import pytest
from click.testing import CliRunner

from sparsecse.errors import SparseCSEError
from sparsecse.evaluation import speed
from sparsecse.targets import relative
from sparsecse.targets.aim import Aim, option_name
from sparsecse.targets.spec import Target
from sparsecse.targets.timing import Timing
from tests.test_targets import TINY_STAGES, FakeClock, text  # noqa: F401  (text: a fixture, the tiny corpus)
from tests.tiny import make_tiny_model_dir

L3 = "paraphrase-MiniLM-L3-v2"


def test_another_model_s_speed_up_is_a_goal_of_its_own():
    from sparsecse.recipes.spec import load_recipe

    with pytest.raises(SparseCSEError, match="--speedup-of.*or a largest dev drop"):
        Target(speedup_of=L3, max_drop=0.5).check()
    with pytest.raises(SparseCSEError, match="gives a speed-up .2. and another model's .speedup_of: .*give one"):
        load_recipe("target", {"target.speedup_of": L3})  # the target recipe's own 2.0 stays
    assert load_recipe("target", {"target.speedup_of": L3, "target.speedup": None}).target.speedup_of == L3
    with pytest.raises(SparseCSEError, match="names a model"):
        Target(speedup_of="  ").check()
    with pytest.raises(SparseCSEError, match="Unknown speed metric"):  # the rest is checked as a speed-up target's
        Target(speedup_of=L3, metric="fast").check()
    target = Target(speedup_of=L3, metric="latency-p50").check()
    assert target.resolved_depth(6) == 3 and target.aim is None  # depth as a speed-up's; no aim until it is measured
    assert target.describe().startswith(f"{L3}'s speed-up on torch-fp32 (latency-p50, batch 1")


def test_the_command_line_takes_one_speed_goal_and_clears_the_other_one_on_the_recipe():
    with pytest.raises(SparseCSEError, match="Give --speedup or --speedup-of"):
        Aim.parse(option_name, speedup="2", speedup_of=L3)
    aim = Aim.parse(option_name, speedup_of=L3, metric="latency-p50")
    assert aim.given and not aim.curve and aim.target().speedup_of == L3
    assert aim.overrides()["target.speedup"] is None and aim.overrides()["target.speedup_of"] == L3
    assert Aim.parse(speedup="2").overrides()["target.speedup_of"] is None  # a recipe's speedup_of gives way
    with pytest.raises(SparseCSEError, match="goes with a target: add --speedup .e.g. 2.0., --speedup-of"):
        Aim.parse(option_name, metric="latency-p50")


class Dev:
    sentences = ["a sentence"]


def fake_timing(speedup: float, calls: list):
    def timed(target, input_model, models, dev, work, calibration=None, seed=0):
        calls.append(models)
        timing = Timing.of([speedup * f for f in (0.98, 1.0, 1.02, 0.99, 1.01)])
        return {relative.NAMED: timing}, None, None, Target(speedup=2.0).shape(2), 7
    return timed


def test_the_named_model_is_timed_once_and_a_resumed_run_aims_where_the_first_attempt_did(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(relative, "timed_side_by_side", fake_timing(1.73, calls))
    target = Target(speedup_of=L3, metric="latency-p50").check()
    resolved, facts = relative.resolve(target, "all-MiniLM-L6-v2", Dev(), tmp_path)
    assert resolved.speedup == pytest.approx(1.73) and resolved.aim == pytest.approx(1.73 * 1.05)
    assert resolved.speedup_of == L3 and facts["model"] == L3 and facts["interval"]["low"] <= 1.73
    assert calls == [{relative.NAMED: L3}]
    monkeypatch.setattr(relative, "timed_side_by_side", fake_timing(1.9, calls))  # a resume times nothing again
    again, _ = relative.resolve(target, "all-MiniLM-L6-v2", Dev(), tmp_path)
    assert again.speedup == pytest.approx(1.73) and len(calls) == 1
    other, _ = relative.resolve(Target(speedup_of="another-model").check(), "all-MiniLM-L6-v2", Dev(), tmp_path)
    assert other.speedup == pytest.approx(1.9) and len(calls) == 2  # the file holds another model's figure
    assert relative.resolve(Target(speedup=2.0), "m", Dev(), tmp_path)[0] == Target(speedup=2.0)


def test_a_named_model_no_faster_than_the_input_is_refused_in_one_sentence(tmp_path, monkeypatch):
    monkeypatch.setattr(relative, "timed_side_by_side", fake_timing(0.95, []))
    with pytest.raises(SparseCSEError, match=r"is not faster than .* \(0.95x, served alone\).*give --speedup"):
        relative.resolve(Target(speedup_of=L3).check(), "all-MiniLM-L6-v2", Dev(), tmp_path)
    assert not (tmp_path / relative.RESOLVED).exists()


def test_a_run_aims_at_the_named_model_and_is_judged_beside_it(tmp_path, text, fake_senteval,  # noqa: F811
                                                                monkeypatch):
    from sparsecse.cli import main

    wide = make_tiny_model_dir(tmp_path / "wide", "bert", layers=2, heads=4, ffn=512, seed=2, init_range=0.2)
    small = make_tiny_model_dir(tmp_path / "small", "bert", layers=2, heads=4, ffn=96, seed=3, init_range=0.2)
    monkeypatch.setattr(speed, "clock", FakeClock())
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["compress", "--model", str(wide), "--corpus", str(text), "--speedup-of",
                                       str(small), "--data-dir", str(fake_senteval), "--out", str(out), "--quiet",
                                       *TINY_STAGES])
    assert result.exit_code == 0, result.output
    start = json.loads((out / relative.RESOLVED).read_text())
    times = [json.loads(line)["stage"] for line in (out / "times.jsonl").read_text().splitlines()]
    assert times[0] == "speedup_of" and times.count("speedup_of") == 1  # its minutes are on the card
    reached = json.loads((out / "model" / "manifest.json").read_text())["figures"]["target"]
    named = reached["speedup_of"]
    assert start["model"] == named["model"] == str(small) and named["aimed"] == start["speedup"] > 1
    assert reached["speedup_target"] == named["speedup"]  # judged against the figure of the same session
    assert reached["met"] and reached["speedup"] >= named["speedup"]
    card = (out / "model" / "README.md").read_text()
    asked = f"Asked for {small}'s speed-up ({named['speedup']:.2f}x in the same timing; {start['speedup']:.2f}x when"
    assert asked in card
