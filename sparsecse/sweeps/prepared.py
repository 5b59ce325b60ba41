"""A sweep prepared (arguments checked, directory opened, scores computed once) and run point by point, in
this process or as cluster tasks (:class:`~sparsecse.sweeps.prepared.Point` is what a task computes)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.tasks import resolve_tasks
from sparsecse.artifacts.files import make_manifest, write_json
from sparsecse.artifacts.sweep_layout import SCORES_FILE, SWEEP_FILE, Variant, read_point, read_sweep_state
from sparsecse.sweeps.directory import fingerprint, open_sweep_dir, pruning_settings
from sparsecse.sweeps.naming import budget_point_name, parse_seeds, point_name, rewind_id, seeded_name
from sparsecse.sweeps.points import (EVAL_MODES, RewindPlan, SweepResult, SweepRun, _check_grid, best_lambda,
                                     missing_tasks, plan_rewinds)
from sparsecse.artifacts.destinations import check_destination
from sparsecse.training.api import run_inputs
from sparsecse.artifacts.locks import FileLock
from sparsecse.pruning.budget import check_budget
from sparsecse.pruning.grid import parse_grid
from sparsecse.shrinking.reconstruction import reconstruction_plan
from sparsecse.scoring.score import ScoringConfig, score
from sparsecse.scoring.scores import GateScores
from sparsecse.sweeps.config import SweepSpec
from sparsecse.modeling.adapters import base_model_type
from sparsecse.modeling import SHRUNK_CONFIGS
from sparsecse.modeling.encoder import SentenceEncoder, check_device, resolve_precision
from sparsecse.artifacts.sweep_layout import MANIFEST_FILE, POINTS_DIR, REWIND_SETTINGS, REWOUND_DIR


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
        """The point's name in logs and the launcher ('masked/s0.1-l0.5', 'rewound/s0.1-lbest-seed0', ...)."""
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

    spec: SweepSpec
    out: Path
    run: SweepRun
    encoder: Any
    fingerprint: dict[str, Any]
    tasks: list[str]
    grids: tuple[list[float], list[float], list[float]]  # sparsities, λs, kept-FLOPs budgets
    plan: RewindPlan | None
    recon: tuple | None
    started: float
    settings: dict[str, Any]

    @property
    def grid_s(self) -> list[float]:
        """The sparsities."""
        return self.grids[0]

    @property
    def grid_l(self) -> list[float]:
        """The λs."""
        return self.grids[1]

    @property
    def grid_b(self) -> list[float]:
        """The kept-FLOPs budgets."""
        return self.grids[2]

    @property
    def grid(self) -> list[tuple[float, float]]:
        """Every (sparsity, λ), λ-major."""
        return [(s, lam) for lam in self.grid_l for s in self.grid_s]

    @property
    def budget_grid(self) -> list[tuple[float, float]]:
        """Every (kept-FLOPs budget, λ), λ-major."""
        return [(b, lam) for lam in self.grid_l for b in self.grid_b]

    @property
    def total(self) -> int:
        """How many points the sweep has, rewound ones included."""
        return (len(self.grid) + len(self.budget_grid) * (2 if self.recon else 1) + int(self.spec.run.dense)
                + (self.plan.count if self.plan else 0))

    @property
    def rewind_id(self) -> str | None:
        """'<objective>-<8 hex>' naming the rewinding settings (None without rewinding)."""
        return rewind_id(self.plan.objective, self.plan.settings()) if self.plan else None

    def points(self) -> list[Point]:
        """Every point but the rewound ones, in the order a one-process sweep computes them."""
        points = [Point(Variant.DENSE)] if self.spec.run.dense else []
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
        points = self.out / POINTS_DIR
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
        rewound_dir = self.out / REWOUND_DIR / rewind_id(self.plan.objective, settings)
        if not (rewound_dir / REWIND_SETTINGS).is_file():
            write_json(rewound_dir / REWIND_SETTINGS, {**settings, "corpus": self.plan.corpus})
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
        _record_run(self)


