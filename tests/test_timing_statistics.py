"""The statistics behind a target's speed figure (sparsecse.targets.statistics, choice, alone, repair), on a fake
clock of known noise instead of a real one: the A/A timing contains 1.00x, the rounds follow the noise, a machine
too noisy says so, a lucky probe does not decide the budget, a confirmation that misses steps the budget down, and
a near miss is repaired."""

import math

import numpy as np
import pytest

from sparsecse.evaluation import speed
from sparsecse.targets.alone import ALONE, measure_alone
from sparsecse.targets.candidates import Candidate
from sparsecse.targets.choice import confirm, fitted_choice
from sparsecse.targets.repair import REPAIR_KEEP, near_miss, repair
from sparsecse.targets.spec import Shape, Target
from sparsecse.targets.statistics import (MAX_ROUNDS, MIN_ROUNDS, SpeedModel, TooNoisy, check_precision,
                                          expected_half_width, median_interval, noise, order_ranks, rounds_needed)
from sparsecse.targets.timing import Timing, aa_timing, sized_rounds
from tests.test_targets import text  # noqa: F401  (a fixture: the tiny model's corpus)

SHAPE = Shape("throughput", 4, 1)  # four sentences: one request per round, so a round is one call of the clock
SENTENCES = ["one", "two", "three", "four"]


class Model:
    """An encoder the fake clock times: ``cost`` seconds a sentence."""

    def __init__(self, cost: float):
        self.cost = cost


class NoisyClock:
    """Seconds = sentences x the model's cost x a log-normal factor of known spread ``sigma`` (seeded)."""

    def __init__(self, sigma: float, seed: int = 0):
        self.sigma, self.rng = sigma, np.random.default_rng(seed)

    def __call__(self, encoder, sentences, batch_size):
        return len(sentences) * encoder.cost * float(np.exp(self.rng.normal(0.0, self.sigma)))


def test_the_median_interval_uses_the_order_statistics_of_the_binomial_table():
    assert order_ranks(20) == (3, 16) and order_ranks(15) == (2, 12)  # 99%: the 4th and 17th of 20 (1-based)
    assert order_ranks(5) == (0, 4)  # too few rounds for 99%: the extremes
    iv = median_interval([1.0, 1.1, 0.9, 1.05, 0.95])
    assert (iv.median, iv.low, iv.high) == (1.0, 0.9, 1.1) and iv.contains(1.0) and not iv.contains(1.2)


@pytest.mark.parametrize("seed", range(10))
def test_the_input_timed_against_itself_has_an_interval_that_contains_one(monkeypatch, seed):
    monkeypatch.setattr(speed, "clock", NoisyClock(0.03, seed))
    model = Model(0.01)
    timing = aa_timing(model, SENTENCES, SHAPE)
    assert timing.interval.contains(1.0)
    assert timing.interval.low < timing.speedup < timing.interval.high  # the noise is there, and measured


def test_the_noise_read_from_the_rounds_is_the_clock_s():
    ratios = np.exp(np.random.default_rng(1).normal(0.0, 0.04, 4001))
    assert noise(ratios) == pytest.approx(0.04, rel=0.1)


def test_the_rounds_are_sized_from_the_machine_s_noise(monkeypatch):
    quiet, noisy = Target(speedup=2.0, margin=0.05), Target(speedup=2.0, margin=0.05)
    monkeypatch.setattr(speed, "clock", NoisyClock(0.002, 3))
    aa, few = sized_rounds(Model(0.01), SENTENCES, SHAPE, quiet)
    assert few == MIN_ROUNDS and aa.interval.contains(1.0)
    monkeypatch.setattr(speed, "clock", NoisyClock(0.03, 3))
    aa, more = sized_rounds(Model(0.01), SENTENCES, SHAPE, noisy)
    assert more > few and more == rounds_needed(noise(aa.ratios), 0.05)
    assert expected_half_width(noise(aa.ratios), more) < 0.05 <= expected_half_width(noise(aa.ratios), more - 1)
    assert rounds_needed(0.02, 0.05) < rounds_needed(0.04, 0.05) < rounds_needed(0.04, 0.03)


