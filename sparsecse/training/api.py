"""``train`` and ``rewind``: load the model, resolve the recipe, run the loop, assemble the output."""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from sparsecse.data.corpus import read_corpus
from sparsecse.encoder import SPARSECSE_CONFIG, SentenceEncoder, resolve_model
from sparsecse.errors import SparseCSEError
from sparsecse.io import atomic_dir, hash_path, make_manifest, write_json
from sparsecse.masks import Mask
from sparsecse.objectives.registry import get_objective, parse_objective_args
from sparsecse.training.loop import LoopSettings, Trainer, make_accelerator
from sparsecse.training.recipe import resolve_hyperparameters
from sparsecse.training.rundir import RunDir


@dataclass
class TrainResult:
    """Where the model went and how the run went; usable as a path (``os.fspath(result)``)."""

    out: Path
    steps: int
    best_step: int | None
    best_score: float | None  # STS-B dev Spearman x 100 of the saved model (None without evaluation)
    final_loss: float | None
    steps_per_second: float
    hyperparameters: dict[str, Any]
    losses: dict[int, float] = field(default_factory=dict)  # the steps this call ran
    history: list[dict[str, Any]] = field(default_factory=list)
    step_starts: list[float] = field(default_factory=list)  # perf_counter() per step, for benchmarks

    def __fspath__(self) -> str:
        return str(self.out)

    def to_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "steps": self.steps, "best_step": self.best_step,
                "stsb_dev": self.best_score, "final_loss": self.final_loss,
                "steps_per_second": self.steps_per_second, "hyperparameters": self.hyperparameters}


def _objective_params(objective_args: str | dict | None) -> dict[str, Any]:
    if objective_args is None or isinstance(objective_args, dict):
        return dict(objective_args or {})
    return parse_objective_args(objective_args)


def _source_hash(source: str | None) -> str | None:
    return hash_path(source) if source and os.path.exists(source) else None


def _read_model_config(model_dir: str | None) -> dict[str, Any]:
    try:
        return json.loads((Path(model_dir) / SPARSECSE_CONFIG).read_text())
    except (OSError, TypeError, ValueError):
        return {}


def _check_out(kind: str, out, resume: bool, overwrite: bool) -> None:
    """Fail before loading anything when ``out`` is missing, finished, or an unfinished run is in the way."""
    if out is None:
        raise SparseCSEError(f"{kind} needs an output directory (--out).")
    RunDir(out).inspect(None, resume=resume, overwrite=overwrite)


