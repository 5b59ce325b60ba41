"""The stock layout (issue 64): a compressed model of the input's own architecture class and model type, no
Python files and no auto_map, loaded in a process that never imports sparsecse by transformers' AutoModel
and by sentence-transformers with trust_remote_code=False, giving sparsecse's own embeddings."""

import json

import numpy as np
import pytest
import torch

from sparsecse.errors import SparseCSEError
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.modeling.flops import shape_record
from sparsecse.pruning.budget import UnitCosts
from sparsecse.pruning.masks import Mask
from sparsecse.pruning.prune import PruningConfig, prune
from sparsecse.pruning.uniform import check_layout, select_uniform, states_head_size
from sparsecse.scoring.score import ScoringConfig, score
from sparsecse.serving.plain_process import load_plainly
from sparsecse.shrinking.shrink import ShrinkConfig, remove_units, save_model_dir, shrink_lineage
from sparsecse.shrinking.stock import to_stock
from sparsecse.shrinking.surgery import shrink_encoder
from sparsecse.reporting.store import load_store
from tests.helpers import assert_same_embeddings, cli, load_benchmark, random_mask, random_sentences
from tests.tiny import make_tiny_model_dir
from tests.tiny_modern import make_modern_model_dir

SENTENCES = random_sentences(12, seed=64)
MIXED_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
POOLING = {"bert": "mean", "qwen3": "last", "gemma3_text": "mean"}
CLASSES = {"bert": "BertModel", "qwen3": "Qwen3Model", "gemma3_text": "Gemma3TextModel"}
# the tiny BERT's heads cost 80% of its layer FLOPs at 128 tokens, and a stock BERT keeps every head
BUDGET = {"bert": 0.9, "qwen3": 0.5, "gemma3_text": 0.5}


def uniform_mask(encoder, budget=0.5, removed=(), seed=0):
    """A stock-layout mask of ``encoder``'s model at ``budget`` of its kept layers' FLOPs (random scores)."""
    shape = shape_record(encoder.model)
    layers = shape["layers"]
    kept = [i for i in range(layers) if i not in removed]
    costs = UnitCosts.from_shape({**shape, "layers": len(kept)}, "flops")
    g = torch.Generator().manual_seed(seed)
    heads, neurons = torch.rand(layers, shape["heads"], generator=g), torch.rand(layers, shape["ffn"], generator=g)
    hk, nk = select_uniform(heads[kept], neurons[kept], costs, budget, states_head_size(shape), hidden=shape["hidden"])
    head_keep = torch.zeros(layers, shape["heads"], dtype=torch.bool)
    neuron_keep = torch.zeros(layers, shape["ffn"], dtype=torch.bool)
    head_keep[kept], neuron_keep[kept] = hk, nk
    mask = Mask(head_keep, neuron_keep)
    return mask.without_layers(removed) if removed else mask


@pytest.fixture(scope="module", params=["bert", "qwen3", "gemma3_text"])
def family(request, tmp_path_factory):
    """A 4-layer tiny model: BERT (no head size of its own), Qwen3 and Gemma-3 (head_dim, grouped key/value heads;
    Gemma-3 with alternating sliding and full attention layers, which a removed layer must not shift)."""
    arch, out = request.param, tmp_path_factory.mktemp(f"stock_{request.param}")
    if arch == "bert":
        return arch, make_tiny_model_dir(out, "bert", layers=4, ffn=48, init_range=0.2)
    extra = {"layer_types": MIXED_TYPES} if arch == "gemma3_text" else {}
    return arch, make_modern_model_dir(out, arch, layers=4, **extra)


def load(path, arch):
    return SentenceEncoder.load(path, pooling=POOLING[arch], device="cpu")


