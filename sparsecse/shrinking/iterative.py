"""Pruning to a budget in several steps, with reconstruction and rescoring between them (K-prune style).

One-shot budgeted pruning (:func:`sparsecse.pruning.prune.prune` then ``shrink --reconstruct``) ranks every
unit by its importance in the dense model, although half of the model is about to go. Following
K-prune (Park et al. 2024: iterative prune, reconstruct, rescore), the budget is reached in ``steps``
geometric steps (kept FLOPs 0.5 in 3 steps: 0.794, 0.63, 0.5). Each step

1. scores the current model's units on STS-B (the same gradients as ``sparsecse score``; the first step
   may reuse a score file of the dense model),
2. keeps, among the units still kept, the most important ones within that step's budget (the exact
   joint search of :mod:`sparsecse.pruning.budget`, restricted with ``within``),
3. reconstructs the kept units so each layer matches the **dense** model (:mod:`sparsecse.shrinking.reconstruction`),
   and silences the removed units (their output-projection columns set to zero), so the next scoring
   sees the model as it now computes.

The last step's budget is the target itself, so the final mask meets it exactly as a one-shot mask
does; the model is then shrunk like ``sparsecse shrink``. Every step's mask and reconstruction report
are kept for the manifest.

A smaller budget of the same model may continue where a larger one's steps ended (a :class:`PrunePath`: a curve's
targets, from the largest budget down, share their steps on the way down): it rescores the model as that run left
it and takes as many steps as the same log-distance takes from the dense model (:func:`continued_budgets`).

    >>> from sparsecse.shrinking.iterative import iterative_prune  # doctest: +SKIP
    >>> result = iterative_prune(keep_flops=0.5, steps=3, reconstruct="wiki1m_sample.txt")  # doctest: +SKIP
    >>> result.mask.manifest["kept_flops_ratio"] <= 0.5  # doctest: +SKIP
    True
"""

from __future__ import annotations

import copy
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from sparsecse.artifacts.remote_code import with_trust_option
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.adapters import layer_parts
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.modeling.flops import shape_record
from sparsecse.pruning.budget import UnitCosts, check_budget, check_budget_keeps_a_unit
from sparsecse.pruning.masks import Mask
from sparsecse.pruning.prune import PruningConfig, check_target, one_target
from sparsecse.pruning.prune import prune as prune_scores
from sparsecse.scoring.criteria import check_lambda
from sparsecse.scoring.score import ScoringConfig
from sparsecse.scoring.score import score as score_model
from sparsecse.scoring.scores import GateScores
from sparsecse.shrinking.reconstruction import ReconstructionPlan, reconstruction_plan, token_batches
from sparsecse.shrinking.reconstruction import reconstruct as refit_layers
from sparsecse.shrinking.shrink import ShrinkConfig, ShrinkResult, remove_units, shrink_lineage
from sparsecse.stage_config import stage_config

DEFAULT_STEPS = 3
STEP_KEEPS = 0.7  # steps sized by the cut ("auto"): no step keeps less of what it starts from (up to DEFAULT_STEPS)
AUTO_STEPS = "auto"


def model_costs(encoder: SentenceEncoder, kind: str, seq_len: int) -> UnitCosts:
    """The unit costs of ``encoder``'s model for a budget, from the shape record a score file holds
    (:func:`~sparsecse.modeling.flops.shape_record`: each architecture at its real shapes, grouped
    key/value heads included), so the check made before scoring is the one pruning applies.

    Args:
        encoder: the dense model to be pruned.
        kind: ``"keep_flops"`` or ``"keep_params"``.
        seq_len: the sequence length FLOPs per token are counted at.

    Returns:
        The :class:`~sparsecse.pruning.budget.UnitCosts` of that metric.
    """
    return UnitCosts.from_shape(shape_record(encoder.model), kind.split("_")[1], seq_len)


def step_budgets(budget: float, steps: int) -> list[float]:
    """Geometric budgets from the dense model to ``budget``, the last exactly ``budget``.

    >>> [round(b, 3) for b in step_budgets(0.5, 3)]
    [0.794, 0.63, 0.5]
    """
    if int(steps) != steps or steps < 1:
        raise SparseCSEError(f"The number of pruning steps must be a whole number of at least 1; got {steps}.")
    steps = int(steps)
    return [budget ** ((k + 1) / steps) for k in range(steps - 1)] + [budget]


