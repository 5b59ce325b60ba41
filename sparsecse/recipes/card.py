"""The end of a recipe run: the final model's evaluation (STS-B dev; the recipe's ``evaluation.tasks``: the 7 STS
tasks with bootstrap intervals, the 7 SentEval transfer tasks with theirs; paired intervals against the recipe's
comparison model; encode speed side by side, unless a target's serving table times every shape; peak memory while
encoding) and the final model directory: its weights, ``README.md`` (the model card of
:mod:`sparsecse.cards.model_card`), ``manifest.json`` (the run's), ``recipe.yaml``, ``sts_results.json`` (the
per-pair similarities: ``sparsecse compare`` recomputes the intervals) and ``transfer_results.json`` (per item)."""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import shlex
import shutil
from pathlib import Path
from typing import Any, Callable

from sparsecse.artifacts.files import atomic_dir, make_manifest, write_json
from sparsecse.cards.facts import base_model_name, hub_id, input_metadata, model_facts, portable_path
from sparsecse.cards.model_card import render_card
from sparsecse.data.sts import read_sts_benchmark
from sparsecse.evaluation import evaluate
from sparsecse.evaluation.compare import ComparisonConfig, compare
from sparsecse.evaluation.eval_sets import load_eval_set
from sparsecse.evaluation.memory import peak_encode_memory
from sparsecse.evaluation.results_file import load_results, save_results
from sparsecse.evaluation.speed import speedups
from sparsecse.evaluation.tasks import TRANSFER_TASKS
from sparsecse.evaluation.transfer_intervals import paired_transfer_difference
from sparsecse.modeling.cpu_features import describe_cpu
from sparsecse.artifacts.model_names import resolve_model
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.errors import SparseCSEError
from sparsecse.recipes.spec import Recipe, load_recipe
from sparsecse.targets import fresh
from sparsecse.targets.engines import to_time
from sparsecse.targets.spec import DEFAULT_ENGINE, default_loader
from sparsecse.targets.timing import engine_threads
from sparsecse.evaluation.config import EvaluationConfig

CARD = "README.md"
RESULTS = "sts_results.json"
REFERENCE_RESULTS = "reference_" + RESULTS  # the comparison model's
TRANSFER_RESULTS = "transfer_results.json"  # per fold and per test item, so the paired intervals can be redone
MANIFEST = "manifest.json"
SKIPPED = {"manifest.json", "README.md"}  # the final stage's own, replaced by the recipe's


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
    """Encode speed-up of the final model (and the comparison model) over the input model, torch fp32 (loaded as
    targets load it), side by side on the distinct STS-B test sentences in a fresh process, with the CPU features."""
    if reference and _same_model(reference, input_model):
        reference = None  # compared with itself: the input model's own 1.0x, timed twice, says nothing
    named = {"input": input_model, "model": model_dir, **({"reference": reference} if reference else {})}
    loader = default_loader(DEFAULT_ENGINE)
    models = {key: to_time(path, DEFAULT_ENGINE, loader=loader) for key, path in named.items()}
    speed = fresh.run(speedups, models, "input", data_dir, SPEED_BATCH, 3, show_progress)
    return {"speedup": speed["model"]["speedup"],
            "reference_speedup": speed["reference"]["speedup"] if reference else None,
            "seconds": {k: v["seconds"] for k, v in speed.items()}, "threads": engine_threads(),
            "cpu": describe_cpu(), "engine": "torch fp32", "loader": loader, "batch_size": SPEED_BATCH,
            "sentences": "distinct STS-B test sentences, models taking turns pass by pass, best of 3 per batch"}


def _same_model(a: str, b: str) -> bool:
    try:
        return os.path.realpath(resolve_model(a)) == os.path.realpath(resolve_model(b))
    except SparseCSEError:
        return False


def _link_or_copy(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, copy_function=_link_file) if src.is_dir() else _link_file(str(src), str(dst))


