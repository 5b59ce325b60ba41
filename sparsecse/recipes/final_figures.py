"""The figures a finished recipe run states about its final model: STS-B dev; the recipe's ``evaluation.tasks`` (the
7 STS tasks with bootstrap intervals, the 7 SentEval transfer tasks with theirs) with paired intervals against the
recipe's comparison model; the user's dev and test sets; the encode speed-up, timed as a target times
(:func:`sparsecse.targets.report.stsb_speedups`), unless a target's serving table times every shape; and peak memory while
encoding. :mod:`sparsecse.recipes.card` writes them into the model directory and its card."""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
from pathlib import Path
from typing import Any

from sparsecse.artifacts.files import make_manifest
from sparsecse.artifacts.model_names import resolve_model
from sparsecse.data.sts import read_sts_benchmark
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation import evaluate
from sparsecse.evaluation.compare import ComparisonConfig, compare
from sparsecse.evaluation.config import EvaluationConfig
from sparsecse.evaluation.eval_sets import load_eval_set
from sparsecse.evaluation.memory import peak_encode_memory
from sparsecse.evaluation.results_file import load_results, save_results
from sparsecse.evaluation.tasks import TRANSFER_TASKS
from sparsecse.evaluation.transfer_intervals import paired_transfer_difference
from sparsecse.modeling.cpu_features import describe_cpu
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.recipes.spec import Recipe
from sparsecse.targets.report import stsb_speedups
from sparsecse.targets.timing import INTERLEAVED, ROUNDS

RESULTS = "sts_results.json"
REFERENCE_RESULTS = "reference_" + RESULTS  # the comparison model's
TRANSFER_RESULTS = "transfer_results.json"  # per fold and per test item, so the paired intervals can be redone


# a comparison model's results do not depend on the run: a curve's targets share one copy
_REFERENCE_DIR: contextvars.ContextVar[Path | None] = contextvars.ContextVar("sparsecse_reference_dir", default=None)


@contextlib.contextmanager
def shared_reference_results(directory: Path):
    """While active, runs keep their comparison model's test results (``reference_*.json``) in ``directory``, not
    their own ``eval/``: computed once for runs of one recipe's ``evaluation`` block (a curve's targets)."""
    token = _REFERENCE_DIR.set(Path(directory))
    try:
        yield
    finally:
        _REFERENCE_DIR.reset(token)


def reference_file(work: Path, name: str) -> Path:
    """Where the comparison model's results file ``name`` is kept: the shared directory, else ``work``."""
    shared = _REFERENCE_DIR.get()
    if shared is not None:
        shared.mkdir(parents=True, exist_ok=True)
    return (shared or work) / name


def _evaluate(model: str, data_dir, replicates: int, split: str = "test", tasks: str = "sts",
              show_progress: bool = False):
    return evaluate(model, config=EvaluationConfig(tasks=tasks, data_dir=data_dir, sts_split=split,
        bootstrap=replicates if split == "test" else 0, keep_pairs=split == "test", align_uniform=False,
        show_progress=show_progress))


def _results_file(path: Path, model: str, data_dir, replicates: int, show_progress: bool) -> Path:
    """``path`` holding ``model``'s 7-task results with per-pair similarities (computed once)."""
    if not path.is_file():
        results = _evaluate(model, data_dir, replicates, show_progress=show_progress)
        save_results(path, results, make_manifest("eval_results", inputs={"model": model},
                                                  params={"tasks": "sts", "bootstrap": replicates}), overwrite=True)
    return path


def sts_average(model: str, path: Path, data_dir, show_progress: bool = False) -> float:
    """``model``'s average over the 7 STS tasks (test), its results kept in ``path`` (computed once).

    Args:
        model: a model directory or name.
        path: the results file.
        data_dir: the SentEval data.
        show_progress: progress bars.

    Returns:
        The average (Spearman x 100).
    """
    return float(load_results(_results_file(path, model, data_dir, 0, show_progress))["avg_sts"])