def test_a_machine_too_noisy_for_the_margin_says_so_plainly(monkeypatch):
    with pytest.raises(TooNoisy, match=r"too noisy at batch 1 to resolve a 5% margin"):
        check_precision(0.2, 0.05, "batch 1")
    assert check_precision(0.2, 0.5, "batch 1") <= MAX_ROUNDS  # a wide margin is resolved on the same noise
    monkeypatch.setattr(speed, "clock", NoisyClock(0.25, 4))
    with pytest.raises(TooNoisy, match=r"This machine is too noisy at throughput at batch 4 on 1 thread.* to "
                                       r"resolve a 5% margin"):
        sized_rounds(Model(0.01), SENTENCES, SHAPE, Target(speedup=2.0, margin=0.05))


LINE = (0.25, 0.75)  # the true time (1/speed-up) = 0.25 + 0.75 x budget


def true_speed(budget: float) -> float:
    return 1.0 / (LINE[0] + LINE[1] * budget)


class Prober:
    """Probes on the true line, some of them lucky; retimed figures fall back to the line (times ``retimed``)."""

    def __init__(self, target: Target, retimed: float = 1.0):
        self.target, self.candidates, self.retimed, self.retimes = target.check(), [], retimed, []

    def probe(self, budget: float, luck: float = 1.0) -> Candidate:
        c = Candidate(round(budget, 4), 0, 0, true_speed(budget) * luck, 80.0, 0.0, "speed", half_width=0.02)
        self.candidates.append(c)
        return c

    def retime(self, candidate: Candidate) -> Timing:
        self.retimes.append(candidate.keep_flops)
        speedup = true_speed(candidate.keep_flops) * self.retimed
        return Timing.of([speedup * f for f in (0.99, 1.0, 1.01, 0.995, 1.005)])

    def timing_of(self, candidate: Candidate) -> Timing:
        """The rounds of ``candidate``'s own probe (±1% around its figure)."""
        return Timing.of([candidate.speedup * f for f in (0.99, 1.0, 1.01, 0.995, 1.005)])


def test_a_lucky_probe_does_not_decide_the_budget():
    target = Target(speedup=2.0, margin=0.05)
    aim, needed = target.aim, (1 / target.aim - LINE[0]) / LINE[1]  # 2.1x at 0.3016
    prober = Prober(target)
    for budget in (0.5, 0.4, 0.25, 0.2):
        prober.probe(budget)
    lucky = prober.probe(0.34, luck=1.09)  # ran 2.13x, above the aim, though the line gives it 1.95x
    assert max((c for c in prober.candidates if c.speedup >= aim), key=lambda c: c.keep_flops) is lucky  # the old rule
    chosen = fitted_choice(prober.candidates, aim, 0.02, True, prober.probe)
    assert chosen is not lucky and chosen.keep_flops < lucky.keep_flops
    # the line through all of them, the lucky one included, lands near the exact budget and meets the target
    assert chosen.keep_flops == pytest.approx(needed, abs=0.015) and true_speed(chosen.keep_flops) >= 2.0
    assert true_speed(lucky.keep_flops) < 2.0  # where the luckiest probe would have led: a miss
    assert lucky.predicted < lucky.speedup


def test_the_speed_model_weighs_each_probe_by_its_precision():
    exact = [(b, true_speed(b), 0.01) for b in (0.5, 0.3)]
    model = SpeedModel.fit(exact + [(0.4, true_speed(0.4) * 1.2, 0.5)])  # a wild, imprecise probe
    assert model.speedup(0.4) == pytest.approx(true_speed(0.4), rel=0.01)
    assert SpeedModel.fit([(0.5, 1.6, 0.02)]) is None and SpeedModel.fit([(0.5, 1.6, 0.02)], anchor=True)


def test_a_choice_is_confirmed_by_a_fresh_timing_and_steps_down_when_the_confirmation_misses():
    target = Target(speedup=2.0, margin=0.05)
    prober = Prober(target)
    chosen = prober.probe(0.3)
    assert confirm(chosen, prober, prober.probe, 0.02, True) is chosen and prober.retimes == [0.3]
    assert chosen.confirmed == pytest.approx(true_speed(0.3), rel=1e-3)
    prober = Prober(target, retimed=0.95)  # the fresh timing runs 5% under the probes: the choice misses
    chosen = prober.probe(0.3)
    final = confirm(chosen, prober, prober.probe, 0.02, True)
    assert final is not chosen and final.keep_flops < 0.3 and len(prober.retimes) >= 2
    assert final.confirmed >= 2.0  # confirmed, before any training


