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

EVAL_MODES = ("masked", "shrunk")


# ---------------------------------------------------------------------------- tasks
def task_average(scores: dict[str, float], group: Sequence[str]) -> float | None:
    """Mean over the group's tasks that were evaluated (all 7 in a full sweep), None if none were."""
    values = [scores[t] for t in group if t in scores]
    return float(sum(values) / len(values)) if values else None


# ---------------------------------------------------------------------------- naming
# Names keep every digit where :g would round, so 0.1 and 0.1000001 never share a point file.
def point_name(sparsity: float, lam: float) -> str:
    return f"s{exact_number(sparsity)}-l{exact_number(lam)}"


def budget_point_name(keep_flops: float, lam: float) -> str:
    return f"f{exact_number(keep_flops)}-l{exact_number(lam)}"


def seeded_name(name: str, seed: int) -> str:
    return f"{name}-seed{seed}"


MAX_SEED = 2**32 - 1  # numpy's RandomState limit


def parse_seeds(seeds: str | int | Iterable[int] | None, default: int) -> list[int]:
    """``"0,1,2"`` (or a list) -> distinct integer seeds in the given order; None -> ``[default]``."""
    if seeds is None:
        return [int(default)]
    items = seeds.split(",") if isinstance(seeds, str) else [seeds] if isinstance(seeds, int) else list(seeds)
    try:
        values = [int(str(x).strip()) for x in items if str(x).strip()]
    except ValueError:
        raise SparseCSEError(f"Seeds must be comma-separated integers, not {seeds!r}.") from None
    if not values:
        raise SparseCSEError("No seed given; pass --seeds as comma-separated integers, e.g. 0,1,2.")
    if len(set(values)) != len(values):
        raise SparseCSEError(f"The seeds {seeds!r} repeat a value; each seed is rewound once.")
    outside = [v for v in values if not 0 <= v <= MAX_SEED]
    if outside:
        raise SparseCSEError(f"Seed {outside[0]} is outside what numpy accepts (0 to {MAX_SEED}).")
    return values


