"""Budgeted pruning: exact to the budget, optimal for its objective, and counted like the shrunk model."""

import itertools
import json

import pytest
import torch
from click.testing import CliRunner

from sparsecse.pruning.budget import UnitCosts, budget_cap, select_under_budget
from sparsecse.cli import main
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.flops import count_parameters, flops_per_token
from sparsecse.pruning.masks import Mask
from sparsecse.pruning.prune import PruningConfig, prune, prune_grid
from sparsecse.scoring.scores import GateScores
from tests.helpers import fake_scores


def unit_costs_left(mask, costs, cap):
    """Budget left over, and the cheapest cost of a unit the mask did not keep."""
    left = cap - costs.kept(mask.head_mask, mask.neuron_mask)
    not_kept = ([costs.head] if (~mask.head_mask).any() else []) + ([costs.neuron] if (~mask.neuron_mask).any() else [])
    return left, min(not_kept) if not_kept else None


@pytest.mark.parametrize("metric", ["flops", "params"])
@pytest.mark.parametrize("budget", [0.9, 0.7, 0.5, 0.35, 0.1])
def test_budget_is_met_and_the_next_unit_would_exceed_it(metric, budget):
    scores = fake_scores()
    mask = prune(scores, keep_flops=budget) if metric == "flops" else prune(scores, keep_params=budget)
    costs = UnitCosts.from_shape(scores.manifest["shape"], metric, 128)
    cap = budget_cap(costs, budget)
    left, cheapest = unit_costs_left(mask, costs, cap)
    assert 0 <= left < cheapest
    m = mask.manifest
    assert m[f"kept_{metric}"] == costs.kept(mask.head_mask, mask.neuron_mask) <= budget * costs.dense
    assert m[f"kept_{metric}_ratio"] == pytest.approx(m[f"kept_{metric}"] / costs.dense)
    assert m["budget"] == {"metric": metric, "keep": budget, "seq_len": 128 if metric == "flops" else None}
    assert m["criterion"] == "fisher" and m["criterion_default"] is True
    assert m["sparsity"] is None and m["seq_len"] == 128


def test_default_criterion_is_fisher_for_budgets_and_abs_grad_for_sparsity():
    scores = fake_scores()
    for kw, expected in ((dict(keep_flops=0.5), "fisher"), (dict(keep_params=0.6), "fisher"),
                         (dict(sparsity=0.3), "abs_grad")):
        default = prune(scores, **kw)
        explicit = prune(scores, config=PruningConfig(criterion=expected), **kw)
        assert (default.manifest["criterion"], default.manifest["criterion_default"]) == (expected, True)
        assert (explicit.manifest["criterion"], explicit.manifest["criterion_default"]) == (expected, False)
        assert torch.equal(default.head_mask, explicit.head_mask)
        assert torch.equal(default.neuron_mask, explicit.neuron_mask)
    # the default is a choice, not a fixed rule: another criterion gives another mask here
    other = prune(scores, keep_flops=0.5, config=PruningConfig(criterion="abs_grad"))
    assert other.manifest["criterion_default"] is False
    assert not torch.equal(torch.cat([other.head_mask.flatten(), other.neuron_mask.flatten()]),
                           torch.cat([prune(scores, keep_flops=0.5).head_mask.flatten(),
                                      prune(scores, keep_flops=0.5).neuron_mask.flatten()]))
    grid = prune_grid(scores, keep_flops="0.5,0.7")
    assert {m.manifest["criterion"] for m in grid.values()} == {"fisher"}
    assert {m.manifest["criterion"] for m in prune_grid(scores, sparsities="0.2,0.4").values()} == {"abs_grad"}


def test_search_is_optimal_against_brute_force():
    layers, heads, ffn = 2, 3, 4
    g = torch.Generator().manual_seed(1)
    head_scores = torch.rand(layers, heads, generator=g, dtype=torch.float64)
    neuron_scores = torch.rand(layers, ffn, generator=g, dtype=torch.float64)
    costs = UnitCosts("flops", head=5, neuron=2, fixed=0, layers=layers, heads=heads, ffn=ffn)
    values = torch.cat([head_scores.flatten(), neuron_scores.flatten()]).tolist()
    unit_cost = [5] * (layers * heads) + [2] * (layers * ffn)
    for budget in (0.2, 0.45, 0.6, 0.85):
        cap = budget_cap(costs, budget)
        best = max(sum(values[i] for i in subset)
                   for r in range(len(values) + 1) for subset in itertools.combinations(range(len(values)), r)
                   if sum(unit_cost[i] for i in subset) <= cap)
        hk, nk = select_under_budget(head_scores, neuron_scores, costs, budget)
        assert costs.kept(hk, nk) <= cap
        got = float(head_scores[hk].sum() + neuron_scores[nk].sum())
        assert got == pytest.approx(best, abs=1e-9)


