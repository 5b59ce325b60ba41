"""A target run times its pruned model before the student (the speed depends on the shapes, which training keeps),
once; a student that changes the shapes is timed again; a time limit reaches the last training stage."""

import json

from click.testing import CliRunner

from sparsecse.cli import main
from sparsecse.recipes import runner
from sparsecse.targets.report import timed_shapes_hold
from tests.test_targets import TINY_STAGES, fake_clock, text, tiny_dir  # noqa: F401  (fixtures)


def run(tmp_path, tiny_dir, text, fake_senteval, *extra):
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["compress", "--model", str(tiny_dir), "--corpus", str(text), "--speedup", "1.3",
                                       "--data-dir", str(fake_senteval), "--out", str(out), "--quiet", *TINY_STAGES,
                                       *extra])
    return out, result


def test_the_target_is_timed_once_on_the_pruned_model_and_its_figure_is_the_final_model_s(
        tmp_path, tiny_dir, text, fake_senteval, fake_clock, monkeypatch):
    from sparsecse.targets import report

    measured, calls = runner.measure_speed, []
    monkeypatch.setattr(runner, "measure_speed", lambda *a, **k: calls.append(a[2]) or measured(*a, **k))

    def no_second_aa(*args, **kwargs):
        raise AssertionError("the budget stage's A/A timing sizes the target's own timing")

    monkeypatch.setattr(report, "rounds_at", no_second_aa)
    out, result = run(tmp_path, tiny_dir, text, fake_senteval)
    assert result.exit_code == 0, result.output
    pruned = out / "stages" / "2-prune"
    assert calls == [str(pruned)]  # once, before the student
    searched = json.loads((out / "stages" / "1-budget.summary.json").read_text())["target"]
    timed = json.loads((out / "eval" / runner.TIMED).read_text())
    reached = json.loads((out / "model" / "manifest.json").read_text())["figures"]["target"]
    assert timed["model"] == str(pruned) and reached["timed_model"] == str(pruned)
    assert reached["speedup"] == timed["figures"]["speedup"] and reached["interval"] == timed["figures"]["interval"]
    assert reached["aa"] == searched["aa"] and reached["rounds"] == searched["rounds"]
    assert timed_shapes_hold(str(pruned), str(out / "model"))  # the student changed weights only
    assert not timed_shapes_hold(str(tiny_dir), str(out / "model"))
    assert reached["dev_score"] != timed["figures"].get("dev_score")  # judged on the student's dev score
    # the card's minutes hold the timing: evaluation covers it with the final evaluation
    times = [json.loads(line) for line in (out / runner.TIMES).read_text().splitlines()]
    assert [t["stage"] for t in times] == ["budget", "prune", "evaluation", "student", "evaluation"]


def test_a_student_that_changes_the_shapes_is_timed_again_on_its_own_weights(tmp_path, tiny_dir, text,
                                                                             fake_senteval, fake_clock, monkeypatch):
    measured, calls = runner.measure_target, []
    monkeypatch.setattr(runner, "timed_shapes_hold", lambda timed, model: False)
    monkeypatch.setattr(runner, "measure_target", lambda *a, **k: calls.append(a[2]) or measured(*a, **k))
    out, result = run(tmp_path, tiny_dir, text, fake_senteval)
    assert result.exit_code == 0, result.output
    assert calls == [str(out / "stages" / "3-student")]
    reached = json.loads((out / "model" / "manifest.json").read_text())["figures"]["target"]
    assert reached["timed_model"] == str(out / "stages" / "3-student")


def test_a_time_limit_ends_the_student_in_time_and_none_lifts_the_recipe_s(tmp_path, tiny_dir, text, fake_senteval,
                                                                           fake_clock):
    out, result = run(tmp_path, tiny_dir, text, fake_senteval, "--minutes", "0.001")
    assert result.exit_code == 0, result.output
    student = json.loads((out / "stages" / "3-student.summary.json").read_text())
    # the limit is spent before the student starts: it trains to its first evaluation, which times it, and ends
    assert student["time_limited"] and student["fitted_steps"] == 2 and student["steps_run_to"] == 2
    reached = json.loads((out / "model" / "manifest.json").read_text())["figures"]["target"]
    assert reached["time_limit"] == {"minutes": 0.001, "time_limited": True, "fitted_steps": 2, "steps_run_to": 2,
                                     "best_step": 2}
    card = (out / "model" / "README.md").read_text(encoding="utf-8")
    assert "- **Time limit:** 0.001 minutes: the student's schedule was fitted to 2 steps" in card
    assert "- **Timed on:** `stages/2-prune`, before the training that followed it (training keeps its shapes)" in card
    lifted, result = run(tmp_path / "lifted", tiny_dir, text, fake_senteval, "--minutes", "none")
    assert result.exit_code == 0, result.output
    assert "time_limited" not in json.loads((lifted / "stages" / "3-student.summary.json").read_text())
    default, result = run(tmp_path / "default", tiny_dir, text, fake_senteval)
    assert result.exit_code == 0, result.output
    student = json.loads((default / "stages" / "3-student.summary.json").read_text())
    assert student["time_limited"] is False and student["steps_run_to"] == 4  # the recipe's 20 minutes: room to spare
    card = (default / "model" / "README.md").read_text(encoding="utf-8")
    assert "- **Time limit:** 20 minutes, not reached by the student" in card


def test_a_bad_time_limit_is_refused_in_one_sentence(tmp_path, tiny_dir, text, fake_senteval):
    for value in ("0", "-3", "soon", "nan"):
        out, result = run(tmp_path / value, tiny_dir, text, fake_senteval, "--minutes", value)
        assert result.exit_code != 0 and not out.exists()
        assert result.output.strip().splitlines()[-1] == (
            f"Error: --minutes must be a number of minutes above 0 (or none: no limit); got {value!r}."), result.output
    result = CliRunner().invoke(main, ["compress", "--model", str(tiny_dir), "--minutes", "5", "--keep-flops", "0.5",
                                       "--out", str(tmp_path / "plain")])
    assert result.exit_code != 0 and "--minutes goes with a target" in result.output
