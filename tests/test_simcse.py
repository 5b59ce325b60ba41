"""SimCSE's loss against a direct computation, and the objective's plumbing (two views, MLP, recipe)."""

import math

import pytest
import torch
from torch import nn

from sparsecse.objectives.losses import info_nce
from sparsecse.objectives.simcse import SimCSE
from sparsecse.training.hyperparameters import published_hyperparameters, resolve_hyperparameters


def direct_infonce(anchors, positives, temperature, negatives=None):
    """-1/N sum_i log( e^{cos(a_i,p_i)/t} / sum_j e^{cos(a_i,c_j)/t} ), written out with plain loops."""
    candidates = list(positives) + (list(negatives) if negatives is not None else [])
    total = 0.0
    for i, a in enumerate(anchors):
        sims = [float(torch.dot(a, c) / (a.norm() * c.norm())) / temperature for c in candidates]
        total += -(sims[i] - math.log(sum(math.exp(s) for s in sims)))
    return total / len(anchors)


def test_info_nce_matches_direct_computation():
    g = torch.Generator().manual_seed(0)
    anchors, positives = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
    loss, logits = info_nce(anchors, positives, temperature=0.05)
    assert logits.shape == (6, 6)
    assert loss.item() == pytest.approx(direct_infonce(anchors, positives, 0.05), rel=1e-5)


def test_info_nce_extra_negatives_are_extra_columns():
    g = torch.Generator().manual_seed(1)
    a, p, n = torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g), torch.randn(5, 3, generator=g)
    loss, logits = info_nce(a, p, temperature=0.1, extra_negatives=n)
    assert logits.shape == (4, 9)
    assert loss.item() == pytest.approx(direct_infonce(a, p, 0.1, n), rel=1e-5)


class FixedEncoder(nn.Module):
    """Embedding of row r = table[input_ids[r, 0]] + noise[r]: the second copy of a sentence differs
    from the first by a fixed 'dropout' noise, so the two views are known in advance."""

    dim = 4

    def __init__(self, table, noise):
        super().__init__()
        self.table, self.noise = table, noise
        self.calls = []

    def forward(self, input_ids=None, attention_mask=None, **_):
        self.calls.append(input_ids.shape[0])
        return self.table[input_ids[:, 0]] + self.noise[: input_ids.shape[0]]


def test_simcse_objective_uses_two_views_of_one_pass():
    g = torch.Generator().manual_seed(2)
    table, noise = torch.randn(10, 4, generator=g), torch.randn(6, 4, generator=g) * 1.5
    encoder = FixedEncoder(table, noise)
    ids = torch.tensor([[3, 1], [7, 1], [5, 1]])
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    out = SimCSE(encoder, mlp=False)(batch)
    assert encoder.calls == [6]  # one forward over the doubled batch
    view1, view2 = table[ids[:, 0]] + noise[:3], table[ids[:, 0]] + noise[3:]
    assert out.loss.item() == pytest.approx(direct_infonce(view1, view2, 0.05), rel=1e-5)
    assert set(out.logs) >= {"acc"}


def test_simcse_mlp_is_a_train_only_extra_module():
    encoder = FixedEncoder(torch.randn(10, 4), torch.zeros(6, 4))
    objective = SimCSE(encoder)
    assert [type(m).__name__ for m in objective.trainable_extra_modules()] == ["MLPHead"]
    assert "encoder" not in dict(objective.named_modules())  # the encoder is not saved with the objective
    assert not any(k.startswith("_encoder") for k in objective.state_dict())
    assert objective.params == {"temperature": 0.05, "mlp": True}


class Config:
    def __init__(self, model_type, hidden, layers):
        self.model_type, self.hidden_size, self.num_hidden_layers = model_type, hidden, layers


@pytest.mark.parametrize("config, batch, lr", [
    (Config("bert", 768, 12), 64, 3e-5),
    (Config("bert", 1024, 24), 64, 1e-5),
    (Config("roberta", 768, 12), 512, 1e-5),
    (Config("roberta", 1024, 24), 512, 3e-5),
    (Config("bert", 384, 6), 64, 3e-5),  # MiniLM: BERT-base fallback
    (Config("distilbert", 768, 6), 64, 3e-5),
])
def test_simcse_recipes_per_backbone(config, batch, lr):
    resolved = resolve_hyperparameters(config)
    assert (resolved["batch_size"], resolved["lr"], resolved["max_length"], resolved["epochs"]) == (batch, lr, 32, 1)
    assert resolved["recipe"] == published_hyperparameters(config).name


def test_explicit_hyperparameters_beat_objective_defaults_beat_recipe():
    class Slow(SimCSE):
        training_defaults = {"lr": 7e-6}

    config = Config("bert", 768, 12)
    assert resolve_hyperparameters(config, Slow)["lr"] == 7e-6
    assert resolve_hyperparameters(config, Slow, lr=1e-4, batch_size=8)["lr"] == 1e-4
    assert resolve_hyperparameters(config, Slow, batch_size=8)["batch_size"] == 8
