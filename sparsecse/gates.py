"""Head gates ξ and FFN-neuron gates ν, attached to a Hugging Face encoder by forward pre-hooks.

A head gate multiplies that head's slice of the attention context (the input of the attention
output projection); a neuron gate multiplies one FFN intermediate activation (the input of the
FFN output projection). Gate 1 changes nothing (x * 1.0 is exact); gate 0 equals deleting the unit.
One small adapter per architecture knows where those projections live.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from sparsecse.errors import SparseCSEError


@dataclass
class LayerParts:
    """The modules of one transformer layer that head and neuron pruning touch."""

    query: nn.Linear
    key: nn.Linear
    value: nn.Linear
    attn_out: nn.Linear  # input: per-head context, heads contiguous
    ffn_in: nn.Linear
    ffn_out: nn.Linear  # input: intermediate activations
    head_dim: int
    attention: nn.Module  # the self-attention module (holds the head count)

    @property
    def num_heads(self) -> int:
        return self.query.out_features // self.head_dim

    @property
    def ffn_size(self) -> int:
        return self.ffn_in.out_features


@dataclass(frozen=True)
class ArchitectureAdapter:
    name: str
    model_types: tuple[str, ...]
    layers: Callable[[nn.Module], list[LayerParts]]
    head_count_attr: str  # attribute on the attention module that stores its head count


def _backbone(model: nn.Module) -> nn.Module:
    """The bare encoder inside a task model (BertForMaskedLM.bert, ...), or the model itself."""
    base = getattr(model, "base_model", model)
    return base if isinstance(base, nn.Module) else model


def _bert_layers(model: nn.Module) -> list[LayerParts]:
    parts = []
    for layer in _backbone(model).encoder.layer:
        att = layer.attention.self
        parts.append(LayerParts(att.query, att.key, att.value, layer.attention.output.dense,
                                layer.intermediate.dense, layer.output.dense,
                                att.attention_head_size, att))
    return parts


def _distilbert_layers(model: nn.Module) -> list[LayerParts]:
    parts = []
    for layer in _backbone(model).transformer.layer:
        att = layer.attention
        parts.append(LayerParts(att.q_lin, att.k_lin, att.v_lin, att.out_lin, layer.ffn.lin1, layer.ffn.lin2,
                                att.attention_head_size, att))
    return parts


def _mpnet_layers(model: nn.Module) -> list[LayerParts]:
    # MPNet keeps q, k, v and the output projection o in one module; the relative position bias
    # (one slice per head) is computed once in the encoder and only shifts that head's attention
    # scores, so gating the head's context (the input of o) removes the head with its bias slice.
    parts = []
    for layer in _backbone(model).encoder.layer:
        att = layer.attention.attn
        parts.append(LayerParts(att.q, att.k, att.v, att.o, layer.intermediate.dense, layer.output.dense,
                                att.attention_head_size, att))
    return parts


# Shrunk models (sparsecse.shrinking) keep their base's module paths; their model_types are "sparsecse-<base>".
SHRUNK_MODEL_TYPES = ("sparsecse-bert", "sparsecse-roberta", "sparsecse-xlm-roberta", "sparsecse-camembert",
                      "sparsecse-electra")
SHRUNK_MPNET_TYPES = ("sparsecse-mpnet",)  # the shrunk MPNet keeps layer.attention.attn.{q,k,v,o}

ADAPTERS = (
    ArchitectureAdapter("bert-like", ("bert", "roberta", "xlm-roberta", "camembert", "electra") + SHRUNK_MODEL_TYPES,
                        _bert_layers, "num_attention_heads"),
    ArchitectureAdapter("distilbert", ("distilbert",), _distilbert_layers, "n_heads"),
    ArchitectureAdapter("mpnet", ("mpnet",) + SHRUNK_MPNET_TYPES, _mpnet_layers, "num_attention_heads"),
)


def supported_model_types() -> list[str]:
    return [t for a in ADAPTERS for t in a.model_types]


def get_adapter(model_or_config) -> ArchitectureAdapter:
    config = getattr(model_or_config, "config", model_or_config)
    model_type = getattr(config, "model_type", None)
    for adapter in ADAPTERS:
        if model_type in adapter.model_types:
            return adapter
    raise SparseCSEError(
        f"Unsupported architecture {model_type!r}; sparsecse supports {', '.join(supported_model_types())}."
    )


def layer_parts(model: nn.Module) -> list[LayerParts]:
    return get_adapter(model).layers(model)


def model_shape(model: nn.Module) -> tuple[list[int], list[int]]:
    """(heads per layer, FFN neurons per layer)."""
    parts = layer_parts(model)
    return [p.num_heads for p in parts], [p.ffn_size for p in parts]


def uniform_shape(model: nn.Module) -> tuple[int, int, int]:
    """(layers, heads, FFN size) of a model whose layers all have the same shape."""
    heads, neurons = model_shape(model)
    if len(set(heads)) != 1 or len(set(neurons)) != 1:
        raise SparseCSEError("This model has already been shrunk (uneven layers); gates need the full model.")
    return len(heads), heads[0], neurons[0]


class Gates:
    """Head gates [layers, heads] and neuron gates [layers, ffn] attached by forward pre-hooks.

    Use as a context manager or call :meth:`attach` / :meth:`detach`. With ``requires_grad=True``
    the gates are leaf tensors whose ``.grad`` is ∂L/∂gate after ``backward``.
    """

    def __init__(self, head_gates: torch.Tensor, neuron_gates: torch.Tensor, requires_grad: bool = False):
        if head_gates.dim() != 2 or neuron_gates.dim() != 2 or head_gates.shape[0] != neuron_gates.shape[0]:
            raise SparseCSEError("Gates must be [layers, heads] and [layers, neurons] tensors with equal layers.")
        self.head = head_gates.detach().clone().float().requires_grad_(requires_grad)
        self.neuron = neuron_gates.detach().clone().float().requires_grad_(requires_grad)
        self._handles: list = []

    @classmethod
    def ones_for(cls, model: nn.Module, requires_grad: bool = False) -> "Gates":
        layers, heads, ffn = uniform_shape(model)
        return cls(torch.ones(layers, heads), torch.ones(layers, ffn), requires_grad=requires_grad)

    @property
    def attached(self) -> bool:
        return bool(self._handles)

    def check_fits(self, model: nn.Module) -> None:
        layers, heads, ffn = uniform_shape(model)
        if tuple(self.head.shape) != (layers, heads) or tuple(self.neuron.shape) != (layers, ffn):
            raise SparseCSEError(
                f"The gates/mask are for {self.head.shape[0]} layers x {self.head.shape[1]} heads x "
                f"{self.neuron.shape[1]} neurons, but the model has {layers} x {heads} x {ffn}."
            )

    def attach(self, model: nn.Module) -> "Gates":
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
        return self

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def __enter__(self) -> "Gates":
        return self

    def __exit__(self, *exc) -> None:
        self.detach()

    def zero_grad(self) -> None:
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
