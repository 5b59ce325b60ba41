"""Today's encoders (issue 37): ModernBERT and the grouped-query decoders Qwen3 and Gemma-3 (text), on tiny
random models built from their transformers configs (their real weights cannot be fetched here).

Gates, scores, every pruning criterion, torch-pruning's removal, the FLOPs and parameter counts at real
shapes, last-token pooling, the shrunk directory in every loader (with its copied code deleted), export to
ONNX and OpenVINO, training, and the refusals.
"""

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from sparsecse.cli import main
from sparsecse.pruning.budget import UnitCosts
from sparsecse.modeling.flops import count_parameters, flops_per_token, size_report
from sparsecse.scoring.gates import Gates
from sparsecse.pruning.masks import Mask
from sparsecse.pruning.prune import PruningConfig, prune
from sparsecse.shrinking.shrink import save_model_dir, shrink
from sparsecse.shrinking.surgery import shrink_encoder
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.adapters import layer_parts, model_shape
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.scoring.kv_gates import KVGroupGates, check_gate_unit
from tests.helpers import assert_same_embeddings, assert_trains, automodel_pooled, random_mask, random_sentences
from tests.tiny import similarity_gap, write_spread_stsb
from sparsecse.data.sts import read_sts_benchmark
from tests.tiny import SENTENCES
from tests.tiny_modern import ARCHS, FFN, HEAD_DIM, HEADS, HIDDEN, KV_HEADS, LAYERS, make_modern_model_dir
from sparsecse.shrinking.shrink import ShrinkConfig

HELD_OUT = random_sentences(12, seed=37)  # sentences no test built or chose anything on
POOLING = {"modernbert": "mean", "qwen3": "last", "gemma3_text": "mean"}


@pytest.fixture(scope="module", params=ARCHS)
def arch_dir(request, tmp_path_factory):
    return request.param, make_modern_model_dir(tmp_path_factory.mktemp(f"tiny_{request.param}"), request.param)


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory):
    return make_modern_model_dir(tmp_path_factory.mktemp("tiny_qwen3"), "qwen3")


@pytest.fixture(scope="module")
def modernbert_dir(tmp_path_factory):
    return make_modern_model_dir(tmp_path_factory.mktemp("tiny_modernbert"), "modernbert")


def load(path, arch):
    return SentenceEncoder.load(path, pooling=POOLING[arch], device="cpu")


def heads_of(arch):
    return HIDDEN // HEAD_DIM if arch == "modernbert" else HEADS


def gated(encoder, mask, sentences=HELD_OUT):
    with mask.apply(encoder.model):
        return encoder.encode(sentences)


def masks_for(arch):
    """Named masks: random ones, one with a layer that has no heads and a whole key/value group lost,
    and one where single query heads go from every group (uneven groups afterwards)."""
    h = heads_of(arch)
    group = h // KV_HEADS if arch != "modernbert" else 1
    structured = torch.ones(LAYERS, h, dtype=torch.bool)
    structured[0] = False  # no heads left in layer 0
    structured[1, :group] = False  # layer 1 loses key/value group 0 whole (ModernBERT: head 0)
    structured[2, 1] = False
    neurons = torch.ones(LAYERS, FFN, dtype=torch.bool)
    neurons[0, ::3] = False
    neurons[2] = False  # no FFN left in layer 2
    uneven = torch.ones(LAYERS, h, dtype=torch.bool)
    uneven[:, [0, h - 1]] = False
    return {"structured": Mask(structured, neurons),
            "uneven": Mask(uneven, torch.ones(LAYERS, FFN, dtype=torch.bool))}


# ----------------------------------------------------------------------------- gates
def test_all_ones_gates_leave_outputs_bit_identical(arch_dir):
    arch, path = arch_dir
    encoder = load(path, arch)
    before = encoder.encode(HELD_OUT)
    with Gates.ones_for(encoder.model).attach(encoder.model):
        assert np.array_equal(encoder.encode(HELD_OUT), before)