def _run(kind: str, encoder: SentenceEncoder, corpus, out, objective: str, objective_args, lineage: dict,
         inputs: dict, fingerprint_extra: dict, *, max_steps=None, batch_size=None, lr=None, max_length=None,
         epochs=None, eval_steps=125, save_steps=None, seed=0, resume=False, overwrite=False, data_dir=None,
         device=None, mixed_precision=None, tensorboard=False, show_progress=True) -> TrainResult:
    from accelerate.utils import set_seed

    if corpus is None:
        raise SparseCSEError(f"{kind} needs a corpus (--corpus FILE, one sentence per line).")
    objective_cls = get_objective(objective)
    params = _objective_params(objective_args)
    hyper = resolve_hyperparameters(encoder.config, objective_cls, batch_size=batch_size, lr=lr,
                                    max_length=max_length, epochs=epochs)
    sentences = list(corpus) if not isinstance(corpus, (str, os.PathLike)) else read_corpus(corpus)
    if not sentences:
        raise SparseCSEError("The corpus holds no sentences.")
    steps_per_epoch = len(sentences) // hyper["batch_size"]
    total_steps = int(max_steps) if max_steps else hyper["epochs"] * steps_per_epoch
    if total_steps < 1 and steps_per_epoch:
        raise SparseCSEError(f"--max-steps must be at least 1, not {max_steps}.")
    eval_steps = int(eval_steps or 0)
    save_steps = int(eval_steps if save_steps is None else save_steps) or 0
    evaluate = None
    if eval_steps:
        from sparsecse.training.dev_eval import stsb_dev_evaluator

        try:
            evaluate = stsb_dev_evaluator(data_dir)
        except SparseCSEError as exc:
            raise SparseCSEError(f"{exc} (STS-B dev picks the best checkpoint; --eval-steps 0 skips it.)") from None

    accelerator = make_accelerator(device, mixed_precision)
    set_seed(seed)
    built = objective_cls(encoder, **params)
    corpus_hash = hash_path(corpus) if isinstance(corpus, (str, os.PathLike)) else _hash_sentences(sentences)
    fingerprint = {
        "kind": kind, "model": lineage.get("init"), "model_sha256": lineage.get("init_sha256"),
        "corpus_sha256": corpus_hash, "objective": objective, "objective_params": built.params,
        "batch_size": hyper["batch_size"], "lr": hyper["lr"], "max_length": hyper["max_length"],
        "max_steps": total_steps, "seed": seed, "pooling": encoder.pooling, "eval_steps": eval_steps,
        **fingerprint_extra,
    }
    run_dir = RunDir(out)
    continuing = run_dir.inspect(fingerprint, resume=resume, overwrite=overwrite)
    if accelerator.is_main_process:
        run_dir.start(fingerprint, continuing)
    accelerator.wait_for_everyone()
    resume_from = run_dir.latest_checkpoint() if continuing else None
    if resume and resume_from is None and accelerator.is_main_process:
        print(f"Nothing to resume in {run_dir.path}; starting from step 0.", file=sys.stderr, flush=True)

    extra_config = {"lineage": lineage, "training": {"objective": objective, "recipe": hyper["recipe"]}}
    settings = LoopSettings(batch_size=hyper["batch_size"], lr=hyper["lr"], max_length=hyper["max_length"],
                            max_steps=total_steps, seed=seed, eval_steps=eval_steps, save_steps=save_steps,
                            tensorboard=tensorboard, show_progress=show_progress, desc=f"{kind} ({objective})")
    trainer = Trainer(accelerator, encoder, built, sentences, settings, run_dir, evaluate,
                      save_model=lambda enc, path: _save_quietly(enc, path, extra_config))
    loop = trainer.run(resume_from)

    hyper_record = {**hyper, "max_steps": total_steps, "steps_per_epoch": steps_per_epoch,
                    "eval_steps": eval_steps, "save_steps": save_steps, "objective": objective,
                    "objective_params": built.params, "pooling": encoder.pooling,
                    "mixed_precision": accelerator.mixed_precision, "processes": accelerator.num_processes,
                    "max_grad_norm": settings.max_grad_norm, "weight_decay": settings.weight_decay,
                    "optimizer": "AdamW", "schedule": "linear decay, no warm-up"}
    final_loss = loop.losses.get(total_steps)
    result = TrainResult(Path(out), total_steps, loop.best_step, loop.best_score, final_loss,
                         loop.steps_per_second, hyper_record, loop.losses, loop.history, loop.step_starts)
    if accelerator.is_main_process:
        manifest = make_manifest(
            f"{kind}_model", inputs={**inputs, "corpus": corpus if isinstance(corpus, (str, os.PathLike)) else None},
            params=hyper_record, seed=seed, lineage=lineage,
            selected=(f"best STS-B dev at step {loop.best_step}" if loop.best_step else "last step"),
            result={k: v for k, v in result.to_dict().items() if k not in ("out", "hyperparameters")},
            history=loop.history,
        )
        with atomic_dir(out, overwrite=overwrite) as tmp:
            if loop.best_dir is not None:
                for item in loop.best_dir.iterdir():
                    shutil.move(str(item), tmp / item.name)
            else:
                _save_quietly(encoder, tmp, extra_config)
            if run_dir.log_path.exists():
                shutil.move(str(run_dir.log_path), tmp / "train_log.jsonl")
            if (run_dir.path / "tensorboard").exists():
                shutil.move(str(run_dir.path / "tensorboard"), tmp / "tensorboard")
            write_json(tmp / "manifest.json", manifest)
        run_dir.remove()
    accelerator.wait_for_everyone()
    return result


def _save_quietly(encoder: SentenceEncoder, path: Path, extra_config: dict) -> None:
    """Save without transformers' own progress bar breaking into the training bar."""
    from transformers.utils import logging

    was_enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        encoder.save(path, extra_config=extra_config)
    finally:
        if was_enabled:
            logging.enable_progress_bar()


