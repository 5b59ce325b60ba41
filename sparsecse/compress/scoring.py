"""Gate importance from alignment and uniformity: ``E_D |∂L_score/∂gate|`` for every head and neuron.

One forward and one backward per batch give both gradients exactly. A batch stacks the alignment
rows (both sides of STS-B positive pairs) and the uniformity rows (STS-B sentences); rows of a
transformer do not interact in eval mode, so each row group gets its own copy of the gates and
``backward(L_align + L_uniform)`` leaves ∂L_align/∂gate in the first copy and ∂L_uniform/∂gate in the
second. Both are stored per batch (with each batch's number of positive pairs), so score(λ) is exact
for every λ and every criterion later, without running the model again:

- ``abs_grad`` (the paper's, default): ``E_b |g_b|`` with ``g_b = λ·g_align + (1−λ)·g_uniform``;
- ``layer_norm``: the same, with each layer's head scores (and, separately, its neuron scores)
  divided by their L2 norm before the global ranking (Michel et al. 2019);
- ``fisher``: E_b g_b² (the empirical Fisher of the gate, Kwon et al. 2022).

E_b weights each batch by its number of positive pairs, so a short last batch (28 of 64 pairs on
STS-B train) counts for what it holds. Score files written before batch sizes were stored load with
equal weights, and say so in :attr:`GateScores.weighting`.
"""

from __future__ import annotations

import dataclasses

import functools
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from sparsecse.compress.alignment import alignment_loss, uniformity_loss
from sparsecse.data.sts import Pair, read_sts_benchmark
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.errors import SparseCSEError
from sparsecse.compress.gates import Gates
from sparsecse.compress.flops import shape_extras
from sparsecse.modeling.adapters import layer_parts, uniform_shape
from sparsecse.artifacts.files import hash_path, load_tensors, make_manifest, save_tensors
from sparsecse.artifacts.remote_code import with_trust_option
from sparsecse.data.paths import resolve_data_dir

POSITIVE_THRESHOLD = 4.0
_TENSORS = ("head_grad_align", "head_grad_uniform", "neuron_grad_align", "neuron_grad_uniform")
CRITERIA = ("abs_grad", "layer_norm", "fisher")
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
        return "batch size (positive pairs)" if self.batch_sizes is not None else EQUAL_WEIGHTS_NOTE

    def batch_weights(self) -> torch.Tensor:
        """[B] weights summing to 1: each batch's share of the positive pairs (equal if sizes are unknown)."""
        if self.batch_sizes is None:
            return torch.full((self.num_batches,), 1.0 / self.num_batches)
        sizes = self.batch_sizes.double()
        return (sizes / sizes.sum()).float()

    @property
    def num_batches(self) -> int:
        return int(self.head_grad_align.shape[0])

    @property
    def shape(self) -> tuple[int, int, int]:
        """(layers, heads, FFN neurons)."""
        return (int(self.head_grad_align.shape[1]), int(self.head_grad_align.shape[2]),
                int(self.neuron_grad_align.shape[2]))

    @functools.cached_property
    def sha256(self) -> str | None:
        return hash_path(self.path) if self.path else None

    def head_scores(self, lam: float, criterion: str = "abs_grad") -> torch.Tensor:
        """[L, H] importance of every head at ``lam`` under ``criterion`` (see the module docstring)."""
        return combine(self.head_grad_align, self.head_grad_uniform, lam, criterion, self.batch_weights())

    def neuron_scores(self, lam: float, criterion: str = "abs_grad") -> torch.Tensor:
        """[L, F] importance of every FFN neuron at ``lam`` under ``criterion``."""
        return combine(self.neuron_grad_align, self.neuron_grad_uniform, lam, criterion, self.batch_weights())

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> Path:
        tensors = {name: getattr(self, name) for name in _TENSORS}
        check_score_tensors(tensors, path)  # never write a score file that load would refuse
        if self.batch_sizes is not None:
            tensors["batch_sizes"] = self.batch_sizes.long()
        self.path = save_tensors(path, tensors, self.manifest, overwrite=overwrite)
        self.__dict__.pop("sha256", None)  # the cached hash belonged to the previous path
        return self.path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "GateScores":
        tensors, manifest = load_tensors(path, what="score file")
        missing = [n for n in _TENSORS if n not in tensors]
        if missing or manifest.get("kind") != "scores":
            raise SparseCSEError(f"{path} is not a sparsecse score file (missing {', '.join(missing) or 'manifest'}).")
        check_score_tensors(tensors, path)
        sizes = tensors.get("batch_sizes")
        batches = tensors[_TENSORS[0]].shape[0]
        if sizes is not None and (sizes.shape != (batches,) or (sizes <= 0).any()):
            raise SparseCSEError(f"{path} holds batch sizes that do not match its {batches} batches.")
        return cls(*(tensors[n].float() for n in _TENSORS), manifest=manifest, path=Path(path), batch_sizes=sizes)


