"""Per-batch gate gradients of L_align and L_uniform: the batches, and one forward and backward per batch.

A batch stacks the alignment rows (both sides of STS-B positive pairs) and the uniformity rows (STS-B
sentences); rows of a transformer do not interact in eval mode, so each row group gets its own copy of the
gates and ``backward(L_align + L_uniform)`` leaves ∂L_align/∂gate in the first copy and ∂L_uniform/∂gate in
the second.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import torch

from sparsecse.data.sts import Pair
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.adapters import uniform_shape
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.scoring.alignment import alignment_loss, uniformity_loss
from sparsecse.scoring.gates import Gates

POSITIVE_THRESHOLD = 4.0


@dataclass(frozen=True)
class ScoreBatch:
    """One scoring batch: positive pairs (alignment) and distinct sentences (uniformity)."""
    pairs: list[Pair]  # alignment: both sides of each positive pair
    sentences: list[str]  # uniformity: distinct sentences

    def rows(self) -> list[str]:
        """The sentences the encoder embeds, in row-group order: every first side, every second side, the uniformity
        sentences."""
        return [p.s1 for p in self.pairs] + [p.s2 for p in self.pairs] + list(self.sentences)


def make_batches(pairs: Sequence[Pair], batch_size: int = 64, seed: int = 0,
                 positive_threshold: float = POSITIVE_THRESHOLD, max_batches: int | None = None) -> list[ScoreBatch]:
    """Batches of ``batch_size`` positive pairs (gold > threshold) and ``batch_size`` STS-B sentences.

    One pass over the shuffled positive pairs; the uniformity sentences are the split's distinct
    sentences, shuffled, taken in turn (wrapping around if there are fewer).
    """
    positives = [p for p in pairs if p.score > positive_threshold]
    sentences = list(dict.fromkeys(s for p in pairs for s in (p.s1, p.s2)))
    return pair_batches(positives, sentences, batch_size, seed, max_batches, f"gold > {positive_threshold!r}")


def pair_batches(positives: Sequence[Pair], sentences: Sequence[str], batch_size: int = 64, seed: int = 0,
                 max_batches: int | None = None, which: str = "") -> list[ScoreBatch]:
    """:func:`make_batches` from positive pairs and distinct uniformity sentences chosen already (a dev set's
    :attr:`~sparsecse.data.eval_data.EvalData.positive_pairs` and sentences); ``which`` says in an error
    which pairs are positive."""
    if batch_size < 2:
        raise SparseCSEError(f"The batch size must be at least 2; got {batch_size}.")
    positives, sentences = list(positives), list(sentences)
    if len(positives) < 2:
        raise SparseCSEError(f"Scoring needs at least 2 positive pairs{f' ({which})' if which else ''}; "
                             f"found {len(positives)}.")
    rng = random.Random(seed)
    rng.shuffle(positives)
    rng.shuffle(sentences)
    chunks = [positives[i:i + batch_size] for i in range(0, len(positives), batch_size)]
    if len(chunks) > 1 and len(chunks[-1]) < 2:
        chunks[-2].extend(chunks.pop())
    if max_batches is not None:
        chunks = chunks[:max_batches]
    batches, cursor = [], 0
    for chunk in chunks:
        take = [sentences[(cursor + k) % len(sentences)] for k in range(min(batch_size, len(sentences)))]
        cursor += len(take)
        batches.append(ScoreBatch(chunk, list(dict.fromkeys(take))))
    return batches


# ---------------------------------------------------------------------------- gradients
class _UnitGate(torch.autograd.Function):
    """y = x · g for gates that are all 1 (the scoring point): y is x itself, and the backward forms
    ∂L/∂g = Σ_tokens Σ_head-dims x ⊙ ∂L/∂y. This skips two of the four elementwise passes over the
    activations that a plain multiply costs (the forward product and ∂L/∂x = g ⊙ ∂L/∂y)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, gate: torch.Tensor, unit_size: int) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.unit_size, ctx.gate_dtype = unit_size, gate.dtype
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (x,) = ctx.saved_tensors
        per_unit = (grad * x).sum(1)  # [rows, units * unit_size]
        if ctx.unit_size > 1:
            per_unit = per_unit.unflatten(-1, (-1, ctx.unit_size)).sum(-1)
        return grad, per_unit.to(ctx.gate_dtype), None


