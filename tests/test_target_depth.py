"""Depth in the target search: candidates remove k whole layers (lowest Block Influence first) and then spend a
width budget of the remaining layers; every depth's finalist is timed on the engine (here a latency model in
which each layer has a fixed cost no width cut removes), and the best dev score wins, right after the cut or
after a short recovery."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from sparsecse.errors import SparseCSEError
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.modeling.flops import flops_per_token, shape_record
from sparsecse.pruning.budget import UnitCosts
from sparsecse.pruning.prune import PruningConfig
from sparsecse.scoring.scores import GateScores
from sparsecse.targets.candidates import TABLE, Candidate, read_table, write_table
from sparsecse.shrinking.layers import scores_without_layers, without_layers
from sparsecse.scoring.layer_criteria import removal_order
from sparsecse.targets.depth import depth_width_probe, layers_removed, overall_keep_flops
from sparsecse.targets.search import TargetOutOfReach as SearchOutOfReach
from sparsecse.targets.depth_search import joint_depth_search, rank_after_recovery, timed_winner, undominated
from sparsecse.targets.search import search_budget
from sparsecse.targets.spec import Target
from sparsecse.targets.timing import Timing
from tests.helpers import random_sentences
from tests.tiny import make_tiny_model_dir

LAYERS = 4
PER_LAYER, VARIABLE = 0.3, 0.7  # the fake engine: time = 0.3 x layers kept / 4 + 0.7 x kept FLOPs (dense: 1)


@pytest.fixture(scope="module")
def deep_dir(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("deep"), "bert", layers=LAYERS, init_range=0.2,
                               pooling="mean")


def random_scores(encoder, batches=2, seed=0) -> GateScores:
    shape = shape_record(encoder.model)
    g = torch.Generator().manual_seed(seed)
    heads, neurons = (batches, shape["layers"], shape["heads"]), (batches, shape["layers"], shape["ffn"])
    return GateScores(*(torch.randn(*s, generator=g) for s in (heads, heads, neurons, neurons)),
                      manifest={"kind": "scores", "shape": shape, "model": "tiny"})


class FakeDev:
    """A dev set whose score is 100 x the mean cosine of a model's embeddings with the input model's."""

    def __init__(self, dense):
        self.sentences = random_sentences(24, seed=3)
        self._target = dense.encode(self.sentences)

    def score(self, encoder):
        got = encoder.encode(self.sentences)
        cos = (got * self._target).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(self._target, axis=1))
        return float(100 * cos.mean())


class LayerClock:
    """The fake engine instead of a clock: seconds = sentences x (``per_layer`` x layers kept / 4 + the rest x the
    encoder's FLOPs over the dense ones), the dense FLOPs the largest seen (the input model is timed first)."""

    def __init__(self, per_layer=PER_LAYER):
        self.per_layer, self.dense = per_layer, 0.0

    def __call__(self, encoder, sentences, batch_size):
        flops = flops_per_token(encoder.model)
        self.dense = max(self.dense, flops)
        return len(sentences) * (self.per_layer * encoder.config.num_hidden_layers / LAYERS
                                 + (1 - self.per_layer) * flops / self.dense)


@pytest.fixture
def fake_engine(monkeypatch):
    from sparsecse.evaluation import speed

    monkeypatch.setattr(speed, "clock", LayerClock())


def test_a_depth_and_width_probe_keeps_what_its_budget_says(deep_dir):
    dense = SentenceEncoder.load(deep_dir, device="cpu")
    scores = random_scores(dense)
    order = removal_order(dense, random_sentences(16, seed=1), batch_size=8)
    assert sorted(order) == list(range(LAYERS))
    removed = layers_removed(order, 2)
    assert removed == sorted(order[:2]) and layers_removed(order, 0) == []
    with pytest.raises(SparseCSEError, match="can lose 0 to 3 of them, not 4"):
        layers_removed(order, 4)
    rest = scores_without_layers(scores, removed)
    kept = [i for i in range(LAYERS) if i not in removed]
    assert torch.equal(rest.head_grad_align, scores.head_grad_align[:, kept]) and rest.manifest["shape"]["layers"] == 2
    assert scores.manifest["shape"]["layers"] == LAYERS  # the input's scores are left as they were

    probe, mask = depth_width_probe(dense, scores, PruningConfig(), removed, 0.6)
    assert probe.config.num_hidden_layers == 2 and probe.config.kept_layers == kept
    assert dense.config.num_hidden_layers == LAYERS  # the input model is left as it was
    rest_model = without_layers(dense, removed)
    costs = UnitCosts.from_shape(shape_record(rest_model.model), "flops")
    assert flops_per_token(probe) == costs.kept(mask.head_mask, mask.neuron_mask) <= 0.6 * costs.dense
    assert costs.dense * 2 == flops_per_token(dense)  # two of four equal layers
    assert overall_keep_flops(0.6, 2, LAYERS) == pytest.approx(0.3)


def test_the_search_times_every_depth_and_recovery_can_change_the_choice(deep_dir, tmp_path, fake_engine):
    dense = SentenceEncoder.load(deep_dir, device="cpu")
    dev, scores = FakeDev(dense), random_scores(dense)
    result = search_budget(deep_dir, dev, Target(speedup=1.6, probes=4, depth=2), tmp_path / "work", scores=scores,
                           show_progress=False)
    assert {c.layers_removed for c in result.candidates} == {0, 1, 2}  # every depth was timed
    finalists = result.finalists
    assert len(finalists) >= 2  # timed ones measured at the target, untimed ones predicted at it
    assert all((c.speedup if c.stage == "speed" else c.predicted) >= 1.6 for c in finalists)
    chosen = next(c for c in result.candidates if c.chosen)
    assert chosen is finalists[0] and chosen.dev_score == max(c.dev_score for c in finalists)  # right after the cut
    order = result.target["removal_order"]
    assert result.layers_removed == sorted(order[:chosen.layers_removed]) and result.keep_flops == chosen.keep_flops
    assert result.to_dict()["layers_removed"] == result.layers_removed

    deepest = max(finalists, key=lambda c: c.layers_removed)
    recovered = []

    def recover(encoder):  # a recovery that restores only the deepest cut completely
        recovered.append(encoder.config.num_hidden_layers)
        return dense if encoder.config.num_hidden_layers == LAYERS - deepest.layers_removed else encoder

    judged = search_budget(deep_dir, dev, Target(speedup=1.6, probes=4, depth=2), tmp_path / "judged", scores=scores,
                           recover=recover, show_progress=False)
    # the finalists a recovery could put first are recovered: none that a deeper one matches right after the cut
    assert sorted(recovered) == sorted(LAYERS - c.layers_removed for c in undominated(judged.finalists))
    assert deepest.layers_removed in {LAYERS - n for n in recovered} and len(recovered) >= 2
    now = [c for c in judged.candidates if c.chosen]
    assert len(now) == 1 and now[0].layers_removed == deepest.layers_removed
    assert now[0].dev_recovered == pytest.approx(100.0, abs=1e-4)
    # the one chosen after recovery is the one the fresh timing confirmed (before, only the first finalist right
    # after the cut was confirmed, and a recovery that changed the choice left the winner unconfirmed)
    assert math.isfinite(now[0].confirmed) and now[0] is judged.finalists[0]
    assert all(math.isnan(c.confirmed) for c in judged.candidates if c.layers_removed != deepest.layers_removed)
    assert judged.layers_removed == sorted(order[:deepest.layers_removed])
    assert judged.keep_flops == now[0].keep_flops and judged.to_dict()["chosen"]["dev_recovered"] is not None
    assert judged.to_dict()["chosen"]["confirmed"] == now[0].confirmed
    back = read_table(judged.table)  # the table holds the choice and the recovered scores
    assert [c.layers_removed for c in back] == [c.layers_removed for c in judged.candidates]
    assert [c.chosen for c in back] == [c.chosen for c in judged.candidates]
    assert [c.dev_recovered is None for c in back] == [c.dev_recovered is None for c in judged.candidates]


def true_speed(budget: float, k: int) -> float:
    rest = (LAYERS - k) / LAYERS
    return 1 / (PER_LAYER * rest + VARIABLE * budget * rest)


class FakeProber:
    """Probes from a latency model in which a removed layer takes its fixed cost with it; ``noise``: each timing's
    relative error is drawn from a normal law of that width (a fake clock with known noise)."""

    def __init__(self, target, noise=0.0, seed=0):
        self.target, self.model, self.candidates, self.show_progress = target.check(), "tiny", [], False
        self.work, self.layers, self.shape = Path("work"), LAYERS, self.target.shape(2)
        self.noise, self.rng, self.timings = noise, np.random.default_rng(seed), {}

    def settle(self, stage):
        pass

    def _candidate(self, budget, k, speed, stage):
        dev = 80 - 4 * (1 - budget * (LAYERS - k) / LAYERS) - 3 * k
        candidate = Candidate(round(budget, 4), 0, 0, speed, dev, 80 - dev, stage, layers_removed=k,
                              half_width=2.5 * self.noise if self.noise else math.nan)
        self.candidates.append(candidate)
        return candidate

    def one_shot(self, scores, pruning, budget, removed=()):
        luck = 1 + self.noise * self.rng.standard_normal() if self.noise else 1.0
        candidate = self._candidate(budget, len(removed), true_speed(budget, len(removed)) * luck, "speed")
        self.timings[id(candidate)] = Timing.of([candidate.speedup] * 5)
        return candidate

    def timing_of(self, candidate):
        return self.timings[id(candidate)]

    def planned(self, scores, pruning, budget, removed):
        return self._candidate(budget, len(removed), math.nan, "planned")


def test_one_speed_model_across_depths_places_each_depth_s_finalist_at_its_aim():
    scores = GateScores(*(torch.zeros(1, LAYERS, 2) for _ in range(4)))
    prober = FakeProber(Target(speedup=2.0, depth=2))
    finalists = joint_depth_search(prober, scores, None, 0.02, [3, 2, 1, 0], 2)
    assert [c.layers_removed for c in finalists] == [0, 1, 2]  # best dev first: depth costs 3 points a layer here
    for c in finalists:  # the clock is the model's own form: each budget is where the true speed-up is the aim
        assert true_speed(c.keep_flops, c.layers_removed) == pytest.approx(2.1, rel=2e-3)
    timed = [c for c in prober.candidates if c.stage == "speed"]
    assert len(timed) <= 5  # a depth searched alone took three to six probes; here the depths share one model
    assert all(math.isfinite(c.predicted) for c in prober.candidates)
    far = FakeProber(Target(speedup=3.3, depth=2))  # width alone cannot reach 3.3x (0.3 fixed): depth can
    assert [c.layers_removed for c in joint_depth_search(far, scores, None, 0.02, [3, 2, 1, 0], 2)] == [1, 2]
    floor_probe = [c for c in far.candidates if c.layers_removed == 0 and c.stage == "speed"]
    assert min(c.keep_flops for c in floor_probe) == 0.02 and all(c.speedup < 3.3 for c in floor_probe)
    with pytest.raises(SearchOutOfReach, match="out of reach for tiny .* with up to 1 layers removed"):
        joint_depth_search(FakeProber(Target(speedup=50.0, depth=1)), scores, None, 0.02, [3, 2, 1, 0], 1)


def test_an_untimed_winner_is_timed_once_and_that_timing_stands_for_its_first_confirmation():
    scores = GateScores(*(torch.zeros(1, LAYERS, 2) for _ in range(4)))
    prober = FakeProber(Target(speedup=2.0, depth=2))
    finalists = joint_depth_search(prober, scores, None, 0.02, [3, 2, 1, 0], 2)
    planned = next(c for c in finalists if c.stage == "planned")
    planned.dev_recovered = 81.0
    before = len(prober.candidates)
    timed, first = timed_winner(planned, prober, scores, None, [3, 2, 1, 0][:planned.layers_removed])
    assert len(prober.candidates) == before + 1 and timed is prober.candidates[-1] and timed.stage == "speed"
    assert (timed.keep_flops, timed.layers_removed, timed.dev_recovered) == (planned.keep_flops,
                                                                             planned.layers_removed, 81.0)
    assert first is prober.timing_of(timed) and first.speedup == pytest.approx(timed.speedup)
    probed = next(c for c in prober.candidates if c.stage == "speed")  # timed before the choice: confirmed afresh
    assert timed_winner(probed, prober, scores, None, []) == (probed, None) and len(prober.candidates) == before + 1


@pytest.mark.parametrize("seed", range(8))
def test_on_a_noisy_clock_the_fitted_budgets_stay_near_the_aim_and_no_lucky_probe_decides(seed):
    scores = GateScores(*(torch.zeros(1, LAYERS, 2) for _ in range(4)))
    target = Target(speedup=2.0, depth=2)
    prober = FakeProber(target, noise=0.03, seed=seed)
    finalists = joint_depth_search(prober, scores, None, 0.02, [3, 2, 1, 0], 2)
    assert {c.layers_removed for c in finalists} == {0, 1, 2}
    for c in finalists:  # every probe of every depth counts: 3% noise a timing, within 4% of the aim in truth
        assert true_speed(c.keep_flops, c.layers_removed) == pytest.approx(target.aim, rel=0.04)
    assert len([c for c in prober.candidates if c.stage == "speed"]) <= target.probes + 2


def test_depth_is_refused_without_a_speed_target_or_when_negative():
    with pytest.raises(SparseCSEError, match="searched for a speed-up target"):
        Target(max_drop=1.0, depth=1).check()
    for bad in (-1, 1.5, True):
        with pytest.raises(SparseCSEError, match="whole number of at least 0"):
            Target(speedup=2.0, depth=bad).check()
    assert Target(speedup=2.0, depth=2).check().describe() == ("2x on torch-fp32 (throughput, batch 128, up to 2 "
                                                                        "layers removed)")


def test_the_candidates_table_keeps_depth_and_recovery(tmp_path):
    rows = [Candidate(0.5, 10, 20, 1.5, 80.0, 0.5, "speed", True, False),
            Candidate(0.8, 5, 10, 2.1, 78.0, 2.5, "speed", True, True, layers_removed=2, dev_recovered=79.5)]
    back = read_table(write_table(rows, tmp_path / TABLE))
    assert [(c.layers_removed, c.dev_recovered) for c in back] == [(0, None), (2, 79.5)]
    assert back[1].describe() == ("2 layers removed, kept FLOPs of the rest 0.800: 2.10x ±0%, dev 78.00 (drop +2.50), "
                                  "dev 79.50 after recovery")


def test_compress_with_depth_removes_the_chosen_layers_before_spending_the_budget(deep_dir, tmp_path, fake_senteval,
                                                                                  monkeypatch):
    """On an engine where every layer costs 0.9/4 of the time whatever its width, only a depth candidate reaches
    1.3x: the budget stage chooses one, and the prune stage removes exactly its layers, then spends its budget on
    the rest; the final model records the layers it kept."""
    import json

    from click.testing import CliRunner

    from sparsecse.cli import main

    from sparsecse.evaluation import speed

    monkeypatch.setattr(speed, "clock", LayerClock(per_layer=0.9))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(random_sentences(96, seed=7)) + "\n")
    out = tmp_path / "run"
    stages = ["--set", "target.depth=2", "--set", "budget.recovery_steps=2", "--set", "prune.steps=1",
              "--set", "prune.reconstruct_sentences=32", "--set", "student.sentences=48",
              "--set", "student.max_steps=2", "--set", "student.eval_steps=2", "--set", "student.batch_size=8",
              "--set", "student.teacher_precision=fp32", "--set", "student.mixed_precision=no",
              "--set", "evaluation.bootstrap=20", "--set", "evaluation.speed=false", "--set", "evaluation.test=false"]
    result = CliRunner().invoke(main, ["compress", "--model", str(deep_dir), "--corpus", str(corpus), "--speedup",
                                       "1.3", "--data-dir", str(fake_senteval), "--out", str(out), "--quiet", *stages])
    assert result.exit_code == 0, result.output
    budget = json.loads((out / "stages" / "1-budget.summary.json").read_text())
    pruned = json.loads((out / "stages" / "2-prune.summary.json").read_text())
    removed = budget["layers_removed"]
    assert removed and pruned["layers_removed"] == removed
    chosen = budget["chosen"]
    recovered = [c for c in read_table(out / "model" / "candidates.csv") if c.dev_recovered is not None]
    if chosen["dev_recovered"] is None:  # no finalist scored above the deepest right after the cut: none recovered
        assert not recovered and chosen["layers_removed"] == 2
    else:  # judged after the short recovery
        assert len({c.layers_removed for c in recovered}) >= 2
    config = json.loads((out / "model" / "config.json").read_text())
    kept = [i for i in range(LAYERS) if i not in removed]
    assert (config["num_hidden_layers"], config["kept_layers"], config["source_layers"]) == (len(kept), kept, LAYERS)
    assert pruned["kept_flops_ratio"] <= budget["keep_flops"] + 1e-9  # the budget of the remaining layers
    reached = json.loads((out / "model" / "manifest.json").read_text())["figures"]["target"]
    assert (reached["depth"], reached["depth_default"], reached["layers"], reached["input_layers"]) == (
        2, False, len(kept), LAYERS)
    card = (out / "model" / "README.md").read_text()
    assert f"- **Layers:** {len(kept)} of the input model's {LAYERS} (candidates could remove up to 2)" in card
    table = read_table(out / "model" / "candidates.csv")
    assert {c.layers_removed for c in table} == {0, 1, 2}


