"""Budgeted unit selection: which heads and FFN neurons to keep under one cost budget.

The search (Kwon et al. 2022, "A Fast Post-Training Pruning Framework for Transformers", Algorithm 1)
maximises the summed importance of the kept units subject to their cost fitting the budget. All heads
cost the same and all neurons cost the same (:mod:`sparsecse.modeling.flops`), so once the number of kept heads
h is fixed, the best choice is the h highest-scored heads and, with the budget they leave, as many of
the highest-scored neurons as fit. Trying every h (at most layers x heads values) over sorted prefix
sums therefore gives the exact optimum of this linear objective, not a greedy approximation, and the
budget left over is smaller than the cost of any unit not kept.

With ``keep_one_head`` every layer's best head is kept first (its cost counts against the budget),
so h runs from the number of layers up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import torch

from sparsecse.modeling import flops
from sparsecse.errors import SparseCSEError

METRICS = ("flops", "params")


@dataclass(frozen=True)
class UnitCosts:
    """Cost of one head, one neuron, and of what no unit owns, in FLOPs per token or in parameters."""

    metric: str
    head: int
    neuron: int
    fixed: int
    layers: int
    heads: int
    ffn: int
    seq_len: int | None = None
    # grouped-query attention: cost of one key/value head, paid while any query head of its group stays
    kv: int = 0
    kv_heads: int = 0

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads if self.kv_heads else 1

    @classmethod
    def from_shape(cls, shape: dict, metric: str = "flops", seq_len: int = 128) -> "UnitCosts":
        """Costs for a uniform model ``shape`` (the score manifest's layers, heads, ffn, hidden, head_dim)."""
        if metric not in METRICS:
            raise SparseCSEError(f"Unknown budget metric {metric!r}; choose flops or params.")
        missing = [k for k in ("layers", "heads", "ffn", "hidden", "head_dim") if k not in shape]
        if missing:
            raise SparseCSEError("The score file does not record the model's shape "
                                 f"({', '.join(missing)}); score the model again with this version.")
        d, dh = int(shape["hidden"]), int(shape["head_dim"])
        layers, heads, ffn = int(shape["layers"]), int(shape["heads"]), int(shape["ffn"])
        if "ffn_matrices" in shape:  # ModernBERT / Qwen3 / Gemma-3: real shapes, recorded at scoring
            return cls._modern(shape, metric, int(seq_len), d, dh, layers, heads, ffn)
        if metric == "flops":
            if int(seq_len) < 1:
                raise SparseCSEError(f"The reference sequence length must be at least 1; got {seq_len}.")
            return cls("flops", flops.head_flops(d, dh, int(seq_len)), flops.neuron_flops(d), 0, layers, heads, ffn,
                       int(seq_len))
        return cls("params", flops.head_params(d, dh), flops.neuron_params(d), layers * flops.layer_fixed_params(d),
                   layers, heads, ffn)

    @classmethod
    def _modern(cls, shape: dict, metric: str, seq_len: int, d: int, dh: int, layers: int, heads: int,
                ffn: int) -> "UnitCosts":
        kv_heads = int(shape.get("kv_heads") or heads)
        grouped = kv_heads < heads
        if metric == "flops":
            if seq_len < 1:
                raise SparseCSEError(f"The reference sequence length must be at least 1; got {seq_len}.")
            head = flops.query_head_flops(d, dh, seq_len) + (0 if grouped else flops.kv_head_flops(d, dh))
            return cls("flops", head, 2 * int(shape["ffn_matrices"]) * d, 0, layers, heads, ffn, seq_len,
                       kv=flops.kv_head_flops(d, dh) if grouped else 0, kv_heads=kv_heads if grouped else 0)
        return cls("params", int(shape["head_params"]), int(shape["neuron_params"]), int(shape["fixed_params"]),
                   layers, heads, ffn, kv=int(shape["kv_head_params"]) if grouped else 0,
                   kv_heads=kv_heads if grouped else 0)

    @property
    def dense(self) -> int:
        """The dense model's cost (every head, every neuron and the fixed part)."""
        return self.fixed + self.layers * (self.heads * self.head + self.kv_heads * self.kv + self.ffn * self.neuron)

    def kept(self, head_keep: torch.Tensor, neuron_keep: torch.Tensor) -> int:
        """The cost of the units the keep-masks ([L, H], [L, F]) keep (a key/value head while one query head of its group stays), plus the fixed part."""
        kv = 0
        if self.kv_heads:  # a key/value head costs while one query head of its group stays
            kv = int(head_keep.bool().view(head_keep.shape[0], self.kv_heads, -1).any(-1).sum()) * self.kv
        return self.fixed + int(head_keep.sum()) * self.head + kv + int(neuron_keep.sum()) * self.neuron


def check_budget(value: float, what: str = "budget") -> float:
    """``value`` as a float if it lies in (0, 1] (a kept fraction of the dense cost)."""
    value = float(value)
    if not (math.isfinite(value) and 0.0 < value <= 1.0):
        raise SparseCSEError(f"The {what} must lie in (0, 1]; got {value!r}.")
    return value


def check_budget_keeps_a_unit(costs: UnitCosts, budget: float, keep_one_head: bool = False) -> float:
    """``budget`` once it is known to keep something of a model with these ``costs`` (checked before any
    work, e.g. by ``compress`` before it scores): what no unit owns, one head per layer with
    ``keep_one_head``, and at least one head or neuron."""
    budget = check_budget(budget, f"kept-{costs.metric} budget")
    available = budget_cap(costs, budget) - costs.fixed
    min_heads = costs.layers if keep_one_head else 0
    if available < min_heads * costs.head:
        floor_ratio = (costs.fixed + min_heads * costs.head) / costs.dense
        held = "the layers' biases and LayerNorms" + (" and one head per layer" if keep_one_head else "")
        raise SparseCSEError(f"A kept-{costs.metric} budget of {budget!r} is below what {held} cost "
                             f"({floor_ratio:.4g} of the dense model); raise the budget.")
    if not min_heads and available < min(costs.head, costs.neuron):
        raise SparseCSEError(f"A kept-{costs.metric} budget of {budget!r} keeps no head and no neuron (one neuron "
                             f"costs {costs.neuron / costs.dense:.3g} of the dense model); raise the budget.")
    return budget


def budget_cap(costs: UnitCosts, budget: float) -> int:
    """The largest whole cost within ``budget`` x dense cost (decimal budgets such as 0.7 taken exactly)."""
    return math.floor(Fraction(repr(float(budget))) * costs.dense)


def _head_order(scores: torch.Tensor, keep_one_head: bool, allowed: torch.Tensor | None = None) -> list[int]:
    """Flat head indices in the order they are kept: best first (each layer's best first if asked),
    only those ``allowed`` (bool [L, H]) if given."""
    order = torch.sort(scores.flatten().double(), descending=True, stable=True).indices.tolist()
    if allowed is not None:
        flat = allowed.flatten().tolist()
        order = [f for f in order if flat[f]]
    if not keep_one_head:
        return order
    heads = scores.shape[1]
    firsts: dict[int, int] = {}
    for flat in order:
        firsts.setdefault(flat // heads, flat)
    chosen = set(firsts.values())
    return [f for f in order if f in chosen] + [f for f in order if f not in chosen]


def select_under_budget(head_scores: torch.Tensor, neuron_scores: torch.Tensor, costs: UnitCosts, budget: float,
                        keep_one_head: bool = False,
                        allowed: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep-masks ([L, H], [L, F]) of the most important units whose total cost fits ``budget`` (a
    fraction of the dense cost); ties between equally important choices go to the one that keeps more
    cost. Scores must be non-negative (every criterion's are). ``allowed`` (bool head and neuron masks)
    restricts the choice to those units (the search stays exact over them), as a later step of
    iterative pruning does (:mod:`sparsecse.shrinking.iterative`)."""
    if costs.kv_heads:
        raise SparseCSEError("A kept-FLOPs or kept-parameters budget is not supported under grouped-query attention "
                             "yet (a key/value head's cost depends on its whole group); prune by --sparsity instead.")
    budget = check_budget_keeps_a_unit(costs, budget, keep_one_head)
    layers, heads = head_scores.shape
    available = budget_cap(costs, budget) - costs.fixed
    min_heads = layers if keep_one_head else 0
    if allowed is not None and keep_one_head and not allowed[0].any(1).all():
        raise SparseCSEError("Cannot keep one head in every layer: a layer has no head left to keep.")
    h_order = _head_order(head_scores, keep_one_head, None if allowed is None else allowed[0])
    n_order = torch.sort(neuron_scores.flatten().double(), descending=True, stable=True).indices
    if allowed is not None:
        n_order = n_order[allowed[1].flatten()[n_order]]
    h_sum = torch.cat([torch.zeros(1, dtype=torch.float64),
                       head_scores.flatten().double()[torch.tensor(h_order, dtype=torch.long)].cumsum(0)])
    n_sum = torch.cat([torch.zeros(1, dtype=torch.float64), neuron_scores.flatten().double()[n_order].cumsum(0)])
    best = None
    for h in range(min_heads, len(h_order) + 1):
        left = available - h * costs.head
        if left < 0:
            break
        n = min(n_order.numel(), left // costs.neuron)
        key = (float(h_sum[h] + n_sum[n]), h * costs.head + n * costs.neuron)
        if best is None or key > best[0]:
            best = (key, h, n)
    _, h, n = best
    if h == 0 and n == 0:
        raise SparseCSEError(f"A kept-{costs.metric} budget of {budget!r} keeps no head and no neuron (one neuron "
                             f"costs {costs.neuron / costs.dense:.3g} of the dense model); raise the budget.")
    head_keep = torch.zeros(layers * heads, dtype=torch.bool)
    head_keep[h_order[:h]] = True
    neuron_keep = torch.zeros(neuron_scores.numel(), dtype=torch.bool)
    neuron_keep[n_order[:n]] = True
    return head_keep.view(layers, heads), neuron_keep.view_as(neuron_scores)