def test_prune_keeps_the_best_subset_of_every_subset_within_the_budget():
    """prune --keep-flops against a true enumeration: every subset of the 6 heads and 10 neurons, costed by the
    shrunk model's count, the best total importance within the budget (no search, no ordering assumed)."""
    import numpy as np

    scores = fake_scores(layers=2, heads=3, ffn=5)
    hs, ns = scores.head_scores(0.5, "abs_grad"), scores.neuron_scores(0.5, "abs_grad")
    costs = UnitCosts.from_shape(scores.manifest["shape"], "flops", 16)
    units = hs.numel() + ns.numel()
    subsets = (np.arange(2 ** units)[:, None] >> np.arange(units)) & 1  # row k: the units subset k keeps
    values = subsets @ np.concatenate([hs.flatten().numpy(), ns.flatten().numpy()]).astype(np.float64)
    cost = np.array([costs.kept(torch.from_numpy(row[:hs.numel()]).view(hs.shape),
                                torch.from_numpy(row[hs.numel():]).view(ns.shape)) for row in subsets])
    for budget in (0.3, 0.5, 0.8):
        best = values[cost <= budget * costs.dense].max()
        mask = prune(scores, keep_flops=budget, config=PruningConfig(seq_len=16, criterion="abs_grad"))
        assert costs.kept(mask.head_mask, mask.neuron_mask) <= budget * costs.dense
        got = float(hs.double()[mask.head_mask].sum() + ns.double()[mask.neuron_mask].sum())
        assert got == pytest.approx(best, rel=1e-12)


def test_keep_one_head_option_and_emptied_attention():
    scores = fake_scores(layers=3, heads=4, ffn=8)
    for t in (scores.head_grad_align, scores.head_grad_uniform):
        t[:, 0] = 0.0  # layer 0's heads are worthless
    emptied = prune(scores, keep_flops=0.6)
    assert emptied.head_mask[0].sum() == 0 and emptied.manifest["keep_one_head"] is False
    kept = prune(scores, keep_flops=0.6, config=PruningConfig(keep_one_head=True))
    assert (kept.head_mask.sum(1) >= 1).all()


@pytest.mark.parametrize("kwargs,message", [
    (dict(keep_flops=0.0), "must lie in (0, 1]"),
    (dict(keep_flops=1.5), "must lie in (0, 1]"),
    (dict(keep_flops=float("nan")), "must lie in (0, 1]"),
    (dict(keep_params=-0.1), "must lie in (0, 1]"),
    (dict(keep_flops=1e-7), "keeps no head and no neuron"),
    (dict(keep_params=0.001), "below what the layers' biases and LayerNorms cost"),
    (dict(keep_flops=0.01, config=PruningConfig(keep_one_head=True)), "one head per layer"),
    (dict(keep_flops=0.5, sparsity=0.5), "exactly one of"),
    (dict(), "exactly one of"),
    (dict(keep_flops=0.5, config=PruningConfig(scope="layer")), "scope must be global"),
    (dict(keep_flops=0.5, config=PruningConfig(criterion="taylor")), "Unknown criterion"),
])
def test_bad_budgets_are_refused(kwargs, message):
    with pytest.raises(SparseCSEError, match=message.replace("(", r"\(").replace(")", r"\)").replace("]", r"\]")):
        prune(fake_scores(), **kwargs)


def test_full_budget_keeps_everything():
    mask = prune(fake_scores(), keep_flops=1.0)
    assert mask.heads_pruned == 0 and mask.neurons_pruned == 0 and mask.manifest["kept_flops_ratio"] == 1.0