def test_the_uniform_rule_keeps_one_shape_within_the_budget(family):
    arch, path = family
    encoder = load(path, arch)
    shape = shape_record(encoder.model)
    costs = UnitCosts.from_shape(shape, "flops")
    mask = uniform_mask(encoder, BUDGET[arch])
    widths, heads = mask.neuron_mask.sum(1).tolist(), mask.head_mask.sum(1).tolist()
    assert len(set(widths)) == 1 and 0 < widths[0] <= shape["ffn"]
    assert costs.kept(mask.head_mask, mask.neuron_mask) <= BUDGET[arch] * costs.dense
    if arch == "bert":  # BERT's config has no head size of its own: every head stays
        assert heads == [shape["heads"]] * shape["layers"]
    else:  # Qwen3 states head_dim: one head count, in key/value groups of one size
        assert len(set(heads)) == 1
        group = shape["heads"] // shape["kv_heads"]
        per_group = mask.head_mask.view(shape["layers"], shape["kv_heads"], group).sum(-1)
        assert len(set(per_group[per_group > 0].tolist())) == 1 and shape["hidden"] % heads[0] == 0


@pytest.mark.parametrize("removed", [(), (1,)])
def test_the_gated_model_with_a_uniform_mask_is_the_stock_model(family, removed):
    arch, path = family
    encoder = load(path, arch)
    mask = uniform_mask(encoder, BUDGET[arch], removed)
    with mask.apply(encoder.model):
        expected = encoder.encode(SENTENCES)
    assert np.abs(expected - load(path, arch).encode(SENTENCES)).max() > 1e-3  # the mask changes the outputs
    remove_units(encoder, mask, ShrinkConfig(align_ffn=1, layout="stock"), shrink_lineage(str(path), mask))
    config = encoder.model.config
    assert type(encoder.model).__name__ == CLASSES[arch]
    assert config.model_type == arch and config.num_hidden_layers == 4 - len(removed)
    if arch == "gemma3_text":
        assert config.layer_types == [t for i, t in enumerate(MIXED_TYPES) if i not in removed]
    assert config.intermediate_size == int(mask.neuron_mask.sum(1).max())
    assert_same_embeddings(encoder.encode(SENTENCES), expected)


def test_a_model_with_layers_removed_first_is_pruned_and_saved_stock(family):
    """The prune stage after a depth search: the layers go first (a custom model of one shape), then the stock
    mask of the rest; the result is the family's own model and computes what the gated input does."""
    from sparsecse.shrinking.layers import without_layers

    arch, path = family
    dense = load(path, arch)
    both = uniform_mask(dense, BUDGET[arch], (0,))
    with both.apply(dense.model):
        expected = dense.encode(SENTENCES)
    smaller = without_layers(dense, [0])
    width = Mask(both.head_mask[1:], both.neuron_mask[1:])
    remove_units(smaller, width, ShrinkConfig(align_ffn=1, layout="stock"), shrink_lineage(str(path), width))
    assert type(smaller.model).__name__ == CLASSES[arch] and smaller.model.config.num_hidden_layers == 3
    assert_same_embeddings(smaller.encode(SENTENCES), expected)


def test_a_free_shape_is_refused_as_stock_in_one_sentence(tmp_path):
    encoder = load(make_tiny_model_dir(tmp_path / "m", "bert", layers=2, init_range=0.2), "bert")
    shrink_encoder(encoder, random_mask(encoder.model, 0.3), align_ffn=1)
    with pytest.raises(SparseCSEError, match="stock layout"):
        to_stock(encoder.model)


def test_unknown_layout_and_a_stock_sparsity_are_refused():
    with pytest.raises(SparseCSEError, match="Unknown layout 'nope'; choose stock"):
        check_layout("nope")
    from sparsecse.pruning.prune import _mask

    no_scores = type("NoScores", (), {"manifest": {}})()  # a sparsity is refused before the scores are read
    with pytest.raises(SparseCSEError, match="not a sparsity"):
        _mask(no_scores, torch.rand(2, 4), torch.rand(2, 8), "sparsity", 0.5, PruningConfig(layout="stock"))


