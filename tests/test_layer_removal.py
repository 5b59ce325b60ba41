"""Whole-layer removal in the one cutting path: a mask may drop layers as well as heads and neurons, in any
mix, for every family the adapters describe. The gated model with those layers skipped computes what the
shrunk model computes; the shrunk config records the kept layers (and keeps their attention types); the
counting code predicts the shrunk model's exact parameters and FLOPs; the directory loads everywhere with
its Python files deleted."""

import json

import numpy as np
import pytest
import torch

from sparsecse.errors import SparseCSEError
from sparsecse.modeling.configuration_sparsecse import SparseCSEBertConfig
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.modeling.flops import count_parameters, flops_per_token, shape_record, size_report
from sparsecse.pruning.budget import UnitCosts
from sparsecse.pruning.masks import Mask
from sparsecse.shrinking.shrink import ShrinkConfig, shrink
from sparsecse.shrinking.surgery import mask_digest, shrink_encoder
from tests.helpers import assert_same_embeddings, automodel_pooled, random_mask, random_sentences
from tests.tiny import make_tiny_model_dir
from tests.tiny_modern import make_modern_model_dir

HELD_OUT = random_sentences(10, seed=55)
FAMILIES = ("bert", "roberta", "mpnet", "modernbert", "qwen3", "gemma3_text")
MIXED_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]


@pytest.fixture(scope="module", params=FAMILIES)
def family_dir(request, tmp_path_factory):
    """A 4-layer tiny model of each family (ModernBERT and Gemma-3 with alternating local/global layers)."""
    arch, out = request.param, tmp_path_factory.mktemp(f"depth_{request.param}")
    if arch in ("bert", "roberta", "mpnet"):
        return arch, make_tiny_model_dir(out, arch, layers=4, init_range=0.2)
    extra = {"layer_types": MIXED_TYPES} if arch in ("modernbert", "gemma3_text") else {}
    return arch, make_modern_model_dir(out, arch, layers=4, **extra)


def load(path, arch):
    return SentenceEncoder.load(path, pooling="last" if arch == "qwen3" else "mean", device="cpu")


def depth_and_width(model, removed, seed=0):
    return random_mask(model, 0.3, seed=seed).without_layers(removed)


@pytest.mark.parametrize("removed", [[0], [1, 2], [3]])
def test_gated_model_with_layers_skipped_equals_the_shrunk_model(family_dir, removed):
    arch, path = family_dir
    encoder = load(path, arch)
    mask = depth_and_width(encoder.model, removed)
    dense = encoder.encode(HELD_OUT)
    with mask.apply(encoder.model):
        expected = encoder.encode(HELD_OUT)
    assert np.abs(expected - dense).max() > 1e-3  # the mask changes the outputs
    shrink_encoder(encoder, mask, align_ffn=1)
    config = encoder.model.config
    kept = [i for i in range(4) if i not in removed]
    assert config.num_hidden_layers == len(kept) and config.kept_layers == kept and config.source_layers == 4
    assert config.heads_per_layer == mask.head_mask.sum(1)[kept].tolist()
    assert config.intermediate_sizes == mask.neuron_mask.sum(1)[kept].tolist()
    if arch in ("modernbert", "gemma3_text"):  # each kept layer keeps its local or global attention
        assert config.layer_types == [MIXED_TYPES[i] for i in kept]
    assert_same_embeddings(encoder.encode(HELD_OUT), expected)


def test_skipping_a_layer_is_not_zeroing_its_units(tmp_path):
    """A skipped layer passes its input on; a layer whose heads and neurons are all gated off still adds
    its biases and LayerNorms: the two differ, and the shrunk model follows the skip."""
    path = make_tiny_model_dir(tmp_path / "bert", "bert", layers=3, init_range=0.2)
    encoder = load(path, "bert")
    with torch.no_grad():  # freshly initialised biases (0) and norms (1, 0) would make LayerNorm(x + 0) = x
        for name, param in encoder.model.encoder.layer[1].named_parameters():
            if "bias" in name or "LayerNorm" in name:
                param.add_(0.3 * torch.randn_like(param))
    emptied = Mask.full(3, 4, 48)
    emptied.head_mask[1], emptied.neuron_mask[1] = False, False
    skipped = Mask.full(3, 4, 48).without_layers([1])
    assert torch.equal(skipped.head_mask, emptied.head_mask) and skipped.removed_layers == [1]
    with emptied.apply(encoder.model):
        zeroed = encoder.encode(HELD_OUT)
    with skipped.apply(encoder.model):
        expected = encoder.encode(HELD_OUT)
    assert np.abs(zeroed - expected).max() > 1e-3
    shrink_encoder(encoder, skipped, align_ffn=1)
    assert_same_embeddings(encoder.encode(HELD_OUT), expected)


