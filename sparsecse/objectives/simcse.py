"""Unsupervised SimCSE (Gao et al. 2021): two dropout views of each sentence, in-batch negatives."""

from __future__ import annotations

import torch
from torch import nn

from sparsecse.objectives.base import Objective, ObjectiveOutput
from sparsecse.objectives.losses import info_nce


def reference_init(module: nn.Module, std: float = 0.02) -> nn.Module:
    """Every Linear in ``module`` drawn N(0, std) with zero bias: what the reference code's
    ``init_weights()`` (BERT's initializer, ``initializer_range`` 0.02) does to the heads it adds."""
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            nn.init.normal_(layer.weight, mean=0.0, std=std)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
    return module


def initializer_range(encoder) -> float:
    """The backbone's ``initializer_range`` (0.02 for BERT, RoBERTa, MiniLM), else 0.02."""
    return float(getattr(getattr(encoder, "config", None), "initializer_range", None) or 0.02)


class MLPHead(nn.Module):
    """SimCSE's train-only projection on the pooled embedding: dense + tanh, initialised N(0, std)
    with zero bias as in the reference code."""

    def __init__(self, dim: int, std: float = 0.02):
        super().__init__()
        self.dense = nn.Linear(dim, dim)
        self.activation = nn.Tanh()
        reference_init(self, std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The projection of ``x`` (dense, then tanh)."""
        return self.activation(self.dense(x))


def two_views(encoder, batch: dict[str, torch.Tensor], **forward_kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Embed the batch twice in one forward pass (duplicated rows get different dropout masks)."""
    doubled = {k: torch.cat([v, v], 0) for k, v in batch.items()}
    doubled.update(forward_kwargs)
    emb = encoder(**doubled)
    return emb.chunk(2, dim=0)


class SimCSE(Objective):
    """Unsupervised SimCSE (Gao et al. 2021): two dropout views of a sentence as positives, in-batch negatives."""
    name = "simcse"
    description = "Two dropout views as positives, in-batch negatives, cosine / temperature, cross-entropy."
    paper = "Gao, Yao & Chen 2021 (SimCSE): unsup BERT-base STS avg 76.25"
    defaults = {"temperature": 0.05, "mlp": True}

    def __init__(self, encoder, **params):
        super().__init__(encoder, **params)
        self.mlp = MLPHead(encoder.dim, initializer_range(encoder)) if self.params["mlp"] else nn.Identity()

    def project(self, emb: torch.Tensor) -> torch.Tensor:
        """The MLP head's projection of the sentence embeddings (identity without ``mlp``)."""
        return self.mlp(emb)

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        """The InfoNCE loss of a batch's two dropout views, and the in-batch accuracy."""
        z1, z2 = two_views(self.encoder, batch)
        loss, logits = info_nce(self.project(z1), self.project(z2), self.params["temperature"])
        acc = (logits.argmax(-1) == torch.arange(logits.shape[0], device=logits.device)).float().mean()
        return ObjectiveOutput(loss, {"simcse_loss": loss.detach(), "acc": acc.detach()})  # read when logged