def rewind_id(objective: str, settings: dict[str, Any]) -> str:
    """'<objective>-<8 hex>' naming one set of rewinding settings (objective, corpus, init, hyperparameters)."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return f"{objective}-{digest}"


# ---------------------------------------------------------------------------- fingerprint
def fingerprint(encoder, data_dir, split: str, batch_size: int, seed: int, max_batches: int | None,
                positive_threshold: float, scope: str, keep_one_head: bool) -> dict[str, Any]:
    """What must match for a sweep directory to be resumed: the model and the scoring/pruning settings."""
    from sparsecse.data.paths import resolve_data_dir, task_path

    source = encoder.source
    stsb = task_path(data_dir, "STS", "STSBenchmark", f"sts-{split}.csv", task="STSBenchmark")
    return {
        "model": str(source),
        "model_sha256": hash_path(source) if source and os.path.exists(source) else None,
        "pooling": encoder.pooling,
        "max_length": encoder.max_length,
        "scoring": {"split": split, "batch_size": batch_size, "seed": seed, "max_batches": max_batches,
                    "positive_threshold": positive_threshold, "stsb_sha256": hash_path(stsb)},
        "pruning": {"scope": scope, "keep_one_head": keep_one_head},
        "data_dir": str(resolve_data_dir(data_dir).resolve()),
    }


# a sweep directory from before the criterion was recorded pruned every point with these
LEGACY_PRUNING = {"criterion": "abs_grad", "budget_criterion": "abs_grad", "budget_keep_one_head": False}


def pruning_settings(out: Path, criterion: str | None, keep_one_head: bool | None) -> dict[str, Any]:
    """The criterion and keep-one-head rule of sparsity points and of budget points. Defaults: abs_grad and
    keep one head for sparsity points; fisher (heads and neurons on one scale) and no such rule for budget
    points, except in a directory from before these were recorded, which resumes as it was made (abs_grad)."""
    from sparsecse.compress.pruning import DEFAULT_CRITERION
    from sparsecse.compress.scoring import check_criterion

    if criterion is not None:
        check_criterion(criterion)
    legacy = (out / SWEEP_FILE).is_file() and "criterion" not in read_sweep_state(out).get(
        "fingerprint", {}).get("pruning", {})
    return {"criterion": criterion or DEFAULT_CRITERION["sparsity"],
            "budget_criterion": criterion or (LEGACY_PRUNING["budget_criterion"] if legacy
                                              else DEFAULT_CRITERION["budget"]),
            "keep_one_head": True if keep_one_head is None else keep_one_head,
            "budget_keep_one_head": bool(keep_one_head)}


def _differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    diffs = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            diffs.append(f"{prefix}{key} {_short(a)} vs {_short(b)}")
    return diffs


def _short(value, width: int = 48) -> str:
    text = repr(value)
    return text if len(text) <= width else "..." + text[-(width - 3):]


def open_sweep_dir(out: Path, print_: dict[str, Any], overwrite: bool = False) -> dict[str, Any]:
    """Create ``out`` or reopen it; refuses a directory from another model or other scoring settings
    (``overwrite``: deletes that sweep and starts afresh). Safe when several processes open it at once."""
    from sparsecse.artifacts.locks import FileLock

    state_path = out / SWEEP_FILE
    if state_path.is_file():
        old = dict(read_sweep_state(out).get("fingerprint", {}))
        if "pruning" in old:  # directories from before the criterion was recorded
            old["pruning"] = {**LEGACY_PRUNING, **old["pruning"]}
        diffs = _differences(old, print_)
        if diffs and not overwrite:
            raise SparseCSEError(
                f"{out} holds a sweep with different model or scoring settings ({'; '.join(diffs[:3])}); "
                "choose another --out to start a new sweep, or pass --overwrite to replace it.")
        if diffs:
            import shutil

            shutil.rmtree(out)
    elif out.exists() and (not out.is_dir() or any(not p.name.endswith(".lock") for p in out.iterdir())):
        raise SparseCSEError(f"{out} exists and is not a sweep directory; choose another --out.")
    out.mkdir(parents=True, exist_ok=True)
    with FileLock(out / (SWEEP_FILE + ".lock")):  # another process may be creating it right now
        if state_path.is_file():
            return read_sweep_state(out)
        state = {"fingerprint": print_, "runs": []}
        write_json(state_path, state)
    return state


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
    swap this function out); ``options``: device, precision, fasttest."""
    from sparsecse.evaluation import evaluate

    return evaluate(model=model, mask=mask, tasks=",".join(tasks), data_dir=data_dir, seed=seed, keep_pairs=True,
                    **options)


def evaluate_pruned(encoder, mask, tasks, data_dir, seed: int, eval_mode: str, **options) -> dict[str, Any]:
    """Evaluate ``encoder`` with ``mask``: gated (``masked``) or on a physically shrunk copy (``shrunk``)."""
    if eval_mode == "masked":
        return run_evaluation(encoder, mask, tasks, data_dir, seed, **options)
    from sparsecse.compress.shrinking import shrink_encoder

    small = shrink_encoder(copy.deepcopy(encoder), mask)
    try:
        return run_evaluation(small, None, tasks, data_dir, seed, **options)
    finally:
        del small


# ---------------------------------------------------------------------------- the sweep
@dataclass
class SweepResult:
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
        per_sparsity = 1 if self.lambdas == "best" else len(self.lambdas)
        return (len(self.sparsities) * per_sparsity + int(self.dense)) * len(self.seeds)

    def settings(self) -> dict[str, Any]:
        """What names a rewinding setting (the seed is not in it: seeds are points of one setting)."""
        from sparsecse.artifacts.files import sha256_file

        return {"objective": self.objective, "corpus_sha256": sha256_file(self.corpus),
                "init": str(self.init) if self.init else None, "args": self.args}


def _check_grid(sparsities, lambdas) -> tuple[list[float], list[float]]:
    from sparsecse.compress.grid import check_sparsity, parse_grid
    from sparsecse.compress.scoring import check_lambda

    sparsities = [check_sparsity(s) for s in parse_grid(sparsities, "sparsity")]
    lambdas = [check_lambda(v) for v in parse_grid(lambdas, "lambda")]
    return sparsities, lambdas


