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
    DIR/results.csv, results.json, summary.md, figures/   rebuilt by :func:`sparsecse.sweeps.report.report`

A point file records the task scores it holds; asking for more tasks later evaluates only the missing
ones. Rewinding settings are part of the rewound points' path (``<id>`` hashes them), so different
objectives or corpora live side by side in one sweep; the seed is not part of ``<id>`` but of each
rewound point's name, so the seeds of one setting sit together and a rerun reuses finished seeds.
"""

from __future__ import annotations

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
from sparsecse.sweeps.layout import POINTS_DIR, SCORES_FILE, SWEEP_FILE, Variant, read_point, read_sweep_state
from sparsecse.sweeps.directory import fingerprint, open_sweep_dir, pruning_settings  # noqa: F401
from sparsecse.sweeps.naming import (budget_point_name, parse_seeds, point_name, rewind_id,  # noqa: F401
                                     seeded_name, task_average)
from sparsecse.sweeps.points import (EVAL_MODES, RewindPlan, SweepResult, SweepRun, _finite_weights,  # noqa: F401
                                     best_lambda, evaluate_pruned, merge_evaluation, plan_rewinds, run_evaluation,
                                     run_rewind)
from sparsecse.sweeps.prepared import Point, PreparedSweep, prepare_sweep, remove_empty_rewinds, run_sweep  # noqa: F401
from sparsecse.sweeps.report import report


@with_trust_option
def sweep(
    model=None,
    sparsities: str | Iterable[float] | None = "0.01:0.10:0.01,0.2:0.5:0.1",
    lambdas: str | Iterable[float] = "0.25,0.5,0.75",
    out: str | os.PathLike = "sweep",
    tasks: str | Sequence[str] = "sts",
    rewind: bool = False,
    objective: str = "simcse",
    corpus: str | os.PathLike | None = None,
    rewind_sparsities: str | Iterable[float] | None = None,
    rewind_lambda: str | float | Iterable[float] = "best",
    rewind_init: str | os.PathLike | None = None,
    rewind_args: dict[str, Any] | None = None,
    rewind_dense: bool = True,
    seeds: str | Iterable[int] | None = None,
    data_dir: str | os.PathLike | None = None,
    seed: int = 0,
    split: str = "train",
    batch_size: int = 64,
    max_batches: int | None = None,
    scope: str = "global",
    keep_one_head: bool | None = None,
    pooling: str | None = None,
    device: str | None = None,
    eval_mode: str = "masked",
    dense: bool = True,
    precision: str = "fp32",
    fasttest: bool = False,
    overwrite: bool = False,
    make_report: bool = True,
    show_progress: bool = True,
    log: Callable[[str], None] | None = None,
    keep_flops: str | Iterable[float] | None = None,
    criterion: str | None = None,
    reconstruct: "str | os.PathLike | ReconstructionPlan | None" = None,
) -> SweepResult:
    """Score once, then prune and evaluate every (sparsity, λ); rewind the chosen points if asked.

    ``rewind_sparsities`` (default: the whole grid) picks the points to rewind, at ``rewind_lambda``:
    ``"best"`` (per sparsity, the λ with the best STS average without rewinding) or given values.
    ``rewind_args`` go to :func:`sparsecse.training.rewind` (max_steps, batch_size, lr, objective_args, ...);
    ``rewind_dense`` also retrains the unpruned model the same way, as a control. ``seeds`` (default:
    ``[seed]``) rewinds every chosen point and the control once per seed (seed-major order); ``seed``
    alone seeds scoring and evaluation.
    ``eval_mode`` "shrunk" evaluates a physically pruned copy instead of the gated model (same numbers).
    ``precision`` and ``fasttest`` are passed to the evaluation (non-default values join the sweep's
    fingerprint). ``overwrite`` replaces a sweep directory of other settings instead of refusing it.
    Several processes may run the same sweep on one directory: each point is locked while computed
    (``<point>.json.lock``, see :mod:`sparsecse.artifacts.locks`) and the others skip it.
    ``keep_flops`` adds kept-FLOPs budget points (:func:`sparsecse.compress.pruning.prune`, 128 tokens) at every λ,
    next to (or, with ``sparsities=None``, instead of) the sparsity grid; they are not rewound.
    ``criterion`` and ``keep_one_head`` apply to every point when given; by default sparsity points use
    abs_grad and keep one head per layer, budget points fisher and may empty a layer
    (:func:`~sparsecse.sweeps.directory.pruning_settings`). Both are part of the fingerprint a resumed directory must match.
    ``reconstruct`` (a corpus file, or a :class:`sparsecse.compress.reconstruction.ReconstructionPlan`) adds, for
    every budget point, the same mask after retraining-free reconstruction, under a directory named by
    the reconstruction's settings (corpus hash included).
    """
    args = {k: v for k, v in locals().items() if k != "make_report"}
    prep = prepare_sweep(args)
    prep.run.evaluate_fn, prep.run.rewind_fn = run_evaluation, run_rewind  # this module's seams (tests replace them)
    run_sweep(prep)
    if make_report:

        report(prep.out)
    return prep.run.result
