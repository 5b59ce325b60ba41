"""The end of a recipe run: the final model's evaluation (STS-B dev, the 7 STS tasks with bootstrap
intervals, a paired interval against the recipe's comparison model, encode speed measured side by side)
and the final model directory: its weights, ``README.md`` (a model card with YAML front matter as
sentence-transformers writes one), ``manifest.json`` (the recipe run's), ``recipe.yaml`` and
``sts_results.json`` (the per-pair similarities, so anyone can recompute the intervals with
``sparsecse compare``)."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path
from typing import Any, Callable

from sparsecse.artifacts import model_store
from sparsecse.artifacts.files import atomic_dir, make_manifest, write_json
from sparsecse.evaluation import evaluate
from sparsecse.evaluation.compare import compare
from sparsecse.evaluation.results_file import load_results, save_results
from sparsecse.evaluation.speed import speedups
from sparsecse.modeling.cpu_features import describe_cpu
from sparsecse.artifacts.model_names import MODELS_ENV
from sparsecse.modeling.encoder import DEFAULT_MODEL_NAME, SentenceEncoder, default_model_path
from sparsecse.errors import SparseCSEError
from sparsecse.recipes.spec import Recipe, load_recipe

CARD = "README.md"
RESULTS = "sts_results.json"
MANIFEST = "manifest.json"
SKIPPED = {"manifest.json", "README.md"}  # the final stage's own, replaced by the recipe's


def base_model_name(model: str) -> str:
    """The input model as a model card names it: the hub name of the embedded default, the name of a model
    installed in sparsecse's model store or of a local copy found through ``$SPARSECSE_MODELS`` (never this
    machine's path), else as given."""
    try:
        if os.path.abspath(model) == os.path.abspath(default_model_path()):
            return DEFAULT_MODEL_NAME
    except Exception:  # the default model's package may be absent
        pass
    for known in model_store.KNOWN_MODELS.values():
        installed = model_store.installed_path(known.name)
        if installed is not None and os.path.isdir(model) and os.path.samefile(model, installed):
            return known.name
    parent = os.path.dirname(os.path.abspath(model))
    for folder in filter(None, os.environ.get(MODELS_ENV, "").split(os.pathsep)):
        if os.path.isdir(model) and os.path.isdir(folder) and os.path.samefile(parent, folder):
            return os.path.basename(os.path.abspath(model))
    return model


def _evaluate(model: str, data_dir, replicates: int, split: str = "test", tasks: str = "sts",
              show_progress: bool = False):
    return evaluate(model, tasks=tasks, data_dir=data_dir, sts_split=split, bootstrap=replicates if split == "test" else 0,
                    keep_pairs=split == "test", align_uniform=False, show_progress=show_progress)


def _results_file(path: Path, model: str, data_dir, replicates: int, show_progress: bool) -> Path:
    """``path`` holding ``model``'s 7-task results with per-pair similarities (computed once)."""
    if not path.is_file():
        results = _evaluate(model, data_dir, replicates, show_progress=show_progress)
        save_results(path, results, make_manifest("eval_results", inputs={"model": model},
                                                  params={"tasks": "sts", "bootstrap": replicates}), overwrite=True)
    return path


def evaluate_final(recipe: Recipe, input_model: str, model_dir: str, work: Path, data_dir,
                   show_progress: bool) -> dict[str, Any]:
    """Every figure the model card states, computed on ``model_dir`` (results files under ``work``)."""
    ev = recipe.evaluation
    work.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {}
    dev = _evaluate(model_dir, data_dir, 0, split="dev", tasks="STSBenchmark")
    figures["stsb_dev"] = round(float(dev["scores"]["STSBenchmark"]), 4)
    if ev.test:
        figures.update(_test_figures(recipe, model_dir, work, data_dir, show_progress))
    if ev.speed:
        figures["speed"] = measure_speed(input_model, model_dir, ev.compare_with, data_dir, show_progress)
    return figures


