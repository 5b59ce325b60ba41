"""The ``budget`` stage: the kept-FLOPs budget (and the whole layers removed) that meets a recipe's target, found by
timing and scoring candidates (:mod:`sparsecse.targets.search`) and handed to the prune stage that spends it."""

from __future__ import annotations

import itertools
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from sparsecse.artifacts.files import atomic_dir
from sparsecse.cards.sections import target_speedups
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.recipes.stage_types import CardSection, FoundBudget, Stage, StageContext, sampled_corpus
from sparsecse.scoring.score import score as score_model
from sparsecse.shrinking.iterative import prune_and_shrink
from sparsecse.targets.search import Calibration, active_sharing, search_budget
from sparsecse.training.api import train
from sparsecse.training.config import TrainingConfig


RECOVERY_BATCH, RECOVERY_LR = 32, 1e-4  # a depth finalist's short recovery (distill's own lr)


@dataclass(frozen=True)
class BudgetStage(Stage):
    """Find the kept-FLOPs budget that meets the recipe's ``target`` (:mod:`sparsecse.targets.search`):
    candidates are shrunk, timed against the input model on the target's engine and scored on the dev set;
    a later prune stage spends the budget with ``keep_flops: "@NAME"``. Makes no model.

    With the target's ``depth`` candidates may also remove whole layers (those of lowest Block Influence), the
    prune stage then removing the chosen ones before it spends the budget on the remaining layers;
    ``recovery_steps`` > 0 judges the depths' finalists by their dev score after that many distillation steps from
    the input model, where a shallower finalist scores above every deeper one right after the cut
    (:func:`~sparsecse.targets.depth_search.undominated`; 0: right after the cut)."""

    name: str
    recovery_steps: int = 0
    type: str = "budget"
    makes_model: ClassVar[bool] = False
    needs_target: ClassVar[bool] = True
    makes_budget: ClassVar[bool] = True

    def check(self, where: str) -> "BudgetStage":
        """The stage with every setting checked, as :meth:`~sparsecse.recipes.stage_types.Stage.check` says."""
        value = self.recovery_steps
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SparseCSEError(f"{where}: recovery_steps must be a whole number >= 0, not {value!r}.")
        return self

    def describe(self) -> str:
        """One line saying what the stage does."""
        judged = (f"; depth finalists judged after {self.recovery_steps} recovery steps where a shallower one leads "
                  "right after the cut") if self.recovery_steps else ""
        return f"find the budget that meets the target (candidates shrunk, timed and scored on dev{judged})"

    def run(self, index: int, model: str, out: Path, ctx: StageContext) -> dict[str, Any]:
        """Search the budget that meets ``ctx.target`` (:func:`sparsecse.targets.search.search_budget`); the table
        and plot of the candidates go to ``ctx.work/candidates`` (kept even when the target is out of reach), the
        chosen budget to the stage's summary.

        The dense model is scored once. A quality probe is pruned in one step from those scores with the
        reconstruction of the prune stage that spends the budget: a cheaper and slightly pessimistic stand-in for
        that stage's steps (rescoring between steps only helps), so the budget it passes keeps the bound; the final
        model is checked against the bound again.

        Args:
            index: its place in the recipe; model: the input of the search; out: its directory;
            ctx: the run's shared context (the target, the dev set, the corpus, the settings its budget is spent
                with).

        Returns:
            The search's result (:meth:`~sparsecse.targets.search.SearchResult.to_dict`).
        """
        shrinking, pruning, scoring = ctx.spending[self.name]  # the spending stage's, resolved by the run
        shared = active_sharing()  # a curve's targets score the input model once
        scores = shared.scores.get(model) if shared is not None else None
        if scores is None:
            scores = score_model(model, scoring)
            if shared is not None:
                shared.scores[model] = scores
        ctx.scores[model] = scores  # the prune stage spending this budget starts from them

        def prune_once(budget: float):
            result, shrunk = prune_and_shrink(model, keep_flops=budget, steps=1, scores=scores, prune=pruning,
                                              score=scoring, shrink=shrinking)
            return shrunk.encoder, int(result.mask.head_mask.sum()), int(result.mask.neuron_mask.sum())

        dev = ctx.dev_set()
        found = search_budget(model, dev, ctx.target, ctx.work / "candidates", scores=scores,
                              pruning=pruning, prune_fn=prune_once, calibration=Calibration(ctx.corpus, ctx.seed),
                              recover=self.recovery(index, model, ctx) if self.recovery_steps else None,
                              show_progress=ctx.show_progress)
        with atomic_dir(out) as tmp:
            for path in (found.table, found.plot):
                shutil.copy2(path, tmp / path.name)
        return found.to_dict()

    def recovery(self, index: int, model: str, ctx: StageContext):
        """The short recovery depth finalists are judged after: ``recovery_steps`` steps of MSE distillation
        from the input ``model`` (batch ``RECOVERY_BATCH``, lr ``RECOVERY_LR``) on a sample of the corpus.

        Args:
            index: its place in the recipe; model: the teacher; ctx: the run's shared context.

        Returns:
            A function from a finalist's encoder to its recovered encoder.
        """
        corpus = sampled_corpus(ctx, index, self.recovery_steps * RECOVERY_BATCH)
        runs = itertools.count(1)

        def recover(encoder: SentenceEncoder) -> SentenceEncoder:
            config = TrainingConfig(max_steps=self.recovery_steps, batch_size=RECOVERY_BATCH, lr=RECOVERY_LR,
                                    eval_steps=0, data_dir=ctx.data_dir, overwrite=True, show_progress=False)
            result = train(model=encoder, corpus=str(corpus), out=str(ctx.work / "recovery" / f"finalist{next(runs)}"),
                           objective="distill", objective_args={"teacher": model}, seed=ctx.seed, config=config)
            return SentenceEncoder.load(result.out, device="cpu")  # the model the recovery saved

        return recover

    def hand_on(self, summary: dict[str, Any]) -> FoundBudget:
        """The budget it found, and the whole layers removed before it is spent, for the prune stage."""
        return FoundBudget(float(summary["keep_flops"]), tuple(summary.get("layers_removed") or ()))

    def card_section(self, record: dict[str, Any], figures: dict[str, Any]) -> CardSection:
        """Its line, and HALP among the methods where a speed target spent measured latency, not FLOPs."""
        speed = target_speedups(figures.get("target") or {})[0] is not None
        return CardSection(self.card_line(), methods=("halp",) if speed else ())
