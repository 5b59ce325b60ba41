"""Iterative budgeted pruning (prune -> reconstruct -> rescore): meets the budget exactly, each step
chooses within the previous one, one step is one-shot pruning + reconstruction, the shrunk model
computes what the silenced full-size model computes."""

import itertools
import json

import pytest
import torch
from click.testing import CliRunner

from sparsecse.pruning.budget import UnitCosts, budget_cap, select_under_budget
from sparsecse.cli import main
from sparsecse.shrinking import iterative
from sparsecse.shrinking.iterative import (continued_budgets, iterative_prune, shrink_iterative, silence,
                                          step_budgets)
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.flops import count_parameters, flops_per_token
from sparsecse.pruning.prune import PruningConfig, prune
from sparsecse.shrinking.reconstruction import ReconstructionPlan
from sparsecse.scoring.score import ScoringConfig, score
from sparsecse.shrinking.shrink import ShrinkConfig, shrink
from tests.helpers import fake_scores
from tests.tiny import SENTENCES


@pytest.fixture(scope="module")
def dense_scores(tiny_bert_dir, tiny_stsb_dir):
    return score(tiny_bert_dir, device="cpu", config=ScoringConfig(data_dir=tiny_stsb_dir, batch_size=8, seed=0))


def test_step_budgets_are_geometric_and_end_at_the_budget():
    assert step_budgets(0.5, 1) == [0.5]
    b = step_budgets(0.5, 3)
    assert b[-1] == 0.5 and b[0] == pytest.approx(0.5 ** (1 / 3)) and b[1] == pytest.approx(0.5 ** (2 / 3))
    for bad in (0, -1, 1.5):
        with pytest.raises(SparseCSEError, match="whole number of at least 1"):
            step_budgets(0.5, bad)


def test_a_continued_path_takes_the_steps_its_log_distance_takes_from_the_dense_model():
    assert continued_budgets(0.566, 0.419, 3) == [0.419]  # a third of log(0.419)'s distance: one of three steps
    b = continued_budgets(0.8, 0.2, 3)  # 86% of it: three steps, geometric
    assert len(b) == 3 and b[-1] == 0.2 and b[0] == pytest.approx(0.8 * 0.25 ** (1 / 3))
    for start, budget in ((0.4, 0.5), (0.4, 0.4), (1.5, 0.4)):
        with pytest.raises(SparseCSEError, match="continues to a smaller budget"):
            continued_budgets(start, budget, 3)


def test_continuing_a_path_is_one_run_through_both_budgets(tiny_bert_dir, tiny_stsb_dir, corpus, dense_scores,
                                                           monkeypatch):
    plan = ReconstructionPlan.prepare(corpus, 20)
    settings = dict(reconstruct=plan, score=ScoringConfig(data_dir=tiny_stsb_dir, batch_size=8), device="cpu")
    larger = iterative_prune(tiny_bert_dir, keep_flops=0.6, steps=2, scores=dense_scores, **settings)
    path = larger.path
    assert path.kept == larger.mask.manifest["kept_flops_ratio"] and path.budgets == step_budgets(0.6, 2)
    before = larger.encoder.encode(SENTENCES)
    shrink_iterative(larger, config=ShrinkConfig(align_ffn=1))  # shrinks a copy: the path stays as it was
    assert abs(path.encoder.encode(SENTENCES) - before).max() == 0 and path.encoder is larger.encoder
    went_on = iterative_prune(path, keep_flops=0.3, steps=2, **settings)
    assert went_on.mask.manifest["iterative"]["budgets"] == pytest.approx(path.budgets + continued_budgets(
        path.kept, 0.3, 2)) and went_on.mask.manifest["iterative"]["continued_after"] == 2
    # the independent path: one run from the dense model through every budget of both
    monkeypatch.setattr(iterative, "step_budgets", lambda budget, steps: path.budgets + continued_budgets(
        path.kept, 0.3, 2))
    whole = iterative_prune(tiny_bert_dir, keep_flops=0.3, steps=2, scores=dense_scores, **settings)
    assert torch.equal(went_on.mask.head_mask, whole.mask.head_mask)
    assert torch.equal(went_on.mask.neuron_mask, whole.mask.neuron_mask)
    assert abs(went_on.encoder.encode(SENTENCES) - whole.encoder.encode(SENTENCES)).max() < 1e-5
    assert not (went_on.mask.head_mask & ~path.mask.head_mask).any()  # within where the path stood
    with pytest.raises(SparseCSEError, match="rescores its first step"):
        iterative_prune(path, keep_flops=0.3, steps=2, scores=dense_scores, **settings)


