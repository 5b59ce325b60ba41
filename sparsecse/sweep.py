"""Sparsity sweeps: score once, then prune and evaluate (and optionally rewind) over sparsity x λ.

A sweep directory holds everything, and every finished point is a small JSON file written
atomically, so a killed sweep resumes where it stopped and a larger grid reuses finished points::

    DIR/sweep.json                            fingerprint (model + scoring settings) and run history
    DIR/scores.safetensors (+ .json)          gate scores, computed once
    DIR/masks/mask-s0.02-l0.5.safetensors     one mask per grid point
    DIR/points/dense.json                     the unpruned model's evaluation
    DIR/points/masked/s0.02-l0.5.json         a pruned model (masked, no retraining)
    DIR/rewound/<objective>-<id>/s0.02-l0.5/  a rewound model directory
    DIR/points/rewound/<objective>-<id>/s0.02-l0.5.json
    DIR/results.csv, results.json, summary.md, figures/   rebuilt by :func:`sparsecse.report.report`

A point file records the task scores it holds; asking for more tasks later evaluates only the missing
ones. Rewinding settings are part of the rewound points' path (``<id>`` hashes them), so different
objectives or corpora live side by side in one sweep.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.tasks import STS_TASKS, TRANSFER_TASKS, resolve_tasks
from sparsecse.io import hash_path, make_manifest, write_json

SWEEP_FILE = "sweep.json"
SCORES_FILE = "scores.safetensors"
EVAL_MODES = ("masked", "shrunk")


# ---------------------------------------------------------------------------- tasks
def task_average(scores: dict[str, float], group: Sequence[str]) -> float | None:
    """Mean over the group's tasks that were evaluated (all 7 in a full sweep), None if none were."""
    values = [scores[t] for t in group if t in scores]
    return float(sum(values) / len(values)) if values else None


# ---------------------------------------------------------------------------- naming
def point_name(sparsity: float, lam: float) -> str:
    return f"s{sparsity:g}-l{lam:g}"


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


def _differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    diffs = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            diffs.append(f"{prefix}{key} {a!r} vs {b!r}")
    return diffs


def open_sweep_dir(out: Path, print_: dict[str, Any]) -> dict[str, Any]:
    """Create ``out`` or reopen it; refuses a directory from another model or other scoring settings."""
    state_path = out / SWEEP_FILE
    if state_path.is_file():
        state = json.loads(state_path.read_text())
        diffs = _differences(state.get("fingerprint", {}), print_)
        if diffs:
            raise SparseCSEError(
                f"{out} holds a sweep with different model or scoring settings ({'; '.join(diffs[:3])}); "
                "choose another --out to start a new sweep.")
        return state
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SparseCSEError(f"{out} exists and is not a sweep directory; choose another --out.")
    out.mkdir(parents=True, exist_ok=True)
    state = {"fingerprint": print_, "runs": []}
    write_json(state_path, state)
    return state