def test_a_stock_model_loads_with_no_custom_code_in_a_plain_process(family, tmp_path):
    """AutoModel and SentenceTransformer load it with trust_remote_code=False, in a process that never imports
    sparsecse; its config has the family's model_type and no auto_map; the embeddings are sparsecse's own and
    those of the gated model it came from."""
    arch, path = family
    encoder = load(path, arch)
    mask = uniform_mask(encoder, BUDGET[arch], (2,))
    with mask.apply(encoder.model):
        gated = encoder.encode(SENTENCES)
    remove_units(encoder, mask, ShrinkConfig(layout="stock"), shrink_lineage(str(path), mask), out=tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["model_type"] == arch and "auto_map" not in config and config["num_hidden_layers"] == 3
    assert not list((tmp_path / "m").glob("*.py"))
    line, embeddings = load_plainly(tmp_path / "m", SENTENCES, tmp_path / "e.npy")
    assert line == f"{CLASSES[arch]} False"
    ours = SentenceEncoder.load(tmp_path / "m", device="cpu").encode(SENTENCES)
    assert_same_embeddings(embeddings, ours)
    assert_same_embeddings(ours, gated)


def test_prune_with_the_stock_layout_from_real_scores(family, tiny_stsb_dir):
    arch, path = family
    scores = score(path, ScoringConfig(data_dir=tiny_stsb_dir, batch_size=8, max_batches=2, seed=0),
                   pooling=POOLING[arch], device="cpu")
    mask = prune(scores, keep_flops=BUDGET[arch], config=PruningConfig(layout="stock"))
    assert mask.manifest["layout"] == "stock" and len(set(mask.neuron_mask.sum(1).tolist())) == 1
    assert mask.manifest["kept_flops_ratio"] <= BUDGET[arch]
    smaller = prune(scores, keep_flops=BUDGET[arch] - 0.05, within=mask, config=PruningConfig(layout="stock"))
    assert bool((smaller.neuron_mask <= mask.neuron_mask).all()) and len(set(smaller.head_mask.sum(1).tolist())) == 1


def test_compress_layout_nope_is_refused_with_nothing_written(tiny_bert_dir, corpus, tmp_path):
    out = tmp_path / "small"
    result = cli("compress", "--model", tiny_bert_dir, "--keep-flops", "0.9", "--reconstruct", corpus,
                 "--layout", "nope", "--out", out)
    assert result.exit_code != 0
    assert "Unknown layout 'nope'; choose stock" in result.output and result.output.count(". ") <= 1
    assert not out.exists() and not list(tmp_path.iterdir())


@pytest.fixture(scope="module")
def plain_load():
    yield from load_benchmark("plain_load")


def test_compress_layout_stock_writes_the_familys_own_model(corpus, tiny_stsb_dir, tmp_path, plain_load):
    path = make_tiny_model_dir(tmp_path / "in", "bert", layers=2, ffn=48, init_range=0.2)
    out = tmp_path / "small"
    result = cli("compress", "--model", path, "--keep-flops", "0.9", "--reconstruct", corpus, "--layout", "stock",
                 "--reconstruct-sentences", "20", "--data-dir", tiny_stsb_dir, "--score-batch-size", "8",
                 "--max-batches", "2", "--device", "cpu", "--out", out, "--json", "--quiet")
    assert result.exit_code == 0, result.output
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "bert" and "auto_map" not in config and not list(out.glob("*.py"))
    assert config["intermediate_size"] < 48 and config["num_attention_heads"] == 4
    # benchmarks/plain_load.py: the stock model passes; a custom one (auto_map, Python files) is reported and fails
    custom = tmp_path / "custom"
    assert cli("compress", "--model", path, "--keep-flops", "0.9", "--reconstruct", corpus, "--layout", "custom",
               "--reconstruct-sentences", "20", "--data-dir", tiny_stsb_dir, "--score-batch-size", "8",
               "--max-batches", "2", "--device", "cpu", "--out", custom, "--quiet").exit_code == 0
    rows = plain_load.main(["--model", str(out), "--data-dir", str(tiny_stsb_dir), "--store", str(tmp_path / "store")])
    assert [(r["model_type"], r["auto_map"], r["python_files"], r["sparsecse_imported"], r["passed"])
            for r in rows] == [("bert", False, [], False, True)] and rows[0]["max_abs_diff"] <= 1e-4
    assert rows[0]["auto_model_class"] == "BertModel" and rows[0]["ffn"] == config["intermediate_size"]
    (entry,) = load_store(tmp_path / "store").values()
    assert entry.id.startswith("plain-load.") and entry.figures["rows"][0]["passed"]
    with pytest.raises(SystemExit):
        plain_load.main(["--model", str(out), str(custom), "--data-dir", str(tiny_stsb_dir)])


def test_layout_reaches_every_prune_stage_of_a_recipe_or_target():
    from cli.compress import with_layout

    assert with_layout("stock", None, True, ()) == ("prune.layout=stock",)  # a target: its recipe's prune stages
    assert with_layout("stock", None, True, ("prune.layout=custom",)) == ("prune.layout=custom",)
    assert with_layout(None, "target", False, ("a.b=1",)) == ("a.b=1",)
    assert with_layout("stock", None, False, ()) == ()  # the single stage takes it directly


def test_the_cards_usage_section_follows_the_layout(tmp_path):
    from sparsecse.cards.model_card import usage_code

    path = make_tiny_model_dir(tmp_path / "in", "bert", layers=3, init_range=0.2)
    encoder = load(path, "bert")
    mask = uniform_mask(encoder, BUDGET["bert"], (1,))
    remove_units(encoder, mask, ShrinkConfig(layout="stock"), shrink_lineage(str(path), mask), out=tmp_path / "stock")
    card = (tmp_path / "stock" / "README.md").read_text()
    assert 'SentenceTransformer("path/to/this/directory")' in usage_code(card) and "trust_remote_code" not in card
    assert "plain `bert` model" in card and 'backend="onnx"' in card
    widths = mask.neuron_mask.sum(1)[mask.kept_layers].tolist()
    rows = [r for r in card.split("## Compression")[1].splitlines() if r.startswith("| ") and "/" in r]
    assert len(rows) == 2 and all(f"{w} / 48" in r for r, w in zip(rows, widths))  # each kept layer's width
    encoder = load(path, "bert")
    remove_units(encoder, random_mask(encoder.model, 0.3), ShrinkConfig(), shrink_lineage(str(path), mask),
                 out=tmp_path / "custom")
    card = (tmp_path / "custom" / "README.md").read_text()
    assert "trust_remote_code=True" in usage_code(card)
    assert "text-embeddings-inference" in card and "`sparsecse compress --layout stock`" in card


def test_a_head_count_the_family_config_refuses_is_one_sentence(tmp_path):
    """Gemma-3's config checks that the heads divide the hidden size: 3 of 8 heads (32 wide) cannot be stated."""
    encoder = load(make_modern_model_dir(tmp_path / "g", "gemma3_text", layers=2), "gemma3_text")
    heads = torch.zeros(2, 8, dtype=torch.bool)
    heads[:, [0, 1, 2]] = True  # three heads of the first key/value group in each layer
    mask = Mask(heads, torch.ones(2, 40, dtype=torch.bool))
    shrink_encoder(encoder, mask, align_ffn=1)
    with pytest.raises(SparseCSEError, match="cannot state this model's shape"):
        to_stock(encoder.model)


def test_score_prune_and_shrink_commands_make_a_stock_model(tiny_stsb_dir, tmp_path):
    path = make_modern_model_dir(tmp_path / "in", "qwen3", layers=2)
    scores, mask, out = tmp_path / "s.safetensors", tmp_path / "m.safetensors", tmp_path / "small"
    assert cli("score", "--model", path, "--pooling", "last", "--data-dir", tiny_stsb_dir, "--batch-size", 8,
               "--max-batches", 2, "--out", scores).exit_code == 0
    refused = cli("prune", "--scores", scores, "--keep-flops", "0.5", "--layout", "nope", "--out", mask)
    assert refused.exit_code != 0 and "Unknown layout 'nope'" in refused.output and not mask.exists()
    result = cli("prune", "--scores", scores, "--keep-flops", "0.5", "--layout", "stock", "--out", mask)
    assert result.exit_code == 0, result.output
    result = cli("shrink", "--model", path, "--mask", mask, "--layout", "stock", "--pooling", "last", "--out", out)
    assert result.exit_code == 0, result.output
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "qwen3" and "auto_map" not in config and not list(out.glob("*.py"))
    assert config["num_attention_heads"] % config["num_key_value_heads"] == 0
