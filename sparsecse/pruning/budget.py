"""Budgeted unit selection: which heads and FFN neurons to keep under one cost budget.

The search (Kwon et al. 2022, "A Fast Post-Training Pruning Framework for Transformers", Algorithm 1)
maximises the summed importance of the kept units subject to their cost fitting the budget. All heads
cost the same and all neurons cost the same (:mod:`sparsecse.modeling.flops`, as the family's
:class:`~sparsecse.modeling.adapters.FamilyCost` describes them), so once the number of kept heads
h is fixed, the best choice is the h highest-scored heads and, with the budget they leave, as many of
the highest-scored neurons as fit. Trying every h (at most layers x heads values) over sorted prefix
sums therefore gives the exact optimum of this linear objective, not a greedy approximation, and the
budget left over is smaller than the cost of any unit not kept.

With ``keep_one_head`` every layer's best head is kept first (its cost counts against the budget),
so h runs from the number of layers up.

**Grouped-query attention** (Qwen3, Gemma-3: K key/value heads per layer, each read by a group of
G = heads / K query heads). A query head costs c_q; a key/value head costs c_kv, paid once while any
query head of its group stays (:mod:`sparsecse.modeling.kv_groups`). The scores hold no key/value gate
(a group gate's gradient would be the sum of its query heads'), so a group's importance is the sum of its
kept query heads' scores. The cost of a choice depends only on (g, Q, n): the groups kept, the query
heads kept and the neurons kept. For each group, keeping j of its heads is best done with its j
highest-scored (allowed) heads (they cost the same), worth P(j), its top-j prefix sum. A dynamic programme over
the groups, in layer order, computes for every (g, Q) the best head importance W(g, Q) over all ways of
spreading Q heads over g groups (each group: j in 0..G), and the choice of j that gave it. Then, as
above, every (g, Q) that fits takes as many top neurons as the rest of the budget buys, and the best
total wins. Every subset of heads and neurons is covered by some (g, Q, n) and is worth at most that
entry's value, so the result is the **exact optimum** (not a bound); tests check it against an
enumeration of all subsets. With ``keep_one_head`` the programme keeps two tables per layer (this layer
keeps no head yet / keeps one) and drops the first at the layer's end, so the constraint is exact too
(forcing each layer's best head would not be: a layer's best pair may sit in another group). Floating
additions are monotone, so the budget left over is again smaller than what any unit not kept would add
(c_q to a kept group, c_q + c_kv to an emptied one, a neuron's cost). Time O(groups · (G+1) · g_max ·
Q_max) and one byte per (group, g, Q) for the choices, g_max and Q_max bounded by what the budget buys:
on one CPU thread about 1 s and 23 MB for Qwen3-0.6B's shape (224 groups, 448 query heads), 10 s and
96 MB for Qwen3-8B's (288 groups, 1152 query heads), 0.03 s for EmbeddingGemma's. A shape whose key/value
heads are not grouped (one per query head) takes the prefix-sum search above.
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
    """Cost of one head (a query head under grouped-query attention), one key/value head, one neuron, and
    of what no unit owns, in FLOPs per token or in parameters."""

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
    # what no unit owns, per layer, where layers differ (ModernBERT's first layer has no attention norm);
    # empty: ``fixed`` spreads evenly over the layers
    layer_fixed: tuple[int, ...] = ()

    @property
    def group(self) -> int:
        """Query heads per key/value head (1 without grouped-query attention)."""
        return self.heads // self.kv_heads if self.kv_heads else 1

    @property
    def first_head(self) -> int:
        """The cost of a head that is the only one kept of its group (with its key/value head)."""
        return self.head + self.kv

    @classmethod
    def from_shape(cls, shape: dict, metric: str = "flops", seq_len: int = 128) -> "UnitCosts":
        """Costs for a uniform model ``shape`` (:func:`sparsecse.modeling.flops.shape_record`, as a score
        manifest holds it: layers, heads, ffn, hidden, head_dim, and the real unit costs
        :func:`~sparsecse.modeling.flops.recorded_costs` reads).

        Args:
            shape: the shape record.
            metric: ``"flops"`` (per token, at ``seq_len`` tokens) or ``"params"``.
            seq_len: the sequence length FLOPs are counted at.

        Returns:
            The costs of one head, key/value head and neuron, and of what no unit owns.
        """
        if metric not in METRICS:
            raise SparseCSEError(f"Unknown budget metric {metric!r}; choose flops or params.")
        missing = [k for k in ("layers", "heads", "ffn", "hidden", "head_dim") if k not in shape]
        if missing:
            raise SparseCSEError("The score file does not record the model's shape "
                                 f"({', '.join(missing)}); score the model again with this version.")
        d, dh = int(shape["hidden"]), int(shape["head_dim"])
        layers, heads, ffn = int(shape["layers"]), int(shape["heads"]), int(shape["ffn"])
        recorded = flops.recorded_costs(shape)  # what the family's units are made of (its FamilyCost)
        kv_heads = recorded["kv_heads"] if recorded["kv_heads"] < heads else 0  # 0: each head its own key/value
        if metric == "flops":
            if int(seq_len) < 1:
                raise SparseCSEError(f"The reference sequence length must be at least 1; got {seq_len}.")
            kv = flops.kv_head_flops(d, dh)
            head = flops.query_head_flops(d, dh, int(seq_len)) + (0 if kv_heads else kv)
            return cls("flops", head, flops.neuron_flops(d, recorded["ffn_matrices"]), 0, layers, heads, ffn,
                       int(seq_len), kv=kv if kv_heads else 0, kv_heads=kv_heads)
        return cls("params", recorded["head_params"], recorded["neuron_params"], recorded["fixed_params"],
                   layers, heads, ffn, kv=recorded["kv_head_params"] if kv_heads else 0, kv_heads=kv_heads,
                   layer_fixed=tuple(shape.get("layer_fixed_params") or ()))

    @property
    def dense(self) -> int:
        """The dense model's cost (every head, every neuron and the fixed part)."""
        return self.fixed + self.layers * (self.heads * self.head + self.kv_heads * self.kv + self.ffn * self.neuron)

    def kept(self, head_keep: torch.Tensor, neuron_keep: torch.Tensor, layer_keep: torch.Tensor | None = None) -> int:
        """The cost of the units the keep-masks ([L, H], [L, F]) keep (a key/value head while one query head
        of its group stays), plus the fixed part of the kept layers.

        Args:
            head_keep: bool [L, H], the heads kept.
            neuron_keep: bool [L, F], the FFN neurons kept.
            layer_keep: bool [L], the layers kept (None: all); a removed layer costs nothing, its units and
                its share of the fixed part included.

        Returns:
            The kept cost.
        """
        if layer_keep is not None:
            head_keep, neuron_keep = head_keep.bool() & layer_keep[:, None], neuron_keep.bool() & layer_keep[:, None]
        kv = 0
        if self.kv_heads:  # a key/value head costs while one query head of its group stays
            kv = int(head_keep.bool().view(head_keep.shape[0], self.kv_heads, -1).any(-1).sum()) * self.kv
        fixed = self.fixed
        if layer_keep is not None:
            per_layer = self.layer_fixed or (self.fixed // self.layers,) * self.layers
            fixed = sum(cost for cost, keep in zip(per_layer, layer_keep.tolist()) if keep)
        return fixed + int(head_keep.sum()) * self.head + kv + int(neuron_keep.sum()) * self.neuron


def check_budget(value: float, what: str = "budget") -> float:
    """``value`` as a float if it lies in (0, 1] (a kept fraction of the dense cost)."""
    value = float(value)
    if not (math.isfinite(value) and 0.0 < value <= 1.0):
        raise SparseCSEError(f"The {what} must lie in (0, 1]; got {value!r}.")
    return value


def check_budget_keeps_a_unit(costs: UnitCosts, budget: float, keep_one_head: bool = False) -> float:
    """``budget`` once it is known to keep something of a model with these ``costs`` (checked before any
    work, e.g. by ``compress`` before it scores): what no unit owns, one head per layer with
    ``keep_one_head``, and at least one head or neuron (under grouped-query attention a head brings its
    key/value head)."""
    budget = check_budget(budget, f"kept-{costs.metric} budget")
    available = budget_cap(costs, budget) - costs.fixed
    min_heads = costs.layers if keep_one_head else 0
    if available < min_heads * costs.first_head:
        floor_ratio = (costs.fixed + min_heads * costs.first_head) / costs.dense
        held = "the layers' biases and LayerNorms" + (" and one head per layer" if keep_one_head else "")
        raise SparseCSEError(f"A kept-{costs.metric} budget of {budget!r} is below what {held} cost "
                             f"({floor_ratio:.4g} of the dense model); raise the budget.")
    if not min_heads and available < min(costs.first_head, costs.neuron):
        raise SparseCSEError(f"A kept-{costs.metric} budget of {budget!r} keeps no head and no neuron "
                             f"({cheapest_unit(costs)}); raise the budget.")
    return budget


def cheapest_unit(costs: UnitCosts) -> str:
    """What the cheapest unit is and what fraction of the dense model it costs, for a refusal."""
    if costs.neuron <= costs.first_head:
        return f"one neuron costs {costs.neuron / costs.dense:.3g} of the dense model"
    head = "one head with its key/value head" if costs.kv else "one head"
    return f"{head} costs {costs.first_head / costs.dense:.3g} of the dense model"


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
    iterative pruning does (:mod:`sparsecse.shrinking.iterative`). Under grouped-query attention
    (``costs.kv_heads``) a key/value head costs while any query head of its group stays (module docstring:
    the search is exact there too)."""
    budget = check_budget_keeps_a_unit(costs, budget, keep_one_head)
    layers, heads = head_scores.shape
    available = budget_cap(costs, budget) - costs.fixed
    min_heads = layers if keep_one_head else 0
    if allowed is not None and keep_one_head and not allowed[0].any(1).all():
        raise SparseCSEError("Cannot keep one head in every layer: a layer has no head left to keep.")
    n_order = torch.sort(neuron_scores.flatten().double(), descending=True, stable=True).indices
    if allowed is not None:
        n_order = n_order[allowed[1].flatten()[n_order]]
    n_sum = torch.cat([torch.zeros(1, dtype=torch.float64), neuron_scores.flatten().double()[n_order].cumsum(0)])
    if costs.kv_heads:
        head_keep, n = _select_grouped(head_scores, n_sum, costs, available, keep_one_head,
                                       None if allowed is None else allowed[0])
        return _masks(head_keep, n_order[:n], neuron_scores, costs, budget)
    h_order = _head_order(head_scores, keep_one_head, None if allowed is None else allowed[0])
    h_sum = torch.cat([torch.zeros(1, dtype=torch.float64),
                       head_scores.flatten().double()[torch.tensor(h_order, dtype=torch.long)].cumsum(0)])
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
    head_keep = torch.zeros(layers * heads, dtype=torch.bool)
    head_keep[h_order[:h]] = True
    return _masks(head_keep.view(layers, heads), n_order[:n], neuron_scores, costs, budget)


def _masks(head_keep: torch.Tensor, kept_neurons: torch.Tensor, neuron_scores: torch.Tensor, costs: UnitCosts,
           budget: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The head keep-mask and the neuron keep-mask of the flat indices ``kept_neurons``; refused if both
    are empty."""
    if not head_keep.any() and not kept_neurons.numel():
        raise SparseCSEError(f"A kept-{costs.metric} budget of {budget!r} keeps no head and no neuron "
                             f"({cheapest_unit(costs)}); raise the budget.")
    neuron_keep = torch.zeros(neuron_scores.numel(), dtype=torch.bool)
    neuron_keep[kept_neurons] = True
    return head_keep, neuron_keep.view_as(neuron_scores)


def _select_grouped(head_scores: torch.Tensor, n_sum: torch.Tensor, costs: UnitCosts, available: int,
                    keep_one_head: bool, allowed: torch.Tensor | None) -> tuple[torch.Tensor, int]:
    """(head keep-mask, number of top neurons) of highest importance within ``available`` under
    grouped-query attention: the dynamic programme over key/value groups of the module docstring.
    ``n_sum``: prefix sums of the allowed neuron scores, best first."""
    layers, heads = head_scores.shape
    kv, group = costs.kv_heads, costs.group
    scores = head_scores.double().view(layers, kv, group)
    ok = torch.ones_like(scores, dtype=torch.bool) if allowed is None else allowed.bool().view(layers, kv, group)
    ranked, order = torch.where(ok, scores, -math.inf).sort(dim=-1, descending=True, stable=True)
    # P(j), the group's best j heads (-inf where fewer than j are allowed)
    prefix = torch.cat([torch.zeros(layers, kv, 1, dtype=torch.float64), ranked.cumsum(-1)], -1)
    q_max = min(int(ok.sum()), available // costs.head)
    g_max = min(int(ok.any(-1).sum()), available // costs.first_head)
    table = torch.full((g_max + 1, q_max + 1), -math.inf, dtype=torch.float64)  # W(g, Q)
    table[0, 0] = 0.0
    choices = []  # per group, for each (g, Q): its j, plus group + 1 where it is its layer's first kept group
    for layer in range(layers):
        start = table  # with keep_one_head: ``start`` keeps no head of this layer yet, ``table`` at least one
        if keep_one_head:
            table = torch.full_like(start, -math.inf)
        for k in range(kv):
            best, code = table.clone(), torch.zeros(table.shape, dtype=torch.uint8)
            for before, first in ((table, 0), (start, 1))[:2 if keep_one_head else 1]:
                for j in range(1, min(group, q_max) + 1):
                    if g_max == 0 or prefix[layer, k, j] == -math.inf:
                        break
                    candidate = before[:-1, :-j] + prefix[layer, k, j]
                    kept = best[1:, j:]
                    code[1:, j:].masked_fill_(candidate > kept, j + (group + 1) * first)
                    kept.copy_(torch.maximum(kept, candidate))
            table = best
            choices.append(code)
    g = torch.arange(g_max + 1).view(-1, 1)
    q = torch.arange(q_max + 1).view(1, -1)
    head_cost = g * costs.kv + q * costs.head
    n = ((available - head_cost) // costs.neuron).clamp(0, n_sum.numel() - 1)
    value = torch.where((head_cost <= available) & (table > -math.inf), table + n_sum[n], -math.inf)
    spent = head_cost + n * costs.neuron
    # the best value; among equals the choice that keeps more cost; then the first
    best = (value == value.max()) & (value > -math.inf)
    best &= spent == spent[best].max()
    gi, qi = (int(i) for i in best.nonzero()[0])
    n_kept = int(n[gi, qi])
    head_keep = torch.zeros(layers, kv, group, dtype=torch.bool)
    for layer in reversed(range(layers)):
        for k in reversed(range(kv)):
            c = int(choices[layer * kv + k][gi, qi])
            j, first = c % (group + 1), c // (group + 1)
            head_keep[layer, k, order[layer, k, :j]] = True
            gi, qi = gi - (j > 0), qi - j
            if first:
                break
    return head_keep.view(layers, heads), n_kept
