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
from sparsecse.targets.engines import check_runnable
from sparsecse.targets.spec import Target, parse_speedups


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
TARGET_OPTIONS = ("speedup", "max_drop", "engine", "timing_batch_size", "teacher", "threads", "metric",
                  "timing_sentences", "when_busy", "compare_with", "depth")
TARGET_RECIPE = "target"  # the shipped recipe a target without --recipe runs


def target_overrides(teacher: str | None = None, compare_with: str | None = None,
                     **target: Any) -> dict[str, Any]:
    """The ``--set`` overrides a target puts on a recipe (``target.*``; ``student.teacher`` for ``teacher``,
    ``evaluation.compare_with`` for ``compare_with``), once the target is checked (one sentence for a bad
    speed-up, drop, engine, batch size, threads, metric, timing sentences file or depth; the engine must run
    here: ``torch-cuda`` needs a GPU).

    Args:
        teacher: the student stage's teacher (None: the recipe's).
        compare_with: the model the card (and a curve) compares with (None: the recipe's).
        target: :class:`~sparsecse.targets.spec.Target` settings, None where not given: ``speedup``,
            ``max_drop``, ``engine``, ``batch_size``, ``threads``, ``metric``, ``timing_sentences``, ``when_busy``,
            ``depth`` (None: ``auto``, :meth:`~sparsecse.targets.spec.Target.resolved_depth`).

    Returns:
        ``{"STAGE.KEY": value}``.
    """
    speedup, max_drop = target.get("speedup"), target.get("max_drop")
    sentences = target.get("timing_sentences")
    settings = {**target, "timing_sentences": None if sentences is None else os.path.abspath(sentences)}
    given = {k: v for k, v in settings.items() if v is not None}
    check_runnable(Target(**given).check())  # the check a recipe run repeats for --set target.* (one road)
    # the two goals replace the recipe's own together (a drop alone is not added to its speed-up)
    overrides: dict[str, Any] = {"target.speedup": speedup, "target.max_drop": max_drop}
    if target.get("metric") is not None and target.get("batch_size") is None:  # the metric's own default batch
        overrides["target.batch_size"] = None
    overrides.update({f"target.{k}": v for k, v in given.items()})
    if teacher is not None:
        overrides["student.teacher"] = teacher
    if compare_with is not None:
        overrides["evaluation.compare_with"] = compare_with
    return overrides