def test_a_depth_the_model_cannot_lose_is_refused_before_any_probe(deep_dir, tmp_path, fake_engine):
    dense = SentenceEncoder.load(deep_dir, device="cpu")
    with pytest.raises(SparseCSEError, match="A model with 4 layers can lose 0 to 3 of them, not 4"):
        search_budget(deep_dir, FakeDev(dense), Target(speedup=1.6, depth=4), tmp_path / "work",
                      scores=random_scores(dense), show_progress=False)
    assert not (tmp_path / "work" / TABLE).exists()


def test_auto_depth_is_half_the_layers_at_a_latency_metric_and_none_at_throughput():
    assert Target(speedup=2.0).resolved_depth(6) == 0
    # stock keeps every head of a BERT-like model, so only depth cuts attention's FLOPs: depth at throughput too
    assert Target(speedup=3.0).resolved_depth(6, "stock") == 3
    assert Target(speedup=3.0, depth=0).resolved_depth(6, "stock") == 0
    assert Target(max_drop=1.0).resolved_depth(6, "stock") == 0
    assert Target(speedup=2.0, metric="latency-p50").resolved_depth(6) == 3
    assert Target(speedup=2.0, metric="latency-p95").resolved_depth(3) == 1
    assert Target(speedup=2.0, metric="latency-p50", depth=0).resolved_depth(6) == 0  # named: kept as named
    assert Target(speedup=2.0, depth=2).resolved_depth(6) == 2
    assert Target(max_drop=1.0, metric="latency-p50").resolved_depth(6) == 0  # depth is searched for a speed-up
    assert Target(speedup=2.0, metric="latency-p50").check().describe() == (
        "2x on torch-fp32 (latency-p50, batch 1, up to half the layers removed)")


