"""The objective interface: an nn.Module that turns (encoder, batch of sentences) into a loss.

An objective owns whatever extra modules it trains (an MLP head, a discriminator) as submodules,
declares its parameters with defaults in ``defaults`` and what it needs in ``requires``, and
returns an :class:`ObjectiveOutput` with the loss and named figures to log. A new objective is one subclass,
found by name once registered (:func:`~sparsecse.objectives.registry.register_objective`, or an entry point of
group ``sparsecse.objectives``)::

    class HotterSimCSE(SimCSE):
        name = "hotter_simcse"
        defaults = {"temperature": 0.5, "mlp": False}

    sparsecse train --objective hotter_simcse --objective-args temperature=0.2 ...
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
    """What one training step's objective gives: ``loss`` (a scalar tensor the loop calls ``backward`` on) and
    ``logs`` (named figures, e.g. ``{"simcse_loss": 0.71, "acc": 0.5}``, written to the training log)."""

    loss: torch.Tensor
    logs: dict[str, Any] = field(default_factory=dict)  # numbers, or 0-dim tensors the loop reads when it logs


class Objective(nn.Module):
    """Base class of every training objective. Subclasses set ``name``, ``description``, ``defaults`` (every
    parameter with its default; ``--objective-args`` may set only these) and implement :meth:`forward`.

    Args:
        encoder: the :class:`~sparsecse.modeling.encoder.SentenceEncoder` being trained (held, not registered
            as a submodule, so it is neither saved with the objective nor trained twice).
        **params: the objective's parameters; each is checked against ``defaults`` and ``checks``
            (:meth:`check_params`).
    """

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
        """The check of each parameter in ``defaults``: the base classes' ``checks``, then this class's.

        Returns:
            ``{parameter: check}``; a check takes (what, value) and returns the value or raises SparseCSEError.
        """
        merged: dict[str, validation.Check] = {"temperature": validation.positive, "mlp": validation.flag}
        for klass in reversed(cls.__mro__):
            merged.update(vars(klass).get("checks", {}))
        return {k: v for k, v in merged.items() if k in cls.defaults}

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """The objective's parameters, checked without a model (so a command refuses them before loading one).

        Args:
            params: the parameters given (e.g. from ``--objective-args``).

        Returns:
            ``defaults`` updated with ``params``.

        Raises:
            SparseCSEError: a parameter not in ``defaults``, a missing required one, or a value of the wrong
                type or range.

        >>> from sparsecse.objectives.simcse import SimCSE
        >>> SimCSE.check_params({"temperature": 0.1})["temperature"]
        0.1
        """
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
        """The encoder being trained."""
        return self._encoder[0]

    def trainable_extra_modules(self) -> list[nn.Module]:
        """What the optimizer trains besides the encoder (train-only, not saved with the model).

        Returns:
            The objective's submodules (an MLP head, a discriminator); override to leave frozen ones out.
        """
        return [m for m in self.children()]

    # set by training under a time limit: work per corpus sentence (a teacher's embeddings) may be left to the
    # batches that use it, so a run that ends early never pays for the sentences it did not reach
    on_demand: bool = False

    def prepare_corpus(self, sentences, corpus_path=None, max_length=None, device=None,
                       show_progress: bool = True) -> None:
        """Called once by training, before the first step, with the whole corpus (e.g. to embed it with a
        teacher up front and cache the embeddings). Default: nothing.

        Args:
            sentences: the training sentences.
            corpus_path: the corpus file they came from (None for an in-memory corpus).
            max_length: the tokens per sentence training uses.
            device: where the encoder runs.
            show_progress: whether to show a progress bar.
        """

    def after_backward(self) -> None:
        """Called by the training loop after ``loss.backward()`` and before the optimizer step
        (e.g. weight perturbation restores the unperturbed weights here)."""

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:  # pragma: no cover - interface
        """The loss of one batch (the method an objective must define).

        Args:
            batch: the tokenized sentences (``input_ids``, ``attention_mask``, ...), [B, T] each; with
                ``uses_sentences`` set, training also passes ``sentences=`` (the batch's texts).

        Returns:
            An :class:`~sparsecse.objectives.base.ObjectiveOutput`.
        """
        raise NotImplementedError