@pytest.fixture(scope="module")
def tiny_scores(tiny_bert_dir, tiny_stsb_dir):
    from sparsecse.scoring.score import ScoringConfig, score

    return score(tiny_bert_dir, config=ScoringConfig(data_dir=tiny_stsb_dir, batch_size=8, seed=0))


@pytest.mark.parametrize("budget,seq_len,allow_empty", [(0.5, 128, False), (0.35, 16, False), (0.3, 64, True)])
def test_shrunk_model_counts_what_the_manifest_says(tiny_bert_dir, tiny_scores, budget, seq_len, allow_empty):
    from sparsecse.modeling.encoder import SentenceEncoder
    from sparsecse.shrinking.surgery import shrink_encoder

    scores = tiny_scores
    if allow_empty:  # make layer 0's attention worthless so the budget empties it
        scores = GateScores(scores.head_grad_align.clone(), scores.head_grad_uniform.clone(), scores.neuron_grad_align,
                            scores.neuron_grad_uniform, manifest=scores.manifest, batch_sizes=scores.batch_sizes)
        scores.head_grad_align[:, 0] = scores.head_grad_uniform[:, 0] = 0.0
    mask = prune(scores, keep_flops=budget, config=PruningConfig(seq_len=seq_len))
    if allow_empty:
        assert mask.head_mask[0].sum() == 0
    dense = SentenceEncoder.load(tiny_bert_dir)
    small = shrink_encoder(SentenceEncoder.load(tiny_bert_dir), mask)
    m = mask.manifest
    assert flops_per_token(dense, seq_len) == m["dense_flops"]
    assert flops_per_token(small, seq_len) == m["kept_flops"]
    assert count_parameters(dense, "layers") == m["dense_params"]
    assert count_parameters(small, "layers") == m["kept_params"]
    assert m["kept_flops"] <= budget * m["dense_flops"]


def test_cli_keep_flops(tiny_scores, tmp_path):
    path = tiny_scores.save(tmp_path / "scores.safetensors")
    out = tmp_path / "mask.safetensors"
    result = CliRunner().invoke(main, ["prune", "--scores", str(path), "--keep-flops", "0.5", "--criterion", "fisher",
                                       "--seq-len", "64", "--out", str(out)])
    assert result.exit_code == 0, result.output
    m = json.loads((tmp_path / "mask.json").read_text())
    assert m["criterion"] == "fisher" and m["budget"]["keep"] == 0.5 and m["seq_len"] == 64
    assert m["kept_flops_ratio"] <= 0.5
    assert "kept-flops 0.5 (n=64)" in result.output and Mask.load(out).shape == tiny_scores.shape
    assert "fisher (global)" in result.output  # given, so not marked as the default

    default = CliRunner().invoke(main, ["prune", "--scores", str(path), "--keep-flops", "0.5", "--out",
                                        str(tmp_path / "default.safetensors")])
    assert default.exit_code == 0, default.output
    assert "fisher (default) (global)" in default.output
    m = json.loads((tmp_path / "default.json").read_text())
    assert (m["criterion"], m["criterion_default"]) == ("fisher", True)
    help_text = " ".join(CliRunner().invoke(main, ["prune", "--help"]).output.split())
    assert "default: abs_grad for --sparsity" in help_text and "fisher for" in help_text

    grid = CliRunner().invoke(main, ["prune", "--scores", str(path), "--keep-params", "0.5,0.7", "--out",
                                     str(tmp_path / "grid")])
    assert grid.exit_code == 0, grid.output
    assert sorted(p.name for p in (tmp_path / "grid").glob("*.safetensors")) == ["mask-p0.5-l0.5.safetensors",
                                                                                 "mask-p0.7-l0.5.safetensors"]


@pytest.mark.parametrize("args,message", [
    (["--keep-flops", "0.5", "--sparsity", "0.5"], "exactly one of"),
    (["--keep-flops", "0"], "must lie in (0, 1]"),
    (["--keep-flops", "1e-7"], "keeps no head and no neuron"),
])
def test_cli_bad_budget_writes_nothing(tiny_scores, tmp_path, args, message):
    path = tiny_scores.save(tmp_path / "scores.safetensors")
    out = tmp_path / "mask.safetensors"
    result = CliRunner().invoke(main, ["prune", "--scores", str(path), *args, "--out", str(out)])
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output
    assert not out.exists() and not (tmp_path / "mask.json").exists()
