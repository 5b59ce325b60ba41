"""A pruning mask: which heads, FFN neurons and whole layers survive (True = keep), saved as safetensors + JSON."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from sparsecse.errors import SparseCSEError
from sparsecse.scoring.gates import Gates
from sparsecse.modeling.adapters import uniform_shape
from sparsecse.modeling.kv_groups import check_kv_mask, kv_group_size
from sparsecse.artifacts.files import hash_path, load_tensors, save_tensors


@dataclass
class Mask:
    """Which heads ([layers, heads]) and FFN neurons ([layers, ffn]) survive (True = keep), with the manifest that says
    how the mask was made."""
    head_mask: torch.Tensor  # bool [layers, heads]
    neuron_mask: torch.Tensor  # bool [layers, ffn]
    manifest: dict[str, Any] = field(default_factory=dict)
    # optional bool [layers, key/value heads] for grouped-query attention; a key/value head is removed
    # exactly when its whole group of query heads is, so this only ever restates head_mask (checked)
    kv_mask: torch.Tensor | None = None
    # optional bool [layers]: False removes the whole layer (it passes its input on unchanged, and its heads
    # and neurons go with it); None keeps every layer
    layer_mask: torch.Tensor | None = None

    def __post_init__(self):
        self.head_mask = self.head_mask.bool().cpu()
        self.neuron_mask = self.neuron_mask.bool().cpu()
        if self.kv_mask is not None:
            self.kv_mask = self.kv_mask.bool().cpu()
        if self.head_mask.dim() != 2 or self.neuron_mask.dim() != 2 or \
                self.head_mask.shape[0] != self.neuron_mask.shape[0]:
            raise SparseCSEError("A mask holds [layers, heads] and [layers, neurons] tensors with equal layers.")
        if self.layer_mask is not None:
            self.layer_mask = self.layer_mask.bool().cpu()
            if tuple(self.layer_mask.shape) != (self.head_mask.shape[0],):
                raise SparseCSEError(f"A mask's layer part holds one keep flag per layer ({self.head_mask.shape[0]}), "
                                     f"not {tuple(self.layer_mask.shape)}.")
            if not bool(self.layer_mask.any()):
                raise SparseCSEError("A mask must keep at least one layer.")
            gone = ~self.layer_mask  # a removed layer's units go with it (on copies: the caller's stay)
            self.head_mask, self.neuron_mask = self.head_mask.clone(), self.neuron_mask.clone()
            self.head_mask[gone], self.neuron_mask[gone] = False, False
            if self.kv_mask is not None:
                self.kv_mask = self.kv_mask.clone()
                self.kv_mask[gone] = False

    def without_layers(self, layers) -> "Mask":
        """This mask with the whole ``layers`` (indices) removed as well, keeping its manifest."""
        keep = self.layer_keep.clone()
        keep[list(layers)] = False
        return Mask(self.head_mask.clone(), self.neuron_mask.clone(), dict(self.manifest),
                    None if self.kv_mask is None else self.kv_mask.clone(), keep)

    @classmethod
    def full(cls, layers: int, heads: int, ffn: int) -> "Mask":
        """The keep-everything mask of a ``layers`` x ``heads`` x ``ffn`` model."""
        return cls(torch.ones(layers, heads, dtype=torch.bool), torch.ones(layers, ffn, dtype=torch.bool))

    @classmethod
    def for_model(cls, model: nn.Module) -> "Mask":
        """The keep-everything mask shaped for ``model``."""
        return cls.full(*uniform_shape(model))

    # -------------------------------------------------------------- shape and counts
    @property
    def shape(self) -> tuple[int, int, int]:
        """(layers, heads, FFN neurons)."""
        return (self.head_mask.shape[0], self.head_mask.shape[1], self.neuron_mask.shape[1])

    @property
    def layer_keep(self) -> torch.Tensor:
        """Which layers stay (all of them without a layer part), as a bool tensor with one entry per layer."""
        return torch.ones(self.shape[0], dtype=torch.bool) if self.layer_mask is None else self.layer_mask

    @property
    def kept_layers(self) -> list[int]:
        """The indices of the layers that stay."""
        return self.layer_keep.nonzero().flatten().tolist()

    @property
    def removed_layers(self) -> list[int]:
        """The indices of the layers the mask removes whole."""
        return (~self.layer_keep).nonzero().flatten().tolist()

    @property
    def heads_pruned(self) -> int:
        """How many heads the mask removes."""
        return int((~self.head_mask).sum())

    @property
    def neurons_pruned(self) -> int:
        """How many FFN neurons the mask removes."""
        return int((~self.neuron_mask).sum())

    def heads_pruned_per_layer(self) -> list[int]:
        """Heads removed in each layer."""
        return (~self.head_mask).sum(1).tolist()

    def neurons_pruned_per_layer(self) -> list[int]:
        """FFN neurons removed in each layer."""
        return (~self.neuron_mask).sum(1).tolist()

    def pruned_heads(self) -> dict[int, list[int]]:
        """{layer: [head indices removed]} for layers that lose any head."""
        return {i: row.nonzero().flatten().tolist() for i, row in enumerate(~self.head_mask) if row.any()}

    def check_fits(self, model: nn.Module) -> None:
        """Refuse (one sentence) a mask whose shape is not ``model``'s."""
        layers, heads, ffn = uniform_shape(model)
        if self.shape != (layers, heads, ffn):
            raise SparseCSEError(
                f"The mask is for a model with {self.shape[0]} layers x {self.shape[1]} heads x {self.shape[2]} "
                f"FFN neurons, but this model has {layers} x {heads} x {ffn}."
            )
        check_mask_kv_groups(self, model)

    def gates(self, requires_grad: bool = False) -> Gates:
        """The mask as fixed 0/1 :class:`~sparsecse.scoring.gates.Gates`."""
        return Gates(self.head_mask.float(), self.neuron_mask.float(), requires_grad=requires_grad,
                     layer_keep=self.layer_mask)

    def apply(self, model: nn.Module) -> Gates:
        """Attach this mask to ``model`` as fixed 0/1 gates; call ``.detach()`` on the result to undo."""
        self.check_fits(model)
        return self.gates().attach(model)

    # -------------------------------------------------------------- files
    def save(self, path: str | os.PathLike, overwrite: bool = False) -> Path:
        """Write the mask file (uint8 tensors + the manifest with :meth:`summary`) atomically; returns ``path``."""
        manifest = dict(self.manifest)
        manifest.update(self.summary())
        self.manifest = manifest
        tensors = {"head_mask": self.head_mask.to(torch.uint8), "neuron_mask": self.neuron_mask.to(torch.uint8)}
        if self.kv_mask is not None:
            tensors["kv_mask"] = self.kv_mask.to(torch.uint8)
        if self.layer_mask is not None:
            tensors["layer_mask"] = self.layer_mask.to(torch.uint8)
        return save_tensors(path, tensors, manifest, overwrite)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Mask":
        """Read a mask file, refusing one that is not a sparsecse mask."""
        tensors, manifest = load_tensors(path, what="mask file")
        if manifest.get("kind") not in (None, "mask") or not {"head_mask", "neuron_mask"} <= set(tensors):
            raise SparseCSEError(f"{path} is not a sparsecse mask file (it lacks head_mask/neuron_mask).")
        for name in ("head_mask", "neuron_mask", "layer_mask"):
            if name in tensors:
                check_zero_one(tensors[name], path, name)
        kv, layers = tensors.get("kv_mask"), tensors.get("layer_mask")
        return cls(tensors["head_mask"].bool(), tensors["neuron_mask"].bool(), manifest,
                   None if kv is None else kv.bool(), None if layers is None else layers.bool())

    def summary(self) -> dict[str, Any]:
        """The counts a mask manifest records: shape, units removed in total and per layer, the heads removed."""
        layers, heads, ffn = self.shape
        kv = {} if self.kv_mask is None else {  # grouped-query attention: whole key/value groups removed
            "kv_heads_pruned": int((~self.kv_mask).sum()),
            "kv_heads_pruned_per_layer": (~self.kv_mask).sum(1).tolist()}
        if self.layer_mask is not None:
            kv["layers_removed"] = self.removed_layers
        return {**kv,
            "shape": {"layers": layers, "heads": heads, "ffn": ffn},
            "heads_pruned": self.heads_pruned,
            "neurons_pruned": self.neurons_pruned,
            "heads_pruned_per_layer": self.heads_pruned_per_layer(),
            "neurons_pruned_per_layer": self.neurons_pruned_per_layer(),
            "pruned_heads": {str(k): v for k, v in self.pruned_heads().items()},
        }


