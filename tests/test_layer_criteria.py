"""Layer importance for depth pruning: ShortGPT's Block Influence on known values, and on every family
(a layer made an identity has influence 0 and is the first to go); the greedy embedding-fidelity order against
models with the layers really removed."""

import pytest
import torch

from sparsecse.errors import SparseCSEError
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.pruning.masks import Mask
from sparsecse.scoring.criteria import CRITERIA, criterion_names, default_criterion, get_criterion
from sparsecse.scoring.layer_criteria import greedy_order, layer_scores, layers_to_remove, removal_order
from sparsecse.shrinking.layers import without_layers
from tests.helpers import random_sentences
from tests.tiny import make_tiny_model_dir
from tests.tiny_modern import FFN, make_modern_model_dir

SENTENCES = random_sentences(12, seed=7)


def test_block_influence_on_known_values():
    bi = get_criterion("block_influence", unit="layer")
    inputs = torch.tensor([[[[1.0, 0.0], [1.0, 0.0], [3.0, 4.0]]],  # layer 0: same, orthogonal, padding
                           [[[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]]]])  # layer 1: opposite, same, padding
    outputs = torch.tensor([[[[5.0, 0.0], [0.0, 2.0], [0.0, 0.0]]],
                            [[[-1.0, 0.0], [0.0, 3.0], [9.0, -9.0]]]])
    total, count = bi.per_batch(inputs, outputs, torch.tensor([[1, 1, 0]]))
    assert total.tolist() == [0.0 + 1.0, 2.0 + 0.0] and count.tolist() == [2.0, 2.0]
    assert "block_influence" in criterion_names("layer") and default_criterion("layers") == "embedding_fidelity"
    with pytest.raises(SparseCSEError, match="Unknown layer criterion 'nope'; choose block_influence, embedding_fidel"):
        get_criterion("nope", unit="layer")


def test_one_registry_holds_both_units_and_each_setting_takes_its_own():
    """A layer criterion is registered beside the head/neuron ones; each unit's settings refuse the other's."""
    assert {"abs_grad", "fisher", "layer_norm", "block_influence"} <= set(CRITERIA)
    assert "block_influence" not in criterion_names("gate") and "fisher" not in criterion_names("layer")
    with pytest.raises(SparseCSEError, match="Unknown criterion 'block_influence'; choose abs_grad"):
        get_criterion("block_influence")
    with pytest.raises(SparseCSEError, match="Unknown layer criterion 'fisher'"):
        get_criterion("fisher", unit="layer")


@pytest.mark.parametrize("arch", ["bert", "mpnet", "modernbert", "qwen3", "gemma3_text"])
def test_a_skipped_layer_has_influence_zero_and_goes_first(arch, tmp_path):
    path = (make_tiny_model_dir(tmp_path / arch, arch, layers=3, init_range=0.2) if arch in ("bert", "mpnet")
            else make_modern_model_dir(tmp_path / arch, arch))
    encoder = SentenceEncoder.load(path, pooling="mean", device="cpu")
    dense = layer_scores(encoder, SENTENCES, batch_size=5)
    assert dense.shape == (3,) and bool((dense > 1e-4).all())
    with Mask.for_model(encoder.model).without_layers([1]).apply(encoder.model):
        scores = layer_scores(encoder, SENTENCES, batch_size=5)
    assert scores[1].item() == pytest.approx(0.0, abs=1e-12)
    assert scores[0].item() == pytest.approx(dense[0].item(), rel=1e-6)  # the layer before is untouched
    assert layers_to_remove(scores, 1) == [1]