def sized_steps(budget: float) -> int:
    """The steps a cut to ``budget`` takes when the steps follow the cut (a prune stage's ``steps: auto``): as few
    as keep at least ``STEP_KEEPS`` of what each step starts from, and no more than ``DEFAULT_STEPS``. A mild cut
    (a depth cut's width trim, 0.72 of the rest) is one step, which lost nothing on STS-B dev against three; a
    deep one (0.45) keeps the three steps that rescoring between steps pays for.

    >>> [sized_steps(b) for b in (0.95, 0.72, 0.7, 0.6, 0.45, 0.2)]
    [1, 1, 1, 2, 3, 3]
    """
    budget = check_budget(budget)
    return max(1, min(DEFAULT_STEPS, math.ceil(math.log(budget) / math.log(STEP_KEEPS) - 1e-9)))


def resolve_steps(steps: int | str, budget: float) -> int:
    """``steps`` as a number: itself, or ``sized_steps(budget)`` for ``"auto"``."""
    return sized_steps(budget) if steps == AUTO_STEPS else steps


def continued_budgets(start: float, budget: float, steps: int) -> list[float]:
    """Geometric budgets from ``start`` (where an earlier run's steps ended) down to ``budget``, the last exactly
    ``budget``: as many steps as that log-distance takes in a run of ``steps`` from the dense model to ``budget``
    (rounded, at least one), so each step removes about what such a run's steps remove.

    >>> [round(b, 3) for b in continued_budgets(0.566, 0.419, 3)]
    [0.419]
    >>> [round(b, 3) for b in continued_budgets(0.8, 0.2, 3)]
    [0.504, 0.317, 0.2]
    """
    if not 0 < budget < start <= 1:
        raise SparseCSEError(f"A pruning path continues to a smaller budget: {budget:g} is not below {start:g}.")
    count = max(1, round(steps * math.log(budget / start) / math.log(budget)))
    return [start * (budget / start) ** ((k + 1) / count) for k in range(count - 1)] + [budget]


@dataclass
class PrunePath:
    """Where a pruning run's steps ended, for a smaller budget of the same model to continue from: the full-size
    encoder after its last step (removed units silenced; the run's result holds the same one, and a run going on
    copies it), its mask, the dense model every step's reconstruction matches, the kind of budget and every budget
    stepped through so far."""

    encoder: SentenceEncoder
    mask: Mask
    dense: torch.nn.Module
    kind: str
    budgets: list[float]

    @property
    def kept(self) -> float:
        """The kept fraction (of FLOPs or parameters, as ``kind`` says) where the path stands."""
        return float(self.mask.manifest[f"kept_{self.kind.split('_')[1]}_ratio"])


@torch.no_grad()
def silence(model: torch.nn.Module, mask: Mask) -> None:
    """Zero the output-projection columns of ``mask``'s removed heads and neurons in place: the model
    then computes what the masked (and the shrunk) model computes, with no gates attached."""
    mask.check_fits(model)
    for parts, heads, neurons in zip(layer_parts(model), mask.head_mask, mask.neuron_mask):
        for h in (~heads).nonzero().flatten().tolist():
            parts.attn_out.weight[:, h * parts.head_dim:(h + 1) * parts.head_dim] = 0
        parts.ffn_out.weight[:, (~neurons).to(parts.ffn_out.weight.device)] = 0


@dataclass
class IterativeResult:
    """The final mask, the reconstructed full-size encoder (removed units silenced), and each step."""

    mask: Mask
    encoder: SentenceEncoder
    steps: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    path: PrunePath | None = None  # where the steps ended, for a smaller budget to go on from (shares ``encoder``)

    def to_dict(self) -> dict[str, Any]:
        """The steps and the time, JSON-ready (the shrunk model's manifest keeps them)."""
        return {"steps": self.steps, "seconds": round(self.seconds, 3)}


