"""Grouped-query attention: which key/value head serves which query heads, and what a head mask means
for them.

With ``num_attention_heads`` H query heads and ``num_key_value_heads`` K key/value heads, key/value
head g serves the G = H / K consecutive query heads g·G … g·G + G − 1 (transformers' ``repeat_kv``). A
query head may be removed alone (its ``q_proj`` rows and ``o_proj`` columns); a key/value head only with
its whole group, i.e. exactly when none of its query heads is kept. Models without shared key/value
heads have G = 1.
"""

from __future__ import annotations

import torch

from sparsecse.errors import SparseCSEError


def kv_group_size(model_or_config) -> int:
    """Query heads per key/value head (1 without grouped-query attention)."""
    config = getattr(model_or_config, "config", model_or_config)
    heads = int(getattr(config, "num_attention_heads", 0) or 0)
    kv = getattr(config, "num_key_value_heads", None) or heads
    if not heads or heads % int(kv):
        return 1
    return heads // int(kv)


def kv_keep(head_keep: torch.Tensor, group: int) -> torch.Tensor:
    """bool [layers, key/value heads]: a key/value head stays iff one of its query heads stays."""
    layers, heads = head_keep.shape
    return head_keep.bool().view(layers, heads // group, group).any(-1)


def check_kv_mask(head_keep: torch.Tensor, kv_mask: torch.Tensor, group: int, model_type: str) -> None:
    """Refuse (one sentence) a key/value-head mask that removes a key/value head some kept query head
    still reads, or one given for a model whose key/value heads are not shared."""
    layers, heads = head_keep.shape
    if group == 1:
        raise SparseCSEError(f"The mask removes key/value heads, but {model_type} has no grouped-query attention "
                             "(each head has its own key and value); give head and neuron masks only.")
    if tuple(kv_mask.shape) != (layers, heads // group):
        raise SparseCSEError(f"The mask's key/value heads are {tuple(kv_mask.shape)}, but the model has "
                             f"{layers} layers x {heads // group} key/value heads.")
    split = kv_mask.bool().logical_not() & kv_keep(head_keep, group)
    if split.any():
        layer, kv = (int(i) for i in split.nonzero()[0])
        kept = [kv * group + i for i in range(group) if bool(head_keep[layer, kv * group + i])]
        raise SparseCSEError(f"The mask would split key/value group {kv} of layer {layer}: it removes the key/value "
                             f"head but keeps query head(s) {kept} that read it; a key/value head goes only with its "
                             "whole group of query heads.")