def test_adapter_reaches_the_real_modules(arch_dir):
    arch, path = arch_dir
    parts = layer_parts(load(path, arch).model)
    assert len(parts) == LAYERS and all(p.head_dim == HEAD_DIM for p in parts)
    assert model_shape(load(path, arch).model) == ([heads_of(arch)] * LAYERS, [FFN] * LAYERS)
    if arch == "modernbert":
        assert parts[0].query is parts[0].key is parts[0].value and parts[0].ffn_gate is parts[0].ffn_in
        assert parts[0].num_kv_heads == heads_of(arch)
    else:
        assert parts[0].num_kv_heads == KV_HEADS and parts[0].ffn_gate is not parts[0].ffn_in


def test_zero_gate_equals_removing_the_neuron_pair(qwen3_dir):
    """Neuron i of SwiGLU is row i of gate_proj and of up_proj and column i of down_proj."""
    encoder = load(qwen3_dir, "qwen3")
    gates = Gates.ones_for(encoder.model)
    gates.neuron[1, [3, 17]] = 0.0
    with gates.attach(encoder.model):
        expected = encoder.encode(HELD_OUT)
    encoder.model.layers[1].mlp.up_proj.weight.data[[3, 17]] = 0.0  # the value half alone suffices
    assert np.abs(encoder.encode(HELD_OUT) - expected).max() < 1e-5


def test_kv_group_gate_gradient_is_the_sum_of_its_query_heads(qwen3_dir):
    """ξ per key/value group: a gate on the group's values; at 1 its gradient equals the summed gradients
    of its query heads' gates, which is how score files rank whole groups without a second pass."""
    encoder = load(qwen3_dir, "qwen3")
    encoder.model.double()
    feats = encoder.tokenize(HELD_OUT[:5])
    heads = Gates.ones_for(encoder.model, requires_grad=True)
    groups = KVGroupGates.ones_for(encoder.model, requires_grad=True)
    with heads.attach(encoder.model), groups.attach(encoder.model):
        encoder(**feats).pow(2).sum().backward()
    summed = heads.head.grad.view(LAYERS, KV_HEADS, -1).sum(-1)
    assert torch.allclose(groups.gate.grad.double(), summed.double(), rtol=1e-4, atol=1e-7)
    assert groups.gate.grad.abs().min() > 0


def test_gate_on_a_missing_module_is_refused(modernbert_dir, tiny_bert_dir):
    for path, name in ((modernbert_dir, "modernbert"), (tiny_bert_dir, "bert")):
        model = SentenceEncoder.load(path, device="cpu").model
        with pytest.raises(SparseCSEError, match=f"^{name} has no key/value heads shared by several query heads"):
            KVGroupGates(torch.ones(LAYERS, 4)).attach(model)
    with pytest.raises(SparseCSEError, match="Unknown gate unit 'ffn_half'"):
        check_gate_unit(model, "ffn_half")


# ----------------------------------------------------------------------------- shrinking
@pytest.mark.parametrize("which", ["random", "structured", "uneven"])
def test_shrunk_model_equals_gated_model(arch_dir, which):
    arch, path = arch_dir
    encoder = load(path, arch)
    mask = random_mask(encoder.model, 0.4, seed=4) if which == "random" else masks_for(arch)[which]
    expected = gated(encoder, mask)
    assert np.abs(expected - encoder.encode(HELD_OUT)).max() > 1e-3  # the mask changes the outputs
    shrink_encoder(encoder, mask, align_ffn=8 if which == "random" else 1)
    assert model_shape(encoder.model)[0] == mask.head_mask.sum(1).tolist()
    assert_same_embeddings(encoder.encode(HELD_OUT), expected)


