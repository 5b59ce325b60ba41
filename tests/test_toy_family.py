"""Adding a family is its adapter plus its tests (issue 48): a toy encoder family (tests/toy_family.py), known
to sparsecse only through the adapter it registers, is gated, shrunk, reloaded, budgeted (its costs from its
adapter's FamilyCost, counted exactly) and exported with no edit to sparsecse's shrinking, modeling, budget
or export code."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from sparsecse.modeling.adapters import get_adapter, model_shape
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.pruning.masks import Mask
from sparsecse.shrinking.shrink import shrink
from sparsecse.shrinking.surgery import shrink_encoder
from tests.helpers import assert_same_embeddings, random_mask, random_sentences
from tests.tiny import make_tokenizer
from tests.toy_family import TOY_ADAPTER, TOY_LAYOUT, ToyConfig, ToyModel
from sparsecse.shrinking.shrink import ShrinkConfig

SENTENCES = random_sentences(10, seed=48)
LAYERS, HEADS, FFN = 3, 4, 24


@pytest.fixture(scope="module")
def toy_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("toy")
    tokenizer = make_tokenizer(out)
    torch.manual_seed(0)
    model = ToyModel(ToyConfig(vocab_size=len(tokenizer)))
    with torch.no_grad():  # a wide spread, so every head and neuron moves the embeddings
        for name, param in model.named_parameters():
            param.copy_(1.0 + 0.3 * torch.randn_like(param) if "norm" in name and name.endswith("weight")
                        else 0.5 * torch.randn_like(param))
    model.save_pretrained(out)
    (out / "sparsecse_config.json").write_text(json.dumps({"pooling": "mean", "max_length": 32}))
    return out


def structured_mask() -> Mask:
    """Layer 0 keeps no head, layer 1 heads 1 and 3, layer 2 no FFN neuron; every third neuron of layer 0 goes."""
    heads = torch.ones(LAYERS, HEADS, dtype=torch.bool)
    heads[0] = False
    heads[1, [0, 2]] = False
    neurons = torch.ones(LAYERS, FFN, dtype=torch.bool)
    neurons[0, ::3] = False
    neurons[2] = False
    return Mask(heads, neurons)


def gated(encoder, mask):
    with mask.apply(encoder.model):
        return encoder.encode(SENTENCES)


def test_the_adapter_is_all_sparsecse_knows_of_the_family(toy_dir):
    encoder = SentenceEncoder.load(toy_dir, device="cpu")
    assert get_adapter(encoder.model) is TOY_ADAPTER
    assert model_shape(encoder.model) == ([HEADS] * LAYERS, [FFN] * LAYERS)


@pytest.mark.parametrize("which,align", [("random", 8), ("structured", 1)])
def test_gated_equals_shrunk(toy_dir, which, align):
    encoder = SentenceEncoder.load(toy_dir, device="cpu")
    mask = random_mask(encoder.model, 0.4, seed=5) if which == "random" else structured_mask()
    expected = gated(encoder, mask)
    assert np.abs(expected - encoder.encode(SENTENCES)).max() > 1e-2  # the mask changes the embeddings
    shrink_encoder(encoder, mask, align_ffn=align)
    kept = mask.neuron_mask.sum(1).tolist()
    assert model_shape(encoder.model) == (mask.head_mask.sum(1).tolist(), [-(-n // align) * align for n in kept])
    assert_same_embeddings(encoder.encode(SENTENCES), expected)


def test_the_shrunk_weights_are_the_kept_rows_and_columns(toy_dir):
    """Independent of the layout code: the kept heads' rows and neurons' rows/columns, picked by hand."""
    dense = SentenceEncoder.load(toy_dir, device="cpu").model
    encoder = SentenceEncoder.load(toy_dir, device="cpu")
    mask = structured_mask()
    shrink_encoder(encoder, mask, align_ffn=1)
    small = encoder.model.blocks[1]
    rows = torch.cat([torch.arange(h * 8, h * 8 + 8) for h in (1, 3)])  # head size 32 / 4 = 8
    for name in ("q", "k", "v"):
        assert torch.equal(getattr(small.attn, name).weight, getattr(dense.blocks[1].attn, name).weight[rows])
    assert torch.equal(small.attn.out.weight, dense.blocks[1].attn.out.weight[:, rows])
    neurons = mask.neuron_mask[0].nonzero().flatten()
    assert torch.equal(encoder.model.blocks[0].ffn_in.weight, dense.blocks[0].ffn_in.weight[neurons])
    assert torch.equal(encoder.model.blocks[0].ffn_out.weight, dense.blocks[0].ffn_out.weight[:, neurons])
    assert encoder.model.blocks[0].attn.q.weight.shape == (0, 32) and encoder.model.blocks[2].ffn_in.out_features == 0


def test_the_shrunk_directory_reloads_everywhere_without_its_code(toy_dir, tmp_path):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    mask = structured_mask()
    mask.manifest = {"kind": "mask", "model": str(toy_dir)}
    mask_path = mask.save(tmp_path / "mask.safetensors")
    expected = gated(SentenceEncoder.load(toy_dir, device="cpu"), mask)
    result = shrink(model=toy_dir, mask=mask_path, out=tmp_path / "small", config=ShrinkConfig(pooling="mean"))
    assert_same_embeddings(result.encoder.encode(SENTENCES), expected)
    config = json.loads((result.out / "config.json").read_text())
    assert config["model_type"] == "sparsecse-toy-encoder" and config["unit_layout"] == TOY_LAYOUT.to_dict()
    assert config["kept_heads"] == [[], [1, 3], [0, 1, 2, 3]] and config["intermediate_sizes"] == [16, 24, 0]
    copied = list(result.out.glob("*.py"))
    assert copied  # save_pretrained copied the family's module, as it copies sparsecse's modeling code
    for file in copied:
        file.unlink()

    assert_same_embeddings(SentenceEncoder.load(result.out, device="cpu").encode(SENTENCES), expected)
    st = SentenceTransformer(str(result.out), device="cpu")
    assert_same_embeddings(st.encode(SENTENCES), expected)
    model = AutoModel.from_pretrained(result.out).eval()
    assert type(model).__name__ == "SparseCSEToyModel"
    tokenizer = AutoTokenizer.from_pretrained(result.out)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    weights = batch["attention_mask"].unsqueeze(-1).float()
    assert_same_embeddings(((hidden * weights).sum(1) / weights.sum(1)).numpy(), expected)


# ----------------------------------------------------------------------------- costs and budgets
# d = 32, d_h = 8, n = 16; biased q/k/v/out and FFN projections, two LayerNorms per layer (read off the modules)
D, DH, N = 32, 8, 16
HEAD_PARAMS = 4 * D * DH + 3 * DH  # q, k, v rows with their biases, output columns
NEURON_PARAMS = 2 * D + 1  # input row and bias, output column
FIXED_PARAMS = LAYERS * (2 * D + 4 * D)  # two output biases, two LayerNorms
HEAD_FLOPS = 2 * (4 * D * DH + 2 * N * DH)
NEURON_FLOPS = 2 * 2 * D


def test_the_shape_record_holds_the_toys_exact_unit_costs(toy_dir):
    from sparsecse.modeling.flops import count_parameters, flops_per_token, shape_record

    encoder = SentenceEncoder.load(toy_dir, device="cpu")
    assert shape_record(encoder.model) == {
        "layers": LAYERS, "heads": HEADS, "ffn": FFN, "hidden": D, "head_dim": DH, "kv_heads": HEADS,
        "ffn_matrices": 2, "head_params": HEAD_PARAMS, "kv_head_params": 0, "neuron_params": NEURON_PARAMS,
        "fixed_params": FIXED_PARAMS}
    assert count_parameters(encoder, "layers") == LAYERS * (HEADS * HEAD_PARAMS + FFN * NEURON_PARAMS) + FIXED_PARAMS
    assert flops_per_token(encoder, N) == LAYERS * (HEADS * HEAD_FLOPS + FFN * NEURON_FLOPS)


@pytest.mark.parametrize("metric", ["flops", "params"])
def test_a_budget_on_the_toy_is_the_shrunk_models_counted_cost(toy_dir, metric):
    from sparsecse.modeling.flops import count_parameters, flops_per_token, shape_record
    from sparsecse.pruning.budget import UnitCosts, budget_cap
    from sparsecse.pruning.prune import PruningConfig, prune
    from tests.helpers import fake_scores

    encoder = SentenceEncoder.load(toy_dir, device="cpu")
    costs = UnitCosts.from_shape(shape_record(encoder.model), metric, N)
    unit = (HEAD_FLOPS, NEURON_FLOPS, 0) if metric == "flops" else (HEAD_PARAMS, NEURON_PARAMS, FIXED_PARAMS)
    assert (costs.head, costs.neuron, costs.fixed, costs.kv, costs.kv_heads) == (*unit, 0, 0)
    scores = fake_scores(layers=LAYERS, heads=HEADS, ffn=FFN, seed=3)
    scores.manifest["shape"] = shape_record(encoder.model)
    mask = prune(scores, config=PruningConfig(seq_len=N), **{f"keep_{metric}": 0.5})
    kept = costs.kept(mask.head_mask, mask.neuron_mask)
    not_kept = [c for c, keep in ((costs.head, mask.head_mask), (costs.neuron, mask.neuron_mask)) if not keep.all()]
    assert 0 <= budget_cap(costs, 0.5) - kept < min(not_kept)  # the next unit would not fit
    assert mask.manifest[f"kept_{metric}"] == kept
    shrink_encoder(encoder, mask, align_ffn=1)
    assert (flops_per_token(encoder, N) if metric == "flops" else count_parameters(encoder, "layers")) == kept


# ----------------------------------------------------------------------------- export
def test_the_shrunk_toy_exports_to_onnx(toy_dir, tmp_path):
    pytest.importorskip("onnxruntime")
    from sparsecse.exporting.export import export
    from sparsecse.serving.loading import load_encoder

    mask = random_mask(SentenceEncoder.load(toy_dir, device="cpu").model, 0.4, seed=5)  # a head in every layer
    mask.manifest = {"kind": "mask", "model": str(toy_dir)}
    expected = gated(SentenceEncoder.load(toy_dir, device="cpu"), mask)
    small = shrink(model=toy_dir, mask=mask.save(tmp_path / "mask.safetensors"), out=tmp_path / "small",
                   config=ShrinkConfig(pooling="mean"))
    result = export(small.out, tmp_path / "onnx")
    assert_same_embeddings(load_encoder(result.out).encode(SENTENCES), expected)


@pytest.mark.parametrize("sees_no_key", [False, True])
def test_openvino_traces_eager_attention_where_the_family_says_a_query_may_see_no_key(toy_dir, sees_no_key,
                                                                                     monkeypatch):
    """The choice keys on the adapter's stated property, not on what the family's FFN or cost looks like."""
    pytest.importorskip("openvino")
    from dataclasses import replace

    from sparsecse.modeling.adapters import register_adapter
    from sparsecse.serving.openvino_convert import convert

    encoder = SentenceEncoder.load(toy_dir, device="cpu")
    chosen = []
    monkeypatch.setattr(encoder.model, "set_attn_implementation", chosen.append, raising=False)
    register_adapter(replace(TOY_ADAPTER, query_may_see_no_key=sees_no_key))
    try:
        convert(encoder, normalize=False)
    finally:
        register_adapter(TOY_ADAPTER)
    assert chosen == (["eager"] if sees_no_key else [])
