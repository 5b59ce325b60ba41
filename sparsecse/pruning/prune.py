"""Scores + λ + a target -> masks (:func:`~sparsecse.pruning.prune.prune`, :func:`~sparsecse.pruning.prune.prune_grid`),
under one :class:`~sparsecse.pruning.prune.PruningConfig`.

With a sparsity s, heads and neurons are ranked separately and the lowest-scored round(s·#units) of each kind
are removed (:mod:`sparsecse.pruning.selection`). With a kept-FLOPs or kept-parameters budget, heads and
neurons are chosen jointly (:mod:`sparsecse.pruning.budget`). The importance comes from the score file under
a registered criterion (:mod:`sparsecse.scoring.criteria`)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Iterable

import torch

from sparsecse.errors import SparseCSEError
from sparsecse.pruning.budget import UnitCosts, check_budget, select_under_budget
from sparsecse.pruning.grid import check_sparsity, parse_grid
from sparsecse.pruning.masks import Mask
from sparsecse.pruning.selection import masks_from_scores
from sparsecse.pruning.uniform import LAYOUTS  # noqa: F401  (the layouts a recipe's prune stage offers)
from sparsecse.pruning.uniform import DEFAULT_LAYOUT, check_layout, select_uniform, states_head_size
from sparsecse.scoring.criteria import check_criterion, check_lambda, default_criterion
from sparsecse.scoring.scores import GateScores
from sparsecse.stage_config import stage_config
from sparsecse.modeling.kv_groups import kv_keep

TARGET_PREFIX = {"sparsity": "s", "keep_flops": "f", "keep_params": "p"}


@dataclass(frozen=True)
class PruningConfig:
    """How scores become a mask, whatever the target (:func:`prune`'s config, and the sweep's): alignment
    weight ``lam``; ``criterion`` (a name in ``sparsecse.scoring.criteria.CRITERIA``; None: the target
    kind's default, :func:`~sparsecse.scoring.criteria.default_criterion`); FLOPs counted at ``seq_len``
    tokens; ranking ``scope`` (global or layer; a budget is always global); ``keep_one_head`` (None: yes for a
    sparsity, no for a budget). A sweep applies ``criterion``, ``scope`` and ``keep_one_head`` to every point
    (its λs come from its grid). ``layout`` ``"stock"`` (budgets only) keeps the same number of neurons (and,
    where the family's config states a head size, heads) in every layer (:mod:`sparsecse.pruning.uniform`), so
    the shrunk model is the input's own architecture; ``"custom"`` lets each layer keep its own.
    ``layer_criterion`` ranks whole layers where a search also removes layers (a criterion of unit ``layer``;
    None: :func:`~sparsecse.scoring.criteria.default_criterion` for ``layers``)."""

    lam: float = 0.5
    criterion: str | None = None
    seq_len: int = 128
    scope: str = "global"
    keep_one_head: bool | None = None
    layout: str = DEFAULT_LAYOUT
    layer_criterion: str | None = None


def encoder_param_counts(shape: dict[str, int], mask: Mask) -> dict[str, Any]:
    """Parameters of the transformer layers (no embeddings) before and after removing the masked units."""
    costs = UnitCosts.from_shape(shape, "params")
    # key/value heads of emptied groups too, and whole removed layers
    removed = costs.dense - costs.kept(mask.head_mask, mask.neuron_mask, mask.layer_mask)
    return {"encoder_params": costs.dense, "encoder_params_removed": removed,
            "encoder_param_sparsity": removed / costs.dense}


def kept_costs(shape: dict[str, int], mask: Mask, seq_len: int = 128) -> dict[str, Any]:
    """Kept FLOPs per token (at ``seq_len``) and kept parameters of the transformer layers, and their ratios."""
    out: dict[str, Any] = {"seq_len": seq_len}
    for metric in ("flops", "params"):
        costs = UnitCosts.from_shape(shape, metric, seq_len)
        kept = costs.kept(mask.head_mask, mask.neuron_mask, mask.layer_mask)
        out.update({f"kept_{metric}": kept, f"dense_{metric}": costs.dense, f"kept_{metric}_ratio": kept / costs.dense})
    return out


def one_target(sparsity, keep_flops, keep_params) -> tuple[str, Any]:
    """(kind, what was given) for the one target among sparsity, keep_flops and keep_params."""
    given = {k: v for k, v in (("sparsity", sparsity), ("keep_flops", keep_flops), ("keep_params", keep_params))
             if v is not None}
    if len(given) != 1:
        raise SparseCSEError("Give exactly one of sparsity, keep_flops and keep_params"
                             + (f" (got {', '.join(given)})." if given else "."))
    (kind, value), = given.items()
    return kind, value


def check_target(kind: str, value: float) -> float:
    """``value`` checked as a target of ``kind``: a sparsity in (0, 1), or a budget in (0, 1]."""
    return check_sparsity(float(value)) if kind == "sparsity" else check_budget(value, kind.replace("_", "-"))


def pruning_config(config: PruningConfig | None, lam: float | None, caller: str) -> PruningConfig:
    """The config a pruning call runs with.

    Args:
        config: the caller's :class:`PruningConfig` (None: the defaults).
        lam: λ given beside it (None: the config's).
        caller: the function's name, for the error.

    Returns:
        ``config`` with ``lam`` in place.

    Raises:
        TypeError: ``config`` is not a :class:`PruningConfig`.
    """
    config = stage_config(PruningConfig, config, f"{caller}()'s config")
    return config if lam is None else dataclasses.replace(config, lam=lam)


def prune(scores: GateScores | str | os.PathLike, sparsity: float | None = None, lam: float | None = None, *,
          keep_flops: float | None = None, keep_params: float | None = None, within: Mask | None = None,
          config: PruningConfig | None = None) -> Mask:
    """A mask from a score file (or :class:`~sparsecse.scoring.scores.GateScores`), for exactly one target:

    - ``sparsity`` s: remove the round(s·#units) lowest-scored heads and, separately, neurons (ranked
      across layers, or within each with ``scope="layer"``); no layer loses its last head unless
      ``keep_one_head=False``;
    - ``keep_flops`` B: keep the heads and neurons, chosen jointly, of highest summed importance whose
      transformer-layer FLOPs per token at ``seq_len`` tokens are at most B of the dense model's (exact
      search, :mod:`sparsecse.pruning.budget`); a layer's attention or FFN may empty unless ``keep_one_head``;
    - ``keep_params`` B: the same with the layers' parameters as the cost.

    ``config``: a :class:`PruningConfig` (``criterion``, ``seq_len``, ``scope``, ``keep_one_head``; default: its
    defaults), its ``lam`` replaced by ``lam`` when given. The criterion (``abs_grad``, ``layer_norm``,
    ``fisher``, :mod:`sparsecse.scoring.criteria`) turns the stored gradients into importance; None (the
    default) takes :func:`~sparsecse.scoring.criteria.default_criterion`: the paper's ``abs_grad`` for a
    sparsity, ``fisher`` for a budget, which compares heads with neurons and so needs importances on one scale
    (on all-MiniLM-L6-v2 at kept FLOPs 0.5, ``abs_grad`` gives away nearly all heads: 71.14 against 76.57 on the
    STS average after reconstruction; README). ``within`` (budgets only): choose among the units this mask
    keeps, e.g. a previous, larger budget's. The manifest records the target, the criterion and whether it was
    the default (``criterion_default``), and the kept FLOPs and parameter ratios.

    >>> mask = prune("scores.safetensors", keep_flops=0.5)  # doctest: +SKIP
    >>> mask.manifest["criterion"], mask.manifest["criterion_default"]  # doctest: +SKIP
    ('fisher', True)
    """
    c = pruning_config(config, lam, "prune")
    if not isinstance(scores, GateScores):
        scores = GateScores.load(scores)
    kind, value = one_target(sparsity, keep_flops, keep_params)
    value = check_target(kind, value)
    check_lambda(c.lam)
    chosen = c.criterion is None
    c = dataclasses.replace(c, criterion=check_criterion(default_criterion(kind) if chosen else c.criterion))
    if within is not None and kind == "sparsity":
        raise SparseCSEError("Choosing within a previous mask needs a kept-FLOPs or kept-parameters budget.")
    mask = _mask(scores, scores.head_scores(c.lam, c.criterion), scores.neuron_scores(c.lam, c.criterion), kind,
                 value, c, within)
    mask.manifest["criterion_default"] = chosen
    return mask


def prune_grid(scores: GateScores | str | os.PathLike, sparsities: Iterable[float] | str | None = None,
               lambdas: Iterable[float] | str = 0.5, *, keep_flops: Iterable[float] | str | None = None,
               keep_params: Iterable[float] | str | None = None, config: PruningConfig | None = None
               ) -> dict[tuple[float, float], Mask]:
    """{(target value, λ): mask} for every grid point of one target kind, from one score file, no model run.

    ``config`` as in :func:`prune`, each λ of ``lambdas`` replacing its ``lam`` (``criterion`` None:
    :func:`~sparsecse.scoring.criteria.default_criterion` of the target kind)."""
    c = pruning_config(config, None, "prune_grid")
    if not isinstance(scores, GateScores):
        scores = GateScores.load(scores)
    kind, grid = one_target(sparsities, keep_flops, keep_params)
    values = [check_target(kind, v) for v in parse_grid(grid, kind.replace("_", "-"))]
    lambdas = [check_lambda(v) for v in parse_grid(lambdas, "lambda")]
    chosen = c.criterion is None
    criterion = check_criterion(default_criterion(kind) if chosen else c.criterion)
    masks = {}
    for lam in lambdas:
        head_scores, neuron_scores = scores.head_scores(lam, criterion), scores.neuron_scores(lam, criterion)
        for v in values:
            masks[(v, lam)] = _mask(scores, head_scores, neuron_scores, kind, v,
                                    dataclasses.replace(c, lam=lam, criterion=criterion))
            masks[(v, lam)].manifest["criterion_default"] = chosen
    return masks


def _mask(scores: GateScores, head_scores: torch.Tensor, neuron_scores: torch.Tensor, kind: str, value: float,
          config: PruningConfig, within: Mask | None = None) -> Mask:
    """The mask of ``kind`` at ``value`` from importances already computed under ``config`` (criterion
    checked)."""
    src = scores.manifest
    lam, criterion, seq_len, scope = config.lam, config.criterion, config.seq_len, config.scope
    keep_one_head = config.keep_one_head
    if check_layout(config.layout) == "stock" and kind == "sparsity":
        raise SparseCSEError("The stock layout prunes to a kept-FLOPs or kept-parameters budget, not a sparsity.")
    if kind == "sparsity":
        keep_one_head = True if keep_one_head is None else keep_one_head
        head_keep, neuron_keep = masks_from_scores(head_scores, neuron_scores, value, scope, keep_one_head)
        budget = None
    else:
        keep_one_head = False if keep_one_head is None else keep_one_head
        if scope != "global":
            raise SparseCSEError("A kept-FLOPs or kept-parameters budget chooses units across all layers; "
                                 "scope must be global.")
        metric = kind.split("_")[1]
        costs = UnitCosts.from_shape(src.get("shape", {}), metric, seq_len)
        if within is not None:
            if within.shape != (*head_scores.shape, neuron_scores.shape[1]):
                raise SparseCSEError(f"The previous mask's shape {within.shape} does not match the scores' "
                                     f"{(*head_scores.shape, neuron_scores.shape[1])}.")
        allowed = None if within is None else (within.head_mask, within.neuron_mask)
        if config.layout == "stock":
            shape = src.get("shape", {})
            head_keep, neuron_keep = select_uniform(head_scores, neuron_scores, costs, value, states_head_size(shape),
                                                    allowed, shape.get("hidden"))
        else:
            head_keep, neuron_keep = select_under_budget(head_scores, neuron_scores, costs, value, keep_one_head,
                                                         allowed)
        budget = {"metric": metric, "keep": value, "seq_len": seq_len if metric == "flops" else None}
    mask = Mask(head_keep, neuron_keep)
    kv_heads = int(src.get("shape", {}).get("kv_heads") or head_keep.shape[1])
    if kv_heads < head_keep.shape[1]:  # grouped-query attention: a key/value head goes with its whole group
        mask.kv_mask = kv_keep(head_keep, head_keep.shape[1] // kv_heads)
    mask.manifest = {
        "kind": "mask",
        "sparsity": value if kind == "sparsity" else None,
        "budget": budget,
        "lambda": lam,
        "criterion": criterion,
        "batch_weighting": scores.weighting,
        "scope": scope,
        "keep_one_head": keep_one_head,
        **({"layout": "stock"} if config.layout == "stock" else {}),
        "model": src.get("model"),
        "model_sha256": ((src.get("inputs") or {}).get("model") or {}).get("sha256"),
        "pooling": src.get("pooling"),
        "scores": {"path": str(scores.path) if scores.path else None,
                   "sha256": scores.sha256,
                   "split": src.get("params", {}).get("split"), "seed": src.get("seed")},
        "versions": src.get("versions"),
    }
    if "shape" in src:
        mask.manifest.update(encoder_param_counts(src["shape"], mask))
        mask.manifest.update(kept_costs(src["shape"], mask, seq_len))
    mask.manifest.update(mask.summary())
    return mask


def target_name(mask: Mask) -> str:
    """How a mask was asked for: 'sparsity 0.5', 'kept-flops 0.5 (n=128)' or 'kept-params 0.5'."""
    m = mask.manifest
    budget = m.get("budget")
    if not budget:
        return f"sparsity {m['sparsity']:g}"
    at = f" (n={budget['seq_len']})" if budget.get("seq_len") else ""
    return f"kept-{budget['metric']} {budget['keep']:g}{at}"


def mask_filename(value: float, lam: float, kind: str = "sparsity") -> str:
    """mask-s0.02-l0.5.safetensors for a sparsity, mask-f0.5-l0.5 / mask-p0.5-l0.5 for a FLOPs / params budget."""
    return f"mask-{TARGET_PREFIX[kind]}{value:g}-l{lam:g}.safetensors"
