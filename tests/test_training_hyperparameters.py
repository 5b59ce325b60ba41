"""Training hyperparameters per backbone: SimCSE's, shrunk models keeping their source's, and the DiffCSE /
InfoCSE settings of their papers and scripts (configs only, no weights)."""

import pytest

from sparsecse.modeling import SHRUNK_CONFIGS
from sparsecse.objectives.diffcse import DiffCSE
from sparsecse.objectives.infocse import InfoCSE
from sparsecse.objectives.simcse import SimCSE
from sparsecse.objectives.backbones import backbone_of, with_backbone_defaults
from sparsecse.training.hyperparameters import published_hyperparameters, resolve_hyperparameters


def shrunk(base: str, hidden: int, layers: int, heads: int):
    """A shrunk-model config of that shape: a third of the heads and FFN neurons of every layer kept."""
    return SHRUNK_CONFIGS[base](hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                                intermediate_size=4 * hidden, kept_heads=[list(range(heads // 3))] * layers,
                                intermediate_sizes=[4 * hidden // 3] * layers)


def plain(model_type: str, hidden: int, layers: int):
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, hidden_size=hidden, num_hidden_layers=layers,
                                num_attention_heads=hidden // 64, intermediate_size=4 * hidden)


@pytest.mark.parametrize("config, backbone, recipe, batch, lr", [
    (shrunk("roberta", 768, 12, 12), "roberta-base", "simcse-roberta-base", 512, 1e-5),
    (shrunk("bert", 1024, 24, 16), "bert-large", "simcse-bert-large", 64, 1e-5),
    (shrunk("roberta", 1024, 24, 16), "roberta-large", "simcse-roberta-large", 512, 3e-5),
    (shrunk("xlm-roberta", 768, 12, 12), "roberta-base", "simcse-roberta-base", 512, 1e-5),
    (shrunk("bert", 384, 6, 12), None, "simcse-bert-base", 64, 3e-5),  # shrunk MiniLM: the fallback
    (plain("roberta", 768, 12), "roberta-base", "simcse-roberta-base", 512, 1e-5),
])
def test_shrunk_models_keep_their_source_models_recipe(config, backbone, recipe, batch, lr):
    assert config.model_type.startswith("sparsecse-") or config.model_type == "roberta"
    assert backbone_of(config) == backbone
    assert published_hyperparameters(config).name == recipe
    resolved = resolve_hyperparameters(config, SimCSE)
    assert (resolved["recipe"], resolved["batch_size"], resolved["lr"]) == (recipe, batch, lr)


@pytest.mark.parametrize("config, lr, mask_ratio", [
    (plain("bert", 768, 12), 7e-6, 0.30),  # DiffCSE Table 12, BERT-base
    (plain("roberta", 768, 12), 1e-5, 0.20),  # DiffCSE Table 12, RoBERTa-base
    (shrunk("roberta", 768, 12, 12), 1e-5, 0.20),
    (plain("bert", 384, 6), 7e-6, 0.30),  # other backbones: BERT-base's settings
])
def test_diffcse_defaults_follow_the_backbone(config, lr, mask_ratio):
    resolved = resolve_hyperparameters(config, DiffCSE)
    assert (resolved["batch_size"], resolved["lr"], resolved["epochs"]) == (64, lr, 2)
    params = with_backbone_defaults(DiffCSE, config, {})
    assert {**DiffCSE.defaults, **params}["mask_ratio"] == mask_ratio
    assert with_backbone_defaults(DiffCSE, config, {"mask_ratio": 0.5})["mask_ratio"] == 0.5  # explicit wins
    assert resolve_hyperparameters(config, DiffCSE, lr=2e-6, batch_size=128)["lr"] == 2e-6


@pytest.mark.parametrize("config, mask_ratio", [
    (plain("bert", 768, 12), 0.40),  # Infocse-bert-base.sh
    (shrunk("bert", 1024, 24, 16), 0.30),  # InfoCSE-bert-large.sh
])
def test_infocse_defaults_follow_the_published_scripts(config, mask_ratio):
    resolved = resolve_hyperparameters(config, InfoCSE)
    assert (resolved["batch_size"], resolved["lr"], resolved["epochs"]) == (64, 7e-6, 2)
    assert {**InfoCSE.defaults, **with_backbone_defaults(InfoCSE, config, {})}["mask_ratio"] == mask_ratio


@pytest.mark.parametrize("config", [plain("bert", 384, 6), shrunk("roberta", 768, 12, 12)])
def test_distill_defaults_follow_sentence_transformers_distillation(config):
    from sparsecse.objectives.distill import Distill

    # sentence-transformers' model_distillation.py: lr 1e-4, batch 64, whatever the backbone
    resolved = resolve_hyperparameters(config, Distill)
    assert (resolved["batch_size"], resolved["lr"], resolved["epochs"]) == (64, 1e-4, 1)
    assert resolve_hyperparameters(config, Distill, lr=3e-5)["lr"] == 3e-5
