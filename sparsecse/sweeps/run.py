"""Sparsity sweeps: score once, then prune and evaluate (and optionally rewind) over sparsity x λ.

A sweep directory holds everything, and every finished point is a small JSON file written
atomically, so a killed sweep resumes where it stopped and a larger grid reuses finished points::

    DIR/sweep.json                            fingerprint (model + scoring settings) and run history
    DIR/scores.safetensors (+ .json)          gate scores, computed once
    DIR/masks/mask-s0.02-l0.5.safetensors     one mask per grid point
    DIR/points/dense.json                     the unpruned model's evaluation
    DIR/points/masked/s0.02-l0.5.json         a pruned model (masked, no retraining)
    DIR/points/budget/f0.5-l0.5.json          a kept-FLOPs budget mask (masked, no retraining)
    DIR/points/reconstructed/<id>/f0.5-l0.5.json   the same mask after reconstruction (``reconstruct``)
    DIR/rewound/<objective>-<id>/s0.02-l0.5-seed0/   a rewound model directory (one per seed)
    DIR/points/rewound/<objective>-<id>/s0.02-l0.5-seed0.json
    DIR/pairs/<point>.safetensors             per-pair STS similarities of a point (for paired tests)
    DIR/results.csv, results.json, summary.md, figures/   rebuilt by :func:`sparsecse.reporting.report.report`

A point file records the task scores it holds; asking for more tasks later evaluates only the missing
ones. Rewinding settings are part of the rewound points' path (``<id>`` hashes them), so different
objectives or corpora live side by side in one sweep; the seed is not part of ``<id>`` but of each
rewound point's name, so the seeds of one setting sit together and a rerun reuses finished seeds.
"""

from __future__ import annotations

import os
from typing import Iterable

from sparsecse.artifacts.remote_code import with_trust_option
from sparsecse.reporting.report import report
from sparsecse.sweeps.config import DEFAULT_LAMBDAS, DEFAULT_SPARSITIES, SweepOptions, sweep_spec
from sparsecse.sweeps.points import SweepResult, run_evaluation, run_rewind
from sparsecse.sweeps.prepared import prepare_sweep, run_sweep


@with_trust_option
def sweep(model=None, sparsities: str | Iterable[float] | None = DEFAULT_SPARSITIES,
          lambdas: str | Iterable[float] = DEFAULT_LAMBDAS, out: str | os.PathLike = "sweep", *,
          keep_flops: str | Iterable[float] | None = None, options: SweepOptions | None = None,
          **stages) -> SweepResult:
    """Score once, then prune and evaluate every (sparsity, λ) and (kept-FLOPs budget, λ); rewind the chosen
    points if asked.

    The grid: ``sparsities``, ``lambdas`` and ``keep_flops`` (budget points, pruned as ``prune --keep-flops``).
    One config per stage, by name in ``stages`` (:mod:`sparsecse.sweeps.config`): ``score`` (a
    :class:`~sparsecse.scoring.score.ScoringConfig`: how gate scores are computed), ``prune`` (a
    :class:`~sparsecse.pruning.prune.PruningConfig`: criterion, scope, keep-one-head rule), ``evaluate`` (an
    :class:`~sparsecse.evaluation.config.EvaluationConfig`: tasks, precision, device), ``rewind`` (a
    :class:`~sparsecse.sweeps.config.RewindConfig`: which points are retrained and how, each seed once; None:
    no rewinding), ``reconstruct`` (a corpus file or a
    :class:`~sparsecse.shrinking.reconstruction.ReconstructionPlan`: every budget point again after
    retraining-free reconstruction). ``options`` (a :class:`~sparsecse.sweeps.config.SweepOptions`: ``eval_mode``,
    ``dense``, ``overwrite``, ``make_report``, ``show_progress``, ``log``) says how it runs.

    Several processes may run the same sweep on one directory: each point is locked while computed
    (``<point>.json.lock``, see :mod:`sparsecse.artifacts.locks`) and the others skip it. A directory made
    with other scoring or pruning settings is refused (its fingerprint differs) unless ``overwrite``.

    Example::

        sweep("all-MiniLM-L6-v2", "0.1,0.2", "0.5", "runs/sweep", evaluate=EvaluationConfig(tasks="sts"),
              rewind=RewindConfig(corpus="wiki.txt", seeds="0,1,2"))
    """
    spec = sweep_spec(model, sparsities, lambdas, out, keep_flops=keep_flops, options=options, **stages)
    prep = prepare_sweep(spec)
    prep.run.evaluate_fn, prep.run.rewind_fn = run_evaluation, run_rewind  # this module's seams (tests replace them)
    run_sweep(prep)
    if spec.run.make_report:
        report(prep.out)
    return prep.run.result
