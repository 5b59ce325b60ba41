"""A score file: the per-batch gate gradients of L_align and L_uniform for every head and FFN neuron.

Both gradients are stored per batch (with each batch's number of positive pairs), so the importance at any λ
and under any criterion (:mod:`sparsecse.scoring.criteria`) is computed later without running the model
again. Score files written before batch sizes were stored load with equal weights, and say so in
:attr:`GateScores.weighting`.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from sparsecse.artifacts.files import hash_path, load_tensors, save_tensors
from sparsecse.errors import SparseCSEError
from sparsecse.scoring.criteria import combine

TENSORS = ("head_grad_align", "head_grad_uniform", "neuron_grad_align", "neuron_grad_uniform")
EQUAL_WEIGHTS_NOTE = "equal batch weights (the score file predates stored batch sizes)"


@dataclass
class GateScores:
    """Per-batch gate gradients of L_align and L_uniform: heads [B, L, H], neurons [B, L, F]."""

    head_grad_align: torch.Tensor
    head_grad_uniform: torch.Tensor
    neuron_grad_align: torch.Tensor
    neuron_grad_uniform: torch.Tensor
    manifest: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    batch_sizes: torch.Tensor | None = None  # [B] positive pairs per batch; None: equal weights

    @property
    def weighting(self) -> str:
        """How the batches are weighed in the importance (by their positive pairs, or equally for old files)."""
        return "batch size (positive pairs)" if self.batch_sizes is not None else EQUAL_WEIGHTS_NOTE

    def batch_weights(self) -> torch.Tensor:
        """[B] weights summing to 1: each batch's share of the positive pairs (equal if sizes are unknown)."""
        if self.batch_sizes is None:
            return torch.full((self.num_batches,), 1.0 / self.num_batches)
        sizes = self.batch_sizes.double()
        return (sizes / sizes.sum()).float()

    @property
    def num_batches(self) -> int:
        """The number of scoring batches B."""
        return int(self.head_grad_align.shape[0])

    @property
    def shape(self) -> tuple[int, int, int]:
        """(layers, heads, FFN neurons)."""
        return (int(self.head_grad_align.shape[1]), int(self.head_grad_align.shape[2]),
                int(self.neuron_grad_align.shape[2]))

    @functools.cached_property
    def sha256(self) -> str | None:
        """The score file's hash (None until saved or when built in memory)."""
        return hash_path(self.path) if self.path else None

    def head_scores(self, lam: float, criterion: str = "abs_grad") -> torch.Tensor:
        """[L, H] importance of every head at ``lam`` under ``criterion`` (:mod:`sparsecse.scoring.criteria`)."""
        return combine(self.head_grad_align, self.head_grad_uniform, lam, criterion, self.batch_weights())

    def neuron_scores(self, lam: float, criterion: str = "abs_grad") -> torch.Tensor:
        """[L, F] importance of every FFN neuron at ``lam`` under ``criterion``."""
        return combine(self.neuron_grad_align, self.neuron_grad_uniform, lam, criterion, self.batch_weights())

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> Path:
        """Write the score file (``path`` + its ``.json`` manifest) atomically; returns ``path``."""
        tensors = {name: getattr(self, name) for name in TENSORS}
        check_score_tensors(tensors, path)  # never write a score file that load would refuse
        if self.batch_sizes is not None:
            tensors["batch_sizes"] = self.batch_sizes.long()
        self.path = save_tensors(path, tensors, self.manifest, overwrite=overwrite)
        self.__dict__.pop("sha256", None)  # the cached hash belonged to the previous path
        return self.path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "GateScores":
        """Read a score file, refusing one that is not a score file or holds unusable tensors."""
        tensors, manifest = load_tensors(path, what="score file")
        missing = [n for n in TENSORS if n not in tensors]
        if missing or manifest.get("kind") != "scores":
            raise SparseCSEError(f"{path} is not a sparsecse score file (missing {', '.join(missing) or 'manifest'}).")
        check_score_tensors(tensors, path)
        sizes = tensors.get("batch_sizes")
        batches = tensors[TENSORS[0]].shape[0]
        if sizes is not None and (sizes.shape != (batches,) or (sizes <= 0).any()):
            raise SparseCSEError(f"{path} holds batch sizes that do not match its {batches} batches.")
        return cls(*(tensors[n].float() for n in TENSORS), manifest=manifest, path=Path(path), batch_sizes=sizes)


def check_score_tensors(tensors: dict[str, torch.Tensor], path) -> None:
    """Floating-point [batches, layers, heads] / [batches, layers, neurons] pairs with at least one
    batch, matching shapes and only finite values; anything else would make a meaningless mask."""
    for name in TENSORS:
        t = tensors[name]
        if not t.is_floating_point():
            raise SparseCSEError(f"The score file {path} is corrupt: {name} holds {t.dtype} values, not floats.")
        if t.dim() != 3:
            raise SparseCSEError(f"The score file {path} is corrupt: {name} has {t.dim()} dimensions, not 3.")
    heads, neurons = tensors["head_grad_align"].shape, tensors["neuron_grad_align"].shape
    if tensors["head_grad_uniform"].shape != heads or tensors["neuron_grad_uniform"].shape != neurons \
            or heads[:2] != neurons[:2]:
        raise SparseCSEError(f"The score file {path} is corrupt: its tensors' shapes disagree "
                             f"({', '.join(f'{n} {list(tensors[n].shape)}' for n in TENSORS)}).")
    if heads[0] == 0 or 0 in heads[1:] or 0 in neurons[1:]:
        raise SparseCSEError(f"The score file {path} holds no scores (shape {list(heads)} / {list(neurons)}).")
    for name in TENSORS:
        if not torch.isfinite(tensors[name]).all():
            raise SparseCSEError(f"The score file {path} holds non-finite values (NaN or infinity) in {name}; "
                                 "score the model again.")

