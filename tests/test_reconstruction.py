"""Retraining-free reconstruction: exact when the removed units were redundant, never worse per layer,
bad inputs refused before anything is written."""

import copy
import json

import pytest
import torch
from click.testing import CliRunner

from sparsecse.cli import main
from sparsecse.data.corpus import read_corpus
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.adapters import layer_parts
from sparsecse.pruning.masks import Mask
from sparsecse.shrinking.reconstruction import ReconstructionPlan, calibration_sentences, reconstruct, token_batches
from sparsecse.shrinking.shrink import shrink
from sparsecse.shrinking.surgery import shrink_encoder
from tests.helpers import random_mask
from tests.tiny import SENTENCES, make_tiny_model_dir
from sparsecse.shrinking.shrink import ShrinkConfig


def duplicated_model(path):
    """A tiny BERT whose head 3 copies head 1 and whose neurons 24..47 copy neurons 0..23 in every
    layer, and the mask that removes the copies: the removed units are redundant by construction."""
    encoder = SentenceEncoder.load(make_tiny_model_dir(path, layers=2, heads=4, hidden=32, ffn=48), device="cpu")
    with torch.no_grad():
        for part in layer_parts(encoder.model):
            d = part.head_dim
            for linear in (part.query, part.key, part.value):
                linear.weight[3 * d:4 * d] = linear.weight[d:2 * d]
                linear.bias[3 * d:4 * d] = linear.bias[d:2 * d]
            part.attn_out.weight[:, 3 * d:4 * d] = part.attn_out.weight[:, d:2 * d]
            part.ffn_in.weight[24:] = part.ffn_in.weight[:24]
            part.ffn_in.bias[24:] = part.ffn_in.bias[:24]
            part.ffn_out.weight[:, 24:] = part.ffn_out.weight[:, :24]
    heads = torch.tensor([[True, True, True, False]] * 2)
    neurons = torch.cat([torch.ones(2, 24), torch.zeros(2, 24)], 1).bool()
    return encoder, Mask(heads, neurons)


@pytest.mark.parametrize("method", ["scales", "full"])
@pytest.mark.parametrize("target", ["residual", "sublayer"])
@pytest.mark.parametrize("weighting", ["none", "layernorm"])
def test_redundant_units_are_recovered_exactly(tmp_path, method, target, weighting):
    encoder, mask = duplicated_model(tmp_path / "m")
    dense = copy.deepcopy(encoder)
    plain = shrink_encoder(copy.deepcopy(encoder), mask)
    batches = token_batches(encoder.tokenizer, SENTENCES, batch_size=5)
    report = reconstruct(copy.deepcopy(dense.model), encoder.model, mask, batches, method, target, ridge=0.0,
                         weighting=weighting)
    shrink_encoder(encoder, mask)
    expected = dense.encode(SENTENCES)
    assert abs(plain.encode(SENTENCES) - expected).max() > 1e-2  # removing the copies does change the output
    assert abs(encoder.encode(SENTENCES) - expected).max() < 1e-4
    for layer in report.layers:
        assert layer["attention"]["error_before"] > 1e-3
        assert layer["attention"]["error_after"] < 1e-8 and layer["ffn"]["error_after"] < 1e-8
    if method == "scales":  # the kept copy of each pair doubles, the others stay
        d = layer_parts(dense.model)[0].head_dim
        ffn_out = layer_parts(encoder.model)[0].ffn_out.weight
        torch.testing.assert_close(ffn_out, 2 * layer_parts(dense.model)[0].ffn_out.weight[:, :24])
        attn_out = layer_parts(encoder.model)[0].attn_out.weight
        torch.testing.assert_close(attn_out[:, d:2 * d], 2 * layer_parts(dense.model)[0].attn_out.weight[:, d:2 * d])


@pytest.mark.parametrize("method", ["scales", "full"])
@pytest.mark.parametrize("target", ["residual", "sublayer"])
@pytest.mark.parametrize("ridge", [0.0, 1e-3, 10.0])
@pytest.mark.parametrize("weighting", ["none", "layernorm"])
def test_never_increases_a_layers_error(tiny_bert_dir, method, target, ridge, weighting):
    encoder = SentenceEncoder.load(tiny_bert_dir, device="cpu")
    mask = random_mask(encoder.model, 0.5, seed=3)
    batches = token_batches(encoder.tokenizer, SENTENCES, batch_size=4)
    report = reconstruct(copy.deepcopy(encoder.model), encoder.model, mask, batches, method, target, ridge,
                         weighting=weighting)
    assert len(report.layers) == mask.shape[0]
    for layer in report.layers:
        for sub in ("attention", "ffn"):
            assert layer[sub]["error_after"] <= layer[sub]["error_before"]
    assert report.tokens == sum(int(b["attention_mask"].sum()) for b in batches)