def test_the_depth_option_reads_a_number_or_auto():
    from sparsecse.targets.aim import option_name, parse_depth

    assert [parse_depth(v) for v in (None, "auto", "AUTO", "0", "3", 2)] == [None, None, None, 0, 3, 2]
    for bad in ("-1", "1.5", "two", 1.5, True):
        with pytest.raises(SparseCSEError, match="--depth must be a whole number of layers"):
            parse_depth(bad, option_name)
        with pytest.raises(SparseCSEError, match="^depth must be a whole number of layers"):
            parse_depth(bad)


def test_only_the_finalists_a_recovery_could_put_first_are_recovered(monkeypatch):
    from types import SimpleNamespace

    from sparsecse.targets import depth_search

    def finalist(layers, budget, dev):
        return Candidate(budget, 4, 40, math.nan, dev, 90.0 - dev, "planned", layers_removed=layers)

    monkeypatch.setattr(depth_search, "depth_width_probe", lambda dense, scores, pruning, removed, budget: (
        SimpleNamespace(layers=len(removed)), None))
    after = {3: 86.0, 2: 83.0, 1: 85.5, 0: 84.0}  # dev after the recovery, by the layers a finalist removed
    recovered = []

    def recover(encoder):
        recovered.append(encoder.layers)
        return encoder

    prober = SimpleNamespace(dense=None, dev=SimpleNamespace(score=lambda encoder: after[encoder.layers]))
    order = [1, 2, 3, 4]
    # the deepest scores best right after the cut: nothing to recover, it stays first
    finalists = [finalist(3, 0.75, 82.5), finalist(1, 0.32, 81.8), finalist(2, 0.48, 81.5), finalist(0, 0.2, 81.2)]
    rank_after_recovery(finalists, prober, order, None, None, recover)
    assert recovered == [] and [c.layers_removed for c in finalists] == [3, 1, 2, 0]
    assert all(c.dev_recovered is None for c in finalists)
    # a shallower finalist above the deepest right after the cut: both are recovered (not the two they dominate)
    finalists = [finalist(1, 0.32, 83.0), finalist(3, 0.75, 82.5), finalist(2, 0.48, 81.5), finalist(0, 0.2, 81.2)]
    rank_after_recovery(finalists, prober, order, None, None, recover)
    assert sorted(recovered) == [1, 3]
    assert [c.layers_removed for c in finalists] == [3, 1, 2, 0]  # recovered best first, then the rest as they were
    assert [c.dev_recovered for c in finalists] == [86.0, 85.5, None, None]