def test_search_within_allowed_units_is_optimal_and_never_leaves_them():
    layers, heads, ffn = 2, 3, 4
    g = torch.Generator().manual_seed(3)
    hs = torch.rand(layers, heads, generator=g, dtype=torch.float64)
    ns = torch.rand(layers, ffn, generator=g, dtype=torch.float64)
    allowed_h = torch.tensor([[True, False, True], [True, True, False]])
    allowed_n = torch.tensor([[True, True, False, True], [False, True, True, True]])
    costs = UnitCosts("flops", head=5, neuron=2, fixed=0, layers=layers, heads=heads, ffn=ffn)
    values = torch.cat([hs.flatten(), ns.flatten()]).tolist()
    unit_cost = [5] * (layers * heads) + [2] * (layers * ffn)
    ok = torch.cat([allowed_h.flatten(), allowed_n.flatten()]).tolist()
    candidates = [i for i in range(len(values)) if ok[i]]
    for budget in (0.2, 0.45, 0.6):
        cap = budget_cap(costs, budget)
        best = max(sum(values[i] for i in subset) for r in range(len(candidates) + 1)
                   for subset in itertools.combinations(candidates, r) if sum(unit_cost[i] for i in subset) <= cap)
        hk, nk = select_under_budget(hs, ns, costs, budget, allowed=(allowed_h, allowed_n))
        assert not (hk & ~allowed_h).any() and not (nk & ~allowed_n).any()
        assert costs.kept(hk, nk) <= cap
        assert float(hs[hk].sum() + ns[nk].sum()) == pytest.approx(best, abs=1e-9)


def test_prune_within_a_previous_mask():
    scores = fake_scores()
    outer = prune(scores, keep_flops=0.7)
    # abs_grad would choose otherwise
    inner = prune(scores, keep_flops=0.5, within=outer, config=PruningConfig(criterion="abs_grad"))
    assert not (inner.head_mask & ~outer.head_mask).any() and not (inner.neuron_mask & ~outer.neuron_mask).any()
    assert inner.manifest["kept_flops_ratio"] <= 0.5
    with pytest.raises(SparseCSEError, match="kept-FLOPs or kept-parameters budget"):
        prune(scores, sparsity=0.3, within=outer)


@pytest.mark.parametrize("metric,budget", [("flops", 0.5), ("params", 0.4)])
def test_iterative_meets_the_budget_exactly_and_the_shrunk_model_counts_it(tiny_bert_dir, tiny_stsb_dir, corpus,
                                                                            dense_scores, metric, budget):
    plan = ReconstructionPlan.prepare(corpus, 20)
    result = iterative_prune(tiny_bert_dir, steps=3, reconstruct=plan, scores=dense_scores,
                             score=ScoringConfig(data_dir=tiny_stsb_dir, batch_size=8), prune=PruningConfig(seq_len=64),
                             device="cpu", **{f"keep_{metric}": budget})
    mask, m = result.mask, result.mask.manifest
    assert [r["step"] for r in result.steps] == [1, 2, 3] and m["method"] == "iterative"
    assert m["iterative"]["budgets"] == pytest.approx(step_budgets(budget, 3))
    kept = [(r["heads_kept"], r["neurons_kept"]) for r in result.steps]
    assert all(a[0] >= b[0] and a[1] >= b[1] for a, b in zip(kept, kept[1:]))
    assert (m["criterion"], m["criterion_default"]) == ("fisher", True)
    # exactly the budget: under the cap, and no unit not kept would still fit
    costs = UnitCosts.from_shape(dense_scores.manifest["shape"], metric, 64)
    left = budget_cap(costs, budget) - costs.kept(mask.head_mask, mask.neuron_mask)
    cheapest = min(([costs.head] if (~mask.head_mask).any() else [])
                   + ([costs.neuron] if (~mask.neuron_mask).any() else []))
    assert 0 <= left < cheapest
    # the silenced full-size model and the shrunk one compute the same embeddings
    full = result.encoder.encode(SENTENCES)
    dense = SentenceEncoder.load(tiny_bert_dir, device="cpu")
    shrunk = shrink_iterative(result, config=ShrinkConfig(align_ffn=1, seq_len=64))
    assert abs(shrunk.encoder.encode(SENTENCES) - full).max() < 1e-5
    assert flops_per_token(shrunk.encoder, 64) == m["kept_flops"]
    assert count_parameters(shrunk.encoder, "layers") == m["kept_params"]
    assert flops_per_token(dense, 64) == m["dense_flops"]


