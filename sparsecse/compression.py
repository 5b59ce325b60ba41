"""``sparsecse.compress``: the ``compress`` command in Python, in its two modes.

- One pruning stage: a model is pruned to a kept-FLOPs or kept-parameters budget in steps, reconstructed and
  rescored between them (:func:`~sparsecse.shrinking.iterative.iterative_prune`), then shrunk and saved
  (:func:`~sparsecse.shrinking.iterative.shrink_iterative`). Its settings come as the configs of the stages
  it runs, as :func:`~sparsecse.sweeps.run.sweep` takes them: ``score=`` (a
  :class:`~sparsecse.scoring.score.ScoringConfig`), ``prune=`` (a :class:`~sparsecse.pruning.prune.PruningConfig`)
  and ``shrink=`` (a :class:`~sparsecse.shrinking.shrink.ShrinkConfig`, whose ``reconstruct`` corpus is required).
- A recipe (``recipe=``): a list of stages (distil, prune, export) run as one, resumable
  (:func:`~sparsecse.recipes.runner.run_recipe`).

This module sits above every stage and above :mod:`sparsecse.recipes`.

    >>> import sparsecse
    >>> shrink = sparsecse.ShrinkConfig(reconstruct="wiki1m_sample.txt")
    >>> result = sparsecse.compress("all-MiniLM-L6-v2", "small", keep_flops=0.5, shrink=shrink)  # doctest: +SKIP
    >>> result.out, result.mask.manifest["kept_flops_ratio"] <= 0.5  # doctest: +SKIP
    (PosixPath('small'), True)
    >>> sparsecse.compress(out="runs/f2x", recipe="frontier-2x", corpus="train.txt").model  # doctest: +SKIP
    PosixPath('runs/f2x/model')
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparsecse.artifacts.destinations import check_destination
from sparsecse.artifacts.inputs import read_inputs
from sparsecse.artifacts.remote_code import with_trust_option
from sparsecse.errors import SparseCSEError
from sparsecse.pruning.masks import Mask
from sparsecse.pruning.prune import PruningConfig
from sparsecse.recipes.curve import CurveResult, run_curve
from sparsecse.recipes.runner import RecipeResult, run_recipe
from sparsecse.recipes.spec import Data
from sparsecse.scoring.score import ScoringConfig
from sparsecse.shrinking.iterative import DEFAULT_STEPS, prune_and_shrink
from sparsecse.shrinking.reconstruction import ReconstructionPlan
from sparsecse.shrinking.shrink import ShrinkConfig, ShrinkResult
from sparsecse.stage_config import stage_config
from sparsecse.targets.aim import NAMES as AIM_NAMES, Aim


@dataclass
class CompressResult:
    """What :func:`compress` did: the final ``mask``, each step (budget, units kept, timings), the shrunk model
    (``shrunk``: sizes before and after, where it was saved) and the pruning time in seconds."""

    mask: Mask
    shrunk: ShrinkResult
    steps: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def out(self) -> Path | None:
        """The saved model directory (None when no ``out`` was given)."""
        return self.shrunk.out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: what ``sparsecse compress --json`` prints."""
        return {**self.shrunk.to_dict(), "mask": self.mask.manifest}


RECIPE_OPTIONS = ("corpus", "data_dir", "overrides", "resume", "show_progress", "dev", "test")
TARGET_RECIPE = "target"  # the shipped recipe a target without --recipe runs