def plan_rewinds(grid_s, grid_l, objective, corpus, sparsities, lambdas, init, args, dense,
                 seeds: list[int] | None = None) -> RewindPlan:
    from sparsecse.training.api import check_inputs

    if corpus is None:
        raise SparseCSEError("Rewinding needs a training corpus (--corpus FILE).")
    args = dict(args or {})
    # corpus, objective, objective parameters and --lr, checked before anything is scored
    check_inputs("sweep --rewind", corpus, objective, args.get("objective_args"), args.get("lr"))
    if init is not None:
        from sparsecse.modeling.encoder import resolve_model

        resolve_model(init)
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

    def __init__(self, out: Path, encoder, scores, tasks: list[str], data_dir, seed: int, eval_mode: str,
                 scope: str, keep_one_head: bool, say: Callable[[str], None], show_progress: bool = False,
                 eval_options: dict[str, Any] | None = None, pruning: dict[str, Any] | None = None):
        self.out, self.encoder, self.scores, self.tasks = out, encoder, scores, tasks
        self.eval_options = dict(eval_options or {})
        self.show_progress = show_progress
        self.data_dir, self.seed, self.eval_mode = data_dir, seed, eval_mode
        self.scope, self.keep_one_head, self.say = scope, keep_one_head, say
        self.pruning = {**LEGACY_PRUNING, "keep_one_head": keep_one_head, **(pruning or {})}
        self.result = SweepResult(out)
        self.masks_dir = out / "masks"
        self.masks_dir.mkdir(exist_ok=True)

    # ------------------------------------------------------------------ masks
    def mask(self, s: float, lam: float):
        from sparsecse.compress.pruning import mask_filename, prune

        mask = prune(self.scores, s, lam, scope=self.scope, keep_one_head=self.keep_one_head,
                     criterion=self.pruning["criterion"])
        return mask, self._saved(mask, mask_filename(s, lam))

    def budget_mask(self, keep_flops: float, lam: float):
        from sparsecse.compress.pruning import mask_filename, prune

        mask = prune(self.scores, lam=lam, keep_flops=keep_flops, criterion=self.pruning["budget_criterion"],
                     keep_one_head=self.pruning["budget_keep_one_head"])
        return mask, self._saved(mask, mask_filename(keep_flops, lam, "keep_flops"))

    def dense_mask(self):
        """The keep-everything mask, for rewinding the unpruned model as a control."""
        from sparsecse.compress.masks import Mask

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
        name = str(path.relative_to(self.out / "points").with_suffix(""))
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
        from sparsecse.artifacts.locks import FileLock

        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(path.with_name(path.name + ".lock"))
        if not lock.acquire():
            name = str(path.relative_to(self.out / "points").with_suffix(""))
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
        from sparsecse.evaluation.results_file import load_pairs, save_pairs

        path = self.out / "pairs" / f"{name}.safetensors"
        save_pairs(path, {**(load_pairs(path) if path.is_file() else {}), **pairs})

    def dense(self) -> dict[str, Any]:
        record = {"variant": Variant.DENSE, "sparsity": 0.0, "lambda": None, "heads_pruned": 0, "neurons_pruned": 0,
                  "param_sparsity": 0.0}
        path = self.out / "points" / "dense.json"
        return self.locked(path, lambda: self.point(path, record, lambda todo: run_evaluation(
            self.encoder, None, todo, self.data_dir, self.seed, **self.eval_options)))

    def masked(self, s: float, lam: float) -> dict[str, Any]:
        mask, mask_path = self.mask(s, lam)
        record = {"variant": Variant.MASKED, "sparsity": s, "lambda": lam, "mask": mask_path.name, **mask_record(mask)}
        path = self.out / POINTS_DIR / Variant.MASKED / f"{point_name(s, lam)}.json"
        return self.locked(path, lambda: self.point(path, record, lambda todo: evaluate_pruned(
            self.encoder, mask, todo, self.data_dir, self.seed, self.eval_mode, **self.eval_options)))

    def budget(self, keep_flops: float, lam: float) -> dict[str, Any]:
        """A kept-FLOPs budget point (layers may lose all their heads, as with ``prune --keep-flops``)."""
        mask, mask_path = self.budget_mask(keep_flops, lam)
        record = {"variant": Variant.BUDGET, "sparsity": None, "keep_flops": keep_flops, "lambda": lam,
                  "mask": mask_path.name, "kept_flops_ratio": mask.manifest.get("kept_flops_ratio"),
                  **mask_record(mask)}
        path = self.out / POINTS_DIR / Variant.BUDGET / f"{budget_point_name(keep_flops, lam)}.json"
        return self.locked(path, lambda: self.point(path, record, lambda todo: evaluate_pruned(
            self.encoder, mask, todo, self.data_dir, self.seed, self.eval_mode, **self.eval_options)))

    def reconstructed(self, plan, rid: str, keep_flops: float, lam: float) -> dict[str, Any] | None:
        """A budget point refit by retraining-free reconstruction (:mod:`sparsecse.compress.reconstruction`)."""
        mask, mask_path = self.budget_mask(keep_flops, lam)
        record = {"variant": Variant.RECONSTRUCTED, "reconstruct_id": rid, "sparsity": None, "keep_flops": keep_flops,
                  "lambda": lam, "mask": mask_path.name, "kept_flops_ratio": mask.manifest.get("kept_flops_ratio"),
                  **mask_record(mask)}
        path = self.out / POINTS_DIR / Variant.RECONSTRUCTED / rid / f"{budget_point_name(keep_flops, lam)}.json"

        def evaluate(todo):
            refit = copy.deepcopy(self.encoder)
            report = plan.run(refit, mask)
            self.say(f"  reconstructed {budget_point_name(keep_flops, lam)} in {report.seconds:.0f} s")
            return evaluate_pruned(refit, mask, todo, self.data_dir, self.seed, self.eval_mode, **self.eval_options)
        return self.locked(path, lambda: self.point(path, record, evaluate))

    def rewound(self, plan: RewindPlan, rid: str, s: float, lam: float | None, seed: int) -> dict[str, Any] | None:
        """Rewind one point (``lam`` None: the unpruned control) with ``seed`` unless its model exists, then
        evaluate it."""
        name = seeded_name("dense" if lam is None else point_name(s, lam), seed)
        point_path = self.out / POINTS_DIR / Variant.REWOUND / rid / f"{name}.json"
        return self.locked(point_path, lambda: self._rewound(plan, rid, s, lam, seed, name, point_path))

    def _rewound(self, plan: RewindPlan, rid: str, s: float, lam: float | None, seed: int, name: str,
                 point_path: Path) -> dict[str, Any]:
        model_dir = self.out / "rewound" / rid / name
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
            run_rewind(mask_path, plan.corpus, model_dir, init=plan.init, objective=plan.objective, seed=seed,
                       data_dir=self.data_dir, show_progress=self.show_progress, **plan.args)
            record["rewind_seconds"] = round(time.perf_counter() - t0, 1)
        else:
            record["rewind_seconds"] = (read_point(point_path) or {}).get("rewind_seconds")
        return self.point(point_path, record, lambda todo: run_evaluation(
            str(model_dir), None, todo, self.data_dir, seed, **self.eval_options))

    def rewind_jobs(self, plan: RewindPlan, masked: dict[float, dict[float, dict]]) -> list[tuple[float, float | None]]:
        jobs: list[tuple[float, float | None]] = [(0.0, None)] if plan.dense else []
        for s in plan.sparsities:
            if plan.lambdas == "best" and not all(masked[s].values()):
                continue  # another process is evaluating this sparsity's points; it rewinds them too
            lams = [best_lambda(masked[s])] if plan.lambdas == "best" else list(plan.lambdas)
            jobs += [(s, lam) for lam in lams]
        return jobs


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
    (:func:`pruning_settings`). Both are part of the fingerprint a resumed directory must match.
    ``reconstruct`` (a corpus file, or a :class:`sparsecse.compress.reconstruction.ReconstructionPlan`) adds, for
    every budget point, the same mask after retraining-free reconstruction, under a directory named by
    the reconstruction's settings (corpus hash included).
    """
    args = {k: v for k, v in locals().items() if k != "make_report"}
    prep = prepare_sweep(args)
    run_sweep(prep)
    if make_report:
        from sparsecse.sweeps.report import report

        report(prep.out)
    return prep.run.result


@dataclass(frozen=True)
class Point:
    """One unit of a sweep's work, computed by :meth:`PreparedSweep.compute` (in this process or in a
    cluster task). ``kind``: dense, masked, budget, reconstructed or rewound; ``value``: the sparsity (the
    kept-FLOPs budget for budget and reconstructed points); ``lam``: λ (rewound: None is the unpruned
    control, "best" the λ chosen from the masked points when they exist); ``seed``: the rewinding seed."""

    kind: str
    value: float = 0.0
    lam: float | str | None = None
    seed: int | None = None

    @property
    def label(self) -> str:
        if self.kind == Variant.DENSE:
            return "dense"
        if self.kind in (Variant.BUDGET, Variant.RECONSTRUCTED):
            return f"{self.kind}/{budget_point_name(self.value, self.lam)}"
        if self.kind == Variant.MASKED:
            return f"masked/{point_name(self.value, self.lam)}"
        if self.lam is None:
            name = "dense"
        else:
            name = f"s{self.value:g}-l{self.lam if isinstance(self.lam, str) else format(self.lam, 'g')}"
        return f"rewound/{seeded_name(name, self.seed)}"


@dataclass
class PreparedSweep:
    """A sweep checked, opened and scored (:func:`prepare_sweep`): what is left is computing its points."""

    args: dict[str, Any]
    out: Path
    run: SweepRun
    encoder: Any
    fingerprint: dict[str, Any]
    tasks: list[str]
    grid_s: list[float]
    grid_l: list[float]
    grid_b: list[float]
    plan: RewindPlan | None
    recon: tuple | None
    started: float
    settings: dict[str, Any]

    @property
    def grid(self) -> list[tuple[float, float]]:
        return [(s, lam) for lam in self.grid_l for s in self.grid_s]

    @property
    def budget_grid(self) -> list[tuple[float, float]]:
        return [(b, lam) for lam in self.grid_l for b in self.grid_b]

    @property
    def total(self) -> int:
        return (len(self.grid) + len(self.budget_grid) * (2 if self.recon else 1) + int(self.args["dense"])
                + (self.plan.count if self.plan else 0))

    @property
    def rewind_id(self) -> str | None:
        return rewind_id(self.plan.objective, self.plan.settings()) if self.plan else None

    def points(self) -> list[Point]:
        """Every point but the rewound ones, in the order a one-process sweep computes them."""
        points = [Point(Variant.DENSE)] if self.args["dense"] else []
        points += [Point(Variant.MASKED, s, lam) for s, lam in self.grid]
        points += [Point(Variant.BUDGET, b, lam) for b, lam in self.budget_grid]
        points += [Point(Variant.RECONSTRUCTED, b, lam) for b, lam in self.budget_grid] if self.recon else []
        return points

    def rewind_points(self) -> list[Point]:
        """The rewound points (seed-major), at λ "best" until the masked points decide it."""
        if not self.plan:
            return []
        jobs = [(0.0, None)] if self.plan.dense else []
        for s in self.plan.sparsities:
            jobs += [(s, lam) for lam in (["best"] if self.plan.lambdas == "best" else self.plan.lambdas)]
        return [Point(Variant.REWOUND, s, lam, seed) for seed in self.plan.seeds for s, lam in jobs]

    def resolve(self, point: Point) -> Point | None:
        """``point`` with its λ decided (None while a masked point it needs is missing)."""
        if point.lam != "best":
            return point
        masked = {lam: read_point(self.path(Point(Variant.MASKED, point.value, lam))) for lam in self.grid_l}
        if not all(masked.values()):
            return None
        return Point(Variant.REWOUND, point.value, best_lambda(masked), point.seed)

    def path(self, point: Point) -> Path:
        """The point's file (``point`` resolved)."""
        points = self.out / "points"
        if point.kind == Variant.DENSE:
            return points / "dense.json"
        if point.kind == Variant.MASKED:
            return points / Variant.MASKED / f"{point_name(point.value, point.lam)}.json"
        if point.kind == Variant.BUDGET:
            return points / Variant.BUDGET / f"{budget_point_name(point.value, point.lam)}.json"
        if point.kind == Variant.RECONSTRUCTED:
            return points / Variant.RECONSTRUCTED / self.recon[1] / f"{budget_point_name(point.value, point.lam)}.json"
        name = "dense" if point.lam is None else point_name(point.value, point.lam)
        return points / Variant.REWOUND / self.rewind_id / f"{seeded_name(name, point.seed)}.json"

    def done(self, point: Point) -> bool:
        """Whether the point's file holds every requested task."""
        point = self.resolve(point)
        return point is not None and not missing_tasks(read_point(self.path(point)), self.tasks)

    def start_rewinds(self) -> Path:
        """The directory of this rewinding setting, with its settings.json."""
        settings = self.plan.settings()
        rewound_dir = self.out / "rewound" / rewind_id(self.plan.objective, settings)
        if not (rewound_dir / "settings.json").is_file():
            write_json(rewound_dir / "settings.json", {**settings, "corpus": self.plan.corpus})
        return rewound_dir

    def compute(self, point: Point) -> dict[str, Any] | None:
        """Compute ``point`` unless its file is complete (None: another process holds its lock)."""
        run = self.run
        if point.kind == Variant.DENSE:
            return run.dense()
        if point.kind == Variant.MASKED:
            return run.masked(point.value, point.lam)
        if point.kind == Variant.BUDGET:
            return run.budget(point.value, point.lam)
        if point.kind == Variant.RECONSTRUCTED:
            return run.reconstructed(self.recon[0], self.recon[1], point.value, point.lam)
        resolved = self.resolve(point)
        if resolved is None:
            raise SparseCSEError(f"Rewinding sparsity {point.value:g} at the best λ needs its masked points "
                                 f"({', '.join(f'{lam:g}' for lam in self.grid_l)}); not all of them were computed.")
        self.start_rewinds()
        return run.rewound(self.plan, self.rewind_id, resolved.value, resolved.lam, resolved.seed)

    def record(self) -> None:
        """Append this invocation to sweep.json's run history and rewrite the manifest."""
        self.run.result.seconds = time.time() - self.started
        _record_run(self.out, self.run.result, self.started, self.total, self.encoder, self.fingerprint, self.tasks,
                    self.grid_s, self.grid_l, self.plan, self.args["eval_mode"], self.settings)


