"""Physical pruning: a shrunk model computes what the gated model computes, saves, reloads anywhere, trains."""

import copy
import json
import shlex

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from sparsecse.cli import main
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.flops import count_parameters, flops_per_token
from sparsecse.modeling.adapters import model_shape
from sparsecse.pruning.masks import Mask
from sparsecse.pruning.selection import masks_from_scores
from sparsecse.shrinking.shrink import save_model_dir, shrink
from sparsecse.shrinking.surgery import shrink_encoder
from tests.tiny import SENTENCES, make_tiny_model_dir
from tests.helpers import random_mask, assert_same_embeddings, gated_embeddings
from sparsecse.shrinking.shrink import ShrinkConfig

SPARSITIES = [0.1, 0.3, 0.5, 0.9]


@pytest.mark.parametrize("pooling", ["mean", "cls"])
@pytest.mark.parametrize("sparsity", SPARSITIES)
def test_shrunk_model_matches_gated_model(tiny_model_dir, sparsity, pooling):
    encoder = SentenceEncoder.load(tiny_model_dir, pooling=pooling, device="cpu")
    mask = random_mask(encoder.model, sparsity, seed=int(sparsity * 100), keep_one_head=sparsity <= 0.5)
    expected = gated_embeddings(encoder, mask)
    dense_params = count_parameters(encoder)

    shrink_encoder(encoder, mask)

    heads, ffn = model_shape(encoder.model)
    assert heads == mask.head_mask.sum(1).tolist() and ffn == mask.neuron_mask.sum(1).tolist()
    assert count_parameters(encoder) < dense_params
    assert_same_embeddings(encoder.encode(SENTENCES), expected)


def test_shrink_keeps_the_right_heads_not_just_the_right_count(tiny_bert_dir):
    encoder = SentenceEncoder.load(tiny_bert_dir, pooling="mean", device="cpu")
    keep = torch.tensor([[True, False, True, False], [False, True, True, True]])
    mask = Mask(keep, torch.ones(2, 48, dtype=torch.bool))
    expected = gated_embeddings(encoder, mask)
    wrong = Mask(torch.tensor([[True, True, False, False], [True, True, True, False]]), mask.neuron_mask)
    shrink_encoder(encoder, mask)
    assert encoder.model.config.kept_heads == [[0, 2], [1, 2, 3]]
    assert_same_embeddings(encoder.encode(SENTENCES), expected)
    other = SentenceEncoder.load(tiny_bert_dir, pooling="mean", device="cpu")
    assert np.abs(gated_embeddings(other, wrong) - expected).max() > 1e-3  # the test can tell heads apart


def test_surgery_equals_torch_pruning_on_the_same_channels(tiny_model_dir):
    """An independent implementation of the cut: Torch-Pruning's channel pruning of the same rows/columns."""
    tp = pytest.importorskip("torch_pruning")
    encoder = SentenceEncoder.load(tiny_model_dir, pooling="mean", device="cpu")
    reference = copy.deepcopy(encoder.model)
    mask = random_mask(encoder.model, 0.4, seed=3)
    shrink_encoder(encoder, mask)

    for layer, heads, neurons in zip(reference.encoder.layer, mask.head_mask, mask.neuron_mask):
        attention = layer.attention.self
        head_dim = attention.attention_head_size
        gone_features = [h * head_dim + d for h in (~heads).nonzero().flatten().tolist() for d in range(head_dim)]
        for linear in (attention.query, attention.key, attention.value):
            tp.prune_linear_out_channels(linear, gone_features)
        tp.prune_linear_in_channels(layer.attention.output.dense, gone_features)
        gone_neurons = (~neurons).nonzero().flatten().tolist()
        tp.prune_linear_out_channels(layer.intermediate.dense, gone_neurons)
        tp.prune_linear_in_channels(layer.output.dense, gone_neurons)

    ours = dict(encoder.model.named_parameters())
    for name, param in reference.named_parameters():
        assert torch.equal(ours[name], param), name


def test_layer_with_every_head_or_neuron_removed_is_handled(tiny_model_dir, tmp_path):
    encoder = SentenceEncoder.load(tiny_model_dir, pooling="mean", device="cpu")
    heads = torch.tensor([[False] * 4, [True, False, True, True]])
    neurons = torch.ones(2, 48, dtype=torch.bool)
    neurons[1] = False
    mask = Mask(heads, neurons)
    expected = gated_embeddings(encoder, mask)

    shrink_encoder(encoder, mask)
    assert model_shape(encoder.model) == ([0, 3], [48, 0])
    assert_same_embeddings(encoder.encode(SENTENCES), expected)

    out = save_model_dir(encoder, tmp_path / "headless")
    assert_same_embeddings(SentenceEncoder.load(out, device="cpu").encode(SENTENCES), expected)