def check_mask_kv_groups(mask: Mask, model: nn.Module) -> None:
    """Refuse in one sentence a mask whose key/value-head part would split a group (or is given for a
    model without grouped-query attention); without one, key/value heads follow their groups."""
    if mask.kv_mask is not None:
        check_kv_mask(mask.head_mask, mask.kv_mask, kv_group_size(model), getattr(model.config, "model_type", "?"))


def check_zero_one(tensor: torch.Tensor, path, name: str) -> None:
    """A mask tensor holds whole 0/1 values (uint8 or bool, as ``prune`` writes): a float or any other value
    (a hand-edited file) would be rounded to keep/remove silently, so it is refused."""
    if tensor.dtype not in (torch.uint8, torch.bool):
        raise SparseCSEError(f"The mask {path} holds {str(tensor.dtype).removeprefix('torch.')} values in {name}; a "
                             "mask holds 0 (remove) and 1 (keep) as uint8, as `sparsecse prune` writes it.")
    if tensor.dtype == torch.uint8 and bool((tensor > 1).any()):
        bad = sorted(set((tensor[tensor > 1]).tolist()))
        raise SparseCSEError(f"The mask {path} holds {', '.join(map(str, bad[:3]))} in {name}; a mask holds only 0 "
                             "(remove) and 1 (keep).")


def model_for_mask(mask: "Mask | str | os.PathLike", model: str | os.PathLike | None = None):
    """``model`` if given, else the model the mask was made from (recorded in its manifest), so a mask
    is never applied to the default model by accident. A mask that records no model applied to a given
    ``model`` says so on stderr (what was assumed)."""
    if model is not None:
        loaded = mask if isinstance(mask, Mask) else Mask.load(mask)
        if not loaded.manifest.get("model"):
            print(f"Note: the mask {'given' if isinstance(mask, Mask) else mask} records no model; it is applied "
                  f"to {model} (its layer and unit counts are checked).", file=sys.stderr, flush=True)
        return model
    mask = mask if isinstance(mask, Mask) else Mask.load(mask)
    recorded = mask.manifest.get("model")
    if not recorded:
        raise SparseCSEError("The mask does not record which model it was made for; pass --model.")
    if os.path.isabs(str(recorded)) and not os.path.isdir(str(recorded)):
        raise SparseCSEError(f"The model {recorded} that the mask was made for no longer exists; pass --model.")
    digest = mask.manifest.get("model_sha256")
    if digest and os.path.isdir(str(recorded)) and hash_path(recorded) != digest:
        raise SparseCSEError(f"The model at {recorded} is not the one the mask was made for (its files changed since "
                             "scoring); pass --model to use it anyway.")
    return recorded
