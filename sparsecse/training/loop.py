"""The training loop on Hugging Face Accelerate: one CPU, one GPU (mixed precision) or many processes.

``--batch-size`` is the global batch: each of the N processes embeds batch/N sentences and the
objectives gather embeddings across processes (``losses.gather_with_grad``), so the in-batch
negatives, the loss and the gradient are those of one process with the whole batch
(``gather_negatives=False``: each process contrasts its own part only, see :mod:`sparsecse.objectives.losses`).
The loss and figures logged at each step are the means over the processes, i.e. those of the global batch.
The data order is a fixed function of (seed, epoch) and the position is the step number, so a
checkpoint resumes exactly where it stopped, with the same or another number of processes.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import nn

from sparsecse.errors import SparseCSEError
from sparsecse.artifacts.files import dumps_json, write_json
from sparsecse.training import time_limit
from sparsecse.training.batches import CorpusSampler, TokenizedBatches
from sparsecse.training.accelerator import gather_objects, wait_for_everyone
from sparsecse.training.rundir import RunDir
from sparsecse.training.state import capture_rng, read_state, restore_rng, write_state
from sparsecse.objectives.losses import gathering


@dataclass
class LoopSettings:
    """What the training loop needs: global batch size, learning rate, truncation, steps, seed, intervals."""
    batch_size: int  # global, over all processes
    lr: float
    max_length: int
    max_steps: int
    seed: int = 0
    eval_steps: int = 125  # 0: no evaluation, the last weights are the result
    save_steps: int = 125  # 0: no checkpoints
    max_grad_norm: float = 1.0  # as the Hugging Face Trainer SimCSE ran on
    weight_decay: float = 0.0
    tensorboard: bool = False
    show_progress: bool = True
    desc: str = "training"
    bucket_by_length: bool = False  # batches of similar token length (less padding); see CorpusSampler
    gather_negatives: bool = True  # in-batch negatives (and similarity pairs) over all processes' sentences
    log_steps: int = 50  # on a GPU the losses stay there and are read (one host sync) every log_steps steps
    patience: int = 0  # stop once this many evaluations in a row have not beaten the best by min_delta (0: never)
    min_delta: float = 0.0
    deadline: float | None = None  # a time (time_limit.clock) the loop ends by: see sparsecse.training.time_limit
    tail_evaluations: float = 0.0  # the run's work after the loop, in this loop's dev evaluations


@dataclass
class LoopResult:
    """What a loop did: its steps, losses, evaluations, best step and score, time spent optimising."""
    steps: int
    losses: dict[int, float] = field(default_factory=dict)  # step -> loss, for the steps this call ran
    history: list[dict[str, Any]] = field(default_factory=list)  # evaluations: step, score
    best_step: int | None = None
    best_score: float | None = None
    best_dir: Path | None = None
    train_seconds: float = 0.0  # optimisation steps only (no evaluation, checkpoints); the device synchronized
    steps_run: int = 0
    stopped_early: bool = False  # the dev score stopped rising (``patience``) before the last step
    fitted_steps: int | None = None  # the step a deadline ended the schedule at (this run or the one it resumed)

    @property
    def steps_per_second(self) -> float:
        """Optimisation steps per second of this call (NaN if it ran none)."""
        return self.steps_run / self.train_seconds if self.train_seconds else float("nan")


class TrainStep(nn.Module):
    """Encoder + objective as one module, so DDP syncs the objective's own modules too."""

    def __init__(self, encoder: nn.Module, objective: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.objective = objective
        owned = {id(m) for m in objective.modules()}
        self.extras = nn.ModuleList([m for m in objective.trainable_extra_modules() if id(m) not in owned])

    def forward(self, batch: dict[str, torch.Tensor], sentences: Sequence[str] | None = None):
        """The objective's (loss, logs) on one ``batch`` (and its ``sentences``, where the objective uses them)."""
        out = self.objective(batch, sentences=sentences) if self.objective.uses_sentences else self.objective(batch)
        return out.loss, dict(out.logs)


def _adamw(params: list[nn.Parameter], **options) -> torch.optim.Optimizer:
    """AdamW, fused (one pass over each tensor) where this torch supports it for these parameters:
    on a small model the optimizer step is a good part of the step time."""
    try:
        return torch.optim.AdamW(params, fused=True, **options)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(params, **options)


def _better(score: float, best: float | None) -> bool:
    """Higher is better; a NaN score (e.g. constant embeddings) never beats a number."""
    if best is None or math.isnan(best):
        return best is None or not math.isnan(score)
    return score > best


def _frozen_names(module: nn.Module) -> set[str]:
    return {name for name, p in module.named_parameters() if not p.requires_grad}


def _trained_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """state_dict minus frozen parameters (e.g. a pretrained generator, rebuilt identically on resume)."""
    frozen = _frozen_names(module)
    return {k: v for k, v in module.state_dict().items() if k not in frozen}


def _load_trained_state(module: nn.Module, state: dict[str, torch.Tensor]) -> None:
    missing, unexpected = module.load_state_dict(state, strict=False)
    if unexpected or set(missing) - _frozen_names(module):
        raise SparseCSEError(f"The checkpoint does not fit the objective's modules "
                             f"(missing {sorted(set(missing) - _frozen_names(module))}, unexpected {unexpected}).")


def _tensorboard(path: Path, start_step: int):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise SparseCSEError("--tensorboard needs the tensorboard package (pip install tensorboard).") from None
    return SummaryWriter(str(path), purge_step=start_step or None)


class Trainer:
    """Runs the optimisation of ``encoder`` under ``objective`` inside ``run_dir``."""

    def __init__(self, accelerator, encoder, objective, sentences: Sequence[str], settings: LoopSettings,
                 run_dir: RunDir, evaluate: Callable[[Any], float] | None,
                 save_model: Callable[[Any, Path], None]):
        self.acc, self.encoder, self.objective, self.settings = accelerator, encoder, objective, settings
        self.run_dir, self.evaluate, self.save_model = run_dir, evaluate, save_model
        lengths = None
        if settings.bucket_by_length:
            lengths = [len(ids) for ids in encoder.tokenizer(list(sentences), truncation=True,
                                                             max_length=settings.max_length)["input_ids"]]
        self.sampler = CorpusSampler(sentences, settings.batch_size, settings.seed,
                                     accelerator.process_index, accelerator.num_processes, lengths)
        self.batches = TokenizedBatches(encoder.tokenizer, self.sampler, settings.max_length, accelerator.device)
        self.module = TrainStep(encoder, objective)
        self.params = [p for p in self.module.parameters() if p.requires_grad]
        optimizer = _adamw(self.params, lr=settings.lr, weight_decay=settings.weight_decay)
        self.end = settings.max_steps  # a deadline may bring the last step nearer (time_limit)
        # linear decay to 0 without warm-up at the last step, the Hugging Face Trainer default SimCSE used
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1.0 - s / self.end))
        # the scheduler is stepped by hand: Accelerate's wrapper would step it once per process
        self.wrapped, self.optimizer = accelerator.prepare(self.module, optimizer)
        self.step = 0
        self.best_step: int | None = None
        self.best_score: float | None = None
        self.history: list[dict[str, Any]] = []
        self.checkpointed_best: int | None = None

    # ------------------------------------------------------------------ checkpoints
    def check_finite_weights(self) -> None:
        """Never evaluate, checkpoint or save weights that hold NaN or infinity (e.g. after a huge --lr)."""
        for name, p in self.encoder.model.named_parameters():
            if not torch.isfinite(p.detach()).all():
                raise SparseCSEError(f"The weights became non-finite (NaN or infinity, first in {name}) by step "
                                     f"{self.step}; nothing was saved. Try a lower --lr.")

    def save_checkpoint(self) -> None:
        """Write a checkpoint (weights, optimizer, schedule, random states); refuses non-finite weights."""
        self.check_finite_weights()
        rng = gather_objects(capture_rng(), self.acc)
        if self.acc.is_main_process:
            def write(tmp: Path) -> None:
                write_state(tmp, "encoder", self.encoder.model.state_dict())
                write_state(tmp, "objective", {"objective": _trained_state(self.objective),
                                               "extras": _trained_state(self.module.extras)})
                optimizer = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}
                if self.acc.scaler is not None:
                    optimizer["scaler"] = self.acc.scaler.state_dict()
                write_state(tmp, "optimizer", optimizer)
                write_state(tmp, "rng", rng)
                write_json(tmp / "trainer_state.json", self._trainer_state())

            self.run_dir.write_checkpoint(self.step, write)
            self.checkpointed_best = self.best_step
        wait_for_everyone(self.acc)

    def _trainer_state(self) -> dict[str, Any]:
        return {"step": self.step, "epoch": self.sampler.epoch_of(self.step), "best_step": self.best_step,
                "best_score": self.best_score, "history": self.history, "processes": self.acc.num_processes,
                "end": self.end}

    def load_checkpoint(self, path: Path) -> None:
        """Restore everything from ``path``; a damaged checkpoint (a truncated tensor file, a blank or
        edited JSON file, tensors that do not fit) is one sentence, never a traceback."""
        try:
            self._load_checkpoint(path)
        except SparseCSEError as exc:
            raise SparseCSEError(f"Cannot resume from {path}: {str(exc).rstrip('.')}; pass --overwrite to start "
                                 "over.") from None
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # safetensors, json, torch and the optimizer raise their own types
            reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            raise SparseCSEError(f"Cannot resume from {path}: the checkpoint is damaged or incomplete ({reason}); "
                                 "pass --overwrite to start over.") from None

    def _load_checkpoint(self, path: Path) -> None:
        device = self.acc.device
        self.encoder.model.load_state_dict(read_state(path, "encoder", device))
        objective = read_state(path, "objective", device)
        _load_trained_state(self.objective, objective["objective"])
        _load_trained_state(self.module.extras, objective["extras"])
        optimizer = read_state(path, "optimizer")
        self.optimizer.load_state_dict(optimizer["optimizer"])
        self.scheduler.load_state_dict(optimizer["scheduler"])
        if self.acc.scaler is not None and "scaler" in optimizer:
            self.acc.scaler.load_state_dict(optimizer["scaler"])
        state = json.loads((path / "trainer_state.json").read_text())
        self.step, self.best_step, self.best_score = state["step"], state["best_step"], state["best_score"]
        self.history = state["history"]
        self.end = min(int(state.get("end", self.settings.max_steps)), self.settings.max_steps)
        self.checkpointed_best = self.best_step
        rng = read_state(path, "rng")
        if self.acc.process_index < len(rng):
            restore_rng(rng[self.acc.process_index])
        else:  # more processes than when the checkpoint was written: a fresh stream for the new ones
            self._seed_process(offset=self.step)
        if self.acc.is_main_process:
            self.run_dir.truncate_log(self.step)
            self.run_dir.prune_best(keep={self.best_step})
        wait_for_everyone(self.acc)

    def _seed_process(self, offset: int = 0) -> None:
        """Each process draws its own dropout masks; process 0 keeps the stream it was seeded with."""
        rank = self.acc.process_index
        if rank or offset:
            from accelerate.utils import set_seed

            set_seed(self.settings.seed + 7919 * rank + 104729 * offset)

    # ------------------------------------------------------------------ the loop
    def _train_step(self) -> tuple[torch.Tensor, dict[str, Any], float]:
        """One optimisation step: (the loss, the objective's figures, both as they are: tensors stay on the
        device until :meth:`_flush` reads them; the learning rate)."""
        lr = self.scheduler.get_last_lr()[0]
        texts, batch = self.batches.get(self.step)
        with gathering(self.settings.gather_negatives):
            loss, logs = self.wrapped(batch, sentences=texts)
        self.acc.backward(loss)
        self.objective.after_backward()
        if self.settings.max_grad_norm:
            self.acc.clip_grad_norm_(self.params, self.settings.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return loss.detach(), logs, lr

    def _flush(self, pending: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The step records of ``pending`` with every figure a number: one host sync for them all. Several
        processes: each figure is the mean over the processes, i.e. the global batch's (the mean of per-process
        means over equal parts; a loss over the gathered batch is the same everywhere)."""
        if not pending:
            return []
        several = self.acc.num_processes > 1  # then every figure is averaged; alone only tensors need reading
        kinds = (int, float, torch.Tensor) if several else (torch.Tensor,)
        keys = ["loss"] + sorted(k for k, v in pending[0].items()
                                 if k not in ("step", "epoch", "loss", "lr") and isinstance(v, kinds)
                                 and not isinstance(v, bool))
        values = torch.stack([torch.stack([torch.as_tensor(r[k], device=self.acc.device).to(torch.float64).reshape(())
                                           for k in keys]) for r in pending])
        if several:
            values = self.acc.reduce(values, reduction="sum") / self.acc.num_processes
        rows = values.tolist()
        return [{**record, **dict(zip(keys, row))} for record, row in zip(pending, rows)]

    def _read_every(self) -> int:
        """Steps between reads of the figures: ``log_steps`` on a GPU (it runs behind the host, and a read waits
        for it), 1 on a CPU (a CPU tensor is read at no cost)."""
        return max(1, self.settings.log_steps) if self.acc.device.type == "cuda" else 1

    def _sync_clock(self) -> float:
        """The time once the device has finished what was queued (CUDA runs behind the host)."""
        if self.acc.device.type == "cuda":
            torch.cuda.synchronize(self.acc.device)
        return time.perf_counter()

    def _evaluate(self) -> dict[str, Any] | None:
        self.check_finite_weights()
        record = None
        if self.acc.is_main_process:
            # full precision, outside any autocast: the recorded score is what the saved weights give
            with torch.autocast(self.acc.device.type, enabled=False):
                score = float(self.evaluate(self.encoder))
            improved = _better(score, self.best_score)
            if improved:
                self.best_step, self.best_score = self.step, score
                self.run_dir.write_best(self.step, lambda tmp: self.save_model(self.encoder, tmp),
                                        keep_step=self.checkpointed_best)
            record = {"step": self.step, "stsb_dev_spearman": score, "best": improved}
            self.history.append({"step": self.step, "score": score})
        wait_for_everyone(self.acc)
        return record

    def _stalled(self) -> bool:
        """Whether the last ``patience`` evaluations fell short of the best before them by ``min_delta``."""
        s, scores = self.settings, [h["score"] for h in self.history]
        stalled = bool(s.patience) and len(scores) > s.patience and \
            max(scores[-s.patience:]) < max(scores[:-s.patience]) + s.min_delta
        if s.patience and self.acc.num_processes > 1:  # the main process, which evaluates, decides for all
            from accelerate.utils import broadcast_object_list
            stalled = broadcast_object_list([stalled], from_process=0)[0]
        return bool(stalled)

    def _fit_to_deadline(self, result: LoopResult, step_seconds: float, eval_seconds: float) -> None:
        """Bring the last step (and the schedule's end) nearer where the steps left would not end by the deadline
        with the run's work after the loop (:func:`~sparsecse.training.time_limit.steps_that_fit`); the main process
        decides for all."""
        s = self.settings
        end = self.end
        if self.acc.is_main_process:
            left = s.deadline - time_limit.clock() - s.tail_evaluations * eval_seconds
            end = min(self.end, time_limit.steps_that_fit(self.step, self.end, s.eval_steps if self.evaluate else 0,
                                                          step_seconds, eval_seconds, left))
        if self.acc.num_processes > 1:
            from accelerate.utils import broadcast_object_list
            end = broadcast_object_list([end], from_process=0)[0]
        if end < self.end:
            self.end = int(end)
            self._bar.total = self.end
            self._bar.refresh()

    def _timed_evaluation(self, log, board, bar) -> float:
        """One evaluation, reported; its seconds."""
        started = time_limit.clock()
        record = self._evaluate()
        if self.acc.is_main_process:
            self._report([record], log, board, bar)
        return time_limit.clock() - started

    def run(self, resume_from: Path | None) -> LoopResult:
        """Train to the last step (from the checkpoint ``resume_from`` if given); what the loop did."""
        s = self.settings
        if resume_from is not None:
            self.load_checkpoint(resume_from)
        else:
            self._seed_process()
        main = self.acc.is_main_process
        from tqdm.auto import tqdm

        bar = self._bar = tqdm(total=self.end, initial=self.step, desc=s.desc, unit="step", dynamic_ncols=True,
                               disable=not (s.show_progress and main))
        log = open(self.run_dir.log_path, "a", encoding="utf-8") if main else None
        board = _tensorboard(self.run_dir.path / "tensorboard", self.step) if s.tensorboard and main else None
        result = LoopResult(steps=s.max_steps)
        self.wrapped.train()
        pending: list[dict[str, Any]] = []
        log_every = self._read_every()

        def flush() -> None:
            """Read the pending losses (the device synchronized), check them, log them."""
            records = self._flush(pending)
            pending.clear()
            for record in records:
                result.losses[record["step"]] = record["loss"]
                if not math.isfinite(record["loss"]):
                    if main:
                        self._report([r for r in records if r["step"] < record["step"]], log, board, bar)
                    raise SparseCSEError(f"The loss became {record['loss']} at step {record['step']}; try a lower "
                                         "--lr.")
            if main:
                self._report(records, log, board, bar)

        timed = s.deadline is not None
        eval_seconds = evaluating = 0.0  # the last evaluation's seconds; all of them since the steps began
        try:
            steps_began = time_limit.clock()  # a step's time for the deadline: with its checkpoints, no evaluation
            tick = time.perf_counter()
            while self.step < self.end:
                loss, logs, lr = self._train_step()
                result.steps_run += 1
                pending.append({"step": self.step, "epoch": self.sampler.epoch_of(self.step - 1), "loss": loss,
                                "lr": lr, **logs})
                bar.update(1)
                evaluate = bool(s.eval_steps and self.evaluate and (self.step % s.eval_steps == 0
                                                                    or self.step == self.end))
                save = bool(s.save_steps and self.step % s.save_steps == 0 and self.step < self.end)
                fit = timed and (evaluate or result.steps_run == time_limit.FIT_AFTER_STEPS)
                # the first fit times an evaluation too (its weights a candidate like any other)
                evaluate = evaluate or bool(fit and s.eval_steps and self.evaluate)
                if evaluate or save or fit or len(pending) >= log_every or self.step == self.end:
                    result.train_seconds += self._sync_clock() - tick
                    flush()  # logged before the evaluation and the checkpoint, so a resumed log never lacks a step
                    if evaluate:
                        eval_seconds = self._timed_evaluation(log, board, bar)
                        evaluating += eval_seconds
                    if save:
                        self.save_checkpoint()
                    if fit:
                        step_seconds = (time_limit.clock() - steps_began - evaluating) / result.steps_run
                        self._fit_to_deadline(result, step_seconds, eval_seconds)
                    tick = time.perf_counter()
                    if evaluate and self._stalled():
                        result.stopped_early = self.step < self.end
                        break
            self.check_finite_weights()  # the last weights may be saved as the model
        finally:
            self.batches.close()
            bar.close()
            if log:
                log.close()
            if board:
                board.close()
        result.history, result.best_step, result.best_score = self.history, self.best_step, self.best_score
        result.fitted_steps = self.end if self.end < s.max_steps else None
        if main and self.best_step is not None:
            result.best_dir = self.run_dir.best_dir(self.best_step)
        return result

    def _report(self, records: list[dict | None], log, board, bar) -> None:
        for record in filter(None, records):
            log.write(dumps_json(record) + "\n")
            if board is not None:
                for key, value in record.items():
                    if key not in ("step", "best") and isinstance(value, (int, float)):
                        board.add_scalar(key, value, record["step"])
        log.flush()
        losses = [r["loss"] for r in records if r and "loss" in r]
        self._last_loss = losses[-1] if losses else getattr(self, "_last_loss", None)
        if self._last_loss is not None or self.best_score is not None:
            postfix = {"loss": f"{self._last_loss:.4g}"} if self._last_loss is not None else {}
            if self.best_score is not None:
                postfix["best_dev"] = f"{self.best_score:.2f}"
            bar.set_postfix(postfix, refresh=False)
