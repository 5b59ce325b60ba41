"""Gates on whole key/value groups under grouped-query attention, beside the head and neuron gates of
:mod:`sparsecse.scoring.gates` (:class:`~sparsecse.scoring.kv_gates.KVGroupGates`), and the refusal of a gate
the architecture has no module for (:func:`~sparsecse.scoring.kv_gates.check_gate_unit`)."""

from __future__ import annotations

import torch
from torch import nn

from sparsecse.errors import SparseCSEError
from sparsecse.modeling.adapters import get_adapter, layer_parts
from sparsecse.modeling.kv_groups import kv_group_size


def check_gate_unit(model: nn.Module, unit: str) -> None:
    """Refuse (one sentence) a gate on a module this architecture does not have."""
    adapter = get_adapter(model)
    model_type = getattr(model.config, "model_type", "?")
    if unit not in GATE_UNITS:
        raise SparseCSEError(f"Unknown gate unit {unit!r}; choose {', '.join(GATE_UNITS)}.")
    if unit == "kv_group" and not (adapter.cost.grouped_kv and kv_group_size(model) > 1):
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
        """Open gates (all 1) for every key/value head of ``model``.

        Args:
            model: the backbone.
            requires_grad: whether the gates collect gradients.

        Returns:
            The gates, not attached yet.
        """
        parts = layer_parts(model)
        return cls(torch.ones(len(parts), parts[0].num_kv_heads), requires_grad)

    def attach(self, model: nn.Module) -> "KVGroupGates":
        """Hook the gates onto ``model``'s value projections (refused for a model without grouped key/value heads);
        returns them."""
        check_gate_unit(model, "kv_group")
        parts = layer_parts(model)
        if tuple(self.gate.shape) != (len(parts), parts[0].num_kv_heads):
            raise SparseCSEError(f"The key/value gates are {tuple(self.gate.shape)}, but the model has "
                                 f"{len(parts)} layers x {parts[0].num_kv_heads} key/value heads.")
        device = next(model.parameters()).device
        if self.gate.device != device:  # on the model's device (a GPU model): as the head and neuron gates
            self.gate = self.gate.detach().to(device).requires_grad_(self.gate.requires_grad)
        for i, part in enumerate(parts):
            self._handles.append(part.value.register_forward_hook(self._hook(i, part.head_dim)))
        return self

    def _hook(self, layer: int, head_dim: int):
        def hook(module, args, output):
            gate = self.gate[layer].to(output.dtype)
            return (output.unflatten(-1, (gate.shape[0], head_dim)) * gate[:, None]).flatten(-2)

        return hook

    def detach(self) -> None:
        """Remove the gates' hooks."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def __enter__(self) -> "KVGroupGates":
        return self

    def __exit__(self, *exc) -> None:
        self.detach()