# ---------------------------------------------------------------------------- points on disk
def read_point(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:  # written atomically, so only a hand-edited file gets here
        raise SparseCSEError(f"The sweep point {path} is not valid JSON; delete it to recompute the point.") from None


def missing_tasks(point: dict[str, Any] | None, tasks: Sequence[str]) -> list[str]:
    have = (point or {}).get("scores", {})
    return [t for t in tasks if t not in have]


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
def run_evaluation(model, mask, tasks: Sequence[str], data_dir, seed: int) -> dict[str, Any]:
    """``sparsecse.evaluation.evaluate`` on the given tasks (tests swap this function out)."""
    from sparsecse.evaluation import evaluate

    return evaluate(model=model, mask=mask, tasks=",".join(tasks), data_dir=data_dir, seed=seed)


def evaluate_pruned(encoder, mask, tasks, data_dir, seed: int, eval_mode: str) -> dict[str, Any]:
    """Evaluate ``encoder`` with ``mask``: gated (``masked``) or on a physically shrunk copy (``shrunk``)."""
    if eval_mode == "masked":
        return run_evaluation(encoder, mask, tasks, data_dir, seed)
    from sparsecse.shrink import shrink_encoder

    small = shrink_encoder(copy.deepcopy(encoder), mask)
    try:
        return run_evaluation(small, None, tasks, data_dir, seed)
    finally:
        del small


# ---------------------------------------------------------------------------- the sweep
@dataclass
class SweepResult:
    out: Path
    computed: list[str] = field(default_factory=list)  # point names evaluated (or extended) in this run
    reused: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _check_grid(sparsities, lambdas) -> tuple[list[float], list[float]]:
    from sparsecse.grid import check_sparsity, parse_grid
    from sparsecse.scoring import check_lambda

    sparsities = [check_sparsity(s) for s in parse_grid(sparsities, "sparsity")]
    lambdas = [check_lambda(v) for v in parse_grid(lambdas, "lambda")]
    return sparsities, lambdas


def best_lambda(points: dict[float, dict[str, Any]], key: str = "avg_sts") -> float:
    """The λ whose point scores highest on ``key`` (ties: the first λ in ascending order)."""
    scored = [(lam, p.get(key)) for lam, p in sorted(points.items()) if p and p.get(key) is not None]
    if not scored:
        raise SparseCSEError(f"No evaluated point has {key} to choose the best lambda from; "
                             "evaluate the STS tasks or pass --rewind-lambda.")
    return max(scored, key=lambda item: item[1])[0]


def sweep(
    model=None,
    sparsities: str | Iterable[float] = "0.01:0.10:0.01,0.2:0.5:0.1",
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
    data_dir: str | os.PathLike | None = None,
    seed: int = 0,
    split: str = "train",
    batch_size: int = 64,
    max_batches: int | None = None,
    scope: str = "global",
    keep_one_head: bool = True,
    pooling: str | None = None,
    device: str | None = None,
    eval_mode: str = "masked",
    dense: bool = True,
    make_report: bool = True,
    show_progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> SweepResult:
    """Score once, then prune and evaluate every (sparsity, λ); rewind the chosen points if asked.

    ``rewind_sparsities`` (default: the whole grid) picks the points to rewind, at ``rewind_lambda``:
    ``"best"`` (per sparsity, the λ with the best STS average without rewinding) or given values.
    ``rewind_args`` go to :func:`sparsecse.training.rewind` (max_steps, batch_size, lr, objective_args, ...);
    ``rewind_dense`` also retrains the unpruned model the same way, as a control.
    ``eval_mode`` "shrunk" evaluates a physically pruned copy instead of the gated model (same numbers).
    """
    from tqdm.auto import tqdm

    from sparsecse.encoder import SentenceEncoder
    from sparsecse.pruning import mask_filename, prune
    from sparsecse.scoring import POSITIVE_THRESHOLD, GateScores, score

    started = time.time()
    say = log or (lambda msg: tqdm.write(msg) if show_progress else None)
    if eval_mode not in EVAL_MODES:
        raise SparseCSEError(f"Unknown eval mode {eval_mode!r}; choose masked or shrunk.")
    task_list = resolve_tasks(tasks)
    grid_s, grid_l = _check_grid(sparsities, lambdas)
    rewind_plan: list[float] = []
    if rewind:
        if corpus is None:
            raise SparseCSEError("Rewinding needs a training corpus (--corpus FILE).")
        if not Path(corpus).is_file():
            raise SparseCSEError(f"The corpus {corpus} does not exist.")
        rewind_plan = grid_s if rewind_sparsities is None else _check_grid(rewind_sparsities, [0.5])[0]
        outside = [s for s in rewind_plan if s not in grid_s]
        if outside:
            raise SparseCSEError(f"Rewind sparsities {', '.join(f'{s:g}' for s in outside)} are not in the "
                                 "sweep's sparsity grid.")
        if not (isinstance(rewind_lambda, str) and rewind_lambda == "best"):
            rewind_lambda = _check_grid([0.5], rewind_lambda)[1]
            if any(v not in grid_l for v in rewind_lambda):
                raise SparseCSEError("Rewind lambdas must be in the sweep's lambda grid.")

    out = Path(out)
    encoder = SentenceEncoder.load(model, pooling=pooling, device=device)
    print_ = fingerprint(encoder, data_dir, split, batch_size, seed, max_batches, POSITIVE_THRESHOLD, scope,
                         keep_one_head)
    state = open_sweep_dir(out, print_)
    result = SweepResult(out)

    scores_path = out / SCORES_FILE
    if scores_path.is_file():
        scores = GateScores.load(scores_path)
    else:
        say(f"Scoring {encoder.source} on STS-B {split} ...")
        scores = score(encoder, data_dir=data_dir, split=split, batch_size=batch_size, seed=seed,
                       max_batches=max_batches, show_progress=show_progress)
        scores.save(scores_path, overwrite=True)
        scores = GateScores.load(scores_path)  # so masks record the score file and its hash

    def evaluate_point(path: Path, record: dict[str, Any], evaluate: Callable[[list[str]], dict]) -> dict:
        point = read_point(path)
        todo = missing_tasks(point, task_list)
        name = str(path.relative_to(out / "points").with_suffix(""))
        if not todo:
            result.reused.append(name)
            return point
        point = {**record, **(point or {})}
        t0 = time.perf_counter()
        evaluation = evaluate(todo)
        point = merge_evaluation(point, evaluation, time.perf_counter() - t0)
        write_json(path, point)
        result.computed.append(name)
        if point.get("avg_sts") is not None:
            say(f"  {name}: avg STS {point['avg_sts']:.2f} ({time.perf_counter() - t0:.0f} s)")
        return point

    masks_dir = out / "masks"
    masks_dir.mkdir(exist_ok=True)

    def mask_for(s: float, lam: float):
        mask = prune(scores, s, lam, scope=scope, keep_one_head=keep_one_head)
        path = masks_dir / mask_filename(s, lam)
        if not path.is_file():
            mask.save(path, overwrite=True)
        return mask, path

    def dense_mask():
        """The keep-everything mask, for rewinding the unpruned model as a control."""
        from sparsecse.masks import Mask

        mask = Mask.full(*scores.shape)
        mask.manifest = {"kind": "mask", "sparsity": 0.0, "lambda": None, "model": scores.manifest.get("model"),
                         "pooling": scores.manifest.get("pooling"), "encoder_param_sparsity": 0.0}
        path = masks_dir / "mask-dense.safetensors"
        if not path.is_file():
            mask.save(path, overwrite=True)
        return mask, path

    grid = [(s, lam) for lam in grid_l for s in grid_s]
    total = len(grid) + (1 if dense else 0) + (
        len(rewind_plan) * (1 if rewind_lambda == "best" else len(rewind_lambda)) + (1 if rewind_dense else 0)
        if rewind_plan else 0)
    bar = tqdm(total=total, desc="sweep", unit="point", disable=not show_progress)
    try:
        if dense:
            bar.set_postfix_str("dense")
            evaluate_point(out / "points" / "dense.json",
                           {"variant": "dense", "sparsity": 0.0, "lambda": None, "heads_pruned": 0,
                            "neurons_pruned": 0, "param_sparsity": 0.0},
                           lambda todo: run_evaluation(encoder, None, todo, data_dir, seed))
            bar.update()
        masked: dict[float, dict[float, dict]] = {}
        for s, lam in grid:
            bar.set_postfix_str(f"sparsity {s:g}, λ {lam:g}")
            mask, mask_path = mask_for(s, lam)
            record = {"variant": "masked", "sparsity": s, "lambda": lam, "mask": mask_path.name,
                      **mask_record(mask)}
            masked.setdefault(s, {})[lam] = evaluate_point(
                out / "points" / "masked" / f"{point_name(s, lam)}.json", record,
                lambda todo, mask=mask: evaluate_pruned(encoder, mask, todo, data_dir, seed, eval_mode))
            bar.update()
        if rewind_plan:
            _rewind_points(out, rewind_plan, rewind_lambda, masked, mask_for, evaluate_point, bar, say,
                           objective=objective, corpus=corpus, init=rewind_init, rewind_args=rewind_args or {},
                           rewind_dense=rewind_dense, data_dir=data_dir, seed=seed, dense_mask=dense_mask)
    finally:
        bar.close()
        result.seconds = time.time() - started
        state = json.loads((out / SWEEP_FILE).read_text())
        state["runs"].append({
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
            "seconds": round(result.seconds, 1),
            "sparsities": grid_s, "lambdas": grid_l, "tasks": task_list, "eval_mode": eval_mode,
            "rewind": {"sparsities": rewind_plan, "lambda": rewind_lambda, "objective": objective,
                       "corpus": str(corpus), "args": rewind_args} if rewind_plan else None,
            "points_computed": len(result.computed), "points_reused": len(result.reused),
            "finished": len(result.computed) + len(result.reused) == total,
        })
        write_json(out / SWEEP_FILE, state)
        write_json(out / "manifest.json", make_manifest(
            "sweep", inputs={"model": encoder.source, "scores": scores_path,
                             "corpus": str(corpus) if rewind_plan else None},
            params={"sparsities": grid_s, "lambdas": grid_l, "tasks": task_list, "scope": scope,
                    "keep_one_head": keep_one_head, "split": split, "batch_size": batch_size,
                    "max_batches": max_batches, "eval_mode": eval_mode, "rewind": bool(rewind_plan)},
            seed=seed, fingerprint=print_))
    if make_report:
        from sparsecse.report import report

        report(out)
    return result


def _rewind_points(out, plan, rewind_lambda, masked, mask_for, evaluate_point, bar, say, *, objective, corpus,
                   init, rewind_args, rewind_dense, data_dir, seed, dense_mask):
    """Rewind and evaluate each planned (sparsity, λ) (and the unpruned model as a control, if asked);
    each rewound model directory is kept in ``out``."""
    from sparsecse.io import sha256_file

    settings = {"objective": objective, "corpus_sha256": sha256_file(corpus), "init": str(init) if init else None,
                "args": rewind_args, "seed": seed}
    rid = rewind_id(objective, settings)
    models_dir = out / "rewound" / rid
    models_dir.mkdir(parents=True, exist_ok=True)
    write_json(models_dir / "settings.json", {**settings, "corpus": str(corpus)})
    jobs = [("dense", 0.0, None)] if rewind_dense else []
    for s in plan:
        lams = [best_lambda(masked[s])] if rewind_lambda == "best" else list(rewind_lambda)
        jobs += [(point_name(s, lam), s, lam) for lam in lams]
    for name, s, lam in jobs:
        bar.set_postfix_str(f"rewind {name}")
        point_path = out / "points" / "rewound" / rid / f"{name}.json"
        model_dir = models_dir / name
        mask, mask_path = dense_mask() if lam is None else mask_for(s, lam)
        record = {"variant": "rewound", "objective": objective, "rewind_id": rid, "sparsity": s, "lambda": lam,
                  "lambda_choice": None if lam is None else rewind_lambda if isinstance(rewind_lambda, str) else "given",
                  "mask": mask_path.name, "model_dir": str(model_dir.relative_to(out)), **mask_record(mask)}
        if not model_dir.is_dir():
            say(f"Rewinding {name} with {objective} ...")
            t0 = time.perf_counter()
            run_rewind(mask_path, corpus, model_dir, init=init, objective=objective, seed=seed, data_dir=data_dir,
                       **rewind_args)
            record["rewind_seconds"] = round(time.perf_counter() - t0, 1)
        else:
            record["rewind_seconds"] = (read_point(point_path) or {}).get("rewind_seconds")
        evaluate_point(point_path, record, lambda todo: run_evaluation(str(model_dir), None, todo, data_dir, seed))
        bar.update()


def run_rewind(mask_path, corpus, out, init=None, objective="simcse", seed=0, data_dir=None, **kwargs):
    """``sparsecse.training.rewind`` (tests swap this function out); resumes a killed rewind."""
    from sparsecse.training import rewind

    return rewind(mask_path, corpus, out, init=init, objective=objective, seed=seed, data_dir=data_dir, resume=True,
                  show_progress=False, **kwargs)
