"""A target's serving shape (``--threads``, ``--metric``, ``--batch-size``, ``--timing-sentences``) and timing a busy
machine cannot fool: bad shapes refused in one sentence with nothing written; the shape recorded in the manifest,
the candidates table and the card; each timing's median ratio and spread exact under a fake clock (no real timing);
a spread that stays wide, or candidates whose order contradicts their size after a second timing, stop the run in
one sentence naming what was measured; ``--when-busy wait`` times again once the machine calms down."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from sparsecse.cli import main
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation import speed
from sparsecse.targets import timing
from sparsecse.targets.candidates import Candidate, next_budget_line, read_table
from sparsecse.targets.search import _Prober, contradictions
from sparsecse.targets.spec import Shape, Target, default_loader
from sparsecse.targets.timing import MachineTooBusy, measure, settled
from tests.test_targets import TINY_STAGES, fake_clock, text, tiny_dir  # noqa: F401  (fixtures)


@pytest.mark.parametrize("extra, words", [
    (["--speedup", "2", "--threads", "0"], "threads (--threads) must be a whole number of at least 1"),
    (["--speedup", "2", "--metric", "nope"], "Unknown speed metric 'nope'"),
    (["--speedup", "2", "--metric", "latency-p50", "--batch-size", "0"], "request size of a latency"),
    (["--speedup", "2", "--when-busy", "later"], "when_busy must be one of stop, wait"),
    (["--speedup", "2", "--timing-sentences", "missing.txt"], "missing.txt"),
    (["--threads", "2"], "--threads goes with a target"),
])
def test_bad_serving_shapes_are_refused_in_one_sentence_and_nothing_is_written(tmp_path, tiny_dir, text, extra,
                                                                               words):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["compress", "--model", str(tiny_dir), "--corpus", str(text), "--out", str(out),
                                       *extra])
    assert result.exit_code != 0
    message = result.output.strip()
    assert words in message and len(message.splitlines()) == 1, message
    assert not out.exists()


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_the_gpu_engine_is_refused_without_cuda(tmp_path, tiny_dir, text):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["compress", "--model", str(tiny_dir), "--corpus", str(text), "--out", str(out),
                                       "--speedup", "2", "--engine", "torch-cuda"])
    assert result.exit_code != 0
    assert "torch-cuda times on a CUDA GPU" in result.output and len(result.output.strip().splitlines()) == 1
    assert not out.exists()


def test_a_latency_metric_defaults_to_one_sentence_and_unnamed_threads_are_the_engines():
    assert Target(speedup=2, metric="latency-p95").check().batch == 1
    assert Target(speedup=2).check().batch == 128
    shape = Target(speedup=2, metric="latency-p50").check().shape(default_threads=7)
    assert (shape.metric, shape.batch_size, shape.threads, shape.threads_default) == ("latency-p50", 1, 7, True)
    named = Target(speedup=2, threads=1, batch_size=8).check().shape(default_threads=7)
    assert (named.batch_size, named.threads, named.threads_default) == (8, 1, False)
    assert shape.percentile == 50 and Shape("latency-p95", 1, 1).percentile == 95


class Costly:
    """A fake encoder whose fake clock time is ``fixed + per_sentence x sentences`` seconds per call."""

    def __init__(self, fixed, per_sentence):
        self.fixed, self.per_sentence = fixed, per_sentence


class Clock:
    """The fake clock: an encoder's cost, multiplied by ``noise(call)`` (1 by default)."""

    def __init__(self, noise=None):
        self.calls, self.noise = 0, noise or (lambda call, encoder: 1.0)

    def __call__(self, encoder, sentences, batch_size):
        self.calls += 1
        return (encoder.fixed + encoder.per_sentence * len(sentences)) * self.noise(self.calls, encoder)


SENTENCES = [f"sentence {i}" for i in range(40)]


def test_a_throughput_and_a_latency_are_the_exact_ratios_of_their_shapes(monkeypatch):
    monkeypatch.setattr(speed, "clock", Clock())
    dense, small = Costly(0.010, 0.004), Costly(0.010, 0.001)
    through = measure(dense, {"small": small}, SENTENCES, Shape("throughput", 8, 1))["small"]
    # 5 batches of 8: (0.010 + 0.032) / (0.010 + 0.008) per batch
    assert through.speedup == pytest.approx(0.042 / 0.018) and through.spread == 0 and through.rounds == 5
    assert through.figure == pytest.approx(40 / (5 * 0.018))  # sentences per second
    latency = measure(dense, {"small": small}, SENTENCES, Shape("latency-p50", 1, 1))["small"]
    assert latency.speedup == pytest.approx(0.014 / 0.011)  # the fixed cost dominates one sentence
    assert latency.figure == pytest.approx(11.0) and latency.reference_figure == pytest.approx(14.0)  # ms