def test_one_step_is_one_shot_pruning_with_reconstruction(tiny_bert_dir, corpus, dense_scores, tmp_path):
    plan = ReconstructionPlan.prepare(corpus, 20)
    result = iterative_prune(tiny_bert_dir, keep_flops=0.5, steps=1, reconstruct=plan, scores=dense_scores,
                             device="cpu")
    one_shot = prune(dense_scores, keep_flops=0.5)
    assert torch.equal(result.mask.head_mask, one_shot.head_mask)
    assert torch.equal(result.mask.neuron_mask, one_shot.neuron_mask)
    reference = shrink(tiny_bert_dir, one_shot, config=ShrinkConfig(reconstruct=plan, align_ffn=1, device="cpu"))
    ours = shrink_iterative(result, out=tmp_path / "out", config=ShrinkConfig(align_ffn=1))
    assert abs(reference.encoder.encode(SENTENCES) - ours.encoder.encode(SENTENCES)).max() < 1e-5
    manifest = json.loads((tmp_path / "out" / "sparsecse_config.json").read_text())["manifest"]
    assert manifest["mask_manifest"]["method"] == "iterative" and manifest["method_seconds"] > 0
    reloaded = SentenceEncoder.load(tmp_path / "out", device="cpu")
    assert abs(reloaded.encode(SENTENCES) - ours.encoder.encode(SENTENCES)).max() < 1e-5


def test_silence_equals_the_mask(tiny_bert_dir, dense_scores):
    mask = prune(dense_scores, keep_flops=0.5)
    gated = SentenceEncoder.load(tiny_bert_dir, device="cpu")
    gates = mask.apply(gated.model)
    expected = gated.encode(SENTENCES)
    gates.detach()
    silenced = SentenceEncoder.load(tiny_bert_dir, device="cpu")
    silence(silenced.model, mask)
    assert abs(silenced.encode(SENTENCES) - expected).max() < 1e-5


def test_refusals(tiny_bert_dir, corpus):
    with pytest.raises(SparseCSEError, match="reconstruction corpus"):
        iterative_prune(tiny_bert_dir, keep_flops=0.5)
    with pytest.raises(SparseCSEError, match="exactly one of"):
        iterative_prune(tiny_bert_dir, reconstruct=corpus)
    with pytest.raises(SparseCSEError, match="must lie in"):
        iterative_prune(tiny_bert_dir, keep_flops=1.5, reconstruct=corpus)


def test_cli_compress(tiny_bert_dir, tiny_stsb_dir, corpus, dense_scores, tmp_path):
    scores_path = dense_scores.save(tmp_path / "scores.safetensors")
    out = tmp_path / "small"
    args = ["compress", "--model", str(tiny_bert_dir), "--scores", str(scores_path), "--data-dir", str(tiny_stsb_dir),
            "--reconstruct", str(corpus), "--reconstruct-sentences", "20", "--score-batch-size", "8", "--device", "cpu",
            "--quiet"]
    result = CliRunner().invoke(main, [*args, "--keep-flops", "0.6", "--steps", "2", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["mask"]["kept_flops_ratio"] <= 0.6 and len(report["reconstruction"]["steps"]) == 2
    small = SentenceEncoder.load(out, device="cpu")
    assert flops_per_token(small, 128) <= 0.6 * flops_per_token(SentenceEncoder.load(tiny_bert_dir), 128) + \
        8 * 4 * 32  # at most the zero neurons --align-ffn 8 adds per layer
    bad = CliRunner().invoke(main, [*args, "--keep-flops", "0", "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 1 and "must lie in (0, 1]" in bad.output and not (tmp_path / "bad").exists()
    assert "compress" in CliRunner().invoke(main, ["--help"]).output


def test_steps_sized_by_the_cut_keep_at_least_step_keeps_of_each_step_up_to_the_default():
    from sparsecse.shrinking.iterative import DEFAULT_STEPS, STEP_KEEPS, resolve_steps, sized_steps

    for budget in (0.99, 0.9, 0.8, 0.72, 0.7, 0.69, 0.6, 0.5, 0.49, 0.45, 0.3, 0.1):
        steps = sized_steps(budget)
        assert 1 <= steps <= DEFAULT_STEPS
        kept_per_step = budget ** (1 / steps)
        if steps < DEFAULT_STEPS:  # within the cap, the fewest steps that keep STEP_KEEPS of each step
            assert kept_per_step >= STEP_KEEPS - 1e-9
        if steps > 1:  # and one step fewer would keep less
            assert budget ** (1 / (steps - 1)) < STEP_KEEPS
    assert [sized_steps(b) for b in (0.72, 0.6, 0.45)] == [1, 2, 3]
    assert resolve_steps("auto", 0.6) == 2 and resolve_steps(3, 0.95) == 3
    for bad in (0, -0.5, 1.5):
        with pytest.raises(SparseCSEError, match=r"must lie in \(0, 1\]"):
            sized_steps(bad)