def _link_file(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def command_line(recipe: Recipe, model: str | None, corpus: Path, out: Path) -> str:
    """The command that rebuilds the run, with no path of this machine in it: the recipe by name (or file), the
    model by its hub id (:func:`~sparsecse.cards.facts.base_model_name`), the corpus and output as the user
    named them (:func:`~sparsecse.cards.facts.portable_path`) and a ``--set`` for every setting the run changed.

    Args:
        recipe: the recipe as it ran.
        model: the input model as the user named it (None: the recipe's default).
        corpus: the corpus file.
        out: the output directory.

    Returns:
        The command, quoted for a shell.
    """
    name = recipe.source if recipe.source and Path(recipe.source).parent != Path(__file__).parent / "shipped" \
        else recipe.name
    words = ["sparsecse", "compress", "--recipe", portable_path(name), "--model", base_model_name(model),
             "--corpus", portable_path(corpus)]
    for key, value in changed_settings(recipe, name):
        words += ["--set", f"{key}={portable_path(value)}"]
    return " ".join(shlex.quote(str(x)) for x in words + ["--out", portable_path(out)])


def changed_settings(recipe: Recipe, name: str) -> list[tuple[str, str]]:
    """(``STAGE.KEY``, value as ``--set`` reads it) for each setting of ``recipe`` that differs from the recipe
    ``name`` as written (its ``--set`` overrides); none where ``name`` no longer loads."""
    try:
        written = load_recipe(name).to_dict()
    except SparseCSEError:
        return []
    ran = recipe.to_dict()
    changes = [(key, ran[key]) for key in ("seed", "model") if ran.get(key) != written.get(key)]
    stages = {stage["name"]: stage for stage in written["stages"]}
    for stage in ran["stages"]:
        changes += [(f"{stage['name']}.{key}", value) for key, value in stage.items()
                    if stage["name"] in stages and value != stages[stage["name"]].get(key)]
    changes += [(f"evaluation.{key}", value) for key, value in ran["evaluation"].items()
                if value != written["evaluation"].get(key)]
    for block in ("target", "data"):  # a target's --speedup/--engine/..., the user's --dev/--test
        ran_block, written_block = ran.get(block) or {}, written.get(block) or {}
        changes += [(f"{block}.{key}", value) for key, value in ran_block.items()
                    if value != written_block.get(key)]
    return [(key, _as_set_value(value)) for key, value in changes]


def _as_set_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def finish(recipe: Recipe, input_model: str, corpus: Path, out: Path, final_dir: str, stages: list[dict],
           figures: dict[str, Any], times: Callable[[], dict], *, named_model: str | None) -> dict[str, Any]:
    """Write ``out/model`` atomically: the last model with its ``figures`` (:func:`evaluate_final`'s, and a
    target's measurement), the result files, the recipe, the manifest and the card; a budget search's candidates
    table and plot (``out/candidates``) are copied beside the model. ``named_model`` is the input model as the
    user named it (None: the recipe's default): the card's ``base_model`` and rebuild command name it so.
    Returns the figures."""
    target = out / "model"
    with atomic_dir(target, overwrite=True) as tmp:
        for item in Path(final_dir).iterdir():
            if item.name not in SKIPPED:
                _link_or_copy(item, tmp / item.name)
        for item in sorted((out / "candidates").glob("candidates.*")):
            shutil.copy2(item, tmp / item.name)
        if recipe.evaluation.test:
            for name in (RESULTS, TRANSFER_RESULTS):
                if (out / "eval" / name).is_file():
                    _link_or_copy(out / "eval" / name, tmp / name)
        shutil.copy2(out / "recipe.yaml", tmp / "recipe.yaml")
        manifest = make_manifest("recipe_model", inputs={"model": input_model, "corpus": str(corpus),
                                                         "recipe": recipe.source or recipe.name},
                                 params=recipe.to_dict(), seed=recipe.seed, stages=stages, figures=figures,
                                 seconds=times(), command=command_line(recipe, named_model, corpus, out),
                                 base_model=hub_id(named_model), input_name=base_model_name(named_model))
        write_json(tmp / MANIFEST, manifest)
        (tmp / CARD).write_text(model_card(recipe, input_model, corpus, stages, figures, manifest, tmp),
                                encoding="utf-8")
    return figures


# ------------------------------------------------------------------------------------------- the card
def _sentences(corpus: Path) -> int | None:
    try:
        with open(corpus, encoding="utf-8", errors="replace") as f:
            return sum(1 for line in f if line.strip())
    except OSError:
        return None


def _set_only(value: Any) -> Any:
    """``value`` without its unset (None or empty) settings: the recipe reads the same, and the card prints no null."""
    if isinstance(value, dict):
        return {k: _set_only(v) for k, v in value.items() if v is not None and v != {} and v != ""}
    if isinstance(value, list):
        return [_set_only(v) for v in value]
    return value


def card_facts(recipe: Recipe, input_model: str, corpus: Path, stages: list[dict], figures: dict[str, Any],
               manifest: dict[str, Any], model_dir: Path) -> dict[str, Any]:
    """The facts of a recipe's model card (:mod:`sparsecse.cards.model_card`): what the final model
    directory records, the recipe's figures (evaluation, speed, memory, ``target``), its stages, corpus,
    command, cost and versions.

    Args:
        recipe: the recipe as it ran.
        input_model: the recipe's input model.
        corpus: the recipe's corpus file.
        stages: the stage records of the run.
        figures: :func:`evaluate_final`'s figures (and ``compress --speedup``'s ``target``).
        manifest: the recipe run's manifest (its ``command``, ``seconds``, ``versions``).
        model_dir: the final model directory (being assembled).

    Returns:
        The facts dictionary :func:`~sparsecse.cards.model_card.render_card` reads.
    """
    import yaml

    facts = model_facts(model_dir)
    base = manifest["input_name"]
    facts.update(input_metadata(input_model))  # the input model's language and license, from its own card
    evaluation = {k: v for k, v in figures.items() if k not in ("speed", "memory", "target")}
    if evaluation and not (figures.get("sts") or figures.get("transfer")):
        evaluation["note"] = "No test figures: this run chose settings on dev (`evaluation.test: false`)."
    compression = facts.setdefault("compression", {})
    if figures.get("speed"):
        compression["speed"] = {**figures["speed"], "reference": recipe.evaluation.compare_with}
    compression.update({k: figures[k] for k in ("memory", "target") if figures.get(k)})
    # what each stage puts on the card (its line only where the run recorded it)
    sections = [stage.card_section(stages[i] if i < len(stages) else {}, figures)
                for i, stage in enumerate(recipe.stages)]
    lineage = [section.line for section in sections[:len(stages)]]
    losses = [loss for section in sections for loss in section.losses]
    methods = sorted(set(facts.get("methods") or []) | {m for section in sections for m in section.methods})
    facts.pop("base_model", None)
    if manifest.get("base_model"):
        facts["base_model"] = manifest["base_model"]
    facts.update(
        input_name=base, title=f"{base}, compressed by sparsecse's `{recipe.name}` recipe",
        description=recipe.description, evaluation=evaluation, methods=methods,
        versions=manifest.get("versions") or facts.get("versions") or {},
        training={"recipe": recipe.name, "made_by": "sparsecse compress --recipe", "stages": lineage,
                  "corpus": Path(corpus).name,
                  "corpus_sentences": _sentences(corpus),
                  "losses": losses,
                  "steps": sum(r.get("steps") or 0 for r in stages) or None,
                  "command": manifest.get("command"), "seconds": manifest.get("seconds"),
                  "recipe_yaml": yaml.safe_dump(_set_only(recipe.to_dict()), sort_keys=False)})
    if not compression:
        facts.pop("compression")
    return facts


def model_card(recipe: Recipe, input_model: str, corpus: Path, stages: list[dict], figures: dict[str, Any],
               manifest: dict[str, Any], model_dir: Path) -> str:
    """The recipe's model card text (:func:`card_facts` rendered).

    Args:
        recipe, input_model, corpus, stages, figures, manifest, model_dir: as :func:`card_facts` takes them.

    Returns:
        The text of ``README.md``.
    """
    return render_card(card_facts(recipe, input_model, corpus, stages, figures, manifest, model_dir))