class RowGroupGates(Gates):
    """All-ones gates with one copy per row group ([G, L, H] and [G, L, F]); ``row_groups`` maps rows to
    copies. They only measure ∂L/∂gate at 1 and never change the model's outputs."""

    def __init__(self, groups: int, layers: int, heads: int, ffn: int):
        self.head = torch.ones(groups, layers, heads, requires_grad=True)
        self.neuron = torch.ones(groups, layers, ffn, requires_grad=True)
        self.row_groups: torch.Tensor | None = None
        self._handles = []

    def check_fits(self, model) -> None:
        """Refuse gates whose [layers, heads] / [layers, neurons] do not fit the model."""
        layers, heads, ffn = uniform_shape(model)
        if tuple(self.head.shape[1:]) != (layers, heads) or tuple(self.neuron.shape[1:]) != (layers, ffn):
            raise SparseCSEError("The gates do not fit the model.")

    def _head_hook(self, layer: int, head_dim: int):
        def hook(module, args):
            return (_UnitGate.apply(args[0], self.head[self.row_groups, layer], head_dim),) + tuple(args[1:])

        return hook

    def _neuron_hook(self, layer: int):
        def hook(module, args):
            return (_UnitGate.apply(args[0], self.neuron[self.row_groups, layer], 1),) + tuple(args[1:])

        return hook


def batch_gradients(encoder: SentenceEncoder, gates: RowGroupGates, batch: ScoreBatch) -> tuple[torch.Tensor, ...]:
    """(g_align heads, g_uniform heads, g_align neurons, g_uniform neurons) for one batch."""
    n_pairs, n_uni = len(batch.pairs), len(batch.sentences)
    features = encoder.tokenize(batch.rows())
    device = features["input_ids"].device
    gates.row_groups = torch.cat([torch.zeros(2 * n_pairs, dtype=torch.long),
                                  torch.ones(n_uni, dtype=torch.long)]).to(device)
    gates.zero_grad()
    emb = encoder(**features).float()
    a, b, u = emb[:n_pairs], emb[n_pairs:2 * n_pairs], emb[2 * n_pairs:]
    (alignment_loss(a, b) + uniformity_loss(u)).backward()
    return gates.head.grad[0].clone(), gates.head.grad[1].clone(), gates.neuron.grad[0].clone(), \
        gates.neuron.grad[1].clone()


def compute_gradients(encoder: SentenceEncoder, batches: Sequence[ScoreBatch],
                      show_progress: bool = False) -> tuple[torch.Tensor, ...]:
    """Stacked per-batch gradients, with the model in eval mode and its weights frozen."""
    from tqdm.auto import tqdm

    layers, heads, ffn = uniform_shape(encoder.model)
    gates = RowGroupGates(2, layers, heads, ffn)
    was_training = encoder.training
    frozen = [(p, p.requires_grad) for p in encoder.parameters()]
    encoder.eval()
    for p, _ in frozen:
        p.requires_grad_(False)
    out: list[list[torch.Tensor]] = [[], [], [], []]
    try:
        gates.attach(encoder.model)
        for batch in tqdm(batches, desc="scoring", unit="batch", disable=not show_progress):
            for store, grad in zip(out, batch_gradients(encoder, gates, batch)):
                store.append(grad.cpu())
    finally:
        gates.detach()
        for p, flag in frozen:
            p.requires_grad_(flag)
        encoder.train(was_training)
    return tuple(torch.stack(store) for store in out)