def evaluate_final(recipe: Recipe, input_model: str, model_dir: str, work: Path, data_dir,
                   show_progress: bool) -> dict[str, Any]:
    """Every figure the model card states, computed on ``model_dir`` (results files under ``work``)."""
    ev = recipe.evaluation
    work.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {}
    dev = _evaluate(model_dir, data_dir, 0, split="dev", tasks="STSBenchmark")
    figures["stsb_dev"] = round(float(dev["scores"]["STSBenchmark"]), 4)
    if recipe.data.dev is not None:
        figures["dev_set"] = eval_set_figures(recipe.data.dev, "dev", model_dir, data_dir, ev.bootstrap)
    if ev.test:
        figures.update(_test_figures(recipe, model_dir, work, data_dir, show_progress))
        if recipe.data.test is not None:
            figures["test_set"] = eval_set_figures(recipe.data.test, "test", model_dir, data_dir, ev.bootstrap)
    if ev.speed:  # a target's serving table times every shape, its own among them (one figure each)
        if recipe.target is None:
            figures["speed"] = measure_speed(input_model, model_dir, ev.compare_with, data_dir, show_progress)
        figures["memory"] = measure_memory(input_model, model_dir, data_dir)
    return figures


def eval_set_figures(spec: str, role: str, model_dir: str, data_dir, replicates: int) -> dict[str, Any]:
    """``model_dir`` on the recipe's own dev or test set (``data:``): the figures of
    :meth:`~sparsecse.evaluation.eval_sets.EvalSet.evaluate` (its per-item values left out), with the bootstrap
    seed 0 that ``sparsecse eval --dev/--test`` uses, so both give the same interval.

    Args:
        spec: a pairs file or a task name; role: "dev" or "test" (task names take that split).
        model_dir: the final model; data_dir: the SentEval data (task names).
        replicates: bootstrap replicates (at least 1).
    """
    # only encoding: on the chosen device (cuda when available), as the STS and transfer figures
    figures = load_eval_set(spec, role, data_dir, role).evaluate(SentenceEncoder.load(model_dir, device=None),
                                                                 replicates=max(replicates, 1), seed=0)
    figures.pop("items")
    return figures


def _test_figures(recipe: Recipe, model_dir: str, work: Path, data_dir, show_progress: bool) -> dict[str, Any]:
    """The test figures of the task groups the recipe names (``evaluation.tasks``): the 7 STS tasks with the
    bootstrap interval and the paired comparison, the 7 transfer tasks with theirs."""
    ev = recipe.evaluation
    figures: dict[str, Any] = {"bootstrap": ev.bootstrap}
    if "transfer" in ev.tasks:
        figures.update(transfer_figures(recipe, model_dir, work, data_dir, show_progress))
    if "sts" not in ev.tasks:
        return figures
    mine = _results_file(work / RESULTS, model_dir, data_dir, ev.bootstrap, show_progress)
    results = load_results(mine)
    boot = results.get("bootstrap") or {}
    figures["sts"] = {t: round(float(v), 4) for t, v in results["scores"].items()}
    figures["sts_avg"] = round(float(results["avg_sts"]), 4)
    figures["sts_avg_ci"] = [round(float(x), 4) for x in boot["avg"]] if boot else None
    figures["bootstrap"] = ev.bootstrap
    if ev.compare_with:
        reference = _results_file(reference_file(work, REFERENCE_RESULTS), ev.compare_with, data_dir, ev.bootstrap,
                                  show_progress)
        paired = compare(str(reference), str(mine), config=ComparisonConfig(replicates=max(ev.bootstrap, 1)))
        avg = paired["avg_sts"]
        figures["versus"] = {"model": ev.compare_with, "sts_avg": round(float(avg["a"]), 4),
                             "difference": round(float(avg["diff"]), 4), "paired_ci": [round(float(x), 4) for x in avg["ci"]],
                             "p": float(avg["p"]) if avg.get("p") is not None else None}
    return figures


def _transfer_file(path: Path, model: str, data_dir, recipe: Recipe, show_progress: bool) -> dict[str, Any]:
    """``model``'s transfer results, per fold and per test item, saved at ``path`` (computed once)."""
    ev = recipe.evaluation
    if not path.is_file():
        results = evaluate(model, config=EvaluationConfig(tasks="transfer", data_dir=data_dir,
            fasttest=ev.transfer_fasttest, bootstrap=ev.bootstrap, seed=recipe.seed, align_uniform=False,
            show_progress=show_progress))
        save_results(path, results, make_manifest("eval_results", inputs={"model": model},
                                                  params={"tasks": "transfer", "fasttest": ev.transfer_fasttest,
                                                          "bootstrap": ev.bootstrap}), overwrite=True)
    return json.loads(path.read_text())  # no per-pair STS similarities: not a file load_results reads


