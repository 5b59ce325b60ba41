"""A time-limited training run: the steps that fit (exact counts against a brute force), and the loop on a fake
clock ending its schedule where the deadline puts it, refitting when the machine slows down."""

import json
import random

import pytest

from sparsecse.training import time_limit
from sparsecse.training.api import train
from sparsecse.training.loop import Trainer
from sparsecse.training.time_limit import evaluations_between, steps_that_fit
from tests.helpers import quick


TRAIN_STEP = Trainer._train_step


def brute_force_fit(step, max_steps, eval_steps, step_seconds, eval_seconds, seconds_left):
    best = step
    for n in range(step, max_steps + 1):
        evals = sum(1 for k in range(step + 1, n + 1) if (eval_steps and k % eval_steps == 0)) + (
            1 if eval_steps and n > step and n % eval_steps else 0)
        if (n - step) * step_seconds + evals * eval_seconds <= seconds_left:
            best = n
    return best


def test_the_steps_that_fit_are_the_brute_force_s():
    rng = random.Random(0)
    for _ in range(400):
        step, max_steps = rng.randrange(0, 60), rng.randrange(0, 200)
        args = (step, max_steps, rng.choice([0, 1, 7, 25]), rng.uniform(0.1, 3), rng.uniform(0, 20),
                rng.uniform(-10, 300))
        assert steps_that_fit(*args) == brute_force_fit(*args), args
    assert evaluations_between(0, 1000, 250) == 4 and evaluations_between(0, 999, 250) == 4
    assert evaluations_between(3, 9, 0) == 0 and steps_that_fit(5, 3, 2, 1.0, 1.0, 100) == 5  # never below its step


class ScriptedMachine:
    """A fake wall clock: a training step takes ``step_seconds`` (``slower`` from step ``slow_from`` on), an
    evaluation ``eval_seconds``; the dev scores rise by one a step, so the last evaluation is the best."""

    def __init__(self, step_seconds, eval_seconds, slow_from=None, slower=None):
        self.now, self.step_seconds, self.eval_seconds = 1000.0, step_seconds, eval_seconds
        self.slow_from, self.slower, self.steps = slow_from, slower, 0

    def clock(self):
        return self.now

    def install(self, monkeypatch):
        from sparsecse.training import api

        monkeypatch.setattr(time_limit, "clock", self.clock)
        step_of, machine = TRAIN_STEP, self

        def train_step(trainer):
            machine.steps += 1
            slow = machine.slow_from is not None and machine.steps > machine.slow_from
            machine.now += machine.slower if slow else machine.step_seconds
            return step_of(trainer)

        class Dev:
            def score(self, encoder):
                machine.now += machine.eval_seconds
                return float(machine.steps)

            def describe(self):
                return {"name": "scripted", "metric": "spearman"}

        monkeypatch.setattr(Trainer, "_train_step", train_step)
        monkeypatch.setattr(api, "checked_dev_set", lambda config: Dev())


def lrs(out):
    lines = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    return {r["step"]: r["lr"] for r in lines if "lr" in r}


def test_a_deadline_fits_the_schedule_to_the_steps_it_leaves(tiny_bert_dir, corpus, tmp_path, monkeypatch):
    machine = ScriptedMachine(step_seconds=2.0, eval_seconds=10.0)
    machine.install(monkeypatch)
    # 200 s: 10 steps timed (20 s) and an evaluation (10 s), then 140 s less 3 evaluations' tail are left:
    # 50 more steps and 3 evaluations (steps 20, 40, 60) take 130 s; a 51st step would need a 4th evaluation
    result = train(tiny_bert_dir, corpus, tmp_path / "out", **quick(
        max_steps=100, eval_steps=20, lr=1e-3, deadline=machine.now + 200, tail_evaluations=3))
    assert [h["step"] for h in result.history] == [10, 20, 40, 60]
    assert result.best_step == 60
    params = json.loads((tmp_path / "out" / "manifest.json").read_text())["params"]
    assert params["time_limited"] is True and params["fitted_steps"] == 60 and params["steps_run_to"] == 60
    rates = lrs(tmp_path / "out")
    assert max(rates) == 60 and rates[60] == pytest.approx(1e-3 * (1 - 59 / 60))  # the decay ends at step 60
    assert machine.now - 1000 <= 200 - 3 * 10  # the tail still fits


def test_a_machine_that_slows_down_ends_sooner_and_a_far_deadline_changes_nothing(tiny_bert_dir, corpus, tmp_path,
                                                                                monkeypatch):
    machine = ScriptedMachine(step_seconds=2.0, eval_seconds=10.0, slow_from=20, slower=6.0)
    machine.install(monkeypatch)
    result = train(tiny_bert_dir, corpus, tmp_path / "slow", **quick(
        max_steps=100, eval_steps=20, deadline=machine.now + 200, tail_evaluations=3))
    # at step 20 (60 s in): 60 still fits; at step 40 (190 s in, after 20 steps of 6 s) the steps average 4 s and
    # 200 - 190 - 3 x 10 < 0 leaves none: it ends at 40, evaluated there
    assert [h["step"] for h in result.history] == [10, 20, 40]
    params = json.loads((tmp_path / "slow" / "manifest.json").read_text())["params"]
    assert params["fitted_steps"] == 40 and params["steps_run_to"] == 40

    far = ScriptedMachine(step_seconds=2.0, eval_seconds=10.0)
    far.install(monkeypatch)
    result = train(tiny_bert_dir, corpus, tmp_path / "far", **quick(
        max_steps=30, eval_steps=10, deadline=far.now + 10_000, tail_evaluations=3))
    assert [h["step"] for h in result.history] == [10, 20, 30]
    params = json.loads((tmp_path / "far" / "manifest.json").read_text())["params"]
    assert params["time_limited"] is False and "fitted_steps" not in params
    assert lrs(tmp_path / "far")[30] == pytest.approx(1e-3 * (1 - 29 / 30))


def test_without_a_deadline_nothing_is_timed_and_no_evaluation_is_added(tiny_bert_dir, corpus, tmp_path,
                                                                         monkeypatch):
    machine = ScriptedMachine(step_seconds=2.0, eval_seconds=10.0)
    machine.install(monkeypatch)
    result = train(tiny_bert_dir, corpus, tmp_path / "out", **quick(max_steps=6, eval_steps=3))
    assert [h["step"] for h in result.history] == [3, 6]
    assert "time_limited" not in json.loads((tmp_path / "out" / "manifest.json").read_text())["params"]


def test_past_its_deadline_a_run_trains_the_steps_it_times_and_ends_evaluated(tiny_bert_dir, corpus,
                                                                                    tmp_path, monkeypatch):
    machine = ScriptedMachine(step_seconds=2.0, eval_seconds=10.0)
    machine.install(monkeypatch)
    result = train(tiny_bert_dir, corpus, tmp_path / "out", **quick(
        max_steps=100, eval_steps=50, deadline=machine.now - 1, tail_evaluations=3))
    # the first FIT_AFTER_STEPS steps and an evaluation time the machine; then nothing fits: it ends there
    assert [h["step"] for h in result.history] == [time_limit.FIT_AFTER_STEPS]
    assert result.best_step == time_limit.FIT_AFTER_STEPS