def test_shrink_keeps_the_right_heads_and_key_value_heads(qwen3_dir):
    encoder = load(qwen3_dir, "qwen3")
    mask = masks_for("qwen3")["structured"]
    wrong = Mask(mask.head_mask.roll(1, dims=1), mask.neuron_mask)
    assert np.abs(gated(load(qwen3_dir, "qwen3"), wrong) - gated(encoder, mask)).max() > 1e-3
    shrink_encoder(encoder, mask, align_ffn=1)
    config = encoder.model.config
    assert config.kept_heads == [[], [4, 5, 6, 7], [0, 2, 3, 4, 5, 6, 7]]
    assert config.kept_kv_heads == [[], [1], [0, 1]]
    layers = encoder.model.layers
    assert [layer.self_attn.k_proj.out_features // HEAD_DIM for layer in layers] == [0, 1, 2]
    assert [layer.self_attn.kv_index for layer in layers] == [[], [0, 0, 0, 0], [0, 0, 0, 1, 1, 1, 1]]
    assert [layer.mlp.down_proj.in_features for layer in layers] == [26, 40, 0]


def test_counts_flops_and_parameters_against_a_hand_count(qwen3_dir):
    encoder = load(qwen3_dir, "qwen3")
    d, dh, n = HIDDEN, HEAD_DIM, 16
    norms = 2 * dh + 2 * d  # q_norm, k_norm, two RMSNorms per layer
    dense_layer = HEADS * 2 * d * dh + KV_HEADS * 2 * d * dh + FFN * 3 * d + norms
    assert count_parameters(encoder, "layers") == LAYERS * dense_layer
    per_token = HEADS * 2 * (2 * d * dh + 2 * n * dh) + KV_HEADS * 2 * 2 * d * dh + FFN * 2 * 3 * d
    assert flops_per_token(encoder, n) == LAYERS * per_token

    mask = masks_for("qwen3")["structured"]  # 8 + 4 + 1 query heads, 2 + 1 + 0 groups, 14 + 0 + 40 neurons
    assert (mask.heads_pruned, mask.neurons_pruned) == (13, 54)
    shrink_encoder(encoder, mask, align_ffn=1)
    kept_q, kept_kv, kept_ffn = 0 + 4 + 7, 0 + 1 + 2, 26 + 40 + 0
    assert count_parameters(encoder, "layers") == (kept_q * 2 * d * dh + kept_kv * 2 * d * dh + kept_ffn * 3 * d
                                                   + LAYERS * norms)
    assert flops_per_token(encoder, n) == (kept_q * 2 * (2 * d * dh + 2 * n * dh) + kept_kv * 2 * 2 * d * dh
                                           + kept_ffn * 2 * 3 * d)
    report = size_report(encoder.model, n)
    assert report["heads_per_layer"] == [0, 4, 7] and report["ffn_per_layer"] == [26, 40, 0]


def test_mask_manifest_costs_follow_the_real_shapes(qwen3_dir, modernbert_dir):
    from sparsecse.modeling.flops import shape_extras

    for path, arch in ((qwen3_dir, "qwen3"), (modernbert_dir, "modernbert")):
        encoder = load(path, arch)
        shape = {"layers": LAYERS, "heads": heads_of(arch), "ffn": FFN, "hidden": HIDDEN, "head_dim": HEAD_DIM,
                 **shape_extras(encoder.model)}
        mask = masks_for(arch)["structured"]
        for metric in ("flops", "params"):
            costs = UnitCosts.from_shape(shape, metric, seq_len=16)
            before = flops_per_token(encoder, 16) if metric == "flops" else count_parameters(encoder, "layers")
            assert costs.dense == before
            small = load(path, arch)
            shrink_encoder(small, mask, align_ffn=1)
            after = flops_per_token(small, 16) if metric == "flops" else count_parameters(small, "layers")
            assert costs.kept(mask.head_mask, mask.neuron_mask) == after, (arch, metric)


def test_unpadded_and_padded_paths_agree(arch_dir):
    """ModernBERT's path without an attention mask (one sentence at a time) and the padded batch give the
    same embeddings, before and after shrinking; decoders likewise, whichever side they pad."""
    arch, path = arch_dir
    encoder = load(path, arch)
    shrink_encoder(encoder, masks_for(arch)["structured"], align_ffn=1)
    batch = encoder.encode(HELD_OUT[:6], batch_size=6)
    with torch.no_grad():
        for i, sentence in enumerate(HELD_OUT[:6]):
            ids = encoder.tokenizer([sentence], return_tensors="pt")["input_ids"]
            hidden = encoder.model(input_ids=ids).last_hidden_state
            one = hidden[0, -1] if arch == "qwen3" else hidden[0].mean(0)
            assert torch.allclose(one, torch.from_numpy(batch[i]), atol=1e-5)


def test_last_token_pooling_respects_the_padding_side(qwen3_dir):
    left = load(qwen3_dir, "qwen3")
    assert left.tokenizer.padding_side == "left"
    right = load(qwen3_dir, "qwen3")
    right.tokenizer.padding_side = "right"
    a, b = left.encode(HELD_OUT, batch_size=12), right.encode(HELD_OUT, batch_size=12)
    assert_same_embeddings(a, b)
    first_token = load(qwen3_dir, "qwen3")
    first_token.pooling = "cls_before_pooler"
    assert np.abs(first_token.encode(HELD_OUT) - a).max() > 1e-3


# ----------------------------------------------------------------------------- saving and loading
def test_shrunk_directory_loads_everywhere_without_its_code(arch_dir, tmp_path):
    from sentence_transformers import SentenceTransformer

    arch, path = arch_dir
    mask = masks_for(arch)["structured"]
    mask.manifest = {"kind": "mask", "model": str(path)}
    mask_path = mask.save(tmp_path / "mask.safetensors")
    result = shrink(model=path, mask=mask_path, out=tmp_path / "small", config=ShrinkConfig(pooling=POOLING[arch]))
    expected = gated(load(path, arch), mask)
    assert_same_embeddings(result.encoder.encode(HELD_OUT), expected)
    config = json.loads((result.out / "config.json").read_text())
    assert config["model_type"] == f"sparsecse-{arch}" and set(config["auto_map"]) == {"AutoConfig", "AutoModel"}
    copied = sorted(p.name for p in result.out.glob("*.py"))
    assert "modeling_sparsecse_modern.py" in copied and "configuration_sparsecse_modern.py" in copied
    for file in result.out.glob("*.py"):
        file.unlink()

    assert_same_embeddings(SentenceEncoder.load(result.out, device="cpu").encode(HELD_OUT), expected)
    st = SentenceTransformer(str(result.out), device="cpu")
    assert_same_embeddings(st.encode(HELD_OUT), expected)
    model, pooled = automodel_pooled(result.out, HELD_OUT, last_token=arch == "qwen3")
    assert type(model).__module__ == "sparsecse.modeling.modeling_sparsecse_modern"
    assert_same_embeddings(pooled, expected)


def test_export_to_onnx_and_openvino_matches_torch(qwen3_dir, modernbert_dir, tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("openvino")
    from sparsecse.serving.loading import load_encoder
    from sparsecse.exporting.export import export

    for path, arch in ((qwen3_dir, "qwen3"), (modernbert_dir, "modernbert")):
        small = load(path, arch)
        shrink_encoder(small, masks_for(arch)["structured"], align_ffn=1)
        torch_dir = save_model_dir(small, tmp_path / f"{arch}-small")
        reference = small.encode(HELD_OUT)
        for fmt in ("onnx", "openvino"):
            result = export(torch_dir, tmp_path / f"{arch}-{fmt}", format=fmt)
            assert result.verification["fp32_min_cosine"] >= 0.9999
            assert_same_embeddings(load_encoder(result.out).encode(HELD_OUT), reference)


# ----------------------------------------------------------------------------- commands, training, refusals
def test_score_prune_every_criterion_shrink_eval_on_qwen3(qwen3_dir, tiny_stsb_dir, tmp_path):
    runner = CliRunner()
    scores, small = tmp_path / "scores.safetensors", tmp_path / "small"
    data = ["--data-dir", str(tiny_stsb_dir)]
    result = runner.invoke(main, ["score", "--model", str(qwen3_dir), "--pooling", "last", "--out", str(scores),
                                  "--batch-size", "8", *data])
    assert result.exit_code == 0, result.output
    for criterion in ("abs_grad", "layer_norm", "fisher"):
        mask = prune(scores, 0.3, 0.5, config=PruningConfig(criterion=criterion))
        assert mask.heads_pruned == round(0.3 * LAYERS * HEADS) and mask.neurons_pruned == round(0.3 * LAYERS * FFN)
        emptied = (~mask.head_mask).view(LAYERS, KV_HEADS, -1).all(-1)
        assert mask.kv_mask is not None and torch.equal(mask.kv_mask, ~emptied)
        assert mask.manifest["kv_heads_pruned"] == int(emptied.sum())
        assert mask.manifest["dense_flops"] == flops_per_token(load(qwen3_dir, "qwen3"), 128)
    mask = prune(scores, 0.3, 0.5)
    mask.save(tmp_path / "mask.safetensors")
    result = runner.invoke(main, ["shrink", "--mask", str(tmp_path / "mask.safetensors"), "--out", str(small),
                                  "--pooling", "last"])
    assert result.exit_code == 0, result.output
    # pairs whose cosines are at least 1e-5 apart, so the gated and the shrunk model rank them alike on any device
    # (the tiny STS-B pairs 8 sentences with themselves: their ranks follow the rounding; see test_mpnet.py)
    spread = ["--data-dir", str(write_spread_stsb(tmp_path / "spread"))]
    assert similarity_gap(SentenceEncoder.load(small, device="cpu"), read_sts_benchmark(spread[1], "test")) > 1e-5
    evals = [runner.invoke(main, ["eval", "--model", str(qwen3_dir), "--mask", str(tmp_path / "mask.safetensors"),
                                  "--pooling", "last", "--tasks", "STSBenchmark", "--json", *spread]),
             runner.invoke(main, ["eval", "--model", str(small), "--tasks", "STSBenchmark", "--json", *spread])]
    assert all(r.exit_code == 0 for r in evals), evals[0].output + evals[1].output
    a, b = (json.loads(r.output.strip().splitlines()[-1])["scores"]["STSBenchmark"] for r in evals)
    assert a == pytest.approx(b, abs=1e-3)
    budgeted = prune(scores, keep_flops=0.5)  # a key/value head costs once for its group (test_budget_gqa.py)
    assert budgeted.manifest["kept_flops"] <= budgeted.manifest["dense_flops"] // 2


def test_a_mask_that_splits_a_key_value_group_is_refused(qwen3_dir, modernbert_dir, tmp_path):
    encoder = load(qwen3_dir, "qwen3")
    heads = torch.ones(LAYERS, HEADS, dtype=torch.bool)
    heads[1, :3] = False
    kv = torch.ones(LAYERS, KV_HEADS, dtype=torch.bool)
    kv[1, 0] = False  # key/value head 0 of layer 1 removed, but its query head 3 is kept
    mask = Mask(heads, torch.ones(LAYERS, FFN, dtype=torch.bool), kv_mask=kv)
    message = (r"^The mask would split key/value group 0 of layer 1: it removes the key/value head but keeps "
               r"query head\(s\) \[3\] that read it; a key/value head goes only with its whole group of query heads\.$")
    with pytest.raises(SparseCSEError, match=message):
        mask.apply(encoder.model)
    with pytest.raises(SparseCSEError, match=message):
        shrink_encoder(encoder, mask)
    mask.manifest = {"kind": "mask", "model": str(qwen3_dir)}
    mask.save(tmp_path / "split.safetensors")
    result = CliRunner().invoke(main, ["shrink", "--mask", str(tmp_path / "split.safetensors"),
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and "would split key/value group 0 of layer 1" in result.output
    assert not (tmp_path / "out").exists()
    heads[1, 3] = False  # the whole group goes: accepted
    Mask(heads, mask.neuron_mask, kv_mask=kv).check_fits(encoder.model)
    bert_like = Mask(torch.ones(LAYERS, 4, dtype=torch.bool), torch.ones(LAYERS, FFN, dtype=torch.bool),
                     kv_mask=torch.ones(LAYERS, 4, dtype=torch.bool))
    with pytest.raises(SparseCSEError, match="^The mask removes key/value heads, but modernbert has no grouped-query"):
        bert_like.apply(load(modernbert_dir, "modernbert").model)


@pytest.mark.parametrize("name", ["simcse", "noise_negatives"])
def test_a_shrunk_decoder_trains(qwen3_dir, name):
    from sparsecse.objectives.registry import build_objective

    encoder = load(qwen3_dir, "qwen3")
    shrink_encoder(encoder, masks_for("qwen3")["uneven"], align_ffn=1)
    assert_trains(build_objective(name, encoder), encoder, SENTENCES[:8],
                  encoder.model.layers[1].self_attn.k_proj.parameters())
