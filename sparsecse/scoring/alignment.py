"""Alignment and uniformity (Wang & Isola 2020) on L2-normalised embeddings.

Losses (the SparseCSE scoring objective)::

    L_align   = log E ||h_i - h_i+||^2          over positive pairs
    L_uniform = log E exp(-2 ||h_i - h_j||^2)   over distinct pairs i < j

Reported metrics (SimCSE's alignment-uniformity plot): alignment = E ||h_i - h_i+||^2 (no log),
uniformity = L_uniform. Squared distances are computed as 2 - 2 cos, which is smooth even for
identical sentences (torch.pdist's gradient is NaN at zero distance).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _pair_sq_dist(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x, y = F.normalize(x, dim=-1), F.normalize(y, dim=-1)
    return (2 - 2 * (x * y).sum(-1)).clamp_min(0)


def alignment_metric(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """E ||x̂_i - ŷ_i||^2 over paired rows."""
    return _pair_sq_dist(x, y).mean()


def alignment_loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """L_align = log E ||x̂_i - ŷ_i||^2 over paired rows (the scoring loss's alignment term)."""
    return torch.log(alignment_metric(x, y))


def uniformity_loss(x: torch.Tensor, t: float = 2.0) -> torch.Tensor:
    """log E exp(-t ||x̂_i - x̂_j||^2) over distinct rows i < j."""
    if x.shape[0] < 2:
        raise ValueError("uniformity needs at least two embeddings")
    x = F.normalize(x, dim=-1)
    i, j = torch.triu_indices(x.shape[0], x.shape[0], offset=1, device=x.device)
    sq = (2 - 2 * (x @ x.T)[i, j]).clamp_min(0)  # one n x n product, not n^2/2 gathered row pairs
    return torch.logsumexp(-t * sq, dim=0) - math.log(sq.numel())


uniformity_metric = uniformity_loss