def test_save_reload_through_all_three_loaders(tiny_model_dir, tmp_path):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    mask = random_mask(SentenceEncoder.load(tiny_model_dir, device="cpu").model, 0.3, seed=3)
    mask_path = mask.save(tmp_path / "mask.safetensors")
    result = shrink(model=tiny_model_dir, mask=mask_path, out=tmp_path / "small", config=ShrinkConfig(pooling="mean"))
    expected = result.encoder.encode(SENTENCES)

    ours = SentenceEncoder.load(result.out, device="cpu")
    assert ours.pooling == "mean"
    assert_same_embeddings(ours.encode(SENTENCES), expected)

    st = SentenceTransformer(str(result.out), trust_remote_code=True, device="cpu")
    assert_same_embeddings(st.encode(SENTENCES), expected)

    model = AutoModel.from_pretrained(result.out, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(result.out, trust_remote_code=True)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    weights = batch["attention_mask"].unsqueeze(-1).float()
    assert_same_embeddings(((hidden * weights).sum(1) / weights.sum(1)).numpy(), expected)

    config = json.loads((result.out / "config.json").read_text())
    assert config["model_type"].startswith("sparsecse-")
    assert config["intermediate_sizes"] == [-(-n // 8) * 8 for n in mask.neuron_mask.sum(1).tolist()]  # aligned
    assert [len(h) for h in config["kept_heads"]] == mask.head_mask.sum(1).tolist()
    assert set(config["auto_map"]) == {"AutoConfig", "AutoModel"}
    own = json.loads((result.out / "sparsecse_config.json").read_text())
    assert own["lineage"]["shrunk_from"] == str(tiny_model_dir)
    assert own["lineage"]["mask_sha256"] and own["lineage"]["shrunk_from_sha256"]
    assert own["manifest"]["kind"] == "shrunk_model"


def test_reloaded_shrunk_model_saves_again(tiny_bert_dir, tmp_path):
    encoder = SentenceEncoder.load(tiny_bert_dir, pooling="mean", device="cpu")
    shrink_encoder(encoder, random_mask(encoder.model, 0.5, seed=5))
    expected = encoder.encode(SENTENCES)
    first = save_model_dir(encoder, tmp_path / "first", lineage={"step": "shrink"})
    reloaded = SentenceEncoder.load(first, device="cpu")
    second = save_model_dir(reloaded, tmp_path / "second", lineage={"step": "again"})
    assert (second / "modeling_sparsecse.py").is_file()
    assert_same_embeddings(SentenceEncoder.load(second, device="cpu").encode(SENTENCES), expected)
    lineage = json.loads((second / "sparsecse_config.json").read_text())["lineage"]
    assert lineage["step"] == "again"


def test_mask_for_another_model_is_rejected(tiny_bert_dir, tmp_path):
    encoder = SentenceEncoder.load(tiny_bert_dir, device="cpu")
    with pytest.raises(SparseCSEError, match="mask is for a model with 3 layers"):
        shrink_encoder(encoder, Mask.full(3, 4, 48))
    with pytest.raises(SparseCSEError, match="4 heads x 64 FFN"):
        shrink_encoder(encoder, Mask.full(2, 4, 64))

    Mask.full(6, 12, 1536).save(tmp_path / "minilm_mask.safetensors")
    result = CliRunner().invoke(main, ["shrink", "--model", str(tiny_bert_dir), "--mask",
                                       str(tmp_path / "minilm_mask.safetensors"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and "Error: The mask is for a model with 6 layers" in result.output
    assert not (tmp_path / "out").exists()


def test_unsupported_architecture_is_refused(tmp_path):
    src = make_tiny_model_dir(tmp_path / "distil", "distilbert")
    encoder = SentenceEncoder.load(src, device="cpu")
    with pytest.raises(SparseCSEError, match="Shrinking supports bert"):
        shrink_encoder(encoder, Mask.full(2, 4, 48))


def test_shrunk_model_trains(tiny_roberta_dir):
    encoder = SentenceEncoder.load(tiny_roberta_dir, pooling="mean", device="cpu")
    heads = torch.tensor([[False] * 4, [True, False, False, True]])  # layer 0 headless on purpose
    shrink_encoder(encoder, Mask(heads, random_mask(encoder.model, 0.5).neuron_mask))
    encoder.train()
    optimizer = torch.optim.SGD(encoder.parameters(), lr=0.1)
    before = {n: p.detach().clone() for n, p in encoder.named_parameters()}
    batch = encoder.tokenize(SENTENCES[:8])
    a, b = encoder(**batch), encoder(**batch)  # two dropout views, as SimCSE
    logits = torch.nn.functional.cosine_similarity(a[:, None], b[None], dim=-1) / 0.05
    loss = torch.nn.functional.cross_entropy(logits, torch.arange(len(a)))
    loss.backward()
    layer1 = encoder.model.encoder.layer[1]
    for linear in (layer1.attention.self.query, layer1.attention.output.dense, layer1.intermediate.dense):
        assert linear.weight.grad is not None and linear.weight.grad.abs().sum() > 0
    optimizer.step()
    changed = [n for n, p in encoder.named_parameters() if not torch.equal(before[n], p)]
    assert any("layer.1.attention.self.query" in n for n in changed)


def test_flops_and_parameters_follow_the_removed_units(tiny_bert_dir):
    encoder = SentenceEncoder.load(tiny_bert_dir, device="cpu")
    hidden, head_dim = 32, 8
    dense_params, dense_flops = count_parameters(encoder), flops_per_token(encoder, seq_len=10)
    mask = random_mask(encoder.model, 0.3, seed=1)
    shrink_encoder(encoder, mask)
    per_head = 4 * hidden * head_dim + 3 * head_dim  # Q/K/V rows + biases, output-projection columns
    per_neuron = 2 * hidden + 1  # FFN-input row + bias, FFN-output column
    assert count_parameters(encoder) == dense_params - mask.heads_pruned * per_head - mask.neurons_pruned * per_neuron

    # the projections' share of the count equals the multiply-adds the linear layers really run
    macs = []
    hooks = [m.register_forward_hook(lambda m, i, o: macs.append(i[0].shape[:-1].numel() * m.in_features
                                                                   * m.out_features))
             for m in encoder.model.encoder.modules() if isinstance(m, torch.nn.Linear)]
    batch = encoder.tokenize(["a man is playing the guitar"])
    encoder(**batch)
    for h in hooks:
        h.remove()
    tokens = batch["input_ids"].numel()
    assert flops_per_token(encoder, seq_len=0) * tokens == 2 * sum(macs)
    assert flops_per_token(encoder, seq_len=10) < dense_flops


def test_cli_shrink_json_and_overwrite(tiny_bert_dir, fake_senteval, tmp_path):
    encoder = SentenceEncoder.load(tiny_bert_dir, device="cpu")
    random_mask(encoder.model, 0.5).save(tmp_path / "mask.safetensors")
    args = ["shrink", "--model", str(tiny_bert_dir), "--mask", str(tmp_path / "mask.safetensors"),
            "--out", str(tmp_path / "small"), "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["after"]["parameters"] < report["before"]["parameters"]
    assert report["ratios"]["flops_per_token"] > 1.5
    assert report["after"]["weights_bytes"] < report["before"]["weights_bytes"]
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 1 and "already exists" in again.output
    text = CliRunner().invoke(main, args[:-1] + ["--overwrite"])  # the text report ends with the eval to run
    assert text.exit_code == 0, text.output
    hinted = text.stdout.splitlines()[-1].split("`")[1]
    assert hinted == f"sparsecse eval --model {tmp_path / 'small'} --tasks STSBenchmark --split dev"
    scored = CliRunner().invoke(main, [*shlex.split(hinted)[1:], "--data-dir", str(fake_senteval), "--json"])
    assert scored.exit_code == 0, scored.output
    assert json.loads(scored.stdout)["settings"]["sts_split"] == "dev"


@pytest.mark.integration
def test_minilm_shrink_matches_gated_and_round_trips(minilm_dir, tmp_path):
    from sentence_transformers import SentenceTransformer

    encoder = SentenceEncoder.load(minilm_dir, device="cpu")
    mask = random_mask(encoder.model, 0.3, seed=0)
    expected = gated_embeddings(encoder, mask)
    mask.save(tmp_path / "mask.safetensors")
    result = shrink(model=minilm_dir, mask=tmp_path / "mask.safetensors", out=tmp_path / "small")
    assert result.encoder.pooling == "mean"
    assert_same_embeddings(result.encoder.encode(SENTENCES), expected)
    assert_same_embeddings(SentenceEncoder.load(result.out, device="cpu").encode(SENTENCES), expected)
    st = SentenceTransformer(str(result.out), trust_remote_code=True, device="cpu")
    assert_same_embeddings(st.encode(SENTENCES), expected)
    assert 1.3 < result.ratios()["flops_per_token"] < 1.5


@pytest.mark.parametrize("arch", ["electra", "xlm-roberta", "camembert"])
def test_other_bert_like_architectures_shrink_and_reload(arch, tmp_path):
    from transformers import AutoConfig, AutoModel

    from tests.tiny import make_tokenizer

    tokenizer = make_tokenizer(tmp_path / "tokenizer")
    extra = {"embedding_size": 16} if arch == "electra" else {}  # ELECTRA projects 16 -> 32
    config = AutoConfig.for_model(arch, vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=48, max_position_embeddings=72,
                                  pad_token_id=0, **extra)
    torch.manual_seed(0)
    encoder = SentenceEncoder(AutoModel.from_config(config).eval(), tokenizer, "mean", max_length=64)
    mask = random_mask(encoder.model, 0.5, seed=7)
    expected = gated_embeddings(encoder, mask)
    shrink_encoder(encoder, mask)
    assert encoder.model.config.model_type == f"sparsecse-{arch}"
    assert_same_embeddings(encoder.encode(SENTENCES), expected)
    out = save_model_dir(encoder, tmp_path / "small")
    assert_same_embeddings(SentenceEncoder.load(out, device="cpu").encode(SENTENCES), expected)


def test_package_level_shrink_is_the_function(tiny_bert_dir, tmp_path):
    import sparsecse
    import sparsecse.shrinking.shrink  # noqa: F401  (the module is named apart from the function it holds)

    mask = Mask.full(2, 4, 48)
    mask.neuron_mask[:, :10] = False
    result = sparsecse.shrink(model=tiny_bert_dir, mask=mask)
    assert result.after["ffn_per_layer"] == [40, 40] and result.out is None  # 38 kept + 2 for alignment


def test_eval_on_shrunk_directory_matches_eval_with_mask(tmp_path):
    """Scores compared on a model and pairs whose cosines are spread out (checked), so that no rank
    depends on float rounding."""
    from sparsecse.data.sts import read_sts_benchmark
    from tests.tiny import make_tiny_model_dir, similarity_gap, write_spread_stsb

    model_dir = make_tiny_model_dir(tmp_path / "model", init_range=0.2)
    data_dir = write_spread_stsb(tmp_path / "data")
    encoder = SentenceEncoder.load(model_dir, device="cpu")
    mask = random_mask(encoder.model, 0.3, seed=2)
    mask.save(tmp_path / "mask.safetensors")
    shrink(model=model_dir, mask=tmp_path / "mask.safetensors", out=tmp_path / "small")
    with mask.apply(encoder.model):
        assert similarity_gap(encoder, read_sts_benchmark(data_dir, "test")) > 1e-5

    def stsb(*args):
        result = CliRunner().invoke(main, ["eval", *args, "--data-dir", str(data_dir),
                                           "--tasks", "STSBenchmark", "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["scores"]["STSBenchmark"]

    masked = stsb("--model", str(model_dir), "--mask", str(tmp_path / "mask.safetensors"))
    assert stsb("--model", str(tmp_path / "small")) == pytest.approx(masked, abs=1e-6)


def test_ffn_alignment_adds_inert_zero_neurons_that_stay_zero_in_training(tiny_bert_dir):
    encoder = SentenceEncoder.load(tiny_bert_dir, pooling="mean", device="cpu")
    neurons = torch.ones(2, 48, dtype=torch.bool)
    neurons[0, :5] = False  # 43 kept -> padded to 48
    neurons[1, 10:30] = False  # 28 kept -> padded to 32
    mask = Mask(torch.ones(2, 4, dtype=torch.bool), neurons)
    expected = gated_embeddings(encoder, mask)
    shrink_encoder(encoder, mask, align_ffn=8)
    assert model_shape(encoder.model)[1] == [48, 32]
    assert encoder.extra_config["shape"]["ffn_zero_padding"] == [5, 4]
    assert_same_embeddings(encoder.encode(SENTENCES), expected)

    encoder.train()
    optimizer = torch.optim.AdamW(encoder.parameters(), lr=0.1, weight_decay=0.01)
    for _ in range(2):
        batch = encoder.tokenize(SENTENCES[:8])
        loss = encoder(**batch).pow(2).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    layer = encoder.model.encoder.layer[1]
    assert layer.intermediate.dense.weight[28:].abs().sum() == 0 and layer.intermediate.dense.bias[28:].abs().sum() == 0
    assert layer.output.dense.weight[:, 28:].abs().sum() == 0
    assert layer.intermediate.dense.weight[:28].abs().sum() > 0
