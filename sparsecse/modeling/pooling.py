"""Last-token pooling for decoder embedders (Qwen3-Embedding and the like)."""

from __future__ import annotations

import torch


def last_token(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The hidden state of each row's last non-padding token: position len-1 with right padding, the
    final position with left padding (the largest position whose mask is 1, whatever the side)."""
    positions = torch.arange(1, attention_mask.shape[1] + 1, device=attention_mask.device)
    last = (attention_mask.to(positions.dtype) * positions).argmax(-1)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
