"""``train``: load the model, resolve the recipe, run the loop, assemble the output (``rewind`` reuses ``_run``)."""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from sparsecse.data.corpus import check_corpus_file, read_corpus
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.errors import SparseCSEError
from sparsecse.artifacts.files import atomic_dir, hash_path, make_manifest, write_json
from sparsecse.artifacts.destinations import check_destination
from sparsecse.artifacts.inputs import read_inputs
from sparsecse.cards.model_card import write_card
from sparsecse.artifacts.model_names import local_model_dir
from sparsecse.objectives.distill import lineage_teacher
from sparsecse.objectives.teachers import teacher_names
from sparsecse.artifacts.model_dir import model_lineage
from sparsecse.objectives.registry import get_objective, parse_objective_args
from sparsecse.artifacts.remote_code import with_trust_option
from sparsecse.training.distributed import stopped
from sparsecse.training.accelerator import make_accelerator, wait_for_everyone
from sparsecse.training.loop import LoopSettings, Trainer
from sparsecse.training.hyperparameters import resolve_hyperparameters
from sparsecse.training.rundir import RunDir
from sparsecse.artifacts.signals import Terminated, interrupts_as_keyboard
from sparsecse.modeling.encoder import check_device
from sparsecse.training.dev_eval import dev_set
from sparsecse.training.config import TrainingConfig
from sparsecse.stage_config import stage_config