def _test_figures(recipe: Recipe, model_dir: str, work: Path, data_dir, show_progress: bool) -> dict[str, Any]:
    """The 7 STS tasks' test figures, with the bootstrap interval and the paired comparison."""
    ev = recipe.evaluation
    figures: dict[str, Any] = {}
    mine = _results_file(work / RESULTS, model_dir, data_dir, ev.bootstrap, show_progress)
    results = load_results(mine)
    boot = results.get("bootstrap") or {}
    figures["sts"] = {t: round(float(v), 4) for t, v in results["scores"].items()}
    figures["sts_avg"] = round(float(results["avg_sts"]), 4)
    figures["sts_avg_ci"] = [round(float(x), 4) for x in boot["avg"]] if boot else None
    figures["bootstrap"] = ev.bootstrap
    if ev.compare_with:
        reference = _results_file(work / "reference_sts_results.json", ev.compare_with, data_dir, ev.bootstrap,
                                  show_progress)
        paired = compare(str(reference), str(mine), replicates=max(ev.bootstrap, 1))
        avg = paired["avg_sts"]
        figures["versus"] = {"model": ev.compare_with, "sts_avg": round(float(avg["a"]), 4),
                             "difference": round(float(avg["diff"]), 4), "paired_ci": [round(float(x), 4) for x in avg["ci"]],
                             "p": float(avg["p"]) if avg.get("p") is not None else None}
    return figures


def measure_speed(input_model: str, model_dir: str, reference: str | None, data_dir,
                  show_progress: bool) -> dict[str, Any]:
    """Encode speed-up of the final model (and the comparison model) over the input model, torch fp32,
    measured side by side on the distinct STS-B test sentences, with the machine's CPU features."""
    import torch

    models = {"input": SentenceEncoder.load(input_model, device="cpu"),
              "model": SentenceEncoder.load(model_dir, device="cpu")}
    if reference:
        models["reference"] = SentenceEncoder.load(reference, device="cpu")
    speed = speedups(models, "input", data_dir, show_progress=show_progress)
    return {"speedup": speed["model"]["speedup"],
            "reference_speedup": speed["reference"]["speedup"] if reference else None,
            "seconds": {k: v["seconds"] for k, v in speed.items()}, "threads": torch.get_num_threads(),
            "cpu": describe_cpu(), "engine": "torch fp32",
            "sentences": "distinct STS-B test sentences, interleaved batch by batch, best of 3"}


def _link_or_copy(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst, copy_function=_link_file)
    else:
        _link_file(str(src), str(dst))


