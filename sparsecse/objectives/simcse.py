"""Unsupervised SimCSE (Gao et al. 2021): two dropout views of each sentence, in-batch negatives."""

from __future__ import annotations

import torch
from torch import nn

from sparsecse.objectives.base import Objective, ObjectiveOutput
from sparsecse.objectives.losses import info_nce


class MLPHead(nn.Module):
    """SimCSE's train-only projection on the pooled embedding: dense + tanh."""

    def __init__(self, dim: int):
        super().__init__()
        self.dense = nn.Linear(dim, dim)
        self.activation = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(x))


def two_views(encoder, batch: dict[str, torch.Tensor], **forward_kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Embed the batch twice in one forward pass (duplicated rows get different dropout masks)."""
    doubled = {k: torch.cat([v, v], 0) for k, v in batch.items()}
    doubled.update(forward_kwargs)
    emb = encoder(**doubled)
    return emb.chunk(2, dim=0)


class SimCSE(Objective):
    name = "simcse"
    description = "Two dropout views as positives, in-batch negatives, cosine / temperature, cross-entropy."
    paper = "Gao, Yao & Chen 2021 (SimCSE): unsup BERT-base STS avg 76.25"
    defaults = {"temperature": 0.05, "mlp": True}

    def __init__(self, encoder, **params):
        super().__init__(encoder, **params)
        self.mlp = MLPHead(encoder.dim) if self.params["mlp"] else nn.Identity()

    def project(self, emb: torch.Tensor) -> torch.Tensor:
        return self.mlp(emb)

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        z1, z2 = two_views(self.encoder, batch)
        loss, logits = info_nce(self.project(z1), self.project(z2), self.params["temperature"])
        acc = (logits.argmax(-1) == torch.arange(logits.shape[0], device=logits.device)).float().mean()
        return ObjectiveOutput(loss, {"simcse_loss": float(loss.detach()), "acc": float(acc)})