def check_score_tensors(tensors: dict[str, torch.Tensor], path) -> None:
    """Floating-point [batches, layers, heads] / [batches, layers, neurons] pairs with at least one
    batch, matching shapes and only finite values; anything else would make a meaningless mask."""
    for name in _TENSORS:
        t = tensors[name]
        if not t.is_floating_point():
            raise SparseCSEError(f"The score file {path} is corrupt: {name} holds {t.dtype} values, not floats.")
        if t.dim() != 3:
            raise SparseCSEError(f"The score file {path} is corrupt: {name} has {t.dim()} dimensions, not 3.")
    heads, neurons = tensors["head_grad_align"].shape, tensors["neuron_grad_align"].shape
    if tensors["head_grad_uniform"].shape != heads or tensors["neuron_grad_uniform"].shape != neurons \
            or heads[:2] != neurons[:2]:
        raise SparseCSEError(f"The score file {path} is corrupt: its tensors' shapes disagree "
                             f"({', '.join(f'{n} {list(tensors[n].shape)}' for n in _TENSORS)}).")
    if heads[0] == 0 or 0 in heads[1:] or 0 in neurons[1:]:
        raise SparseCSEError(f"The score file {path} holds no scores (shape {list(heads)} / {list(neurons)}).")
    for name in _TENSORS:
        if not torch.isfinite(tensors[name]).all():
            raise SparseCSEError(f"The score file {path} holds non-finite values (NaN or infinity) in {name}; "
                                 "score the model again.")


def check_lambda(lam: float) -> float:
    lam = float(lam)
    if not 0.0 <= lam <= 1.0:
        raise SparseCSEError(f"lambda must lie in [0, 1]; got {lam!r}.")
    return lam


def check_criterion(criterion: str) -> str:
    if criterion not in CRITERIA:
        raise SparseCSEError(f"Unknown criterion {criterion!r}; choose {', '.join(CRITERIA)}.")
    return criterion


def combine(grad_align: torch.Tensor, grad_uniform: torch.Tensor, lam: float, criterion: str = "abs_grad",
            weights: torch.Tensor | None = None) -> torch.Tensor:
    """Per-unit importance [L, U] from per-batch gradients [B, L, U]: with g = λ·g_align + (1−λ)·g_uniform
    (the gradient of L_score(λ), exactly), the weighted batch mean of ``|g|`` (``abs_grad``), of ``|g|`` then
    divided per layer by its L2 norm (``layer_norm``), or of g² (``fisher``). ``weights`` [B] sum to 1;
    None means equal weights."""
    lam, criterion = check_lambda(lam), check_criterion(criterion)
    grad = lam * grad_align + (1.0 - lam) * grad_uniform
    if weights is None:
        weights = torch.full((grad.shape[0],), 1.0 / grad.shape[0])
    per_batch = grad.square() if criterion == "fisher" else grad.abs()
    scores = torch.einsum("b,b...->...", weights.to(per_batch.dtype), per_batch)
    if criterion == "layer_norm":
        norms = scores.norm(dim=-1, keepdim=True)
        scores = scores / torch.where(norms > 0, norms, torch.ones_like(norms))
    return scores


# ---------------------------------------------------------------------------- batches
@dataclass(frozen=True)
class ScoreBatch:
    pairs: list[Pair]  # alignment: both sides of each positive pair
    sentences: list[str]  # uniformity: distinct sentences

    def rows(self) -> list[str]:
        return [p.s1 for p in self.pairs] + [p.s2 for p in self.pairs] + list(self.sentences)


