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
from torch import nn

from sparsecse.errors import SparseCSEError
from sparsecse.modeling.adapters import get_adapter, layer_parts


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


def check_gate_unit(model: nn.Module, unit: str) -> None:
    """Refuse (one sentence) a gate on a module this architecture does not have."""
    adapter = get_adapter(model)
    model_type = getattr(model.config, "model_type", "?")
    if unit not in GATE_UNITS:
        raise SparseCSEError(f"Unknown gate unit {unit!r}; choose {', '.join(GATE_UNITS)}.")
    if unit == "kv_group" and not (adapter.grouped_kv and kv_group_size(model) > 1):
        raise SparseCSEError(f"{model_type} has no key/value heads shared by several query heads, so there is no "
                             "key/value-group gate to attach; gate its heads instead.")


GATE_UNITS = ("head", "neuron", "kv_group")


class KVGroupGates:
    """Gates [layers, key/value heads] that multiply each key/value head's values (the output of
    ``v_proj``), so gate g scales the context of every query head in its group: at 0 the whole group is
    gone, and at 1 its gradient is the sum of the group's query-head gradients (a group's score
    follows from its heads' gradients without a second pass).
    A forward hook on ``v_proj``; :meth:`attach` refuses a model without grouped-query attention."""

    def __init__(self, gates: torch.Tensor, requires_grad: bool = False):
        self.gate = gates.detach().clone().float().requires_grad_(requires_grad)
        self._handles: list = []

    @classmethod
    def ones_for(cls, model: nn.Module, requires_grad: bool = False) -> "KVGroupGates":
        parts = layer_parts(model)
        return cls(torch.ones(len(parts), parts[0].num_kv_heads), requires_grad)

    def attach(self, model: nn.Module) -> "KVGroupGates":
        check_gate_unit(model, "kv_group")
        parts = layer_parts(model)
        if tuple(self.gate.shape) != (len(parts), parts[0].num_kv_heads):
            raise SparseCSEError(f"The key/value gates are {tuple(self.gate.shape)}, but the model has "
                                 f"{len(parts)} layers x {parts[0].num_kv_heads} key/value heads.")
        for i, part in enumerate(parts):
            self._handles.append(part.value.register_forward_hook(self._hook(i, part.head_dim)))
        return self

    def _hook(self, layer: int, head_dim: int):
        def hook(module, args, output):
            gate = self.gate[layer].to(output.dtype)
            return (output.unflatten(-1, (gate.shape[0], head_dim)) * gate[:, None]).flatten(-2)

        return hook

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def __enter__(self) -> "KVGroupGates":
        return self

    def __exit__(self, *exc) -> None:
        self.detach()