def test_the_timing_threads_are_the_shapes_and_are_restored(monkeypatch):
    import torch

    seen = []
    monkeypatch.setattr(speed, "clock", lambda encoder, sentences, batch: seen.append(torch.get_num_threads()) or 1.0)
    before = torch.get_num_threads()
    measure(Costly(1, 0), {"a": Costly(1, 0)}, SENTENCES, Shape("throughput", 8, 1))
    assert set(seen) == {1} and torch.get_num_threads() == before


def noisy_rounds(rounds_per_run=5, calm_after=None):
    """Noise that slows the candidate by a different factor each round (spread 40%), until ``calm_after`` calls."""
    factors = [1.0, 1.6, 0.8, 1.3, 0.7]

    def noise(call, encoder):
        if calm_after is not None and call > calm_after or encoder.per_sentence > 0.002:
            return 1.0
        return factors[(call // 10) % len(factors)]
    return noise


def test_a_spread_that_stays_wide_stops_before_choosing_naming_what_was_measured(monkeypatch):
    clock = Clock(noisy_rounds())
    monkeypatch.setattr(speed, "clock", clock)
    target = Target(speedup=2.0).check()
    with pytest.raises(MachineTooBusy) as caught:
        settled(Costly(0.0, 0.004), {"the candidate keeping 0.300 of the layer FLOPs": Costly(0.0, 0.001)}, SENTENCES,
                Shape("throughput", 8, 2), target)
    message = str(caught.value)
    assert message.startswith("The machine is too busy to time: the candidate keeping 0.300 of the layer FLOPs "
                              "measured") and "over 25 interleaved rounds" in message and "\n" not in message
    assert "throughput at batch 8 on 2 threads" in message


def drifting(factors, period=22):
    """Noise that slows the candidate by ``factors`` in turn, each for ``period`` clock calls."""
    def noise(call, encoder):
        return 1.0 if encoder.per_sentence > 0.002 else factors[(call // period) % len(factors)]
    return noise


def test_rounds_too_spread_whose_median_is_pinned_down_are_noise_not_a_busy_machine(monkeypatch):
    """Spread rounds alone do not stop a run: pooled, their median's interval is within twice the margin, the
    precision the rounds were sized for (a run on a quiet machine stopped on a 12% spread over 24 rounds)."""
    monkeypatch.setattr(speed, "clock", Clock(drifting([0.94, 1.04, 0.97, 1.21, 1.17, 1.08, 0.77, 1.01, 1.09])))
    target = Target(speedup=2.0).check()
    found = settled(Costly(0.0, 0.004), {"c": Costly(0.0, 0.001)}, SENTENCES, Shape("throughput", 8, 2), target,
                    rounds=12)["c"]
    assert found.rounds == 24 and found.spread > target.max_spread  # timed again, still spread
    assert found.interval.half_width <= 2 * target.margin and found.interval.contains(4.0)
    monkeypatch.setattr(speed, "clock", Clock(drifting([1.13, 0.93, 1.24, 0.85, 0.92, 1.12, 1.01, 1.27, 1.02])))
    with pytest.raises(MachineTooBusy, match=r"and its interval \(±1\d%\) wider than 2 times the 5% margin"):
        settled(Costly(0.0, 0.004), {"c": Costly(0.0, 0.001)}, SENTENCES, Shape("throughput", 8, 2), target,
                rounds=12)


def test_an_interval_too_wide_gets_more_rounds_before_the_machine_is_called_busy(monkeypatch):
    """Ten rounds leave the median's interval wider than twice the margin, fifteen do not: the rounds are pooled
    until they do, up to the most a timing may have, and only then is the machine too busy."""
    noise = drifting([0.94, 0.81, 1.02, 1.01, 0.85, 0.92, 0.99, 0.88, 0.99])
    monkeypatch.setattr(speed, "clock", Clock(noise))
    target = Target(speedup=2.0).check()
    found = settled(Costly(0.0, 0.004), {"c": Costly(0.0, 0.001)}, SENTENCES, Shape("throughput", 8, 2), target,
                    rounds=5)["c"]
    assert found.rounds == 15 and found.spread > target.max_spread
    assert found.interval.half_width <= 2 * target.margin
    monkeypatch.setattr(speed, "clock", Clock(noise))
    monkeypatch.setattr(timing, "MAX_ROUNDS", 10)
    with pytest.raises(MachineTooBusy, match="over 10 interleaved rounds"):
        settled(Costly(0.0, 0.004), {"c": Costly(0.0, 0.001)}, SENTENCES, Shape("throughput", 8, 2), target, rounds=5)


def test_an_unanchored_search_steps_at_most_halfway_down_beyond_its_probes():
    """Two close, noisy probes of a model with layers removed draw a shallow line: the next budget is half the
    smallest probed, not the floor (a run probed 0.013 of the rest after 0.714 and 0.643)."""
    assert next_budget_line([(0.714, 1.70), (0.643, 1.73)], 2.1, 0.013, anchored=False) == pytest.approx(0.3215)
    assert next_budget_line([(0.95, 1.81), (0.88, 1.86)], 2.1, 0.013, anchored=False) > 0.44  # a true slope stays
    assert next_budget_line([(0.7, 1.8), (0.6, 2.3)], 2.1, 0.013, anchored=False) == pytest.approx(0.6343, abs=1e-4)


def test_when_busy_wait_times_again_once_the_machine_calms_down(monkeypatch):
    monkeypatch.setattr(speed, "clock", Clock(noisy_rounds(calm_after=300)))
    monkeypatch.setattr(timing, "BUSY_WAIT_SECONDS", 0.0)
    target = Target(speedup=2.0, when_busy="wait").check()
    found = settled(Costly(0.0, 0.004), {"c": Costly(0.0, 0.001)}, SENTENCES, Shape("throughput", 8, 2), target)
    assert found["c"].speedup == pytest.approx(4.0) and found["c"].spread == 0


def candidate(budget, speedup, spread=0.0, layers_removed=0):
    return Candidate(budget, 0, 0, speedup, 80.0, 0.0, "speed", spread=spread, layers_removed=layers_removed)


def test_an_order_that_contradicts_the_size_is_found_beyond_the_spreads():
    rows = [candidate(0.5, 1.45), candidate(0.25, 3.22), candidate(0.188, 1.22), candidate(0.156, 2.14)]
    pairs = {(a.keep_flops, b.keep_flops) for a, b in contradictions(rows, 6)}
    assert pairs == {(0.188, 0.25), (0.188, 0.5), (0.156, 0.25)}
    assert contradictions([candidate(0.3, 2.0, 0.05), candidate(0.4, 2.1, 0.05)], 6) == []  # within the spreads


def test_depth_and_width_candidates_are_ordered_by_their_overall_kept_flops():
    # 0.8 of the 2 remaining layers of 4 keeps 0.4 of the whole model: smaller than 0.5 width-only, and faster
    wide = candidate(0.5, 1.45)
    assert contradictions([candidate(0.8, 1.6, layers_removed=2), wide], 4) == []
    # 0.6 of 2 remaining layers keeps 0.3 and removes more layers: running slower than 0.5 width-only contradicts
    deep_slow = candidate(0.6, 1.2, layers_removed=2)
    assert contradictions([deep_slow, wide], 4) == [(deep_slow, wide)]
    # 0.9 of 3 remaining layers keeps 0.675 of the FLOPs but one layer less (its fixed cost gone): faster than the
    # width-only 0.5 is no contradiction, though by its own budget 0.9 > 0.5 it would look like one
    assert contradictions([candidate(0.9, 1.55, layers_removed=1), candidate(0.5, 1.39)], 4) == []
    assert contradictions([candidate(0.9, 1.55), candidate(0.5, 1.39)], 4) != []  # width-only: out of order


def bare_prober(timed, rows, target=None):
    prober = object.__new__(_Prober)
    prober.target = (target or Target(speedup=2.0)).check()
    prober.shape = prober.target.shape(2)
    prober.reference, prober.sentences = Costly(0.0, 0.004), SENTENCES
    prober.candidates, prober.timed, prober.layers = rows, timed, 6
    prober.rounds = 5  # as the A/A timing sizes them on a machine without noise
    return prober


def test_candidates_out_of_size_order_are_timed_again_and_take_the_new_figures(monkeypatch):
    monkeypatch.setattr(speed, "clock", Clock())
    timed = [Costly(0.0, 0.002), Costly(0.0, 0.001), Costly(0.0, 0.0015)]  # true speed-ups 2, 4, 2.67
    rows = [candidate(0.5, 2.0), candidate(0.2, 1.2), candidate(0.3, 2.6)]  # 0.2 was disturbed: 1.2x
    prober = bare_prober(timed, rows)
    prober.settle("speed")
    assert [round(c.speedup, 3) for c in rows] == [2.0, 4.0, 2.667]
    assert [c.retimed for c in rows] == [True, True, True]  # 0.2 contradicted both larger budgets


def test_candidates_still_out_of_size_order_stop_the_run(monkeypatch):
    monkeypatch.setattr(speed, "clock", Clock())
    timed = [Costly(0.0, 0.002), Costly(0.0, 0.003)]  # the smaller budget really is slower: a broken timing
    rows = [candidate(0.5, 2.0), candidate(0.2, 1.3)]
    with pytest.raises(MachineTooBusy, match=r"the candidate keeping 0\.200 of the layer FLOPs ran 1\.33x") as caught:
        bare_prober(timed, rows).settle("speed")
    assert "\n" not in str(caught.value) and "contradicts their size" in str(caught.value)


def test_the_serving_shape_is_recorded_in_the_manifest_the_table_and_the_card(tmp_path, tiny_dir, text, fake_senteval,
                                                                              fake_clock):
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["compress", "--model", str(tiny_dir), "--corpus", str(text), "--speedup", "1.3",
                                       "--metric", "latency-p50", "--threads", "1", "--data-dir", str(fake_senteval),
                                       "--out", str(out), "--quiet", *TINY_STAGES])
    assert result.exit_code == 0, result.output
    reached = json.loads((out / "model" / "manifest.json").read_text())["figures"]["target"]
    served = "" if default_loader("torch-fp32") == "sparsecse" else " via sentence-transformers"
    assert reached["shape"] == {"metric": "latency-p50", "batch_size": 1, "threads": 1, "threads_default": False,
                                "sentences": "dev", "engine": "torch-fp32", "loader": default_loader("torch-fp32")}
    assert reached["spread"] == 0 and reached["rounds"] == 5
    import pandas as pd

    table = pd.read_csv(out / "model" / "candidates.csv")
    assert set(table["metric"]) == {"latency-p50"} and set(table["batch_size"]) == {1} and set(table["threads"]) == {1}
    assert all(c.spread == 0 for c in read_table(out / "model" / "candidates.csv"))
    card = (out / "model" / "README.md").read_text()
    assert f"(torch-fp32, latency-p50, batch 1, 1 threads{served.replace(' via', ', via')})" in card
    assert f"at latency-p50 at batch 1 on 1 thread, torch-fp32{served}" in result.output


def test_an_out_of_reach_message_names_the_serving_shape(tmp_path, tiny_dir, text, fake_senteval, fake_clock):
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["compress", "--model", str(tiny_dir), "--corpus", str(text), "--speedup", "50",
                                       "--metric", "latency-p95", "--batch-size", "4", "--threads", "2",
                                       "--data-dir", str(fake_senteval), "--out", str(out), "--quiet", *TINY_STAGES])
    assert result.exit_code != 0
    message = result.output.strip().splitlines()[-1]
    served = "" if default_loader("torch-fp32") == "sparsecse" else " via sentence-transformers"
    assert f"at latency-p95 at batch 4 on 2 threads, torch-fp32{served}: the fastest candidate" in message, message
    assert np.isfinite(read_table(out / "candidates" / "candidates.csv")[0].speedup)


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_the_gpu_engine_encodes_under_autocast_and_times_side_by_side(tmp_path, tiny_dir):
    import torch

    from sparsecse.modeling.encoder import SentenceEncoder
    from sparsecse.targets.engines import GpuEncoder, on_engine

    gpu = on_engine(tiny_dir, "torch-cuda")
    assert isinstance(gpu, GpuEncoder) and gpu.precision == ("bf16" if torch.cuda.is_bf16_supported() else "fp16")
    sentences = ["a man plays a guitar", "someone plays music", "a cat sleeps"]
    cpu = SentenceEncoder.load(tiny_dir, device="cpu").encode(sentences)
    assert np.allclose(gpu.encode(sentences, batch_size=2), cpu, atol=0.05)
    found = measure(gpu, {"same": on_engine(tiny_dir, "torch-cuda")}, sentences, Shape("latency-p50", 1, 1,
                                                                                      engine="torch-cuda"))
    assert np.isfinite(found["same"].speedup) and found["same"].rounds == 5


def test_with_when_busy_wait_candidates_out_of_size_order_are_timed_again_until_the_machine_calms(monkeypatch):
    from sparsecse.targets import search

    # the smaller budget's encoder runs 2.5x slower (a steady disturbance) through the first timing (3 models x
    # (1 warm-up + 5 rounds x 5 requests) = 78 clock calls): 1.6x, slower than the larger budget's 2x
    monkeypatch.setattr(speed, "clock", Clock(lambda call, encoder: 2.5 if encoder.per_sentence == 0.001
                                              and call <= 78 else 1.0))
    monkeypatch.setattr(search, "BUSY_WAIT_SECONDS", 0.0)
    timed = [Costly(0.0, 0.002), Costly(0.0, 0.001)]
    rows = [candidate(0.5, 2.0), candidate(0.2, 1.3)]
    bare_prober(timed, rows, Target(speedup=2.0, when_busy="wait")).settle("speed")
    assert [round(c.speedup, 3) for c in rows] == [2.0, 4.0] and all(c.retimed for c in rows)