def test_a_confirmation_at_the_bare_target_is_not_enough():
    """A fresh figure of 2.01x for a 2x target (the first run of issue 62's default latency command: confirmed
    2.01x, final 1.95x) steps down: the confirmation must clear half the margin (2.05x)."""
    target = Target(speedup=2.0, margin=0.05)
    prober = Prober(target, retimed=2.01 / true_speed(0.3))
    chosen = prober.probe(0.3)
    final = confirm(chosen, prober, prober.probe, 0.02, True)
    assert chosen.confirmed == pytest.approx(2.01, rel=1e-3) and final is not chosen
    assert final.keep_flops < 0.3 and final.confirmed >= 2.05


def test_a_precise_confirmation_between_the_bar_and_the_aim_is_kept():
    """lat-1202c (issue 62, an AVX2-only EPYC): the untimed winner's first timing was 2.0519x ±2.2% against the 2.05x
    bar and the 2.1x aim; an interval short of the aim stepped 0.853 down to 0.806 (a probe and a timing more, and
    width lost) though the figure was over the 2x target by more than its noise. At the bar it passes; under it, it
    steps down."""
    target = Target(speedup=2.0, margin=0.05)
    for figure, kept in ((2.0519, True), (2.09, True), (2.0, False)):
        prober = SequencedProber(target, [figure, 2.2], spread=0.005)  # its interval ends under the aim
        chosen = prober.probe(0.3)
        final = confirm(chosen, prober, prober.probe, 0.02, True)
        assert (final is chosen) is kept and chosen.confirmed == pytest.approx(figure, abs=1e-4)
        assert prober.retimes == ([0.3] if kept else [0.3, final.keep_flops])


class SequencedProber(Prober):
    """Each retiming gives the next figure of ``figures``, over five rounds spread evenly ±``spread`` around it (so
    its 99% interval is exactly ``figure x (1 ± spread)``)."""

    def __init__(self, target: Target, figures, spread: float):
        super().__init__(target)
        self.figures, self.spread = list(figures), spread

    def retime(self, candidate: Candidate) -> Timing:
        self.retimes.append(candidate.keep_flops)
        return spread_timing(self.figures.pop(0), self.spread)


def spread_timing(figure: float, spread: float) -> Timing:
    return Timing.of([figure * (1 + spread * x) for x in (-1.0, -0.5, 0.0, 0.5, 1.0)])


def test_a_confirmation_that_misses_by_less_than_its_noise_is_timed_again_and_pooled():
    """lat-auto1 (issue 62) lost 0.067 of its width and two timings to confirmations of 2.0494x against the 2.05x
    bar, each known to ±2.5%: a miss the median's noise explains is timed once more, and the rounds pooled."""
    target = Target(speedup=2.0, margin=0.05)  # the bar: 2.05x; the aim 2.1x
    prober = SequencedProber(target, [2.0494, 2.07], spread=0.03)  # 2.0494x, its interval 1.99-2.11x
    chosen = prober.probe(0.3)
    assert confirm(chosen, prober, prober.probe, 0.02, True) is chosen and prober.retimes == [0.3, 0.3]
    pooled = spread_timing(2.0494, 0.03).pooled(spread_timing(2.07, 0.03))
    assert chosen.confirmed == pytest.approx(pooled.speedup, abs=1e-4) and chosen.confirmed >= 2.05
    assert chosen.confirmed_half_width == pytest.approx(pooled.interval.half_width)
    # pooled and still short of the bar: the budget steps down, and the smaller candidate is confirmed in its turn
    prober = SequencedProber(target, [2.0494, 2.03, 2.2], spread=0.03)
    chosen = prober.probe(0.3)
    final = confirm(chosen, prober, prober.probe, 0.02, True)
    assert final is not chosen and final.keep_flops < 0.3 and prober.retimes == [0.3, 0.3, final.keep_flops]
    assert chosen.confirmed < 2.05 and final.confirmed == pytest.approx(2.2)
    # a miss the interval does not explain (2.00x, known to ±1%) is not timed again: it steps down at once
    prober = SequencedProber(target, [2.0, 2.2], spread=0.01)
    chosen = prober.probe(0.3)
    final = confirm(chosen, prober, prober.probe, 0.02, True)
    assert prober.retimes == [0.3, final.keep_flops] and final.keep_flops < 0.3


