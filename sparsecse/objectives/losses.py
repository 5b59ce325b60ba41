"""Contrastive pieces shared by the objectives: cross-process gathering and InfoNCE."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """Concatenate ``x`` from every process (rank order), keeping the gradient of the local part.

    Single-process: returns ``x`` unchanged. This is how SimCSE enlarges in-batch negatives under DDP.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return x
    from torch.distributed.nn.functional import all_gather

    return torch.cat(all_gather(x), dim=0)


def info_nce(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    temperature: float = 0.05,
    extra_negatives: torch.Tensor | None = None,
    gather: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SimCSE's loss: cross-entropy over cos(anchor_i, positive_j)/τ, the diagonal being the target.

    ``extra_negatives`` [M, d] add M columns that are negatives for every anchor. Returns
    (loss, logits).
    """
    if gather:
        anchors, positives = gather_with_grad(anchors), gather_with_grad(positives)
    candidates = positives if extra_negatives is None else torch.cat([positives, extra_negatives], 0)
    logits = F.cosine_similarity(anchors.unsqueeze(1), candidates.unsqueeze(0), dim=-1) / temperature
    labels = torch.arange(anchors.shape[0], device=anchors.device)
    return F.cross_entropy(logits, labels), logits