@with_trust_option
def compress(model: str | os.PathLike | None = None, out: str | os.PathLike | None = None, *,
             keep_flops: float | None = None, keep_params: float | None = None, steps: int = DEFAULT_STEPS,
             scores: str | os.PathLike | None = None, score: ScoringConfig | None = None,
             prune: PruningConfig | None = None, shrink: ShrinkConfig | None = None, overwrite: bool = False,
             **run) -> CompressResult | RecipeResult | CurveResult:
    """Prune ``model`` to ``keep_flops`` (or ``keep_params``) of its transformer layers' FLOPs per token (or
    parameters) in ``steps`` geometric steps, reconstructing and rescoring between them, then shrink it and,
    given ``out``, save the smaller model directory. With ``recipe`` (a shipped name or a file), run that
    recipe instead (:func:`run_recipe_mode`).

    With ``target`` instead of a budget (an :class:`~sparsecse.targets.aim.Aim`, or what
    :meth:`~sparsecse.targets.aim.Aim.of` reads as one: a speed-up ``2.0``, several ``"1.5,2,3"`` for the whole curve
    in one run, a :class:`~sparsecse.targets.spec.Target`, or a mapping such as ``{"speedup": 2.0, "metric":
    "latency-p50"}``), run the shipped ``target`` recipe (or ``recipe``, which must hold a budget stage): find the
    budget that meets the target by timing candidates, prune to it with reconstruction, distil from ``model`` itself
    (or the aim's teacher), choose on the dev set (:mod:`sparsecse.targets`). Several speed-ups give a
    :class:`~sparsecse.recipes.curve.CurveResult` (:func:`~sparsecse.recipes.curve.run_curve`). ``corpus`` is
    required there.

    ``scores``: a score file of the dense model for the first step (default: scored here). The single stage's
    settings: ``score`` (a :class:`~sparsecse.scoring.score.ScoringConfig`: how each step rescores, ``data_dir``,
    ``batch_size``, ``max_batches``, ``seed``, ...), ``prune`` (a :class:`~sparsecse.pruning.prune.PruningConfig`:
    ``lam``, ``criterion``, ``seq_len``, ``keep_one_head``) and ``shrink`` (a
    :class:`~sparsecse.shrinking.shrink.ShrinkConfig`: ``reconstruct``, a corpus file or a
    :class:`~sparsecse.shrinking.reconstruction.ReconstructionPlan`, required; ``reconstruct_sentences``,
    ``align_ffn``, ``pooling``, ``device``); None: a config's defaults. ``prune`` and ``shrink`` count FLOPs at
    the same ``seq_len``.

    ``run``, the keywords of a recipe or target run: ``recipe``, ``target``, and the run's ``corpus``, ``data_dir``,
    ``overrides`` (``{"STAGE.KEY": value}``), ``resume``, ``show_progress``, ``dev`` and ``test``
    (:func:`run_recipe_mode`). Any other name is refused as an unexpected keyword.
    """
    unknown = sorted(set(run) - {"recipe", "target", *RECIPE_OPTIONS})
    if unknown:
        hint = (f"; {unknown[0]} is a target setting: pass target={{{unknown[0]!r}: ...}} or an Aim"
                if unknown[0] in AIM_NAMES else "")
        raise TypeError(f"compress() got an unexpected keyword argument {unknown[0]!r}{hint}")
    recipe, aimed, options = run.pop("recipe", None), run.pop("target", None), run
    configs = [name for name, value in (("score", score), ("prune", prune), ("shrink", shrink)) if value is not None]
    if aimed is not None:
        aim = Aim.of(aimed)
        for name, value in (("keep_flops", keep_flops), ("keep_params", keep_params), ("scores", scores)):
            if value is not None:
                raise SparseCSEError(f"{name} fixes the budget; a target (speedup, max_drop) lets the search find "
                                     "it: give one or the other.")
        if configs:
            raise SparseCSEError(f"{configs[0]} configures the single pruning stage; a target runs the stages of "
                                 "its recipe (change one with overrides={'STAGE.KEY': value}).")
        if not aim.given:
            raise SparseCSEError("A target needs a speed-up or a largest dev drop, e.g. target=2.0.")
        overrides = {**aim.overrides(), **(options.pop("overrides", None) or {})}
        if aim.curve:  # one model per speed-up
            return run_curve(recipe or TARGET_RECIPE, model, options.get("corpus"), out, aim,
                             overrides=overrides, data_dir=options.get("data_dir"), resume=options.get("resume", False),
                             overwrite=overwrite, show_progress=options.get("show_progress", True),
                             data=Data(options.get("dev"), options.get("test")))
        return run_recipe_mode(recipe or TARGET_RECIPE, model, out, overwrite, overrides=overrides, **options)
    if recipe is not None:
        single = [name for name, value in (("keep_flops", keep_flops), ("keep_params", keep_params),
                                           ("scores", scores)) if value is not None] + configs
        if single or steps != DEFAULT_STEPS:
            raise SparseCSEError(f"{(single or ['steps'])[0]} sets the single pruning stage; a recipe sets its own "
                                 "stages (change one with overrides={'STAGE.KEY': value}).")
        return run_recipe_mode(recipe, model, out, overwrite, **options)
    if options:
        raise TypeError(f"compress() takes {sorted(options)[0]!r} with a recipe or a target; the single pruning "
                        "stage takes its settings as configs (score=, prune=, shrink=)")
    scoring = stage_config(ScoringConfig, score, "compress()'s score")
    pruning = stage_config(PruningConfig, prune, "compress()'s prune")
    shrinking = stage_config(ShrinkConfig, shrink, "compress()'s shrink")
    if pruning.seq_len != shrinking.seq_len:
        raise SparseCSEError(f"prune counts FLOPs at seq_len {pruning.seq_len} and shrink at {shrinking.seq_len}: "
                             "give both configs the same seq_len.")
    corpus = shrinking.reconstruct
    if out is not None:  # before any work
        check_destination(out, overwrite, inputs=read_inputs(
            model=model, scores=scores, data_dir=scoring.data_dir, dev=scoring.dev,
            corpus=corpus.calibration.corpus if isinstance(corpus, ReconstructionPlan) else corpus))
    result, shrunk = prune_and_shrink(model, out, keep_flops=keep_flops, keep_params=keep_params, steps=steps,
                                      scores=scores, prune=pruning, score=scoring, shrink=shrinking,
                                      overwrite=overwrite)
    return CompressResult(result.mask, shrunk, result.steps, result.seconds)


def run_recipe_mode(recipe: str | os.PathLike, model=None, out=None, overwrite: bool = False,
                    **options) -> RecipeResult:
    """``compress --recipe``: :func:`~sparsecse.recipes.runner.run_recipe` on ``model`` into ``out``;
    ``options``: ``corpus`` (the sentences its stages train and reconstruct on), ``data_dir``, ``overrides``
    (``{"STAGE.KEY": value}``), ``resume``, ``show_progress``, ``dev`` and ``test`` (the user's sets, replacing the
    recipe's ``data:`` block)."""
    unknown = sorted(set(options) - set(RECIPE_OPTIONS))
    if unknown:
        raise TypeError(f"compress() with a recipe got an unexpected keyword argument {unknown[0]!r}")
    return run_recipe(recipe, model, options.get("corpus"), out, data_dir=options.get("data_dir"),
                      overrides=options.get("overrides"), resume=options.get("resume", False), overwrite=overwrite,
                      show_progress=options.get("show_progress", True),
                      data=Data(options.get("dev"), options.get("test")))