def prepare_sweep(args: dict[str, Any]) -> PreparedSweep:
    """Check the arguments of :func:`sweep` (all of them, by name), open the sweep directory and score
    (once: later calls read the scores back). Nothing is evaluated yet."""
    from tqdm.auto import tqdm

    from sparsecse.modeling.encoder import SentenceEncoder, check_device, resolve_precision
    from sparsecse.artifacts.files import check_destination
    from sparsecse.compress.scoring import POSITIVE_THRESHOLD

    a = dict(args)
    started = time.time()
    show_progress, eval_mode, seed = a["show_progress"], a["eval_mode"], a["seed"]
    say = a["log"] or (lambda msg: tqdm.write(msg) if show_progress else None)
    if eval_mode not in EVAL_MODES:
        raise SparseCSEError(f"Unknown eval mode {eval_mode!r}; choose masked or shrunk.")
    task_list = resolve_tasks(a["tasks"])
    sparsities = a["sparsities"]
    grid_s, grid_l = (_check_grid(sparsities, a["lambdas"]) if sparsities is not None
                      else ([], _check_grid(0.5, a["lambdas"])[1]))
    grid_b = _check_budgets(a["keep_flops"], sparsities)
    rewind_seeds = parse_seeds(a["seeds"], seed)
    if a["seeds"] is not None and not a["rewind"]:
        raise SparseCSEError("--seeds sets the rewinding seeds; add --rewind (scoring and evaluation use --seed).")
    check_device(a["device"])
    precision = resolve_precision(a["precision"], a["device"])
    out = Path(a["out"])
    check_destination(out, True, inputs={"model": a["model"], "corpus": a["corpus"],
                                         "initial checkpoint": a["rewind_init"]})
    plan = plan_rewinds(grid_s, grid_l, a["objective"], a["corpus"], a["rewind_sparsities"], a["rewind_lambda"],
                        a["rewind_init"], a["rewind_args"], a["rewind_dense"], rewind_seeds) if a["rewind"] else None
    recon = _reconstruction(a["reconstruct"], grid_b)

    pruning = pruning_settings(out, a["criterion"], a["keep_one_head"])
    keep_one_head = pruning["keep_one_head"]
    encoder = SentenceEncoder.load(a["model"], pooling=a["pooling"], device=a["device"])
    print_ = fingerprint(encoder, a["data_dir"], a["split"], a["batch_size"], seed, a["max_batches"],
                         POSITIVE_THRESHOLD, a["scope"], keep_one_head)
    print_["pruning"].update(pruning)
    eval_options = {k: v for k, v in (("precision", precision), ("fasttest", a["fasttest"]))
                    if v not in ("fp32", False)}
    if eval_options:  # only non-default values, so sweeps made before these options existed still match
        print_["evaluation"] = eval_options
    if a["device"] is not None:
        eval_options["device"] = a["device"]
    if eval_mode == "shrunk" or plan:
        _check_shrinkable(encoder, "--eval-mode shrunk" if eval_mode == "shrunk" else "rewinding")
    open_sweep_dir(out, print_, a["overwrite"])
    scores = _cached_scores(out, encoder, a["data_dir"], a["split"], a["batch_size"], seed, a["max_batches"],
                            show_progress, say)
    run = SweepRun(out, encoder, scores, task_list, a["data_dir"], seed, eval_mode, a["scope"], keep_one_head, say,
                   show_progress, eval_options, pruning)
    settings = dict(seed=seed, scope=a["scope"], **pruning, split=a["split"], batch_size=a["batch_size"],
                    max_batches=a["max_batches"], keep_flops=grid_b)
    return PreparedSweep(a, out, run, encoder, print_, task_list, grid_s, grid_l, grid_b, plan, recon, started,
                         settings)