def make_batches(pairs: Sequence[Pair], batch_size: int = 64, seed: int = 0,
                 positive_threshold: float = POSITIVE_THRESHOLD, max_batches: int | None = None) -> list[ScoreBatch]:
    """Batches of ``batch_size`` positive pairs (gold > threshold) and ``batch_size`` STS-B sentences.

    One pass over the shuffled positive pairs; the uniformity sentences are the split's distinct
    sentences, shuffled, taken in turn (wrapping around if there are fewer).
    """
    if batch_size < 2:
        raise SparseCSEError(f"The batch size must be at least 2; got {batch_size}.")
    positives = [p for p in pairs if p.score > positive_threshold]
    if len(positives) < 2:
        raise SparseCSEError(f"Scoring needs at least 2 positive pairs (gold > {positive_threshold!r}); "
                             f"found {len(positives)}.")
    sentences = list(dict.fromkeys(s for p in pairs for s in (p.s1, p.s2)))
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


# ---------------------------------------------------------------------------- public API
@dataclass(frozen=True)
class ScoringConfig:
    """How gate scores are computed (the keywords of :func:`score` besides the model): STS-B ``split``,
    ``batch_size`` sentence pairs per batch drawn with ``seed``, at most ``max_batches`` batches, pairs
    with gold score above ``positive_threshold`` as positives."""

    data_dir: str | os.PathLike | None = None
    split: str = "train"
    batch_size: int = 64
    seed: int = 0
    max_batches: int | None = None
    positive_threshold: float = POSITIVE_THRESHOLD
    show_progress: bool = False

    def score(self, encoder) -> "GateScores":
        return score(encoder, **dataclasses.asdict(self))


@with_trust_option
def score(
    model: str | os.PathLike | SentenceEncoder | None = None,
    data_dir: str | os.PathLike | None = None,
    split: str = "train",
    batch_size: int = 64,
    seed: int = 0,
    pooling: str | None = None,
    device: str | None = None,
    max_batches: int | None = None,
    positive_threshold: float = POSITIVE_THRESHOLD,
    show_progress: bool = False,
) -> GateScores:
    """Score every head and FFN neuron of ``model`` on an STS-B split (default: train)."""
    encoder = model if isinstance(model, SentenceEncoder) else SentenceEncoder.load(model, pooling=pooling,
                                                                                    device=device)
    layers, heads, ffn = uniform_shape(encoder.model)
    pairs = read_sts_benchmark(data_dir, split)
    batches = make_batches(pairs, batch_size, seed, positive_threshold, max_batches)
    torch.manual_seed(seed)
    start = time.perf_counter()
    grads = compute_gradients(encoder, batches, show_progress=show_progress)
    seconds = time.perf_counter() - start
    for name, grad in zip(_TENSORS, grads):
        bad = (~torch.isfinite(grad)).flatten(1).any(1).nonzero().flatten().tolist()
        if bad:  # e.g. a batch whose positive pairs are all identical sentences: log E||h-h+||^2 = log 0
            raise SparseCSEError(f"Scoring gave non-finite {name} in batch(es) {', '.join(map(str, bad[:5]))} "
                                 "(a batch whose positive pairs are all identical sentences has no alignment "
                                 "gradient); use a larger --batch-size.")
    config = encoder.config

    manifest = make_manifest(
        "scores",
        inputs={"model": encoder.source, "stsb": resolve_data_dir(data_dir) / "STS" / "STSBenchmark" / f"sts-{split}.csv"},
        params={"split": split, "batch_size": batch_size, "positive_threshold": positive_threshold,
                "max_batches": max_batches, "loss": "lambda*log E||h-h+||^2 + (1-lambda)*log E exp(-2||h_i-h_j||^2)"},
        seed=seed,
        model=os.path.abspath(encoder.source) if os.path.isdir(encoder.source) else encoder.source,  # not cwd-bound
        pooling=encoder.pooling,
        pooling_source=encoder.pooling_source,
        max_length=encoder.max_length,
        shape={"layers": layers, "heads": heads, "ffn": ffn, "hidden": int(config.hidden_size),
               "head_dim": int(layer_parts(encoder.model)[0].head_dim), **shape_extras(encoder.model)},
        num_batches=len(batches),
        num_positive_pairs=sum(len(b.pairs) for b in batches),
        batch_weighting="positive pairs per batch (tensor batch_sizes)",
        seconds=round(seconds, 3),
    )
    return GateScores(*grads, manifest=manifest, batch_sizes=torch.tensor([len(b.pairs) for b in batches]))