def test_an_untimed_winner_is_confirmed_by_its_first_timing_and_counted_once():
    """A depth finalist chosen on its dev score, untimed: its first timing never took part in the choice, so it is
    the fresh timing (no second one), and the speed model holds it once."""
    target = Target(speedup=2.0, margin=0.05)
    prober = SequencedProber(target, [], spread=0.01)
    winner = prober.probe(0.3)
    first = spread_timing(2.12, 0.01)  # over the bar, and within its noise of the aim (no step up)
    assert confirm(winner, prober, prober.probe, 0.02, True, first) is winner and prober.retimes == []
    assert winner.confirmed == pytest.approx(2.12) and winner.confirmed_with_probe
    assert winner.figures() == [(winner.confirmed, winner.confirmed_half_width)]
    timed_again = prober.probe(0.3)  # a winner timed before it was chosen: its probe and its confirmation both count
    prober.figures = [2.12]
    confirm(timed_again, prober, prober.probe, 0.02, True)
    assert prober.retimes == [0.3] and not timed_again.confirmed_with_probe and len(timed_again.figures()) == 2
    # a first timing that misses by less than its noise is pooled with one fresh timing
    prober = SequencedProber(target, [2.08], spread=0.03)
    winner = prober.probe(0.3)
    confirm(winner, prober, prober.probe, 0.02, True, spread_timing(2.04, 0.03))
    assert prober.retimes == [0.3] and winner.confirmed_with_probe and winner.confirmed >= 2.05


def test_a_confirmation_over_the_aim_by_more_than_its_noise_steps_the_budget_up():
    """lat-1202l (issue 62, an AVX2-only EPYC) confirmed 2.198x for the 2.1x aim and kept its 0.706: the noise had
    taken width away, and nothing gave it back. A first confirmation whose whole interval clears the aim joins the
    fit, the budget steps up to the line's (at most 3 x STEP), and the wider candidate's own timing confirms it."""
    target = Target(speedup=2.0, margin=0.05)  # the bar 2.05x, the aim 2.1x (at 0.3016 on the true line)
    prober = SequencedProber(target, [2.25], spread=0.01)
    for budget in (0.5, 0.2):
        prober.probe(budget)
    chosen = prober.probe(0.26)  # the true line: 2.25x, 0.04 of width under the aim's budget
    final = confirm(chosen, prober, prober.probe, 0.02, True)
    assert final is not chosen and final.stepped_up_from == 0.26 and prober.retimes == [0.26]
    assert final.keep_flops == pytest.approx(0.26 * 1.12, abs=1e-4)  # the line gives 0.3016: 3 x STEP at most
    assert final.confirmed_with_probe and final.confirmed == pytest.approx(true_speed(final.keep_flops), abs=1e-3)
    assert true_speed(final.keep_flops) >= 2.05 and chosen.confirmed == pytest.approx(2.25)
    # the wider candidate's own timing misses the bar: the candidate already confirmed is kept, nothing else timed
    prober = SequencedProber(target, [2.25], spread=0.01)
    for budget in (0.5, 0.2):
        prober.probe(budget)
    chosen = prober.probe(0.26)
    final = confirm(chosen, prober, lambda b: prober.probe(b, luck=0.92), 0.02, True)
    assert final is chosen and len(prober.candidates) == 4 and prober.candidates[-1].stepped_up_from == 0.26
    # over the aim by less than its noise, or up against a probe that fell short of the aim: no step
    for figure, spread, short in ((2.15, 0.03, None), (2.25, 0.01, 0.27)):
        prober = SequencedProber(target, [figure], spread=spread)
        for budget in (0.5, 0.2):
            prober.probe(budget)
        if short is not None:
            prober.probe(short, luck=0.9)  # 1.9x, its whole interval short of the aim
        chosen = prober.probe(0.26)
        assert confirm(chosen, prober, prober.probe, 0.02, True) is chosen
        assert math.isnan(chosen.stepped_up_from) and prober.candidates[-1] is chosen