def _hash_sentences(sentences: Sequence[str]) -> str:
    import hashlib

    h = hashlib.sha256()
    for s in sentences:
        h.update(s.encode("utf-8") + b"\n")
    return h.hexdigest()


# ---------------------------------------------------------------------------------------- train
def train(model=None, corpus=None, out=None, objective: str = "simcse", objective_args=None, *,
          pooling: str | None = None, seed: int = 0, **options) -> TrainResult:
    """Train ``model`` (a pretrained LM; default all-MiniLM-L6-v2) on ``corpus`` with ``objective``.

    ``options``: max_steps, batch_size (global), lr, max_length, epochs (None = the backbone's SimCSE
    recipe), eval_steps (STS-B dev every N steps, 0 = never), save_steps (checkpoint every N steps,
    default eval_steps), resume, overwrite, data_dir, device, mixed_precision, tensorboard,
    show_progress. The best STS-B dev checkpoint (else the last weights) is saved to ``out``.
    """
    from accelerate.utils import set_seed

    _check_out("train", out, options.get("resume", False), options.get("overwrite", False))
    set_seed(seed)  # weights a checkpoint lacks (e.g. a pooler) are drawn at load time
    encoder = SentenceEncoder.load(model, pooling=pooling, device="cpu")
    source = encoder.source
    lineage = {"stage": "train", "init": source, "init_sha256": _source_hash(source), "objective": objective}
    if encoder.extra_config.get("lineage"):
        lineage["parent"] = encoder.extra_config["lineage"]
    return _run("train", encoder, corpus, out, objective, objective_args, lineage, {"model": source}, {},
                seed=seed, **options)


# --------------------------------------------------------------------------------------- rewind
def resolve_init(mask: Mask, init: str | os.PathLike | None) -> tuple[str, str | None]:
    """(the checkpoint to rewind to, the scored model): ``init``, else the scored model's lineage
    ``init``, else the scored model itself."""
    scored = mask.manifest.get("model")
    if init is not None:
        return resolve_model(init), scored
    if not scored:
        raise SparseCSEError("The mask does not record which model was scored; pass --init.")
    recorded = (_read_model_config(scored).get("lineage") or {}).get("init")
    if recorded:
        if os.path.isdir(recorded) or not os.path.isabs(recorded):
            return resolve_model(recorded), scored
        raise SparseCSEError(f"The initial checkpoint {recorded} recorded in {scored}'s lineage no longer exists; "
                             f"pass --init.")
    return resolve_model(scored), scored


def rewind(mask, corpus=None, out=None, init=None, objective: str = "simcse", objective_args=None, *,
           pooling: str | None = None, seed: int = 0, **options) -> TrainResult:
    """Reset to ``init``'s weights, physically remove ``mask``'s pruned units and retrain.

    ``mask`` is a :class:`Mask` or a mask file. ``init`` left out: the initial checkpoint in the
    scored model's lineage, else the scored model. The pooling is the scored model's (as recorded in
    the mask) unless given. Options as for :func:`train`.
    """
    from accelerate.utils import set_seed

    from sparsecse.shrink import mask_digest, shrink_encoder

    _check_out("rewind", out, options.get("resume", False), options.get("overwrite", False))
    mask_path = None if isinstance(mask, Mask) else str(mask)
    mask = mask if isinstance(mask, Mask) else Mask.load(mask)
    init_path, scored = resolve_init(mask, init)
    set_seed(seed)
    encoder = SentenceEncoder.load(init_path, pooling=pooling or mask.manifest.get("pooling"), device="cpu")
    mask.check_fits(encoder.model)
    shrink_encoder(encoder, mask)
    lineage = {"stage": "rewind", "init": init_path, "init_sha256": _source_hash(init_path),
               "objective": objective, "mask": mask_path, "mask_digest": mask_digest(mask),
               "scored_model": scored,
               "sparsity": mask.manifest.get("sparsity"), "lambda": mask.manifest.get("lambda")}
    parent = _read_model_config(scored).get("lineage") if scored else None
    if parent:
        lineage["parent"] = parent
    return _run("rewind", encoder, corpus, out, objective, objective_args, lineage,
                {"init": init_path, "mask": mask_path, "scored_model": scored},
                {"mask_digest": lineage["mask_digest"]}, seed=seed, **options)