@with_trust_option
def compress(model: str | os.PathLike | None = None, out: str | os.PathLike | None = None, *,
             keep_flops: float | None = None, keep_params: float | None = None, steps: int = DEFAULT_STEPS,
             scores: str | os.PathLike | None = None, score: ScoringConfig | None = None,
             prune: PruningConfig | None = None, shrink: ShrinkConfig | None = None, overwrite: bool = False,
             **mode) -> CompressResult | RecipeResult | CurveResult:
    """Prune ``model`` to ``keep_flops`` (or ``keep_params``) of its transformer layers' FLOPs per token (or
    parameters) in ``steps`` geometric steps, reconstructing and rescoring between them, then shrink it and,
    given ``out``, save the smaller model directory. With ``recipe`` (a shipped name or a file), run that
    recipe instead (:func:`run_recipe_mode`).

    With a target instead of a budget (``speedup``: a speed-up measured on ``engine`` at ``timing_batch_size`` against
    ``model`` itself, or several, ``[1.5, 2, 3]`` or ``"1.5,2,3"``, for the whole curve in one run: a
    :class:`~sparsecse.recipes.curve.CurveResult`, see :func:`~sparsecse.recipes.curve.run_curve`; ``max_drop``: the
    largest dev-score drop; one of the two), run the shipped ``target`` recipe
    (or ``recipe``, which must hold a budget stage): find the budget that meets the target by timing candidates,
    prune to it with reconstruction, distil from ``model`` itself (or ``teacher``), choose on the dev set
    (:mod:`sparsecse.targets`). ``corpus`` is required there.

    ``scores``: a score file of the dense model for the first step (default: scored here). The single stage's
    settings: ``score`` (a :class:`~sparsecse.scoring.score.ScoringConfig`: how each step rescores, ``data_dir``,
    ``batch_size``, ``max_batches``, ``seed``, ...), ``prune`` (a :class:`~sparsecse.pruning.prune.PruningConfig`:
    ``lam``, ``criterion``, ``seq_len``, ``keep_one_head``) and ``shrink`` (a
    :class:`~sparsecse.shrinking.shrink.ShrinkConfig`: ``reconstruct``, a corpus file or a
    :class:`~sparsecse.shrinking.reconstruction.ReconstructionPlan`, required; ``reconstruct_sentences``,
    ``align_ffn``, ``pooling``, ``device``); None: a config's defaults. ``prune`` and ``shrink`` count FLOPs at
    the same ``seq_len``.

    ``mode``, the keywords of the other two modes: ``recipe``; a target's ``speedup``, ``max_drop``, ``engine``,
    ``timing_batch_size``, ``teacher`` and its serving shape's ``threads``, ``metric`` (``throughput``,
    ``latency-p50``, ``latency-p95``), ``timing_sentences`` (a file) and ``when_busy`` (``stop`` or ``wait``), and
    ``depth`` (the most whole layers a candidate may remove; None: ``auto``); and the run's ``corpus``, ``data_dir``, ``overrides``
    (``{"STAGE.KEY": value}``), ``resume``, ``show_progress``, ``dev`` and ``test`` (:func:`run_recipe_mode`).
    Any other name is refused as an unexpected keyword.
    """
    unknown = sorted(set(mode) - {"recipe", *TARGET_OPTIONS, *RECIPE_OPTIONS})
    if unknown:
        raise TypeError(f"compress() got an unexpected keyword argument {unknown[0]!r}")
    recipe = mode.pop("recipe", None)
    aimed = {("batch_size" if k == "timing_batch_size" else k): mode.pop(k, None) for k in TARGET_OPTIONS}
    speedup, max_drop, options = aimed["speedup"], aimed["max_drop"], mode
    configs = [name for name, value in (("score", score), ("prune", prune), ("shrink", shrink)) if value is not None]
    if any(v is not None for v in aimed.values()):
        for name, value in (("keep_flops", keep_flops), ("keep_params", keep_params), ("scores", scores)):
            if value is not None:
                raise SparseCSEError(f"{name} fixes the budget; a target (speedup, max_drop) lets the search find "
                                     "it: give one or the other.")
        if configs:
            raise SparseCSEError(f"{configs[0]} configures the single pruning stage; a target runs the stages of "
                                 "its recipe (change one with overrides={'STAGE.KEY': value}).")
        if speedup is None and max_drop is None:
            given = next(k for k, v in aimed.items() if v is not None)
            given = "timing_batch_size" if given == "batch_size" else given
            raise SparseCSEError(f"{given} goes with a target: add speedup (e.g. 2.0) or max_drop.")
        speedups = parse_speedups(speedup) if speedup is not None else None
        if speedups is not None and len(speedups) > 1:  # a curve: one model per speed-up
            overrides = {**target_overrides(**{**aimed, "speedup": speedups[0]}), **(options.pop("overrides", None) or {})}
            overrides.pop("target.speedup")
            return run_curve(recipe or TARGET_RECIPE, model, options.get("corpus"), out, speedups, overrides=overrides,
                             data_dir=options.get("data_dir"), resume=options.get("resume", False), overwrite=overwrite,
                             show_progress=options.get("show_progress", True),
                             data=Data(options.get("dev"), options.get("test")))
        aimed["speedup"] = speedups[0] if speedups else None
        overrides = {**target_overrides(**aimed), **(options.pop("overrides", None) or {})}
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
