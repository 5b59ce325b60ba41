"""A custom-layout model laid out at one shape again (sparsecse.shrinking.expand): it computes what the shrunk model
does, its mask is exactly the units it has, and pruning goes on within them as it would have gone on from the
silenced full-size model the shrunk one was cut from (the near-miss repair of a custom-layout run)."""

import pytest
import torch

from sparsecse.errors import SparseCSEError
from sparsecse.modeling.adapters import is_uniform, model_shape
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.modeling.flops import flops_per_token
from sparsecse.pruning.masks import Mask
from sparsecse.scoring.score import ScoringConfig, score
from sparsecse.shrinking.expand import expanded_model, pruning_path
from sparsecse.shrinking.iterative import iterative_prune, prune_and_shrink, shrink_iterative
from sparsecse.shrinking.reconstruction import ReconstructionPlan
from sparsecse.shrinking.shrink import ShrinkConfig, save_model_dir
from sparsecse.shrinking.surgery import shrink_encoder
from tests.helpers import assert_same_embeddings, random_mask
from tests.tiny import SENTENCES, make_tiny_model_dir
from tests.tiny_modern import ARCHS, make_modern_model_dir

POOLING = {"modernbert": "mean", "qwen3": "last", "gemma3_text": "mean"}


def shrunk_with_a_removed_layer(path, pooling, seed):
    encoder = SentenceEncoder.load(path, pooling=pooling, device="cpu")
    mask = random_mask(encoder.model, 0.4, seed=seed)
    mask = Mask(mask.head_mask, mask.neuron_mask, layer_mask=torch.tensor([True, False, True]))
    shrink_encoder(encoder, mask)
    return encoder, mask


@pytest.mark.parametrize("arch", ["bert", "roberta", *ARCHS])
def test_an_expanded_model_computes_what_the_shrunk_one_does_and_its_mask_is_its_units(arch, tmp_path):
    if arch in ARCHS:
        path, pooling = make_modern_model_dir(tmp_path / arch, arch), POOLING[arch]
    else:
        path, pooling = make_tiny_model_dir(tmp_path / arch, arch, layers=3, seed=5), "mean"
    small, cut = shrunk_with_a_removed_layer(path, pooling, seed=7)
    assert not is_uniform(small.model)
    wide, units = expanded_model(small.model)
    source = SentenceEncoder.load(path, pooling=pooling, device="cpu").model
    heads, ffn = model_shape(wide)
    assert heads == [model_shape(source)[0][0]] * 2 and ffn == [model_shape(source)[1][0]] * 2 and is_uniform(wide)
    assert torch.equal(units.head_mask, cut.head_mask[[0, 2]])  # each kept head at its source index
    assert units.neuron_mask.sum(1).tolist() == cut.neuron_mask[[0, 2]].sum(1).tolist()
    assert wide.config.kept_layers == [0, 2] and wide.config.source_layers == 3
    expected = small.encode(SENTENCES)
    small.model = wide
    assert_same_embeddings(small.encode(SENTENCES), expected)


def test_only_a_shrunk_model_is_expanded(tiny_bert_dir):
    with pytest.raises(SparseCSEError, match="Only a shrunk sparsecse model"):
        expanded_model(SentenceEncoder.load(tiny_bert_dir, device="cpu").model)


def test_pruning_goes_on_from_a_saved_custom_model_as_from_the_path_it_was_cut_from(tiny_stsb_dir, corpus,
                                                                                   tmp_path):
    tiny_bert_dir = make_tiny_model_dir(tmp_path / "dense", layers=3, seed=5)
    scoring = ScoringConfig(data_dir=tiny_stsb_dir, batch_size=8, seed=0)
    settings = dict(reconstruct=ReconstructionPlan.prepare(corpus, 20), score=scoring, device="cpu")
    dense = score(tiny_bert_dir, device="cpu", config=scoring)
    larger = iterative_prune(tiny_bert_dir, keep_flops=0.6, steps=2, scores=dense, **settings)
    shrunk = shrink_iterative(larger, config=ShrinkConfig(align_ffn=1))
    saved = save_model_dir(shrunk.encoder, tmp_path / "custom")
    custom = SentenceEncoder.load(saved, device="cpu")
    assert not is_uniform(custom.model)

    embedded = custom.encode(SENTENCES)
    path = pruning_path(custom)
    assert custom.model is not path.encoder.model and not is_uniform(custom.model)  # the encoder is left as it was
    assert_same_embeddings(path.encoder.encode(SENTENCES), embedded)
    assert path.kept == pytest.approx(larger.path.kept, abs=1e-9)  # the same units, counted on the same shape
    assert torch.equal(path.mask.head_mask, larger.mask.head_mask)
    assert path.mask.neuron_mask.sum(1).tolist() == larger.mask.neuron_mask.sum(1).tolist()
    # its units score as the silenced full-size model's do (the neurons in their new places)
    here, there = score(path.encoder, config=scoring), score(larger.path.encoder, config=scoring)
    heads = path.mask.head_mask
    for part in ("align", "uniform"):
        mine, theirs = getattr(here, f"head_grad_{part}"), getattr(there, f"head_grad_{part}")
        assert torch.allclose(mine[:, heads], theirs[:, heads], rtol=1e-4, atol=1e-6 * theirs.abs().max())
        mine, theirs = getattr(here, f"neuron_grad_{part}"), getattr(there, f"neuron_grad_{part}")
        for layer, kept in enumerate(larger.mask.neuron_mask):
            assert torch.allclose(mine[:, layer, :int(kept.sum())], theirs[:, layer, kept], rtol=1e-4,
                                  atol=1e-6 * theirs.abs().max())

    result, smaller = prune_and_shrink(path, tmp_path / "smaller", keep_flops=0.9 * path.kept, steps=1,
                                       score=scoring, shrink=ShrinkConfig(reconstruct=corpus, reconstruct_sentences=20,
                                                                          align_ffn=1, device="cpu"))
    assert not (result.mask.head_mask & ~path.mask.head_mask).any()  # within the units it had
    assert not (result.mask.neuron_mask & ~path.mask.neuron_mask).any()
    assert result.mask.manifest["kept_flops_ratio"] <= 0.9 * path.kept + 1e-9
    config = smaller.encoder.model.config
    before = custom.model.config
    assert all(set(new) <= set(old) for new, old in zip(config.kept_heads, before.kept_heads))  # source indices
    assert config.kept_heads == [row.nonzero().flatten().tolist() for row in result.mask.head_mask]
    assert config.kept_layers == before.kept_layers
    assert flops_per_token(smaller.encoder) < flops_per_token(custom)
    assert smaller.out is not None and SentenceEncoder.load(smaller.out, device="cpu").encode(SENTENCES).shape[0] == 16