@with_trust_option
def iterative_prune(
    model: str | os.PathLike | SentenceEncoder | PrunePath | None = None,
    *,
    keep_flops: float | None = None,
    keep_params: float | None = None,
    steps: int = DEFAULT_STEPS,
    reconstruct: str | os.PathLike | ReconstructionPlan | None = None,
    scores: GateScores | str | os.PathLike | None = None,
    prune: PruningConfig | None = None,
    score: ScoringConfig | None = None,
    pooling: str | None = None,
    device: str | None = None,
) -> IterativeResult:
    """Prune ``model`` to a kept-FLOPs or kept-parameters budget in ``steps`` steps (module docstring).

    ``reconstruct`` (a corpus file or a :class:`~sparsecse.shrinking.reconstruction.ReconstructionPlan`) is
    required: without a refit between steps, rescoring would see the same model. ``scores`` (optional) is a
    score file of the dense model for the first step; later steps score as ``score`` says (a
    :class:`~sparsecse.scoring.score.ScoringConfig`: STS-B train, as ``sparsecse score`` does). ``prune`` (a
    :class:`~sparsecse.pruning.prune.PruningConfig`: λ, criterion, seq_len, keep_one_head) is that of
    :func:`sparsecse.pruning.prune.prune`. The returned encoder is full size; shrink it with
    :func:`shrink_iterative`.

    ``model`` may be a :class:`PrunePath` (an earlier result's ``path``: a larger budget of the same kind): its
    steps go on (on a copy) instead of starting from the dense units (:func:`continued_budgets`; ``scores`` must
    then be None: the first step rescores the model as that run left it). The result's ``path`` is where these
    steps end.
    """
    start = model if isinstance(model, PrunePath) else None
    rule, scoring = stage_config(PruningConfig, prune, "prune"), stage_config(ScoringConfig, score, "score")
    kind, budget = one_target(None, keep_flops, keep_params)
    budget = check_target(kind, budget)
    check_lambda(rule.lam)
    if start is not None and (scores is not None or start.kind != kind):
        raise SparseCSEError("A pruning path continues with its own kind of budget and rescores its first step.")
    budgets = step_budgets(budget, steps) if start is None else continued_budgets(start.kept, budget, steps)
    plan = reconstruction_plan(reconstruct)
    if plan is None:
        raise SparseCSEError("Iterative pruning needs a reconstruction corpus (--reconstruct) to refit the "
                             "model between steps.")
    first = scores if scores is None or isinstance(scores, GateScores) else GateScores.load(scores)
    if start is not None or isinstance(model, SentenceEncoder):
        encoder = start.encoder if start is not None else model
    else:
        encoder = SentenceEncoder.load(model, pooling=pooling, device=device)
    if first is not None and first.manifest.get("model") not in (None, encoder.source):
        raise SparseCSEError(f"The score file was made for {first.manifest.get('model')}, not {encoder.source}.")
    check_budget_keeps_a_unit(model_costs(encoder, kind, rule.seq_len), budget, bool(rule.keep_one_head))  # not
    # after scoring and reconstructing, with a step's budget the user never gave
    began = time.perf_counter()
    if start is None:
        dense, mask, earlier = copy.deepcopy(encoder.model), None, []
    else:  # the model as the earlier run left it, matched to the same dense model
        encoder, dense, mask, earlier = copy.deepcopy(start.encoder), start.dense, start.mask, start.budgets
    batches = token_batches(encoder.tokenizer, plan.calibration.sentences, plan.batch_size, plan.max_length)
    records = []
    for k, b in enumerate(budgets):
        t0 = time.perf_counter()
        step_scores = first if k == 0 and first is not None else score_model(encoder, scoring)
        scored_s = time.perf_counter() - t0
        mask = prune_scores(step_scores, within=mask, config=rule, **{kind: b})
        report = refit_layers(dense, encoder.model, mask, batches, plan.method, plan.target, plan.ridge,
                              show_progress=scoring.show_progress, weighting=plan.weighting)
        silence(encoder.model, mask)
        records.append({"step": k + 1, "budget": b, "heads_kept": int(mask.head_mask.sum()),
                        "neurons_kept": int(mask.neuron_mask.sum()),
                        f"kept_{kind.split('_')[1]}_ratio": mask.manifest[f"kept_{kind.split('_')[1]}_ratio"],
                        "score_seconds": round(scored_s, 3), "reconstruction_seconds": round(report.seconds, 3),
                        "reconstruction": report.to_dict()["layers"]})
    mask.manifest.update(method="iterative", iterative={
        "steps": len(earlier) + len(budgets), "budgets": earlier + budgets,
        **({"continued_after": len(earlier)} if earlier else {}), "reconstruction": {**plan.calibration.describe(),
                                                                      "method": plan.method, "target": plan.target,
                                                                      "ridge": plan.ridge,
                                                                      "weighting": plan.weighting},
        "rescoring": {"split": scoring.split, "batch_size": scoring.batch_size, "max_batches": scoring.max_batches,
                      "seed": scoring.seed}})
    return IterativeResult(mask, encoder, records, time.perf_counter() - began,
                           PrunePath(encoder, mask, dense, kind, earlier + budgets))


