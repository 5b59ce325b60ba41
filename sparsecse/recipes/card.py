"""The end of a recipe run: the final model directory, with the figures :mod:`sparsecse.recipes.final_figures`
measured: its weights, ``README.md`` (the model card of :mod:`sparsecse.cards.model_card`), ``manifest.json`` (the
run's), ``recipe.yaml``, ``sts_results.json`` (the per-pair similarities: ``sparsecse compare`` recomputes the
intervals) and ``transfer_results.json`` (per item); and the command that rebuilds it."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path
from typing import Any, Callable

from sparsecse.artifacts.files import atomic_dir, make_manifest, write_json
from sparsecse.artifacts.model_dir import CARD
from sparsecse.cards.facts import base_model_name, hub_id, input_metadata, model_facts, portable_path
from sparsecse.cards.model_card import render_card
from sparsecse.errors import SparseCSEError
from sparsecse.recipes.final_figures import RESULTS, TRANSFER_RESULTS
from sparsecse.recipes.spec import Recipe, load_recipe

MANIFEST = "manifest.json"
SKIPPED = {"manifest.json", "README.md"}  # the final stage's own, replaced by the recipe's


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
    """Write ``out/model`` atomically: the last model with its ``figures`` (:func:`~sparsecse.recipes.final_figures.evaluate_final`'s, and a
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
        figures: :func:`~sparsecse.recipes.final_figures.evaluate_final`'s figures (and ``compress --speedup``'s ``target``).
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
