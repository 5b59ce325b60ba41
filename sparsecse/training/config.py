"""How a training or rewinding run trains: the one config :func:`sparsecse.training.api.run` takes."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TrainingConfig:
    """The settings of ``train`` and ``rewind`` (None: the backbone's SimCSE recipe).

    ``batch_size`` is global; ``eval_steps`` scores STS-B dev every N steps (0: never) to keep the best
    checkpoint; ``save_steps`` checkpoints every N steps (default ``eval_steps``); ``resume`` continues an
    interrupted run with the same settings; ``patience`` > 0 stops training once that many evaluations in a row
    have not beaten the best before them by ``min_delta`` (the dev score stopped rising; the best checkpoint is the
    result, as always). ``objective_args``: a dict or ``"k=v,..."``.
    ``bucket_by_length`` batches sentences of similar length together (less padding; the same sentences
    per epoch, in other batches). ``mixed_precision``: ``no``, ``bf16``, ``fp16`` (GPU), or ``auto``: bf16
    where the hardware runs it natively (a GPU with bf16, a CPU with AVX512-BF16 or AMX), else full
    precision; None keeps Accelerate's default (full precision on CPU). ``gather_negatives`` (several
    processes only): in-batch negatives and similarity pairs over the whole global batch, as in one process
    (default), or False: each process's own part only (sentence-transformers' ``gather_across_devices=False``).
    ``dev``: the set the checkpoint is chosen on instead of STS-B dev (a pairs file, a task name or an
    :class:`~sparsecse.evaluation.eval_sets.EvalSet`; :func:`~sparsecse.training.dev_eval.dev_set`).
    ``deadline`` (a time of day in seconds, as ``sparsecse.training.time_limit.clock`` reads it) ends training by
    then, the schedule fitted to the steps that fit with ``tail_evaluations`` dev evaluations' worth of the caller's
    work left after it (:mod:`sparsecse.training.time_limit`); None: no time limit.

    >>> TrainingConfig(max_steps=100, lr=3e-5).eval_steps
    125
    """

    objective: str = "simcse"
    objective_args: str | dict[str, Any] | None = None
    max_steps: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    max_length: int | None = None
    epochs: int | None = None
    eval_steps: int = 125
    patience: int = 0
    min_delta: float = 0.0
    save_steps: int | None = None
    seed: int = 0
    resume: bool = False
    overwrite: bool = False
    data_dir: str | os.PathLike | None = None
    device: str | None = None
    mixed_precision: str | None = None
    tensorboard: bool = False
    show_progress: bool = True
    bucket_by_length: bool = False
    gather_negatives: bool = True
    dev: Any = None
    deadline: float | None = None
    tail_evaluations: float = 0.0