def run_sweep(prep: PreparedSweep) -> None:
    """Compute every point of a prepared sweep in this process (points another process holds are skipped)."""
    from tqdm.auto import tqdm

    run, plan, out = prep.run, prep.plan, prep.out
    bar = tqdm(total=prep.total, desc="sweep", unit="point", disable=not prep.args["show_progress"])
    try:
        if prep.args["dense"]:
            bar.set_postfix_str("dense")
            run.dense()
            bar.update()
        masked: dict[float, dict[float, dict]] = {}
        for s, lam in prep.grid:
            bar.set_postfix_str(f"sparsity {s:g}, λ {lam:g}")
            masked.setdefault(s, {})[lam] = run.masked(s, lam)
            bar.update()
        for b, lam in prep.budget_grid:
            bar.set_postfix_str(f"kept FLOPs {b:g}, λ {lam:g}")
            run.budget(b, lam)
            bar.update()
        if prep.recon:
            plan_r, recon_id = prep.recon
            for b, lam in prep.budget_grid:
                bar.set_postfix_str(f"reconstruct kept FLOPs {b:g}, λ {lam:g}")
                run.reconstructed(plan_r, recon_id, b, lam)
                bar.update()
        if plan:
            rid = prep.rewind_id
            rewound_dir = prep.start_rewinds()
            try:
                jobs = run.rewind_jobs(plan, masked)
                for rewind_seed in plan.seeds:  # seed-major order
                    for s, lam in jobs:
                        name = "dense" if lam is None else point_name(s, lam)
                        bar.set_postfix_str(f"rewind {name}, seed {rewind_seed}")
                        run.rewound(plan, rid, s, lam, rewind_seed)
                        bar.update()
            finally:
                remove_empty_rewinds(rewound_dir)
    finally:
        bar.close()
        prep.record()