def prepare_sweep(spec: SweepSpec) -> PreparedSweep:
    """Check a sweep's settings (a :class:`~sparsecse.sweeps.config.SweepSpec`), open the sweep directory and
    score (once: later calls read the scores back). Nothing is evaluated yet."""
    from tqdm.auto import tqdm

    started = time.time()
    opts, ev, sc, pr, rw = spec.run, spec.evaluate, spec.score, spec.prune, spec.rewind
    say = opts.log or (lambda msg: tqdm.write(msg) if opts.show_progress else None)
    if opts.eval_mode not in EVAL_MODES:
        raise SparseCSEError(f"Unknown eval mode {opts.eval_mode!r}; choose masked or shrunk.")
    task_list = resolve_tasks(ev.tasks)
    grid_s, grid_l = (_check_grid(spec.sparsities, spec.lambdas) if spec.sparsities is not None
                      else ([], _check_grid(0.5, spec.lambdas)[1]))
    grid_b = _check_budgets(spec.keep_flops, spec.sparsities)
    check_device(ev.device)
    precision = resolve_precision(ev.precision, ev.device)
    out = Path(spec.out)
    check_destination(out, True, inputs=run_inputs(
        spec.model, rw.objective if rw else None, rw.args.get("objective_args") if rw else None, ev.data_dir,
        corpus=rw.corpus if rw else None, init=rw.init if rw else None, reconstruct_corpus=spec.reconstruct))
    plan = plan_rewinds(grid_s, grid_l, rw, parse_seeds(rw.seeds, sc.seed)) if rw else None
    recon = _reconstruction(spec.reconstruct, grid_b)

    pruning = pruning_settings(out, pr.criterion, pr.keep_one_head)
    encoder = SentenceEncoder.load(spec.model, pooling=ev.pooling, device=ev.device)
    print_ = fingerprint(encoder, sc, pr.scope, pruning["keep_one_head"])
    print_["pruning"].update(pruning)
    eval_options = {k: v for k, v in (("precision", precision), ("fasttest", ev.fasttest))
                    if v not in ("fp32", False)}
    if eval_options:  # only non-default values, so sweeps made before these options existed still match
        print_["evaluation"] = eval_options
    if ev.device is not None:
        eval_options["device"] = ev.device
    if opts.eval_mode == "shrunk" or plan:
        _check_shrinkable(encoder, "--eval-mode shrunk" if opts.eval_mode == "shrunk" else "rewinding")
    open_sweep_dir(out, print_, opts.overwrite)
    scores = _cached_scores(out, encoder, dataclasses.replace(sc, show_progress=opts.show_progress), say)
    run = SweepRun(out, encoder, scores, task_list, opts.eval_mode, say, opts.show_progress,
                   {"data_dir": ev.data_dir, "seed": ev.seed, **eval_options}, {**pruning, "scope": pr.scope})
    settings = dict(seed=sc.seed, scope=pr.scope, **pruning, split=sc.split, batch_size=sc.batch_size,
                    max_batches=sc.max_batches, keep_flops=grid_b)
    return PreparedSweep(spec, out, run, encoder, print_, task_list, (grid_s, grid_l, grid_b), plan, recon, started,
                         settings)


def run_sweep(prep: PreparedSweep) -> None:
    """Compute every point of a prepared sweep in this process (points another process holds are skipped)."""
    from tqdm.auto import tqdm

    run, plan = prep.run, prep.plan
    bar = tqdm(total=prep.total, desc="sweep", unit="point", disable=not prep.spec.run.show_progress)
    try:
        if prep.spec.run.dense:
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
    if rewound_dir.is_dir() and [p.name for p in rewound_dir.iterdir()] == [REWIND_SETTINGS]:
        import shutil

        shutil.rmtree(rewound_dir)


def _reconstruction(reconstruct, budgets: list[float]):
    """(plan, '<method>-<8 hex>' naming its settings) for ``reconstruct``, or None; checked before any model
    loads."""
    if reconstruct is None:
        return None
    if not budgets:
        raise SparseCSEError("--reconstruct refits the kept-FLOPs budget points; add --keep-flops.")

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

    return [check_budget(b, "kept-FLOPs budget") for b in parse_grid(keep_flops, "kept-FLOPs")]


def _check_shrinkable(encoder, what: str) -> None:
    """Fail before any work when ``what`` needs physical pruning the architecture lacks."""

    base = base_model_type(encoder.config)
    if base not in SHRUNK_CONFIGS:
        raise SparseCSEError(f"{what} needs physically pruned models, which {base!r} models do not support "
                             f"(supported: {', '.join(SHRUNK_CONFIGS)}).")


def _cached_scores(out: Path, encoder, scoring: ScoringConfig, say):
    """The sweep's gate scores: computed once, then read back from the sweep directory."""
    path = out / SCORES_FILE
    with FileLock(out / (SCORES_FILE + ".lock")):  # a second process waits for the first one's scores
        if not path.is_file():
            say(f"Scoring {encoder.source} on STS-B {scoring.split} ...")
            score(encoder, scoring).save(path, overwrite=True)
    return GateScores.load(path)  # loaded back, so masks record the score file and its hash


def _record_run(prep: PreparedSweep) -> None:
    """Append this invocation to sweep.json's run history and rewrite the sweep's manifest."""
    with FileLock(prep.out / (SWEEP_FILE + ".lock")):
        _record_run_locked(prep)


def _record_run_locked(prep: PreparedSweep) -> None:
    out, result, plan, eval_mode, settings = prep.out, prep.run.result, prep.plan, prep.spec.run.eval_mode, prep.settings
    state = read_sweep_state(out)
    rewind = {"sparsities": plan.sparsities, "lambda": plan.lambdas, "objective": plan.objective,
              "corpus": plan.corpus, "args": plan.args, "dense_control": plan.dense,
              "seeds": plan.seeds} if plan else None
    state["runs"].append({
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(prep.started)),
        "seconds": round(result.seconds, 1), "sparsities": prep.grid_s, "lambdas": prep.grid_l, "tasks": prep.tasks,
        "eval_mode": eval_mode, "rewind": rewind,
        "points_computed": len(result.computed), "points_reused": len(result.reused),
        "points_skipped_busy": len(result.busy),
        "finished": len(result.computed) + len(result.reused) == prep.total,
    })
    write_json(out / SWEEP_FILE, state)
    write_json(out / MANIFEST_FILE, make_manifest(
        "sweep", inputs={"model": prep.encoder.source, "scores": out / SCORES_FILE,
                         "corpus": plan.corpus if plan else None},
        params={"sparsities": prep.grid_s, "lambdas": prep.grid_l, "tasks": prep.tasks, "eval_mode": eval_mode,
                "rewind": rewind, **{k: v for k, v in settings.items() if k != "seed"}},
        seed=settings["seed"], fingerprint=prep.fingerprint, configs=prep.spec.record()))
