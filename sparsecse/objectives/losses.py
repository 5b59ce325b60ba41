"""Contrastive pieces shared by the objectives: cross-process gathering and InfoNCE.

In a data-parallel run each process embeds its part of the global batch. Losses over pairs of the batch
(InfoNCE's in-batch negatives, distillation's similarity matrices) gather the embeddings of every
process first (:func:`gather_with_grad`, as sentence-transformers' ``gather_across_devices``): the loss
and the gradient are then those of one process with the whole batch. :func:`gathering` (``False``) turns
that off for a run: each process then contrasts its own sentences only, B/N candidates instead of B, and
the loss is the mean of the processes' losses, a different objective that changes with N.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
import torch.distributed as dist
import torch.nn.functional as F


_GATHER = [True]  # switched by gathering()


@contextmanager
def gathering(enabled: bool) -> Iterator[None]:
    """Within the block, :func:`gather_with_grad` gathers across processes (``enabled``) or not."""
    before = _GATHER[0]
    _GATHER[0] = bool(enabled)
    try:
        yield
    finally:
        _GATHER[0] = before


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """Concatenate ``x`` from every process (rank order), keeping the gradient of the local part.

    Single-process, or inside ``gathering(False)``: returns ``x`` unchanged. This is how SimCSE enlarges
    in-batch negatives under DDP. The backward pass sums the gradients every process computed for this
    process's rows; as every process computes the same loss over the gathered batch, DDP's mean of the
    processes' gradients is then exactly the gradient of that loss.
    """
    if not _GATHER[0] or not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return x
    import warnings

    from torch.distributed.nn.functional import all_gather

    with warnings.catch_warnings():  # torch >= 2.10 calls it deprecated; its replacement is still private
        warnings.simplefilter("ignore", FutureWarning)
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
