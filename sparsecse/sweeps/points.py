"""The work of one sweep: evaluating pruned points, rewinding, recording each point atomically.

``run_evaluation`` and ``run_rewind`` are the seams tests replace (``monkeypatch`` on this module).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.tasks import STS_TASKS, TRANSFER_TASKS
from sparsecse.artifacts.files import write_json
from sparsecse.artifacts.sweep_layout import POINTS_DIR, Variant, read_point
from sparsecse.sweeps.directory import DEFAULT_PRUNING
from sparsecse.sweeps.naming import budget_point_name, point_name, seeded_name, task_average
from sparsecse.artifacts.files import sha256_file
from sparsecse.artifacts.locks import FileLock
from sparsecse.pruning.grid import check_sparsity, parse_grid
from sparsecse.pruning.masks import Mask
from sparsecse.pruning.prune import PruningConfig, mask_filename, prune
from sparsecse.scoring.criteria import check_lambda
from sparsecse.shrinking.surgery import shrink_encoder
from sparsecse.evaluation import evaluate
from sparsecse.evaluation.config import EvaluationConfig
from sparsecse.evaluation.results_file import load_pairs, save_pairs
from sparsecse.modeling.encoder import resolve_model
from sparsecse.training.config import TrainingConfig
from sparsecse.training import rewind
from sparsecse.training.api import check_inputs, teacher_inputs
from sparsecse.artifacts.remote_code import allow_code
from sparsecse.artifacts.sweep_layout import MASKS_DIR, PAIRS_DIR, REWOUND_DIR

EVAL_MODES = ("masked", "shrunk")


# ---------------------------------------------------------------------------- points on disk
def missing_tasks(point: dict[str, Any] | None, tasks: Sequence[str]) -> list[str]:
    """The tasks without a finite score (a NaN or null one, e.g. from an older version, is redone)."""
    have = (point or {}).get("scores", {})
    return [t for t in tasks if not isinstance(have.get(t), (int, float)) or not math.isfinite(have[t])]


def _finite_weights(model_dir: Path) -> bool:
    from safetensors.torch import load_file

    import torch

    return all(torch.isfinite(t).all() for f in model_dir.glob("*.safetensors") for t in load_file(str(f)).values()
               if t.is_floating_point())


def merge_evaluation(point: dict[str, Any], result: dict[str, Any], seconds: float) -> dict[str, Any]:
    """Fold an ``evaluate`` result into a point record (scores merged, averages recomputed)."""
    scores = {**point.get("scores", {}), **{k: float(v) for k, v in result.get("scores", {}).items()}}
    point["scores"] = scores
    point["avg_sts"] = task_average(scores, STS_TASKS)
    point["avg_transfer"] = task_average(scores, TRANSFER_TASKS)
    for key in ("alignment", "uniformity"):
        if result.get(key) is not None:
            point[key] = float(result[key])
    point.setdefault("eval_seconds", 0.0)
    point["eval_seconds"] = round(point["eval_seconds"] + seconds, 3)
    return point


def mask_record(mask) -> dict[str, Any]:
    """What a point file records of its mask: units removed (in total and per layer), parameter sparsity, totals."""
    m = mask.manifest
    return {
        "heads_pruned": mask.heads_pruned,
        "neurons_pruned": mask.neurons_pruned,
        "heads_pruned_per_layer": mask.heads_pruned_per_layer(),
        "neurons_pruned_per_layer": mask.neurons_pruned_per_layer(),
        "param_sparsity": m.get("encoder_param_sparsity"),
        "heads_total": int(mask.head_mask.numel()),
        "neurons_total": int(mask.neuron_mask.numel()),
    }


# ---------------------------------------------------------------------------- evaluation
def run_evaluation(model, mask, tasks: Sequence[str], data_dir, seed: int, **options) -> dict[str, Any]:
    """``sparsecse.evaluation.evaluate`` on the given tasks, keeping the per-pair STS similarities (tests
    swap this function out); ``options``: the other fields of its
    :class:`~sparsecse.evaluation.config.EvaluationConfig` (device, precision, fasttest)."""

    return evaluate(model=model, mask=mask, config=EvaluationConfig(
        tasks=",".join(tasks), data_dir=data_dir, seed=seed, keep_pairs=True, **options))


def evaluate_pruned(encoder, mask, tasks, data_dir, seed: int, eval_mode: str, evaluate: Callable | None = None,
                    **options) -> dict[str, Any]:
    """Evaluate ``encoder`` with ``mask``: gated (``masked``) or on a physically shrunk copy (``shrunk``),
    with ``evaluate`` (default :func:`run_evaluation`)."""
    run_evaluation_ = evaluate or run_evaluation
    if eval_mode == "masked":
        return run_evaluation_(encoder, mask, tasks, data_dir, seed, **options)

    small = shrink_encoder(copy.deepcopy(encoder), mask)
    try:
        return run_evaluation_(small, None, tasks, data_dir, seed, **options)
    finally:
        del small


# ---------------------------------------------------------------------------- the sweep
@dataclass
class SweepResult:
    """What one invocation of a sweep did: the points computed, reused, and left to another process, and its time."""
    out: Path
    computed: list[str] = field(default_factory=list)  # point names evaluated (or extended) in this run
    reused: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)  # points another process was computing (skipped)
    seconds: float = 0.0


@dataclass
class RewindPlan:
    """Which points to rewind and how: at ``lambdas`` ("best" per sparsity, or given values)."""

    sparsities: list[float]
    lambdas: str | list[float]
    objective: str
    corpus: str
    init: str | None
    args: dict[str, Any]
    dense: bool  # also retrain the unpruned model, as a control
    seeds: list[int] = field(default_factory=lambda: [0])  # each point and the control once per seed

    @property
    def count(self) -> int:
        """How many rewound points the plan makes (controls included, every seed)."""
        per_sparsity = 1 if self.lambdas == "best" else len(self.lambdas)
        return (len(self.sparsities) * per_sparsity + int(self.dense)) * len(self.seeds)

    def settings(self) -> dict[str, Any]:
        """What names a rewinding setting (the seed is not in it: seeds are points of one setting)."""

        return {"objective": self.objective, "corpus_sha256": sha256_file(self.corpus),
                "init": str(self.init) if self.init else None, "args": self.args}


def _check_grid(sparsities, lambdas) -> tuple[list[float], list[float]]:

    sparsities = [check_sparsity(s) for s in parse_grid(sparsities, "sparsity")]
    lambdas = [check_lambda(v) for v in parse_grid(lambdas, "lambda")]
    return sparsities, lambdas


def plan_rewinds(grid_s: list[float], grid_l: list[float], config, seeds: list[int] | None = None) -> RewindPlan:
    """The rewinds a :class:`~sparsecse.sweeps.config.RewindConfig` asks for, checked against the grid
    (before anything is scored)."""
    objective, corpus, sparsities, lambdas, init, args, dense = (
        config.objective, config.corpus, config.sparsities, config.lambdas, config.init, config.args, config.dense)

    if corpus is None:
        raise SparseCSEError("Rewinding needs a training corpus (--corpus FILE).")
    args = dict(args or {})
    # corpus, objective, objective parameters and --lr, checked before anything is scored
    check_inputs("sweep --rewind", corpus, objective, args.get("objective_args"), args.get("lr"))
    if init is not None:  # a directory with its own code needs consent: asked now, not after every point ran
        allow_code(resolve_model(init), "initial checkpoint (--init)")
    for teacher in teacher_inputs(objective, args.get("objective_args")):
        allow_code(resolve_model(teacher), "teacher")
    chosen = grid_s if sparsities is None else _check_grid(sparsities, [0.5])[0]
    outside = [s for s in chosen if s not in grid_s]
    if outside:
        raise SparseCSEError(f"Rewind sparsities {', '.join(repr(s) for s in outside)} are not in the "
                             "sweep's sparsity grid.")
    if not (isinstance(lambdas, str) and lambdas == "best"):
        lambdas = _check_grid([0.5], lambdas)[1]
        if any(v not in grid_l for v in lambdas):
            raise SparseCSEError("Rewind lambdas must be in the sweep's lambda grid.")
    return RewindPlan(chosen, lambdas, objective, str(corpus), init, dict(args or {}), dense, seeds or [0])


def best_lambda(points: dict[float, dict[str, Any]], key: str = "avg_sts") -> float:
    """The λ whose point scores highest on ``key`` (ties: the first λ in ascending order)."""
    scored = [(lam, p.get(key)) for lam, p in sorted(points.items()) if p and p.get(key) is not None]
    if not scored:
        raise SparseCSEError(f"No evaluated point has {key} to choose the best lambda from; "
                             "evaluate the STS tasks or pass --rewind-lambda.")
    return max(scored, key=lambda item: item[1])[0]


class SweepRun:
    """One invocation on an opened sweep directory: each point is evaluated unless its file already holds
    every requested task, and written as soon as it is done."""

    def __init__(self, out: Path, encoder, scores, tasks: list[str], eval_mode: str, say: Callable[[str], None],
                 show_progress: bool = False, evaluation: dict[str, Any] | None = None,
                 pruning: dict[str, Any] | None = None):
        """``evaluation``: ``data_dir`` and ``seed``, and the options every evaluation gets (device,
        precision, fasttest); ``pruning``: :func:`~sparsecse.sweeps.directory.pruning_settings` and the
        ranking ``scope``."""
        self.out, self.encoder, self.scores, self.tasks = out, encoder, scores, tasks
        self.eval_options = dict(evaluation or {})
        self.data_dir, self.seed = self.eval_options.pop("data_dir", None), self.eval_options.pop("seed", 0)
        self.show_progress, self.eval_mode, self.say = show_progress, eval_mode, say
        self.pruning = {**DEFAULT_PRUNING, "scope": "global", **(pruning or {})}
        self.scope, self.keep_one_head = self.pruning["scope"], self.pruning["keep_one_head"]
        self.result = SweepResult(out)
        self.masks_dir = out / MASKS_DIR
        self.masks_dir.mkdir(exist_ok=True)
        # the evaluation and rewinding functions: :func:`sparsecse.sweeps.run.sweep` sets its own module's (which
        # tests replace); a sweep prepared elsewhere (cluster tasks) uses these
        self.evaluate_fn, self.rewind_fn = run_evaluation, run_rewind

    # ------------------------------------------------------------------ masks
    def mask(self, s: float, lam: float):

        """The mask of sparsity ``s`` at ``lam`` (the sweep's criterion, scope and keep-one-head rule) and its file."""
        mask = prune(self.scores, s, lam, config=PruningConfig(scope=self.scope, keep_one_head=self.keep_one_head,
                                                               criterion=self.pruning["criterion"]))
        return mask, self._saved(mask, mask_filename(s, lam))

    def budget_mask(self, keep_flops: float, lam: float):

        """The mask of the kept-FLOPs budget ``keep_flops`` at ``lam`` and its file."""
        mask = prune(self.scores, lam=lam, keep_flops=keep_flops,
                     config=PruningConfig(criterion=self.pruning["budget_criterion"],
                                          keep_one_head=self.pruning["budget_keep_one_head"]))
        return mask, self._saved(mask, mask_filename(keep_flops, lam, "keep_flops"))

    def dense_mask(self):
        """The keep-everything mask, for rewinding the unpruned model as a control."""

        mask = Mask.full(*self.scores.shape)
        mask.manifest = {"kind": "mask", "sparsity": 0.0, "lambda": None, "model": self.scores.manifest.get("model"),
                         "pooling": self.scores.manifest.get("pooling"), "encoder_param_sparsity": 0.0}
        return mask, self._saved(mask, "mask-dense.safetensors")

    def _saved(self, mask, name: str) -> Path:
        path = self.masks_dir / name
        if not path.is_file():
            mask.save(path, overwrite=True)
        return path

    # ------------------------------------------------------------------ points
    def point(self, path: Path, record: dict[str, Any], evaluate: Callable[[list[str]], dict]) -> dict[str, Any]:
        """The point stored at ``path``, evaluated on whatever requested tasks it lacks (then saved)."""
        point = read_point(path)
        todo = missing_tasks(point, self.tasks)
        name = str(path.relative_to(self.out / POINTS_DIR).with_suffix(""))
        if not todo:
            self.result.reused.append(name)
            return point
        point = {**record, **(point or {})}
        t0 = time.perf_counter()
        result = evaluate(todo)
        point = merge_evaluation(point, result, time.perf_counter() - t0)
        bad = [task for task, value in point["scores"].items() if not math.isfinite(value)]
        if bad:
            raise SparseCSEError(f"The sweep point {name} scored non-finite values on {', '.join(bad)}; it was not "
                                 "saved.")
        if result.get("pairs"):
            self._save_pairs(name, result["pairs"])
        write_json(path, point)
        self.result.computed.append(name)
        if point.get("avg_sts") is not None:
            self.say(f"  {name}: avg STS {point['avg_sts']:.2f} ({time.perf_counter() - t0:.0f} s)")
        return point

    def locked(self, path: Path, compute: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
        """``compute()`` while holding ``path``'s lock; None (point skipped) while another process holds it."""

        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(path.with_name(path.name + ".lock"))
        if not lock.acquire():
            name = str(path.relative_to(self.out / POINTS_DIR).with_suffix(""))
            holder = lock.holder() or {}
            self.say(f"  {name}: skipped, process {holder.get('pid')} on {holder.get('host')} is computing it")
            self.result.busy.append(name)
            return None
        try:
            return compute()
        finally:
            lock.release()

    def _save_pairs(self, name: str, pairs: dict) -> None:
        """Keep a point's per-pair similarities (merged with tasks evaluated before) for paired tests."""

        path = self.out / PAIRS_DIR / f"{name}.safetensors"
        save_pairs(path, {**(load_pairs(path) if path.is_file() else {}), **pairs})

    def dense(self) -> dict[str, Any]:
        """The unpruned model's point."""
        record = {"variant": Variant.DENSE, "sparsity": 0.0, "lambda": None, "heads_pruned": 0, "neurons_pruned": 0,
                  "param_sparsity": 0.0}
        path = self.out / POINTS_DIR / "dense.json"
        return self.locked(path, lambda: self.point(path, record, lambda todo: self.evaluate_fn(
            self.encoder, None, todo, self.data_dir, self.seed, **self.eval_options)))

    def masked(self, s: float, lam: float) -> dict[str, Any]:
        """The point of sparsity ``s`` at ``lam``, evaluated masked or shrunk."""
        mask, mask_path = self.mask(s, lam)
        record = {"variant": Variant.MASKED, "sparsity": s, "lambda": lam, "mask": mask_path.name, **mask_record(mask)}
        path = self.out / POINTS_DIR / Variant.MASKED / f"{point_name(s, lam)}.json"
        return self.locked(path, lambda: self.point(path, record, lambda todo: evaluate_pruned(
            self.encoder, mask, todo, self.data_dir, self.seed, self.eval_mode, evaluate=self.evaluate_fn,
            **self.eval_options)))

    def budget(self, keep_flops: float, lam: float) -> dict[str, Any]:
        """A kept-FLOPs budget point (layers may lose all their heads, as with ``prune --keep-flops``)."""
        mask, mask_path = self.budget_mask(keep_flops, lam)
        record = {"variant": Variant.BUDGET, "sparsity": None, "keep_flops": keep_flops, "lambda": lam,
                  "mask": mask_path.name, "kept_flops_ratio": mask.manifest.get("kept_flops_ratio"),
                  **mask_record(mask)}
        path = self.out / POINTS_DIR / Variant.BUDGET / f"{budget_point_name(keep_flops, lam)}.json"
        return self.locked(path, lambda: self.point(path, record, lambda todo: evaluate_pruned(
            self.encoder, mask, todo, self.data_dir, self.seed, self.eval_mode, evaluate=self.evaluate_fn,
            **self.eval_options)))

    def reconstructed(self, plan, rid: str, keep_flops: float, lam: float) -> dict[str, Any] | None:
        """A budget point refit by retraining-free reconstruction (:mod:`sparsecse.shrinking.reconstruction`)."""
        mask, mask_path = self.budget_mask(keep_flops, lam)
        record = {"variant": Variant.RECONSTRUCTED, "reconstruct_id": rid, "sparsity": None, "keep_flops": keep_flops,
                  "lambda": lam, "mask": mask_path.name, "kept_flops_ratio": mask.manifest.get("kept_flops_ratio"),
                  **mask_record(mask)}
        path = self.out / POINTS_DIR / Variant.RECONSTRUCTED / rid / f"{budget_point_name(keep_flops, lam)}.json"

        def evaluate(todo):
            refit = copy.deepcopy(self.encoder)
            report = plan.run(refit, mask)
            self.say(f"  reconstructed {budget_point_name(keep_flops, lam)} in {report.seconds:.0f} s")
            return evaluate_pruned(refit, mask, todo, self.data_dir, self.seed, self.eval_mode,
                                   evaluate=self.evaluate_fn, **self.eval_options)
        return self.locked(path, lambda: self.point(path, record, evaluate))

    def rewound(self, plan: RewindPlan, rid: str, s: float, lam: float | None, seed: int) -> dict[str, Any] | None:
        """Rewind one point (``lam`` None: the unpruned control) with ``seed`` unless its model exists, then
        evaluate it."""
        name = seeded_name("dense" if lam is None else point_name(s, lam), seed)
        point_path = self.out / POINTS_DIR / Variant.REWOUND / rid / f"{name}.json"
        return self.locked(point_path, lambda: self._rewound(plan, rid, s, lam, seed, name, point_path))

    def _rewound(self, plan: RewindPlan, rid: str, s: float, lam: float | None, seed: int, name: str,
                 point_path: Path) -> dict[str, Any]:
        model_dir = self.out / REWOUND_DIR / rid / name
        if model_dir.is_dir() and not _finite_weights(model_dir):  # e.g. from a version that saved NaN weights
            import shutil

            self.say(f"  rewound/{rid}/{name}: its weights are not finite; discarding it and rewinding again")
            shutil.rmtree(model_dir)
            point_path.unlink(missing_ok=True)
        mask, mask_path = self.dense_mask() if lam is None else self.mask(s, lam)
        record = {"variant": Variant.REWOUND, "objective": plan.objective, "rewind_id": rid, "seed": seed,
                  "sparsity": s, "lambda": lam,
                  "lambda_choice": None if lam is None else plan.lambdas if isinstance(plan.lambdas, str) else "given",
                  "mask": mask_path.name, "model_dir": str(model_dir.relative_to(self.out)), **mask_record(mask)}
        if not model_dir.is_dir():
            self.say(f"Rewinding {name} with {plan.objective} ...")
            t0 = time.perf_counter()
            self.rewind_fn(mask_path, plan.corpus, model_dir, init=plan.init, objective=plan.objective, seed=seed,
                       data_dir=self.data_dir, show_progress=self.show_progress, **plan.args)
            record["rewind_seconds"] = round(time.perf_counter() - t0, 1)
        else:
            record["rewind_seconds"] = (read_point(point_path) or {}).get("rewind_seconds")
        return self.point(point_path, record, lambda todo: self.evaluate_fn(
            str(model_dir), None, todo, self.data_dir, seed, **self.eval_options))

    def rewind_jobs(self, plan: RewindPlan, masked: dict[float, dict[float, dict]]) -> list[tuple[float, float | None]]:
        """(sparsity, λ) of every rewind this run makes: the control (λ None) and each sparsity at its λs ("best"
        decided from ``masked``)."""
        jobs: list[tuple[float, float | None]] = [(0.0, None)] if plan.dense else []
        for s in plan.sparsities:
            if plan.lambdas == "best" and not all(masked[s].values()):
                continue  # another process is evaluating this sparsity's points; it rewinds them too
            lams = [best_lambda(masked[s])] if plan.lambdas == "best" else list(plan.lambdas)
            jobs += [(s, lam) for lam in lams]
        return jobs


def run_rewind(mask_path, corpus, out, init=None, objective="simcse", seed=0, data_dir=None, show_progress=False,
               **kwargs):
    """``sparsecse.training.rewind`` (tests swap this function out); resumes a killed rewind. ``kwargs``: the
    rewind's ``objective_args`` and ``pooling``, and fields of its
    :class:`~sparsecse.training.config.TrainingConfig` (max_steps, batch_size, lr, ...)."""
    explicit = {k: kwargs.pop(k) for k in ("objective_args", "pooling") if k in kwargs}
    return rewind(mask_path, corpus, out, init=init, objective=objective, seed=seed, **explicit,
                  config=TrainingConfig(data_dir=data_dir, resume=True, show_progress=show_progress, **kwargs))
