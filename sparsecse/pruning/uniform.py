"""The stock layout's selection rule: the same number of FFN neurons in every kept layer, and the same
number of heads where the family's config can state it, so the shrunk model is the input's own
architecture class (one ``intermediate_size``, one ``num_attention_heads``; Minitron prunes width
uniformly across layers for this reason).

A BERT-like config has no head size of its own (it is ``hidden_size / num_attention_heads``), so there
every head stays and only the FFN width shrinks. Qwen3 and Gemma-3 configs state ``head_dim`` and group
their query heads over key/value heads; there every layer keeps the same K' key/value groups' worth of
heads, G' query heads in each (its best G' by score), so ``num_attention_heads = K'·G'`` and
``num_key_value_heads = K'`` describe every layer (the group structure stays valid). Which families
state a head size: those whose scores record grouped key/value heads (:func:`states_head_size`).

For every head choice (G', K'), each layer's best heads and the largest common neuron count n that the
budget still buys (each layer's top-n neurons) are taken; the best summed importance wins (ties: the one
that keeps more cost). This is exact over uniform choices, the way :mod:`sparsecse.pruning.budget` is
exact over free ones. ``allowed`` restricts the choice to the units an earlier (uniform) mask kept.
"""

from __future__ import annotations

import math

import torch

from sparsecse.errors import SparseCSEError
from sparsecse.pruning.budget import UnitCosts, budget_cap, check_budget

LAYOUTS = ("custom", "stock")
DEFAULT_LAYOUT = "custom"


def check_layout(layout: str) -> str:
    """``layout`` if it is a known layout, else a one-sentence refusal."""
    if layout not in LAYOUTS:
        raise SparseCSEError(f"Unknown layout {layout!r}; choose stock (the input's own architecture, loadable "
                             "with no custom code) or custom (each layer its own width).")
    return layout


def states_head_size(shape: dict) -> bool:
    """Whether the family of a score file's ``shape`` record states a head size in its config (Qwen3,
    Gemma-3: the grouped-query families), so a stock model may keep fewer heads per layer."""
    heads, kv = int(shape.get("heads") or 0), int(shape.get("kv_heads") or 0)
    return 0 < kv < heads


def _ranked(scores: torch.Tensor, allowed: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores (float64, -inf where not allowed) sorted best first along the last dimension, and the order."""
    scores = scores.double()
    if allowed is not None:
        scores = torch.where(allowed.bool(), scores, torch.tensor(-math.inf, dtype=torch.float64))
    return scores.sort(dim=-1, descending=True, stable=True)


def _head_options(head_scores: torch.Tensor, costs: UnitCosts, free: bool, allowed: torch.Tensor | None,
                  hidden: int | None = None):
    """Every uniform head choice: (importance, head keep-mask [L, H], query heads per layer, key/value heads
    per layer); with ``hidden``, only head counts that divide it (transformers' configs check that, head_dim
    stated or not)."""
    layers, heads = head_scores.shape
    if not free:  # every (allowed) head stays
        keep = torch.ones(layers, heads, dtype=torch.bool) if allowed is None else allowed.bool().clone()
        counts = keep.sum(1)
        if not bool((counts == heads).all()):
            raise SparseCSEError("The stock layout keeps every head of this family (its config has no head size "
                                 "of its own), but an earlier mask removed some.")
        return [(float(head_scores.double()[keep].sum()), keep, heads, 0)]
    group = costs.group
    kv = heads // group
    ranked, order = _ranked(head_scores.view(layers, kv, group), None if allowed is None
                            else allowed.view(layers, kv, group))
    prefix = ranked.cumsum(-1)  # [L, K, G]: a group's best g heads
    options = []
    for g in range(1, group + 1):
        value = prefix[..., g - 1]  # [L, K]
        groups_ranked, groups_order = value.sort(dim=-1, descending=True, stable=True)
        for k in range(1, kv + 1):
            total = float(groups_ranked[:, :k].sum())
            if total == -math.inf:
                break
            if hidden and hidden % (g * k):
                continue
            keep = torch.zeros(layers, kv, group, dtype=torch.bool)
            for layer in range(layers):
                for chosen in groups_order[layer, :k].tolist():
                    keep[layer, chosen, order[layer, chosen, :g]] = True
            options.append((total, keep.view(layers, heads), g * k, k if costs.kv_heads else 0))
    return options


def select_uniform(head_scores: torch.Tensor, neuron_scores: torch.Tensor, costs: UnitCosts, budget: float,
                   free_heads: bool, allowed: tuple[torch.Tensor, torch.Tensor] | None = None,
                   hidden: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep-masks ([L, H], [L, F]) of the most important uniform choice within ``budget`` (module docstring).

    Args:
        head_scores: head importances [L, H] (non-negative).
        neuron_scores: neuron importances [L, F].
        costs: the unit costs of the model (its kept layers).
        budget: the kept fraction of the dense cost.
        free_heads: whether heads may go too (:func:`states_head_size`); else every head stays.
        allowed: bool head and neuron masks of the units that may stay (an earlier uniform mask's).
        hidden: the model's hidden size: a kept head count must divide it (None: any count).

    Returns:
        The head and neuron keep-masks; every layer keeps the same number of each.
    """
    budget = check_budget(budget, f"kept-{costs.metric} budget")
    layers = head_scores.shape[0]
    available = budget_cap(costs, budget) - costs.fixed
    ranked, order = _ranked(neuron_scores, None if allowed is None else allowed[1])
    n_max = int(torch.isfinite(ranked).sum(1).min())
    totals = torch.cat([torch.zeros(1, dtype=torch.float64), ranked[:, :n_max].cumsum(1).sum(0)])
    best = None
    for value, keep, q, kv in _head_options(head_scores, costs, free_heads, None if allowed is None else allowed[0],
                                            hidden):
        spent_heads = layers * (q * costs.head + kv * costs.kv)
        n = min(n_max, (available - spent_heads) // (layers * costs.neuron)) if available >= spent_heads else -1
        if n < 1:
            continue
        key = (value + float(totals[n]), spent_heads + layers * n * costs.neuron)
        if best is None or key > best[0]:
            best = (key, keep, n)
    if best is None:
        raise SparseCSEError(f"A kept-{costs.metric} budget of {budget!r} cannot keep one head and one FFN neuron in "
                             "every layer of the stock layout; raise the budget or remove fewer layers.")
    _, head_keep, n = best
    neuron_keep = torch.zeros_like(neuron_scores, dtype=torch.bool)
    neuron_keep.scatter_(1, order[:, :n], True)
    return head_keep, neuron_keep


def smallest_budget(shape: dict, layout: str, seq_len: int = 128) -> float:
    """The smallest kept-FLOPs budget a ``layout`` model of the score file's ``shape`` can be pruned to (0 for
    custom): in stock layout every layer keeps one FFN neuron and its heads (every head, or one key/value
    group's one head where the family states a head size), so a speed search never probes below it."""
    if check_layout(layout) != "stock" or not shape:
        return 0.0
    costs = UnitCosts.from_shape(shape, "flops", seq_len)
    heads = costs.first_head if states_head_size(shape) else costs.heads * costs.head
    least = costs.fixed + costs.layers * (heads + costs.neuron)
    return math.ceil(least / costs.dense * 1e4 + 1e-9) / 1e4