def test_each_model_served_alone_gives_the_speed_up_and_names_its_method(monkeypatch):
    monkeypatch.setattr(speed, "clock", NoisyClock(0.01, 5))
    timing = measure_alone(Model(0.02), {"half": Model(0.01)}, SENTENCES, SHAPE, rounds=7)["half"]
    assert timing.rounds == 7 and timing.interval.contains(2.0)
    assert "served alone" in ALONE and "own fresh process" in ALONE


class DriftClock:
    """A machine whose speed drifts slowly: seconds = sentences x the model's cost x (1 + ``depth`` x sin(2 pi t /
    ``period``)), t the clock's own running total (a shared machine drifted by up to ±15% over tens of seconds)."""

    def __init__(self, depth: float = 0.15, period: float = 8.0):
        self.depth, self.period, self.t = depth, period, 0.0

    def __call__(self, encoder, sentences, batch_size):
        seconds = len(sentences) * encoder.cost * (1 + self.depth * math.sin(2 * math.pi * self.t / self.period))
        self.t += seconds
        return seconds


LATENCY = Shape("latency-p50", 1, 1)
REQUESTS = [f"sentence {i}" for i in range(100)]  # 100 requests of one sentence: a round lasts about a second


@pytest.mark.parametrize("turn, resolved", [(None, True), (100, False)])
def test_a_slow_drift_falls_on_both_models_alike_only_when_they_take_short_turns(monkeypatch, turn, resolved):
    monkeypatch.setattr(speed, "clock", DriftClock())
    monkeypatch.setattr(speed, "turn_requests", lambda batch: turn or speed.TURN_SENTENCES)
    aa = aa_timing(Model(0.01), REQUESTS, LATENCY, rounds=9)
    assert (noise(aa.ratios) < 0.01) == resolved  # whole rounds in turns: the drift is in every ratio
    assert aa.interval.contains(1.0)


def test_served_alone_a_slow_drift_leaves_the_ratio_where_it_is(monkeypatch):
    monkeypatch.setattr(speed, "clock", DriftClock())
    timing = measure_alone(Model(0.02), {"half": Model(0.01)}, REQUESTS, LATENCY, rounds=7)["half"]
    assert abs(timing.speedup - 2.0) < 0.02 and timing.interval.half_width < 0.02
    whole = measure_alone(Model(0.02), {"half": Model(0.01)}, REQUESTS, LATENCY, rounds=7, turn=100)["half"]
    assert whole.interval.half_width > 0.05  # a process timed after the other's whole pass keeps the drift


def near(speedup: float, low: float, high: float, met: bool = False) -> dict:
    return {"speedup": speedup, "met": met, "met_quality": True, "interval": {"low": low, "high": high},
            "near_miss": (not met) and high >= 2.0}


def test_a_near_miss_is_repaired_by_one_more_step_and_a_true_miss_is_not():
    steps = []

    def step(model_dir: str, keep: float) -> str:
        steps.append((model_dir, keep))
        return model_dir + "-repaired"

    missed = near(1.97, 1.90, 2.04)
    assert near_miss(missed)
    model, figures = repair(missed, "run/model", step, lambda d: near(2.08, 2.01, 2.15, met=True))
    assert model == "run/model-repaired" and figures["met"] and steps == [("run/model", REPAIR_KEEP)]
    assert figures["repair"]["before"] == 1.97 and figures["repair"]["after"] == 2.08
    # repaired and still short: a true miss, the run's own model kept (the command ends non-zero naming it)
    model, figures = repair(missed, "run/model", step, lambda d: near(1.99, 1.93, 2.05))
    assert model == "run/model" and not figures["met"] and figures["repair"]["met"] is False
    # short with its interval short too: no repair is tried
    steps.clear()
    true_miss = near(1.85, 1.80, 1.90)
    assert not near_miss(true_miss)
    assert repair(true_miss, "run/model", step, lambda d: pytest.fail("timed")) == ("run/model", true_miss)
    assert not steps and math.isfinite(true_miss["speedup"])