def test_a_pre_norm_layer_with_zero_output_projections_is_an_identity(tmp_path):
    """Qwen3's layers add their attention and FFN to the residual: with o_proj and down_proj at zero the
    layer is the identity, its influence 0, and the batch size does not change the scores."""
    encoder = SentenceEncoder.load(make_modern_model_dir(tmp_path / "qwen3", "qwen3"), pooling="last", device="cpu")
    with torch.no_grad():
        encoder.model.layers[2].self_attn.o_proj.weight.zero_()
        encoder.model.layers[2].mlp.down_proj.weight.zero_()
    scores = layer_scores(encoder, SENTENCES, batch_size=4)
    assert scores[2].item() == pytest.approx(0.0, abs=1e-12) and bool((scores[:2] > 1e-4).all())
    assert torch.allclose(layer_scores(encoder, SENTENCES, batch_size=12), scores, rtol=1e-6)
    assert FFN == encoder.model.layers[2].mlp.down_proj.in_features


def test_layers_to_remove_takes_the_least_important():
    scores = torch.tensor([0.9, 0.1, 0.5, 0.1, 0.7])
    assert layers_to_remove(scores, 0) == []
    assert layers_to_remove(scores, 2) == [1, 3]
    assert layers_to_remove(scores, 3) == [1, 2, 3]
    with pytest.raises(SparseCSEError, match="can lose 0 to 4 of them, not 5"):
        layers_to_remove(scores, 5)



def test_embedding_fidelity_on_known_values():
    fidelity = get_criterion("embedding_fidelity", unit="layer")
    reference = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    assert fidelity.cost(reference * 3, reference) == pytest.approx(0.0, abs=1e-12)  # cosine ignores the length
    assert fidelity.cost(torch.tensor([[0.0, 1.0], [0.0, 5.0]]), reference) == pytest.approx(0.5)  # cos 0 and 1


@pytest.mark.parametrize("arch", ["bert", "qwen3"])
def test_the_greedy_order_is_that_of_models_with_the_layers_really_removed(arch, tmp_path):
    """Each step's choice, re-derived from copies of the model with the layers removed by surgery (an independent
    path: the order itself skips layers with hooks), is the one the greedy order made."""
    path = (make_tiny_model_dir(tmp_path / arch, arch, layers=4, init_range=0.2) if arch == "bert"
            else make_modern_model_dir(tmp_path / arch, arch))
    encoder = SentenceEncoder.load(path, pooling="mean", device="cpu")
    layers = encoder.config.num_hidden_layers
    criterion = get_criterion("embedding_fidelity", unit="layer")
    reference = torch.as_tensor(encoder.encode(SENTENCES, batch_size=5, convert_to_numpy=False))

    def cost(removed):
        cut = without_layers(encoder, sorted(removed))
        return criterion.cost(torch.as_tensor(cut.encode(SENTENCES, batch_size=5, convert_to_numpy=False)), reference)

    order = greedy_order(encoder, SENTENCES, criterion, batch_size=5, limit=2)
    assert sorted(order) == list(range(layers)) and order[2:] == sorted(order[2:])  # the rest in index order
    for step in range(2):
        costs = {i: cost({*order[:step], i}) for i in range(layers) if i not in order[:step]}
        assert order[step] == min(costs, key=lambda i: (costs[i], -i))
        best, second = sorted(costs.values())[:2]
        assert second - best > 1e-6  # the choice is not decided by float rounding
    assert removal_order(encoder, SENTENCES, batch_size=5, limit=2) == order  # the default for layers
    assert len(greedy_order(encoder, SENTENCES, criterion, batch_size=5)) == layers
    with pytest.raises(SparseCSEError, match="can lose 0 to"):
        greedy_order(encoder, SENTENCES, criterion, limit=layers)


def test_a_layer_made_an_identity_is_the_first_the_greedy_order_removes(tmp_path):
    encoder = SentenceEncoder.load(make_modern_model_dir(tmp_path / "qwen3", "qwen3"), pooling="last", device="cpu")
    with torch.no_grad():
        encoder.model.layers[1].self_attn.o_proj.weight.zero_()
        encoder.model.layers[1].mlp.down_proj.weight.zero_()
    assert removal_order(encoder, SENTENCES, "embedding_fidelity", batch_size=4, limit=1)[0] == 1
    assert removal_order(encoder, SENTENCES, "block_influence", batch_size=4)[0] == 1  # both kinds agree here