def remove_empty_rewinds(rewound_dir: Path) -> None:
    """Settings that produced nothing leave no stub for reports to list."""
    if rewound_dir.is_dir() and [p.name for p in rewound_dir.iterdir()] == ["settings.json"]:
        import shutil

        shutil.rmtree(rewound_dir)


def _reconstruction(reconstruct, budgets: list[float]):
    """(plan, '<method>-<8 hex>' naming its settings) for ``reconstruct``, or None; checked before any model
    loads."""
    if reconstruct is None:
        return None
    if not budgets:
        raise SparseCSEError("--reconstruct refits the kept-FLOPs budget points; add --keep-flops.")
    from sparsecse.compress.reconstruction import reconstruction_plan

    plan = reconstruction_plan(reconstruct)
    settings = {**plan.calibration.describe(), "corpus": None, "method": plan.method, "target": plan.target,
                "ridge": plan.ridge, "weighting": plan.weighting, "max_length": plan.max_length}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
    return plan, f"{plan.method}-{digest}"


def _check_budgets(keep_flops, sparsities) -> list[float]:
    if keep_flops is None:
        if sparsities is None:
            raise SparseCSEError("A sweep needs --sparsities, --keep-flops or both.")
        return []
    from sparsecse.compress.budget import check_budget
    from sparsecse.compress.grid import parse_grid

    return [check_budget(b, "kept-FLOPs budget") for b in parse_grid(keep_flops, "kept-FLOPs")]