@pytest.mark.parametrize("layout", ["stock", "custom"])
def test_a_run_s_near_miss_is_repaired_before_the_student_which_trains_the_repaired_model(tmp_path, text,
                                                                                        fake_senteval, monkeypatch,
                                                                                        layout):
    import json

    from click.testing import CliRunner

    from sparsecse.cli import main
    from sparsecse.modeling.adapters import is_uniform
    from sparsecse.modeling.encoder import SentenceEncoder
    from sparsecse.modeling.flops import flops_per_token
    from sparsecse.recipes import runner
    from sparsecse.targets.report import timed_shapes_hold
    from tests.test_targets import TINY_STAGES, FakeClock
    from tests.tiny import make_tiny_model_dir

    wide = make_tiny_model_dir(tmp_path / "wide", "bert", layers=2, heads=4, ffn=512, seed=2, init_range=0.2)

    monkeypatch.setattr(speed, "clock", FakeClock())
    measured, calls = runner.measure_speed, []

    def first_a_near_miss(*args, **kwargs):  # the first figure falls just short, its interval covering the target
        figures = measured(*args, **kwargs)
        calls.append(args[2])
        if len(calls) == 1:
            figures.update(met=False, met_speed=False, near_miss=True, speedup=1.29)
        return figures

    def never(*args, **kwargs):
        raise AssertionError("timed after the student: its shapes are the repaired model's")

    monkeypatch.setattr(runner, "measure_speed", first_a_near_miss)
    monkeypatch.setattr(runner, "measure_target", never)
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["compress", "--model", str(wide), "--corpus", str(text), "--speedup", "1.3",
                                       "--data-dir", str(fake_senteval), "--out", str(out), "--quiet",
                                       "--layout", layout, *TINY_STAGES])
    assert result.exit_code == 0, result.output
    repaired, pruned = out / "repair" / "model", out / "stages" / "2-prune"
    assert len(calls) == 2 and calls == [str(pruned), str(repaired)]  # timed again after one more step
    student = json.loads((out / "stages" / "3-student" / "manifest.json").read_text())
    assert student["inputs"]["model"]["path"] == str(repaired)  # the student trained the repaired model
    final, cut = (SentenceEncoder.load(path, device="cpu") for path in (out / "model", pruned))
    assert flops_per_token(final) < flops_per_token(cut) and timed_shapes_hold(str(repaired), str(out / "model"))
    assert is_uniform(final.model) == (layout == "stock")
    if layout == "custom":  # pruned within its own units, each head still named by its source index
        assert all(set(new) <= set(old) for new, old in zip(final.model.config.kept_heads, cut.model.config.kept_heads))
    reached = json.loads((out / "model" / "manifest.json").read_text())["figures"]["target"]
    facts = reached["repair"]
    assert reached["met"] and facts["before"] == 1.29 and facts["keep"] == REPAIR_KEEP and facts["before_training"]
    assert reached["speedup"] == facts["after"] and reached["method"] == ALONE
    assert reached["timed_model"] == str(repaired)
    card = (out / "model" / "README.md").read_text(encoding="utf-8")
    assert "**Near miss:** the first figure, 1.290x" in card and "before the training" in card


def test_a_machine_somewhat_too_noisy_goes_on_at_the_most_rounds_and_says_so():
    from sparsecse.targets.statistics import USABLE, usable_rounds

    assert usable_rounds(0.02, 0.05, "batch 1") == (rounds_needed(0.02, 0.05), None)
    sigma = 0.12  # too noisy for a 5% margin even over MAX_ROUNDS, but within USABLE margins
    assert expected_half_width(sigma, MAX_ROUNDS) > 0.05 and expected_half_width(sigma, MAX_ROUNDS) <= USABLE * 0.05
    rounds, warning = usable_rounds(sigma, 0.05, "batch 1")
    assert rounds == MAX_ROUNDS and "noisy at batch 1" in warning and "5% margin" in warning
    with pytest.raises(TooNoisy, match="too noisy at batch 1"):
        usable_rounds(0.2, 0.05, "batch 1")