@pytest.mark.parametrize("metric", ["flops", "params"])
def test_counts_of_the_shrunk_model_equal_the_prediction(family_dir, metric):
    arch, path = family_dir
    encoder = load(path, arch)
    costs = UnitCosts.from_shape(shape_record(encoder.model), metric, seq_len=16)
    count = (lambda enc: flops_per_token(enc, 16)) if metric == "flops" else (
        lambda enc: count_parameters(enc, "layers"))
    assert costs.dense == count(encoder)
    mask = depth_and_width(encoder.model, [0, 2], seed=2)
    predicted = costs.kept(mask.head_mask, mask.neuron_mask, mask.layer_mask)
    width_only = costs.kept(mask.head_mask, mask.neuron_mask)
    fixed = costs.layer_fixed or (costs.fixed // 4,) * 4  # ModernBERT's first layer has no attention norm
    assert predicted == width_only - fixed[0] - fixed[2]  # the removed layers' biases and norms go too
    shrink_encoder(encoder, mask, align_ffn=1)
    assert count(encoder) == predicted
    one_layer = costs.kept(*(torch.ones(4, n, dtype=torch.bool) for n in (costs.heads, costs.ffn)),
                           torch.tensor([False, True, False, False]))
    assert one_layer * 4 == costs.dense - fixed[0] + fixed[1]
    assert size_report(encoder.model, 16)["heads_per_layer"] == mask.head_mask.sum(1)[[1, 3]].tolist()


@pytest.mark.parametrize("arch", ["bert", "qwen3", "modernbert"])
def test_directory_with_fewer_layers_loads_everywhere_without_its_code(arch, tmp_path):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    path = (make_tiny_model_dir(tmp_path / arch, arch, layers=3, init_range=0.2) if arch == "bert"
            else make_modern_model_dir(tmp_path / arch, arch))
    dense = load(path, arch)
    mask = depth_and_width(dense.model, [0], seed=5)
    mask.manifest = {"kind": "mask", "model": str(path)}
    mask_path = mask.save(tmp_path / "mask.safetensors")
    with mask.apply(dense.model):
        expected = dense.encode(HELD_OUT)
    pooling = "last" if arch == "qwen3" else "mean"
    result = shrink(model=path, mask=mask_path, out=tmp_path / "small",
                    config=ShrinkConfig(pooling=pooling, align_ffn=1))
    assert_same_embeddings(result.encoder.encode(HELD_OUT), expected)
    config = json.loads((result.out / "config.json").read_text())
    assert (config["num_hidden_layers"], config["kept_layers"], config["source_layers"]) == (2, [1, 2], 3)
    assert [len(h) for h in config["kept_heads"]] == mask.head_mask.sum(1)[1:].tolist()
    assert config["intermediate_sizes"] == mask.neuron_mask.sum(1)[1:].tolist()
    assert result.after["heads_per_layer"] == mask.head_mask.sum(1)[1:].tolist()

    # with its code, through the remote-code path
    remote = AutoModel.from_pretrained(result.out, trust_remote_code=True).eval()
    assert len(remote.layers if arch != "bert" else remote.encoder.layer) == 2
    for file in result.out.glob("*.py"):
        file.unlink()
    assert_same_embeddings(SentenceEncoder.load(result.out, device="cpu").encode(HELD_OUT), expected)
    assert_same_embeddings(SentenceTransformer(str(result.out), device="cpu").encode(HELD_OUT), expected)
    _, pooled = automodel_pooled(result.out, HELD_OUT, last_token=arch == "qwen3")
    assert_same_embeddings(pooled, expected)


def test_mask_layer_part_saves_reloads_and_is_checked(tmp_path):
    mask = Mask.full(3, 4, 8).without_layers([2])
    assert mask.kept_layers == [0, 1] and mask.heads_pruned == 4 and mask.neurons_pruned == 8
    path = mask.save(tmp_path / "mask.safetensors")
    again = Mask.load(path)
    assert torch.equal(again.layer_mask, mask.layer_mask) and again.manifest["layers_removed"] == [2]
    assert mask_digest(again) == mask_digest(mask) != mask_digest(Mask(mask.head_mask, mask.neuron_mask))
    assert Mask.full(3, 4, 8).removed_layers == [] and Mask.full(3, 4, 8).layer_mask is None
    with pytest.raises(SparseCSEError, match="one keep flag per layer"):
        Mask(mask.head_mask, mask.neuron_mask, layer_mask=torch.ones(2, dtype=torch.bool))
    with pytest.raises(SparseCSEError, match="at least one layer"):
        Mask.full(3, 4, 8).without_layers([0, 1, 2])
    given = torch.ones(3, 4, dtype=torch.bool)
    Mask(given, torch.ones(3, 8, dtype=torch.bool), layer_mask=torch.tensor([True, False, True]))
    assert bool(given.all())  # the caller's tensor is left as it was


def test_configs_written_before_layer_removal_keep_every_layer():
    config = SparseCSEBertConfig(num_hidden_layers=3, num_attention_heads=4, hidden_size=32, intermediate_size=48)
    assert (config.kept_layers, config.source_layers) == ([0, 1, 2], 3)
    with pytest.raises(ValueError, match="kept_layers"):
        SparseCSEBertConfig(num_hidden_layers=2, num_attention_heads=4, hidden_size=32, kept_layers=[2, 1],
                            source_layers=3)