def test_only_kept_columns_and_biases_change(tiny_bert_dir):
    encoder = SentenceEncoder.load(tiny_bert_dir, device="cpu")
    before = copy.deepcopy(encoder.model.state_dict())
    mask = random_mask(encoder.model, 0.5, seed=1)
    reconstruct(copy.deepcopy(encoder.model), encoder.model, mask, token_batches(encoder.tokenizer, SENTENCES), "full")
    changed = {k for k, v in encoder.model.state_dict().items() if not torch.equal(v, before[k])}
    assert changed and all(".output.dense." in k for k in changed)  # attention and FFN output projections only
    for i, part in enumerate(layer_parts(encoder.model)):
        removed = (~mask.neuron_mask[i]).nonzero().flatten()
        assert torch.equal(part.ffn_out.weight[:, removed], before[f"encoder.layer.{i}.output.dense.weight"][:, removed])


def test_shrink_records_the_reconstruction_and_reloads(tiny_bert_dir, corpus, tmp_path):
    mask_path = tmp_path / "mask.safetensors"
    encoder = SentenceEncoder.load(tiny_bert_dir, device="cpu")
    random_mask(encoder.model, 0.5).save(mask_path)
    result = shrink(tiny_bert_dir, mask_path, out=tmp_path / "out", config=ShrinkConfig(reconstruct=corpus,
        reconstruct_sentences=20))
    manifest = json.loads((tmp_path / "out" / "sparsecse_config.json").read_text())["manifest"]
    rec = manifest["reconstruction"]
    assert rec["corpus"] == str(corpus) and rec["sentences"] == 20 and len(rec["corpus_sha256"]) == 64
    assert len(rec["layers"]) == 2 and {"error_before", "error_after"} <= set(rec["layers"][0]["ffn"])
    reloaded = SentenceEncoder.load(tmp_path / "out", device="cpu")
    assert abs(reloaded.encode(SENTENCES) - result.encoder.encode(SENTENCES)).max() < 1e-5


def test_calibration_sample_is_seeded_and_capped(corpus):
    a, b = calibration_sentences(corpus, 10, seed=0), calibration_sentences(corpus, 10, seed=0)
    assert a.sentences == b.sentences and len(a.sentences) == 10
    assert calibration_sentences(corpus, 10_000).sentences == read_corpus(corpus)  # all of them, in file order


@pytest.mark.parametrize("content", [None, "", "\n  \n"])
def test_missing_or_empty_corpus_is_refused_before_anything_is_written(tiny_bert_dir, tmp_path, content):
    corpus = tmp_path / "corpus.txt"
    if content is not None:
        corpus.write_text(content)
    mask_path = tmp_path / "mask.safetensors"
    random_mask(SentenceEncoder.load(tiny_bert_dir, device="cpu").model, 0.5).save(mask_path)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["shrink", "--model", str(tiny_bert_dir), "--mask", str(mask_path),
                                       "--out", str(out), "--reconstruct", str(corpus)])
    assert result.exit_code == 1
    assert "corpus" in result.output and len(result.output.strip().splitlines()) == 1
    assert "Traceback" not in result.output and not out.exists()
    with pytest.raises(SparseCSEError):
        ReconstructionPlan.prepare(corpus)


def test_token_weights_give_the_weighted_least_squares_solution():
    """NormalEquations with per-token weights == numpy's least squares on sqrt(w)-scaled rows with an intercept."""
    import numpy as np

    from sparsecse.shrinking.reconstruction import NormalEquations, fit_projection

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(200, 6, generator=gen, dtype=torch.float64)
    y = torch.randn(200, 3, generator=gen, dtype=torch.float64)
    w = torch.rand(200, generator=gen, dtype=torch.float64) * 4 + 0.1
    eq = NormalEquations(6, 3)
    eq.add(x[:120], y[:120], w[:120])
    eq.add(x[120:], y[120:], w[120:])
    weight, bias, info = fit_projection(eq, torch.zeros(3, 6, dtype=torch.float64), torch.zeros(3, dtype=torch.float64),
                                        [[i] for i in range(6)], "full", ridge=0.0)
    design = np.hstack([x.numpy(), np.ones((200, 1))]) * np.sqrt(w.numpy())[:, None]
    solution = np.linalg.lstsq(design, y.numpy() * np.sqrt(w.numpy())[:, None], rcond=None)[0]
    np.testing.assert_allclose(weight.numpy(), solution[:6].T, atol=1e-9)
    np.testing.assert_allclose(bias.numpy(), solution[6], atol=1e-9)
    residual = ((design @ solution - y.numpy() * np.sqrt(w.numpy())[:, None]) ** 2).sum()
    assert info["error_after"] == pytest.approx(residual / float((w * (y * y).sum(1)).sum()), rel=1e-6)
    assert info["tokens"] == 200


def test_unknown_weighting_is_refused(corpus):
    with pytest.raises(SparseCSEError, match="weighting"):
        ReconstructionPlan.prepare(corpus, weighting="tokens")
