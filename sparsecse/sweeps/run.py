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

import copy
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from sparsecse.errors import SparseCSEError, exact_number
from sparsecse.evaluation.tasks import STS_TASKS, TRANSFER_TASKS, resolve_tasks
from sparsecse.artifacts.files import hash_path, make_manifest, write_json
from sparsecse.artifacts.remote_code import with_trust_option
from sparsecse.artifacts.sweep_layout import POINTS_DIR, SCORES_FILE, SWEEP_FILE, Variant, read_point, read_sweep_state
from sparsecse.sweeps.directory import fingerprint, open_sweep_dir, pruning_settings  # noqa: F401
from sparsecse.sweeps.naming import (budget_point_name, parse_seeds, point_name, rewind_id,  # noqa: F401
                                     seeded_name, task_average)
from sparsecse.sweeps.points import (EVAL_MODES, RewindPlan, SweepResult, SweepRun, _finite_weights,  # noqa: F401
                                     best_lambda, evaluate_pruned, merge_evaluation, plan_rewinds, run_evaluation,
                                     run_rewind)
from sparsecse.sweeps.prepared import Point, PreparedSweep, prepare_sweep, remove_empty_rewinds, run_sweep  # noqa: F401
from sparsecse.reporting.report import report
from sparsecse.sweeps.config import (DEFAULT_LAMBDAS, DEFAULT_SPARSITIES, PruningConfig, RewindConfig,  # noqa: F401
                                     SweepOptions, SweepSpec, sweep_spec)
from sparsecse.shrinking.reconstruction import ReconstructionPlan
from sparsecse.scoring.score import ScoringConfig
from sparsecse.evaluation.config import EvaluationConfig


@with_trust_option
def sweep(model=None, sparsities: str | Iterable[float] | None = DEFAULT_SPARSITIES,
          lambdas: str | Iterable[float] = DEFAULT_LAMBDAS, out: str | os.PathLike = "sweep", *,
          score: ScoringConfig | None = None, prune: PruningConfig | None = None,
          evaluate: EvaluationConfig | None = None, rewind: RewindConfig | bool | None = None,
          reconstruct: "str | os.PathLike | ReconstructionPlan | None" = None, **options) -> SweepResult:
    """Score once, then prune and evaluate every (sparsity, λ); rewind the chosen points if asked.

    One config per stage (:mod:`sparsecse.sweeps.config`): ``score`` (how gate scores are computed),
    ``prune`` (criterion, keep-one-head rule, kept-FLOPs budget points), ``evaluate`` (tasks, precision,
    device), ``rewind`` (a :class:`~sparsecse.sweeps.config.RewindConfig`: which points are retrained and
    how; each seed once), ``reconstruct`` (a corpus file or a
    :class:`~sparsecse.shrinking.reconstruction.ReconstructionPlan`: every budget point again after
    retraining-free reconstruction). ``options``: ``run=`` a :class:`~sparsecse.sweeps.config.SweepOptions`
    (eval_mode, dense, overwrite, make_report, show_progress, log), and the flat keywords of earlier
    versions (``tasks=``, ``rewind=True, corpus=...``, ``sparsecse.sweeps.config.FLAT_OPTIONS``).

    Several processes may run the same sweep on one directory: each point is locked while computed
    (``<point>.json.lock``, see :mod:`sparsecse.artifacts.locks`) and the others skip it. A directory made
    with other scoring or pruning settings is refused (its fingerprint differs) unless ``overwrite``.

    Example::

        sweep("all-MiniLM-L6-v2", "0.1,0.2", "0.5", "runs/sweep", evaluate=EvaluationConfig(tasks="sts"),
              rewind=RewindConfig(corpus="wiki.txt", seeds="0,1,2"))
    """
    spec = sweep_spec(model, sparsities, lambdas, out, score, prune, evaluate, rewind, reconstruct, **options)
    prep = prepare_sweep(spec)
    prep.run.evaluate_fn, prep.run.rewind_fn = run_evaluation, run_rewind  # this module's seams (tests replace them)
    run_sweep(prep)
    if spec.run.make_report:
        report(prep.out)
    return prep.run.result
