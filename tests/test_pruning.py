import pytest
import torch

from sparsecse.errors import SparseCSEError
from sparsecse.pruning.grid import parse_grid
from sparsecse.pruning.masks import Mask
from sparsecse.pruning.prune import PruningConfig, prune, prune_grid
from sparsecse.pruning.selection import round_half_up
from sparsecse.scoring.scores import GateScores
from tests.helpers import fake_scores


@pytest.mark.parametrize("sparsity,heads,neurons", [(0.01, 1, 92), (0.02, 1, 184), (0.05, 4, 461),
                                                     (0.1, 7, 922), (0.3, 22, 2765), (0.5, 36, 4608)])
def test_exact_counts_global(sparsity, heads, neurons):
    mask = prune(fake_scores(), sparsity, 0.5)
    assert (mask.heads_pruned, mask.neurons_pruned) == (heads, neurons)
    assert sum(mask.heads_pruned_per_layer()) == heads
    assert mask.manifest["heads_pruned"] == heads and mask.manifest["neurons_pruned"] == neurons


def test_lowest_scored_units_are_the_ones_removed():
    scores = fake_scores()
    mask = prune(scores, 0.1, 0.25)
    h = scores.head_scores(0.25)
    assert h[~mask.head_mask].max() <= h[mask.head_mask].min()
    n = scores.neuron_scores(0.25)
    assert n[~mask.neuron_mask].max() <= n[mask.neuron_mask].min()


def test_keep_one_head_per_layer():
    scores = fake_scores(layers=3, heads=4, ffn=8)
    scores.head_grad_align[:, 0] = 0.0  # layer 0 has the lowest scores everywhere
    scores.head_grad_uniform[:, 0] = 0.0
    kept = prune(scores, 0.5, 0.5)  # 6 heads
    assert kept.head_mask[0].sum() == 1 and kept.heads_pruned == 6
    emptied = prune(scores, 0.5, 0.5, config=PruningConfig(keep_one_head=False))
    assert emptied.head_mask[0].sum() == 0


def test_layer_scope_prunes_the_same_number_in_every_layer():
    mask = prune(fake_scores(), 0.25, 0.5, config=PruningConfig(scope="layer"))
    assert mask.heads_pruned_per_layer() == [3] * 6
    assert mask.neurons_pruned_per_layer() == [384] * 6


def test_param_sparsity_counts_removed_parameters():
    mask = prune(fake_scores(), 0.02, 0.5)
    d, dh = 384, 32
    expected = 1 * (4 * d * dh + 3 * dh) + 184 * (2 * d + 1)
    assert mask.manifest["encoder_params_removed"] == expected
    assert 0 < mask.manifest["encoder_param_sparsity"] < 0.03


def test_grid_is_cheap_and_complete():
    grid = prune_grid(fake_scores(), "0.01:0.10:0.01,0.2:0.5:0.1", "0.25,0.5,0.75")
    assert len(grid) == 42
    assert grid[(0.2, 0.75)].neurons_pruned == round_half_up(0.2 * 9216)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5])
def test_bad_sparsity_rejected(bad):
    with pytest.raises(SparseCSEError, match="sparsity must lie strictly between 0 and 1"):
        prune(fake_scores(), bad, 0.5)


@pytest.mark.parametrize("bad", [-0.01, 1.01])
def test_bad_lambda_rejected(bad):
    with pytest.raises(SparseCSEError, match="lambda must lie in"):
        prune(fake_scores(), 0.1, bad)


def test_mask_file_round_trip(tmp_path):
    mask = prune(fake_scores(), 0.05, 0.5)
    mask.save(tmp_path / "m.safetensors")
    loaded = Mask.load(tmp_path / "m.safetensors")
    assert torch.equal(loaded.head_mask, mask.head_mask) and torch.equal(loaded.neuron_mask, mask.neuron_mask)
    for key in ("heads_pruned", "neurons_pruned", "sparsity", "lambda", "heads_pruned_per_layer",
                "neurons_pruned_per_layer", "encoder_param_sparsity"):
        assert key in loaded.manifest


def test_grid_parser_ranges_and_lists():
    assert parse_grid("0.01:0.05:0.01,0.2") == [0.01, 0.02, 0.03, 0.04, 0.05, 0.2]
    with pytest.raises(SparseCSEError):
        parse_grid("0.1:0.05:0.01")
    with pytest.raises(SparseCSEError):
        parse_grid("abc")
