import pytest
import torch

from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.errors import SparseCSEError
from sparsecse.scoring.gates import Gates
from sparsecse.modeling.adapters import get_adapter, layer_parts
from sparsecse.pruning.masks import Mask
from tests.tiny import SENTENCES, make_tiny_model_dir
from tests.helpers import assert_gate_gradients_match_finite_differences


@pytest.fixture(scope="module", params=["bert", "roberta", "distilbert"])
def encoder(request, tmp_path_factory):
    path = make_tiny_model_dir(tmp_path_factory.mktemp(request.param), request.param)
    return SentenceEncoder.load(path, pooling="mean")


def embed(enc):
    return enc.encode(SENTENCES[:6], convert_to_numpy=False)


def test_all_ones_gates_leave_embeddings_bit_identical(encoder):
    before = embed(encoder)
    with Gates.ones_for(encoder.model).attach(encoder.model):
        during = embed(encoder)
    after = embed(encoder)
    assert torch.equal(before, during)
    assert torch.equal(before, after)  # detached cleanly


@pytest.mark.parametrize("layer,head", [(0, 0), (1, 3)])
def test_zero_head_gate_equals_deleting_the_head(encoder, layer, head):
    gates = Gates.ones_for(encoder.model)
    gates.head[layer, head] = 0.0
    with gates.attach(encoder.model):
        gated = embed(encoder)
    part = layer_parts(encoder.model)[layer]
    cols = slice(head * part.head_dim, (head + 1) * part.head_dim)
    saved = part.attn_out.weight.data.clone()
    part.attn_out.weight.data[:, cols] = 0.0  # the head's only path to the output
    try:
        by_hand = embed(encoder)
    finally:
        part.attn_out.weight.data.copy_(saved)
    assert torch.allclose(gated, by_hand, atol=1e-6)
    assert not torch.allclose(gated, embed(encoder), atol=1e-4)


def test_zero_neuron_gates_equal_deleting_the_neurons(encoder):
    gates = Gates.ones_for(encoder.model)
    drop = [1, 5, 7]
    gates.neuron[1, drop] = 0.0
    with gates.attach(encoder.model):
        gated = embed(encoder)
    part = layer_parts(encoder.model)[1]
    saved = part.ffn_out.weight.data.clone()
    part.ffn_out.weight.data[:, drop] = 0.0
    try:
        by_hand = embed(encoder)
    finally:
        part.ffn_out.weight.data.copy_(saved)
    assert torch.allclose(gated, by_hand, atol=1e-6)


def test_gate_gradient_matches_finite_differences(tiny_bert_dir):
    enc = SentenceEncoder.load(tiny_bert_dir, pooling="mean")
    assert_gate_gradients_match_finite_differences(
        enc, (("head", (0, 2)), ("head", (1, 0)), ("neuron", (0, 11)), ("neuron", (1, 40))))


def test_mask_for_another_model_is_rejected(tiny_bert_dir):
    enc = SentenceEncoder.load(tiny_bert_dir)
    with pytest.raises(SparseCSEError, match="mask is for a model with 3 layers"):
        Mask.full(3, 4, 48).apply(enc.model)
    with pytest.raises(SparseCSEError, match="do not fit|mask is for"):
        Mask.full(2, 4, 47).apply(enc.model)


def test_unsupported_architecture_is_named():
    from transformers import GPT2Config

    with pytest.raises(SparseCSEError, match="Unsupported architecture 'gpt2'"):
        get_adapter(GPT2Config())


def test_gating_a_shrunk_model_is_refused_with_what_to_do(tiny_bert_dir, tmp_path):
    from tests.helpers import shrunk_dir

    enc = SentenceEncoder.load(shrunk_dir(tiny_bert_dir, tmp_path / "small"), device="cpu")
    with pytest.raises(SparseCSEError, match=r"already been shrunk \(heads per layer \[0, 3\].*prune the dense model"):
        Gates.ones_for(enc.model)