@dataclass
class TrainResult:
    """Where the model went and how the run went; usable as a path (``os.fspath(result)``)."""

    out: Path
    steps: int
    best_step: int | None
    best_score: float | None  # the dev score x 100 of the saved model: STS-B dev or --dev (None without evaluation)
    final_loss: float | None
    steps_per_second: float
    hyperparameters: dict[str, Any]
    losses: dict[int, float] = field(default_factory=dict)  # the steps this call ran
    history: list[dict[str, Any]] = field(default_factory=list)
    seconds: float | None = None  # this call's wall time: teacher embeddings, steps, evaluations, saving
    main_process: bool = True  # False in the other processes of a data-parallel run (they report nothing)

    def __fspath__(self) -> str:
        return str(self.out)

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data."""
        return {"out": str(self.out), "steps": self.steps, "best_step": self.best_step,
                "stsb_dev": self.best_score if dev_label(self.hyperparameters) == "STS-B dev" else None,
                "dev_score": self.best_score, "dev_set": dev_label(self.hyperparameters), "final_loss": self.final_loss,
                "steps_per_second": self.steps_per_second, "seconds": self.seconds,
                "hyperparameters": self.hyperparameters}


def dev_label(hyperparameters: dict) -> str:
    """What the checkpoint was chosen on, in words: "STS-B dev" or "dev set NAME (METRIC)"."""
    dev = hyperparameters.get("dev_set")
    if not dev or (dev.get("task") == "STSBenchmark" and dev.get("split") == "dev"):
        return "STS-B dev"
    return f"dev set {dev['name']} ({dev['metric']})"


def _objective_params(objective_args: str | dict | None) -> dict[str, Any]:
    if objective_args is None or isinstance(objective_args, dict):
        return dict(objective_args or {})
    return parse_objective_args(objective_args)


def absolute_path(path: str | None) -> str | None:
    """A local path made absolute (so lineage survives a change of directory); hub names unchanged."""
    return os.path.abspath(path) if path and os.path.exists(path) else path


def source_hash(source: str | None) -> str | None:
    """The hash of a local model ``source``, or None for a hub name or nothing."""
    return hash_path(source) if source and os.path.exists(source) else None


def check_out(kind: str, out, resume: bool, overwrite: bool, inputs: dict | None = None) -> None:
    """Fail before loading anything when ``out`` is missing, finished, one of the ``inputs`` (a
    :func:`~sparsecse.artifacts.inputs.read_inputs` mapping), not writable, or an unfinished run is in the way."""
    if out is None:
        raise SparseCSEError(f"{kind} needs an output directory (--out).")
    # overwrite=True: RunDir.inspect words the "already exists" case (it knows about --resume)
    check_destination(out, True, inputs=inputs)
    RunDir(out).check_free()
    RunDir(out).inspect(None, resume=resume, overwrite=overwrite)


def teacher_inputs(objective: str | None, objective_args, model=None) -> list[str]:
    """The teacher models a run reads: ``teacher=A+B`` of the distill objective's arguments, else the
    dense model recorded in ``model``'s lineage (distill's default teacher)."""
    if objective != "distill":
        return []
    teacher = _objective_params(objective_args).get("teacher")
    if teacher is None and isinstance(model, (str, os.PathLike, type(None))):
        directory = local_model_dir(model)
        teacher = lineage_teacher(model_lineage(directory)) if directory else None
    return teacher_names(teacher) if isinstance(teacher, (str, os.PathLike)) and str(teacher).strip() else []


def run_inputs(model=None, objective: str | None = None, objective_args=None, data_dir=None,
               **named) -> dict[str, list[str]]:
    """Everything a training run reads (:func:`~sparsecse.artifacts.inputs.read_inputs`): its model,
    teachers, data directory and ``named`` inputs (corpus, mask, init, ...); a loaded model is no path."""
    model_given = model is None or isinstance(model, (str, os.PathLike))
    return read_inputs(**({"model": model} if model_given else {}), **named, data_dir=data_dir,
                       teacher=teacher_inputs(objective, objective_args, model) or None)


@dataclass
class _Plan:
    """What a run will do, resolved from the arguments before anything heavy starts."""

    objective_cls: type
    objective_params: dict[str, Any]
    hyper: dict[str, Any]
    sentences: list[str]
    corpus_hash: str
    total_steps: int
    steps_per_epoch: int
    eval_steps: int
    save_steps: int
    evaluate: Any
    dev_info: dict | None = None  # the dev set checkpoints are chosen on (None: no evaluation)
    started: float = field(default_factory=time.perf_counter)
    trainer: Any = None  # set once built: an interrupted run names the step it stopped at


def _plan(encoder, corpus, config: TrainingConfig) -> _Plan:
    objective_cls = get_objective(config.objective)  # train() and rewind() checked corpus and objective already
    hyper = resolve_hyperparameters(encoder.config, objective_cls, batch_size=config.batch_size, lr=config.lr,
                                    max_length=config.max_length, epochs=config.epochs)
    max_steps, eval_steps, save_steps = config.max_steps, config.eval_steps, config.save_steps
    from_file = isinstance(corpus, (str, os.PathLike))
    sentences = read_corpus(corpus) if from_file else [s for s in map(str.strip, corpus) if s]
    if not sentences:
        raise SparseCSEError("The corpus holds no sentences.")
    if max_steps is not None and int(max_steps) < 1:
        raise SparseCSEError(f"--max-steps must be at least 1, not {max_steps}.")
    steps_per_epoch = len(sentences) // hyper["batch_size"]
    if steps_per_epoch == 0:  # checked here, before OUT.partial is created
        raise SparseCSEError(f"The corpus has {len(sentences)} sentences, fewer than one batch of "
                             f"{hyper['batch_size']}; lower --batch-size or use a larger corpus.")
    eval_steps = int(eval_steps or 0)
    if isinstance(config.patience, bool) or not isinstance(config.patience, int) or config.patience < 0:
        raise SparseCSEError(f"patience must be a whole number >= 0, not {config.patience!r}.")
    if config.patience and not eval_steps:
        raise SparseCSEError("patience stops training when the dev score stops rising, which needs --eval-steps N "
                             "(it is 0).")
    dev = checked_dev_set(config)
    evaluate = dev.score if dev is not None else None
    return _Plan(objective_cls, _objective_params(config.objective_args), hyper, sentences,
                 hash_path(corpus) if from_file else _hash_sentences(sentences),
                 int(max_steps) if max_steps else hyper["epochs"] * steps_per_epoch, steps_per_epoch,
                 eval_steps, int(eval_steps if save_steps is None else save_steps), evaluate,
                 dev_info=dev.describe() if dev is not None else None)


def checked_dev_set(config: TrainingConfig):
    """The dev set the run chooses its checkpoint on (``config.dev``, else STS-B dev), read and checked; None
    when ``eval_steps`` is 0 (a ``dev`` then is refused: it would choose nothing)."""
    if not config.eval_steps:
        if config.dev is not None:
            raise SparseCSEError("--dev picks the best checkpoint every --eval-steps, but --eval-steps is 0; give "
                                 "--eval-steps N or leave --dev out.")
        return None
    if config.dev is not None:
        return dev_set(config.dev, config.data_dir)
    try:
        return dev_set(None, config.data_dir)
    except SparseCSEError as exc:
        raise SparseCSEError(f"{str(exc).rstrip('.')} (STS-B dev picks the best checkpoint; --eval-steps 0 skips "
                             "it).") from None


def run(kind: str, encoder: SentenceEncoder, corpus, out, config: TrainingConfig, lineage: dict, inputs: dict,
        fingerprint_extra: dict) -> TrainResult:
    """Train ``encoder`` on ``corpus`` into ``out`` (``kind``: train or rewind); ``lineage``, ``inputs`` and
    ``fingerprint_extra`` say where the model came from, for the manifest and for resuming."""
    started = time.perf_counter()
    plan = _plan(encoder, corpus, config)
    plan.started = started
    accelerator = make_accelerator(config.device, config.mixed_precision)
    try:
        return _run(kind, encoder, corpus, out, config, lineage, inputs, fingerprint_extra, plan, accelerator)
    except BaseException as exc:
        # several processes: one of them says why the run stopped, naming the process that stopped first
        final = stopped(exc, plan.trainer.step + 1 if plan.trainer is not None else None)
        if final is exc:
            raise
        raise final from None


def _run(kind, encoder, corpus, out, config: TrainingConfig, lineage, inputs, fingerprint_extra, plan: _Plan,
         accelerator) -> TrainResult:
    from accelerate.utils import set_seed

    hyper, objective, seed, show_progress = plan.hyper, config.objective, config.seed, config.show_progress
    set_seed(seed)  # the objective's own modules (MLP head, ...) are drawn here
    built = plan.objective_cls(encoder, **plan.objective_params)
    corpus_path = corpus if isinstance(corpus, (str, os.PathLike)) else None
    # every process embeds its share of the corpus with the teacher (one cache, written by the first); under a
    # time limit the objective may leave that to the batches that use it
    built.on_demand = config.deadline is not None
    built.prepare_corpus(plan.sentences, corpus_path, hyper["max_length"], accelerator.device,
                         show_progress=show_progress and accelerator.is_main_process)
    wait_for_everyone(accelerator)
    objective_info = dict(getattr(built, "teacher_info", None) or {})
    fingerprint = {
        "kind": kind, "model": lineage.get("init"), "model_sha256": lineage.get("init_sha256"),
        "corpus_sha256": plan.corpus_hash, "objective": objective, "objective_params": built.params,
        "batch_size": hyper["batch_size"], "lr": hyper["lr"], "max_length": hyper["max_length"],
        "max_steps": plan.total_steps, "seed": seed, "pooling": encoder.pooling, "eval_steps": plan.eval_steps,
        **({"dev_set": plan.dev_info} if config.dev is not None else {}),
        **({"bucket_by_length": True} if config.bucket_by_length else {}),
        **({"gather_negatives": False} if not config.gather_negatives else {}),
        **({"patience": config.patience, "min_delta": config.min_delta} if config.patience else {}),
        **({"objective_info": {k: objective_info.get(k) for k in ("teacher_digest", "key", "teacher_dim_mode")}}
           if objective_info else {}),
        **fingerprint_extra,
    }
    run_dir = RunDir(out)
    main = accelerator.is_main_process
    with run_dir.locked(take=main), interrupts_as_keyboard():  # SIGTERM ends the run as Ctrl-C does
        # a partial run without a checkpoint yet starts over (its log and best model would be stale)
        resume, overwrite = config.resume, config.overwrite
        resume_from = run_dir.latest_checkpoint() if run_dir.inspect(fingerprint, resume, overwrite) else None
        wait_for_everyone(accelerator)  # every process has looked before the first one changes anything
        extra_config = {"lineage": lineage, "training": {"objective": objective, "recipe": hyper["recipe"]}}
        settings = LoopSettings(batch_size=hyper["batch_size"], lr=hyper["lr"], max_length=hyper["max_length"],
                                max_steps=plan.total_steps, seed=seed, eval_steps=plan.eval_steps,
                                save_steps=plan.save_steps, tensorboard=config.tensorboard,
                                show_progress=show_progress, desc=f"{kind} ({objective})",
                                bucket_by_length=config.bucket_by_length, gather_negatives=config.gather_negatives,
                                patience=config.patience, min_delta=config.min_delta, deadline=config.deadline,
                                tail_evaluations=config.tail_evaluations)
        try:
            if main:
                run_dir.start(fingerprint, continuing=resume_from is not None)
                if resume and resume_from is None:
                    print(f"Nothing to resume in {run_dir.path}; starting from step 0.", file=sys.stderr, flush=True)
            wait_for_everyone(accelerator)
            trainer = Trainer(accelerator, encoder, built, plan.sentences, settings, run_dir, plan.evaluate,
                              save_model=lambda enc, path: _save_quietly(enc, path, extra_config))
            plan.trainer = trainer
            loop = trainer.run(resume_from)
        except BaseException as exc:
            _after_failure(run_dir, main, exc)
            raise

        record = {**hyper, "max_steps": plan.total_steps, "steps_per_epoch": plan.steps_per_epoch,
                  "eval_steps": plan.eval_steps, "save_steps": plan.save_steps, "objective": objective,
                  "objective_params": built.params, "pooling": encoder.pooling,
                  "mixed_precision": accelerator.mixed_precision, "processes": accelerator.num_processes,
                  "per_process_batch_size": hyper["batch_size"] // accelerator.num_processes,
                  "gather_negatives": config.gather_negatives,
                  "max_grad_norm": settings.max_grad_norm, "weight_decay": settings.weight_decay,
                  "optimizer": "AdamW", "schedule": "linear decay, no warm-up",
                  "bucket_by_length": config.bucket_by_length, "dev_set": plan.dev_info,
                  **({"patience": config.patience, "min_delta": config.min_delta, "steps_run_to": trainer.step,
                      "stopped_early": loop.stopped_early} if config.patience else {}),
                  **({"time_limited": loop.fitted_steps is not None, "steps_run_to": trainer.step,
                      **({"fitted_steps": loop.fitted_steps} if loop.fitted_steps is not None else {})}
                     if config.deadline is not None else {}),
                  **({"objective_info": objective_info} if objective_info else {})}
        result = TrainResult(Path(out), plan.total_steps, loop.best_step, loop.best_score,
                             loop.losses.get(plan.total_steps), loop.steps_per_second, record, loop.losses,
                             loop.history, seconds=round(time.perf_counter() - plan.started, 3), main_process=main)
        if main:
            corpus_input = corpus if isinstance(corpus, (str, os.PathLike)) else None
            manifest = make_manifest(
                f"{kind}_model", inputs={**inputs, "corpus": corpus_input}, params=record, seed=seed,
                lineage=lineage, selected=(f"best {dev_label(record)} at step {loop.best_step}"
                                           if loop.best_step is not None else "last step"),
                result={k: v for k, v in result.to_dict().items() if k not in ("out", "hyperparameters")},
                history=loop.history,
            )
            try:
                _assemble_output(out, run_dir, loop.best_dir, lambda tmp: _save_quietly(encoder, tmp, extra_config),
                                 manifest, overwrite)
            except BaseException as exc:
                _after_failure(run_dir, main, exc)
                raise
        wait_for_everyone(accelerator)
    return result


def _after_failure(run_dir: RunDir, main: bool, exc: BaseException) -> None:
    """A run that stopped before its first checkpoint leaves no OUT.partial (it would only block the
    next run); one with a checkpoint stays. An interrupt (Ctrl-C or SIGTERM) says how to go on."""
    if not main:
        return
    if run_dir.latest_checkpoint() is None:
        run_dir.remove()
        if isinstance(exc, KeyboardInterrupt):
            raise type(exc)(f"{_stopped(exc)} before the first checkpoint, so there is nothing to resume and "
                            f"{run_dir.path} was removed; run the same command again to start over.") from None
    elif isinstance(exc, KeyboardInterrupt):
        step = run_dir.latest_checkpoint().name.rsplit("-", 1)[1].lstrip("0") or "0"
        raise type(exc)(f"{_stopped(exc)}; the run so far (checkpoint at step {step}) is kept in {run_dir.path}: "
                        f"run the same command with --resume to continue it, or with --overwrite to start "
                        f"over.") from None


def _stopped(exc: BaseException) -> str:
    return "Terminated (SIGTERM)" if isinstance(exc, Terminated) else "Interrupted"


def _assemble_output(out, run_dir: RunDir, best_dir: Path | None, save_last, manifest: dict, overwrite: bool) -> None:
    """OUT = the best model (else the last weights) + log + manifest + model card, atomically; then drop OUT.partial.
    The run directory is only read until OUT is in place (files linked or copied, never moved), so a
    run stopped while assembling can still be resumed."""
    with atomic_dir(out, overwrite=overwrite) as tmp:
        if best_dir is not None:
            shutil.copytree(best_dir, tmp, dirs_exist_ok=True, copy_function=_link_or_copy)
        else:
            save_last(tmp)
        if run_dir.log_path.exists():
            shutil.copyfile(run_dir.log_path, tmp / "train_log.jsonl")
        if (run_dir.path / "tensorboard").exists():
            shutil.copytree(run_dir.path / "tensorboard", tmp / "tensorboard", copy_function=_link_or_copy)
        write_json(tmp / "manifest.json", manifest)
        write_card(tmp)
    run_dir.remove()


def _link_or_copy(src: str, dst: str) -> None:
    """A hard link (no second copy of a model's weights on disk), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


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
def training_config(config: TrainingConfig | None, caller: str, **given) -> TrainingConfig:
    """``config`` (None: the defaults) with the ``given`` arguments that are not None."""
    return dataclasses.replace(stage_config(TrainingConfig, config, f"{caller}()'s config"),
                               **{k: v for k, v in given.items() if v is not None})


def check_inputs(kind: str, corpus, objective: str, objective_args=None, lr=None, device=None) -> None:
    """Fail on a missing corpus file, an unknown objective, a bad objective parameter, a
    non-finite learning rate or a missing device before any model is loaded."""

    check_device(device)
    if corpus is None:
        raise SparseCSEError(f"{kind} needs a corpus (--corpus FILE, one sentence per line).")
    if isinstance(corpus, (str, os.PathLike)):
        check_corpus_file(corpus)
    get_objective(objective).check_params(_objective_params(objective_args))
    check_lr(lr)


def check_lr(lr) -> None:
    """Refuse (one sentence) a learning rate that is not a finite positive number; None passes."""
    if lr is None:
        return
    try:
        value = float(lr)
    except (TypeError, ValueError):
        raise SparseCSEError(f"--lr must be a number, not {lr!r}.") from None
    if not math.isfinite(value) or value <= 0:
        raise SparseCSEError(f"--lr must be a finite positive number, not {lr}.")


@with_trust_option
def train(model=None, corpus=None, out=None, objective: str | None = None, objective_args=None, *,
          pooling: str | None = None, seed: int | None = None, config: TrainingConfig | None = None) -> TrainResult:
    """Train ``model`` (a name or directory, default all-MiniLM-L6-v2, or a loaded
    :class:`~sparsecse.modeling.encoder.SentenceEncoder`, trained in place) on ``corpus`` with ``objective``.

    ``config``: a :class:`~sparsecse.training.config.TrainingConfig` (max_steps, batch_size, lr, max_length,
    epochs, eval_steps, save_steps, resume, overwrite, data_dir, device, mixed_precision, tensorboard,
    show_progress; None: its defaults); ``objective``, ``objective_args`` and ``seed``, when given, replace
    its own. The best STS-B dev checkpoint (else the last weights) is saved to ``out``.
    """
    from accelerate.utils import set_seed

    config = training_config(config, "train", objective=objective, objective_args=objective_args, seed=seed)
    objective, objective_args = config.objective, config.objective_args
    check_out("train", out, config.resume, config.overwrite,
              inputs=run_inputs(model, objective, objective_args, config.data_dir, dev=config.dev,
                                corpus=corpus if isinstance(corpus, (str, os.PathLike)) else None))
    check_inputs("train", corpus, objective, objective_args, config.lr, config.device)
    checked_dev_set(config)  # before the model loads
    set_seed(config.seed)  # weights a checkpoint lacks (e.g. a pooler) are drawn at load time
    if isinstance(model, SentenceEncoder):
        encoder = model if pooling is None else SentenceEncoder(
            model.model, model.tokenizer, pooling, model.max_length, model.source, extra_config=model.extra_config,
            dense=model.dense)
    else:
        encoder = SentenceEncoder.load(model, pooling=pooling, device="cpu")
    source = absolute_path(encoder.source)
    lineage = {"stage": "train", "init": source, "init_sha256": source_hash(source), "objective": objective}
    if encoder.extra_config.get("lineage"):
        lineage["parent"] = encoder.extra_config["lineage"]
    return run("train", encoder, corpus, out, config, lineage, {"model": source}, {})