def _check_shrinkable(encoder, what: str) -> None:
    """Fail before any work when ``what`` needs physical pruning the architecture lacks."""
    from sparsecse.modeling import SHRUNK_CONFIGS
    from sparsecse.compress.shrinking import base_model_type

    base = base_model_type(encoder.config)
    if base not in SHRUNK_CONFIGS:
        raise SparseCSEError(f"{what} needs physically pruned models, which {base!r} models do not support "
                             f"(supported: {', '.join(SHRUNK_CONFIGS)}).")


def _cached_scores(out: Path, encoder, data_dir, split, batch_size, seed, max_batches, show_progress, say):
    """The sweep's gate scores: computed once, then read back from the sweep directory."""
    from sparsecse.compress.scoring import GateScores, score

    from sparsecse.artifacts.locks import FileLock

    path = out / SCORES_FILE
    with FileLock(out / (SCORES_FILE + ".lock")):  # a second process waits for the first one's scores
        if not path.is_file():
            say(f"Scoring {encoder.source} on STS-B {split} ...")
            scores = score(encoder, data_dir=data_dir, split=split, batch_size=batch_size, seed=seed,
                           max_batches=max_batches, show_progress=show_progress)
            scores.save(path, overwrite=True)
    return GateScores.load(path)  # loaded back, so masks record the score file and its hash


