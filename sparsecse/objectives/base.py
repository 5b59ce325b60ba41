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
from sparsecse.objectives import validation


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
    # parameter name -> check(name, value) returning the value or raising SparseCSEError (type and range);
    # merged with the base classes' checks, so temperature and mlp are checked for every objective
    checks: ClassVar[dict[str, validation.Check]] = {}
    # True: training calls forward(batch, sentences=the batch's texts) (e.g. to look up cached targets)
    uses_sentences: ClassVar[bool] = False

    def __init__(self, encoder: nn.Module, **params: Any):
        super().__init__()
        self.params = self.check_params(params)
        # held in a list so the encoder is not registered (and saved) as part of the objective
        self._encoder = [encoder]

    @classmethod
    def parameter_checks(cls) -> dict[str, validation.Check]:
        merged: dict[str, validation.Check] = {"temperature": validation.positive, "mlp": validation.flag}
        for klass in reversed(cls.__mro__):
            merged.update(vars(klass).get("checks", {}))
        return {k: v for k, v in merged.items() if k in cls.defaults}

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """Defaults + ``params``, each checked against its declared type and range (no model needed)."""
        unknown = sorted(set(params) - set(cls.defaults))
        if unknown:
            raise SparseCSEError(
                f"Objective {cls.name!r} has no parameter {', '.join(unknown)}; "
                f"its parameters are {', '.join(sorted(cls.defaults)) or 'none'}."
            )
        merged = {**cls.defaults, **params}
        for key, what in cls.requires.items():
            if not merged.get(key):
                raise SparseCSEError(f"Objective {cls.name!r} needs {key}= ({what}).")
        for key, check in cls.parameter_checks().items():
            check(f"Objective {cls.name!r} parameter {key}", merged[key])
        return merged

    @property
    def encoder(self) -> nn.Module:
        return self._encoder[0]

    def trainable_extra_modules(self) -> list[nn.Module]:
        """Modules besides the encoder that the optimizer trains (train-only; not saved with the model)."""
        return [m for m in self.children()]

    def prepare_corpus(self, sentences, corpus_path=None, max_length=None, device=None,
                       show_progress: bool = True) -> None:
        """Called once by training before the first step with the whole corpus (e.g. to embed it with a
        teacher up front); ``corpus_path`` is None for an in-memory corpus."""

    def after_backward(self) -> None:
        """Called by the training loop after ``loss.backward()`` and before the optimizer step
        (e.g. weight perturbation restores the unperturbed weights here)."""

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:  # pragma: no cover - interface
        raise NotImplementedError
