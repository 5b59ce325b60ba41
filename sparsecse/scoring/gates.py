"""Head gates ξ and FFN-neuron gates ν, attached to a Hugging Face encoder by forward pre-hooks.

A head gate multiplies that head's slice of the attention context (the input of the attention
output projection); a neuron gate multiplies one FFN intermediate activation (the input of the
FFN output projection). Gate 1 changes nothing (x * 1.0 is exact); gate 0 equals deleting the unit.
One small adapter per architecture knows where those projections live. A whole layer can be skipped too
(``layer_keep``): a forward hook replaces its output hidden states by its input, which is what the model
computes once the layer is removed.
"""

from __future__ import annotations

import torch
from torch import nn

from sparsecse.errors import SparseCSEError
from sparsecse.modeling.adapters import layer_modules, layer_parts, uniform_shape


class Gates:
    """Head gates [layers, heads] and neuron gates [layers, ffn] attached by forward pre-hooks.

    Use as a context manager or call :meth:`attach` / :meth:`detach`. With ``requires_grad=True``
    the gates are leaf tensors whose ``.grad`` is ∂L/∂gate after ``backward``. ``layer_keep`` (bool
    [layers], None: every layer runs) skips the layers marked False.
    """

    layer_keep: torch.Tensor | None = None  # subclasses that never skip a layer need not set it

    def __init__(self, head_gates: torch.Tensor, neuron_gates: torch.Tensor, requires_grad: bool = False,
                 layer_keep: torch.Tensor | None = None):
        if head_gates.dim() != 2 or neuron_gates.dim() != 2 or head_gates.shape[0] != neuron_gates.shape[0]:
            raise SparseCSEError("Gates must be [layers, heads] and [layers, neurons] tensors with equal layers.")
        self.head = head_gates.detach().clone().float().requires_grad_(requires_grad)
        self.neuron = neuron_gates.detach().clone().float().requires_grad_(requires_grad)
        self.layer_keep = None if layer_keep is None else layer_keep.detach().bool().cpu().clone()
        self._handles: list = []

    @classmethod
    def ones_for(cls, model: nn.Module, requires_grad: bool = False) -> "Gates":
        """All-ones gates (the model unchanged) shaped for ``model``."""
        layers, heads, ffn = uniform_shape(model)
        return cls(torch.ones(layers, heads), torch.ones(layers, ffn), requires_grad=requires_grad)

    @property
    def attached(self) -> bool:
        """Whether the gates are hooked into a model."""
        return bool(self._handles)

    def check_fits(self, model: nn.Module) -> None:
        """Refuse (one sentence) gates whose shape is not the model's layers x heads x neurons."""
        layers, heads, ffn = uniform_shape(model)
        if tuple(self.head.shape) != (layers, heads) or tuple(self.neuron.shape) != (layers, ffn):
            raise SparseCSEError(
                f"The gates/mask are for {self.head.shape[0]} layers x {self.head.shape[1]} heads x "
                f"{self.neuron.shape[1]} neurons, but the model has {layers} x {heads} x {ffn}."
            )
        if self.layer_keep is not None and tuple(self.layer_keep.shape) != (layers,):
            raise SparseCSEError(f"The gates/mask skip layers of a {self.layer_keep.shape[0]}-layer model, but the "
                                 f"model has {layers} layers.")

    def attach(self, model: nn.Module) -> "Gates":
        """Hook the gates into ``model`` (moved to its device); returns the gates, a context manager."""
        if self.attached:
            raise RuntimeError("gates are already attached")
        self.check_fits(model)
        device = next(model.parameters()).device
        if self.head.device != device:
            grad = self.head.requires_grad
            self.head = self.head.detach().to(device).requires_grad_(grad)
            self.neuron = self.neuron.detach().to(device).requires_grad_(grad)
        for i, part in enumerate(layer_parts(model)):
            self._handles.append(part.attn_out.register_forward_pre_hook(self._head_hook(i, part.head_dim)))
            self._handles.append(part.ffn_out.register_forward_pre_hook(self._neuron_hook(i)))
        if self.layer_keep is not None:
            for layer, keep in zip(layer_modules(model), self.layer_keep.tolist()):
                if not keep:
                    self._handles.append(layer.register_forward_hook(skip_layer, with_kwargs=True))
        return self

    def detach(self) -> None:
        """Remove the hooks: the model computes as it did before :meth:`attach`."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def __enter__(self) -> "Gates":
        return self

    def __exit__(self, *exc) -> None:
        self.detach()

    def zero_grad(self) -> None:
        """Forget the gates' gradients."""
        self.head.grad = None
        self.neuron.grad = None

    def _head_hook(self, layer: int, head_dim: int):
        def hook(module, args):
            x = args[0]
            gate = self.head[layer].to(x.dtype)
            shaped = x.unflatten(-1, (gate.shape[0], head_dim)) * gate[:, None]
            return (shaped.flatten(-2),) + tuple(args[1:])

        return hook

    def _neuron_hook(self, layer: int):
        def hook(module, args):
            x = args[0]
            return (x * self.neuron[layer].to(x.dtype),) + tuple(args[1:])

        return hook


def skip_layer(module, args, kwargs, output):
    """Forward hook that makes a transformer layer pass its input hidden states on unchanged (in the
    layer's output structure: a tensor, or a tuple whose first item is the hidden states)."""
    hidden = args[0] if args else kwargs["hidden_states"]
    return (hidden,) + tuple(output[1:]) if isinstance(output, tuple) else hidden