def shrink_iterative(result: IterativeResult, out: str | os.PathLike | None = None, overwrite: bool = False,
                     config: ShrinkConfig | None = None) -> ShrinkResult:
    """Remove ``result``'s pruned units as :func:`sparsecse.shrinking.shrink.shrink` does and, given ``out``,
    save the model directory; its manifest holds the final mask's manifest and every step. ``config``: a
    :class:`~sparsecse.shrinking.shrink.ShrinkConfig` (default: its defaults), of which ``seq_len`` and
    ``align_ffn`` apply (the encoder is loaded and reconstructed already). A copy is shrunk: ``result``'s encoder
    and path stay as its steps left them, for a smaller budget to go on from."""
    c = stage_config(ShrinkConfig, config, "config")
    encoder, mask = copy.deepcopy(result.encoder), result.mask
    lineage = shrink_lineage(encoder.source, mask, scored_model=encoder.source)
    return remove_units(encoder, mask, c, lineage, out, overwrite,
                        reconstruction={"iterative": mask.manifest["iterative"], **result.to_dict()},
                        mask_manifest=mask.manifest, method_seconds=round(result.seconds, 3))


def prune_and_shrink(model: str | os.PathLike | SentenceEncoder | PrunePath | None,
                     out: str | os.PathLike | None = None, *,
                     keep_flops: float | None = None, keep_params: float | None = None, steps: int = DEFAULT_STEPS,
                     scores: GateScores | str | os.PathLike | None = None, prune: PruningConfig | None = None,
                     score: ScoringConfig | None = None, shrink: ShrinkConfig | None = None,
                     overwrite: bool = False) -> tuple[IterativeResult, ShrinkResult]:
    """The prune stage, written once: :func:`iterative_prune` to the budget, reconstructing on ``shrink``'s
    ``reconstruct`` (a corpus file or a ready plan, ``reconstruct_sentences`` of it) with its ``pooling`` and
    ``device``, then :func:`shrink_iterative` (saved to ``out`` when given). ``compress``'s single stage, a
    recipe's prune stage and the target search's probes all run it.

    Args:
        model: a model directory, a name, a loaded encoder, or an earlier result's :class:`PrunePath` (its steps go
            on: see :func:`iterative_prune`).
        out: where the shrunk model is saved; None keeps it in memory.
        keep_flops: the kept fraction of the layers' FLOPs (or ``keep_params`` of their parameters).
        keep_params: the kept fraction of the layers' parameters.
        steps: geometric steps to the budget.
        scores: a score file of the dense model for the first step (default: scored here).
        prune: the :class:`~sparsecse.pruning.prune.PruningConfig` of every step.
        score: the :class:`~sparsecse.scoring.score.ScoringConfig` of every rescoring.
        shrink: the :class:`~sparsecse.shrinking.shrink.ShrinkConfig`; its ``reconstruct`` is required.
        overwrite: replace an existing ``out``.

    Returns:
        The pruning (mask, steps, time) and the shrunk model.
    """
    shrinking = stage_config(ShrinkConfig, shrink, "shrink")
    plan = reconstruction_plan(shrinking.reconstruct, shrinking.reconstruct_sentences)
    result = iterative_prune(model, keep_flops=keep_flops, keep_params=keep_params, steps=steps, reconstruct=plan,
                             scores=scores, prune=prune, score=score, pooling=shrinking.pooling,
                             device=shrinking.device)
    return result, shrink_iterative(result, out, overwrite, config=shrinking)