def transfer_figures(recipe: Recipe, model_dir: str, work: Path, data_dir, show_progress: bool) -> dict[str, Any]:
    """The 7 SentEval transfer tasks on ``model_dir``: accuracy with its interval (a bootstrap over the test
    items of SST2, TREC and MRPC; the spread of the folds of MR, CR, SUBJ and MPQA), and against the
    recipe's comparison model the paired differences (same folds, same test items).

    Args:
        recipe: the recipe (its ``evaluation`` block and seed).
        model_dir: the final model.
        work: where the results files are kept (a resumed run reuses them).
        data_dir: the SentEval data.
        show_progress: progress bars.

    Returns:
        ``transfer`` ({task: acc, ci or fold_std and fold_range, f1}), ``transfer_avg``,
        ``transfer_settings`` and, with ``compare_with``, ``transfer_versus``.
    """
    ev = recipe.evaluation
    results = _transfer_file(work / TRANSFER_RESULTS, model_dir, data_dir, recipe, show_progress)
    details = results["details"]
    figures: dict[str, Any] = {
        "transfer": {t: {k: _rounded(details[t][k]) for k in ("acc", "ci", "fold_std", "fold_range", "f1")
                         if k in details[t]} for t in TRANSFER_TASKS if t in details},
        "transfer_avg": round(float(results["avg_transfer"]), 4),
        "transfer_settings": ("SentEval's fast settings as in SimCSE's fasttest: 5 folds, RMSprop" if ev.transfer_fasttest
                              else "SentEval's settings as SimCSE reports them: 10 folds, Adam")
                             + f"; seed {recipe.seed}"}
    if ev.compare_with:
        reference = _transfer_file(reference_file(work, f"reference_{TRANSFER_RESULTS}"), ev.compare_with, data_dir,
                                   recipe, show_progress)
        paired = paired_transfer_difference(reference["details"], details, max(ev.bootstrap, 1), recipe.seed)
        figures["transfer_versus"] = {"model": ev.compare_with, "avg": round(float(reference["avg_transfer"]), 4),
                                      "avg_diff": round(float(results["avg_transfer"] - reference["avg_transfer"]), 4),
                                      "tasks": {t: {k: _rounded(v) for k, v in d.items()} for t, d in paired.items()}}
    return figures


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def measure_memory(input_model: str, model_dir: str, data_dir) -> dict[str, Any]:
    """Peak memory while encoding the distinct STS-B test sentences, of the final model and of the input
    model, each in a fresh process (:func:`~sparsecse.evaluation.memory.peak_encode_memory`).

    Args:
        input_model: the recipe's input model.
        model_dir: the final model.
        data_dir: the SentEval data (STS-B test).

    Returns:
        The final model's measurement, with the input model's ``input_peak_rss_bytes`` and
        ``input_runtime_rss_bytes`` added.
    """
    pairs = read_sts_benchmark(data_dir, "test")
    sentences = list(dict.fromkeys([p.s1 for p in pairs] + [p.s2 for p in pairs]))
    mine, theirs = peak_encode_memory(model_dir, sentences), peak_encode_memory(input_model, sentences)
    return {**mine, "input_peak_rss_bytes": theirs["peak_rss_bytes"], "input_runtime_rss_bytes": theirs["runtime_rss_bytes"]}


SPEED_BATCH = 128  # the batch of the card's throughput speed-up (its serving table has every shape)


def measure_speed(input_model: str, model_dir: str, reference: str | None, data_dir,
                  show_progress: bool) -> dict[str, Any]:
    """Encode speed-up of the final model (and the comparison model) over the input model: throughput at batch
    ``SPEED_BATCH``, torch fp32 (loaded as targets load it), timed as a target's candidates are
    (:func:`~sparsecse.targets.report.stsb_speedups`: interleaved rounds in a fresh process, the figure the median
    ratio over the rounds with its interval), on the distinct STS-B test sentences, with the CPU features."""
    if reference and _same_model(reference, input_model):
        reference = None  # compared with itself: the input model's own 1.0x, timed twice, says nothing
    named = {"model": model_dir, **({"reference": reference} if reference else {})}
    timed, shape, sentences = stsb_speedups(input_model, named, data_dir, SPEED_BATCH, rounds=ROUNDS,
                                            show_progress=show_progress)
    return {"speedup": round(timed["model"].speedup, 4), "interval": timed["model"].facts(),
            "reference_speedup": round(timed["reference"].speedup, 4) if reference else None,
            "threads": shape.threads, "cpu": describe_cpu(), "engine": "torch fp32", "loader": shape.loader,
            "batch_size": SPEED_BATCH, "sentences": f"{len(sentences):,} distinct STS-B test sentences, {INTERLEAVED}"}


def _same_model(a: str, b: str) -> bool:
    try:
        return os.path.realpath(resolve_model(a)) == os.path.realpath(resolve_model(b))
    except SparseCSEError:
        return False