def _record_run(out: Path, result: SweepResult, started: float, total: int, encoder, print_, tasks, grid_s, grid_l,
                plan: RewindPlan | None, eval_mode: str, settings: dict[str, Any]) -> None:
    """Append this invocation to sweep.json's run history and rewrite the sweep's manifest."""
    from sparsecse.artifacts.locks import FileLock

    with FileLock(out / (SWEEP_FILE + ".lock")):
        _record_run_locked(out, result, started, total, encoder, print_, tasks, grid_s, grid_l, plan, eval_mode,
                           settings)


def _record_run_locked(out: Path, result: SweepResult, started: float, total: int, encoder, print_, tasks, grid_s,
                       grid_l, plan: RewindPlan | None, eval_mode: str, settings: dict[str, Any]) -> None:
    state = read_sweep_state(out)
    rewind = {"sparsities": plan.sparsities, "lambda": plan.lambdas, "objective": plan.objective,
              "corpus": plan.corpus, "args": plan.args, "dense_control": plan.dense,
              "seeds": plan.seeds} if plan else None
    state["runs"].append({
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "seconds": round(result.seconds, 1), "sparsities": grid_s, "lambdas": grid_l, "tasks": tasks,
        "eval_mode": eval_mode, "rewind": rewind,
        "points_computed": len(result.computed), "points_reused": len(result.reused),
        "points_skipped_busy": len(result.busy),
        "finished": len(result.computed) + len(result.reused) == total,
    })
    write_json(out / SWEEP_FILE, state)
    write_json(out / "manifest.json", make_manifest(
        "sweep", inputs={"model": encoder.source, "scores": out / SCORES_FILE, "corpus": plan.corpus if plan else None},
        params={"sparsities": grid_s, "lambdas": grid_l, "tasks": tasks, "eval_mode": eval_mode, "rewind": rewind,
                **{k: v for k, v in settings.items() if k != "seed"}},
        seed=settings["seed"], fingerprint=print_))


def run_rewind(mask_path, corpus, out, init=None, objective="simcse", seed=0, data_dir=None, show_progress=False,
               **kwargs):
    """``sparsecse.training.rewind`` (tests swap this function out); resumes a killed rewind."""
    from sparsecse.training import rewind

    return rewind(mask_path, corpus, out, init=init, objective=objective, seed=seed, data_dir=data_dir, resume=True,
                  show_progress=show_progress, **kwargs)