def _link_file(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def command_line(recipe: Recipe, model: str, corpus: Path, out: Path) -> str:
    """The command that rebuilds the run: the recipe by name (or file) and a ``--set`` for every setting the
    run changed from it."""
    name = recipe.source if recipe.source and Path(recipe.source).parent != Path(__file__).parent / "shipped" \
        else recipe.name
    words = ["sparsecse", "compress", "--recipe", name, "--model", base_model_name(model), "--corpus", corpus]
    for key, value in changed_settings(recipe, name):
        words += ["--set", f"{key}={value}"]
    return " ".join(shlex.quote(str(x)) for x in words + ["--out", out])


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
    return [(key, _as_set_value(value)) for key, value in changes]


def _as_set_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def finish(recipe: Recipe, input_model: str, corpus: Path, out: Path, final_dir: str, stages: list[dict],
           data_dir, show_progress: bool, evaluate: bool, times: Callable[[], dict]) -> dict[str, Any]:
    """Evaluate the last model (``evaluate``) and write ``out/model`` atomically; returns the figures."""
    figures = evaluate_final(recipe, input_model, final_dir, out / "eval", data_dir, show_progress) if evaluate else {}
    target = out / "model"
    with atomic_dir(target, overwrite=True) as tmp:
        for item in Path(final_dir).iterdir():
            if item.name not in SKIPPED:
                _link_or_copy(item, tmp / item.name)
        if evaluate and recipe.evaluation.test:
            _link_or_copy(out / "eval" / RESULTS, tmp / RESULTS)
        shutil.copy2(out / "recipe.yaml", tmp / "recipe.yaml")
        manifest = make_manifest("recipe_model", inputs={"model": input_model, "corpus": str(corpus),
                                                         "recipe": recipe.source or recipe.name},
                                 params=recipe.to_dict(), seed=recipe.seed, stages=stages, figures=figures,
                                 seconds=times(), command=command_line(recipe, input_model, corpus, out))
        write_json(tmp / MANIFEST, manifest)
        (tmp / CARD).write_text(model_card(recipe, input_model, stages, figures, manifest), encoding="utf-8")
    return figures


# ------------------------------------------------------------------------------------------- the card
def front_matter(recipe: Recipe, input_model: str, figures: dict[str, Any]) -> dict[str, Any]:
    """The card's YAML metadata (sentence-transformers' fields; scores as fractions, as it writes them)."""
    meta: dict[str, Any] = {
        "base_model": base_model_name(input_model),
        "library_name": "sentence-transformers",
        "pipeline_tag": "sentence-similarity",
        "tags": ["sentence-transformers", "sentence-similarity", "feature-extraction", "sparsecse",
                 *sorted({"pruned" if s.type == "prune" else "distilled" for s in recipe.stages
                          if s.type in ("prune", "distill")})],
        "sparsecse_recipe": recipe.name,
    }
    if figures.get("sts"):
        metrics = [{"task": {"type": "semantic-similarity", "name": "Semantic Similarity"},
                    "dataset": {"name": task, "type": task.lower()},
                    "metrics": [{"type": "spearman_cosine", "value": round(score / 100, 6), "name": "Spearman Cosine"}]}
                   for task, score in figures["sts"].items()]
        meta["model-index"] = [{"name": f"{base_model_name(input_model)} ({recipe.name})", "results": metrics}]
    return meta


def _ci(ci, signed: bool = False) -> str:
    if not ci:
        return ""
    return f"[{ci[0]:+.2f}, {ci[1]:+.2f}]" if signed else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def model_card(recipe: Recipe, input_model: str, stages: list[dict], figures: dict[str, Any],
               manifest: dict[str, Any]) -> str:
    import yaml

    base = base_model_name(input_model)
    lines = ["---", yaml.safe_dump(front_matter(recipe, input_model, figures), sort_keys=False).rstrip(), "---", "",
             f"# {base}, compressed by sparsecse's `{recipe.name}` recipe", ""]
    if recipe.description:
        lines += [recipe.description.strip(), ""]
    lines += ["## Lineage", "", f"- input model: `{base}`"]
    for i, (stage, record) in enumerate(zip(recipe.stages, stages), 1):
        lines.append(f"- stage {i}, `{stage.name}`: {stage.describe()}" + (
            f" (STS-B dev {record['stsb_dev']:.2f})" if record.get("stsb_dev") is not None else "") + (
            f" (kept {record['kept_flops_ratio']:.4f} of layer FLOPs)" if record.get("kept_flops_ratio") else ""))
    versus = figures.get("versus")
    if figures.get("sts"):
        lines += ["", "## Results", "",
                  "Spearman x 100 of cosine similarities (SentEval protocol); 95% intervals from "
                  f"{figures.get('bootstrap')} paired bootstrap resamples of the test pairs (`sts_results.json` holds "
                  "the per-pair similarities: `sparsecse compare` recomputes them).", "",
                  "| task | score |", "|---|---:|"]
        lines += [f"| {task} | {score:.2f} |" for task, score in figures["sts"].items()]
        lines += [f"| **STS avg (7 tasks)** | **{figures['sts_avg']:.2f}** {_ci(figures.get('sts_avg_ci'))} |",
                  f"| STS-B dev (the checkpoint choice) | {figures['stsb_dev']:.2f} |"]
        if versus:
            lines += ["", f"Against `{versus['model']}` ({versus['sts_avg']:.2f}): **{versus['difference']:+.2f}** "
                          f"{_ci(versus['paired_ci'], signed=True)} (paired bootstrap, B - A)."]
    elif figures:
        lines += ["", "## Results", "", f"STS-B dev (the checkpoint choice): {figures['stsb_dev']:.2f}. No test "
                  "figures: this run chose settings on dev (`evaluation.test: false`)."]
    speed = figures.get("speed")
    if speed:
        lines += ["", "## Speed", "",
                  f"Encode speed-up over `{base}` in {speed['engine']}, {speed['threads']} threads, "
                  f"{speed['sentences']}: **{speed['speedup']:.2f}x**"
                  + (f" (`{recipe.evaluation.compare_with or 'reference'}`: {speed['reference_speedup']:.2f}x)"
                     if speed.get("reference_speedup") else "") + f". Machine: {speed['cpu']}."]
    seconds = manifest.get("seconds") or {}
    if seconds:
        lines += ["", "## Cost", "", "| stage | wall time |", "|---|---:|"]
        lines += [f"| {k} | {v / 60:.1f} min |" for k, v in seconds.items()]
        lines += [f"| total | {sum(seconds.values()) / 60:.1f} min |"]
    lines += ["", "## How it was made", "", "```bash", manifest["command"], "```", "",
              "The recipe as it ran (`recipe.yaml`):", "", "```yaml",
              yaml.safe_dump(recipe.to_dict(), sort_keys=False).rstrip(), "```", "",
              "## Usage", "", "```python", "from sentence_transformers import SentenceTransformer",
              "model = SentenceTransformer(\"path/to/this/directory\")",
              "embeddings = model.encode([\"A man is playing a guitar.\"])", "```", ""]
    return "\n".join(lines)


def read_front_matter(card: str) -> dict[str, Any]:
    """The YAML metadata of a model card's text."""
    import yaml

    if not card.startswith("---\n"):
        return {}
    end = card.index("\n---", 4)
    return yaml.safe_load(card[4:end]) or {}
