"""The objective interface: an nn.Module that turns (encoder, batch of sentences) into a loss.

An objective owns whatever extra modules it trains (an MLP head, a discriminator) as submodules,
declares its parameters with defaults in ``defaults`` and what it needs in ``requires``, and
returns an :class:`ObjectiveOutput` with the loss and named figures to log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from sparsecse.errors import SparseCSEError


@dataclass
class ObjectiveOutput:
    loss: torch.Tensor
    logs: dict[str, float] = field(default_factory=dict)


class Objective(nn.Module):
    """Base class. Subclasses set ``name``, ``description``, ``defaults`` and implement ``forward``."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    defaults: ClassVar[dict[str, Any]] = {}
    requires: ClassVar[dict[str, str]] = {}  # parameter name -> what it must point to
    # shifts the backbone's SimCSE recipe for this objective (keys: batch_size, lr, max_length, epochs);
    # explicit training arguments still win
    training_defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, encoder: nn.Module, **params: Any):
        super().__init__()
        unknown = sorted(set(params) - set(self.defaults))
        if unknown:
            raise SparseCSEError(
                f"Objective {self.name!r} has no parameter {', '.join(unknown)}; "
                f"its parameters are {', '.join(sorted(self.defaults)) or 'none'}."
            )
        self.params = {**self.defaults, **params}
        for key, what in self.requires.items():
            if not self.params.get(key):
                raise SparseCSEError(f"Objective {self.name!r} needs {key}= ({what}).")
        # held in a list so the encoder is not registered (and saved) as part of the objective
        self._encoder = [encoder]

    @property
    def encoder(self) -> nn.Module:
        return self._encoder[0]

    def trainable_extra_modules(self) -> list[nn.Module]:
        """Modules besides the encoder that the optimizer trains (train-only; not saved with the model)."""
        return [m for m in self.children()]

    def after_backward(self) -> None:
        """Called by the training loop after ``loss.backward()`` and before the optimizer step
        (e.g. weight perturbation restores the unperturbed weights here)."""

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:  # pragma: no cover - interface
        raise NotImplementedError
