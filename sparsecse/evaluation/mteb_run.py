"""``evaluate_mteb``: any model sparsecse evaluates, on mteb (>= 2) tasks, benchmarks or local task directories.

The model is what ``sparsecse eval`` takes (a name or directory, dense, gated by a mask, shrunk, exported
ONNX/OpenVINO, a decoder embedder with query/document prompts), wrapped by
:class:`~sparsecse.evaluation.mteb_model.MtebEncoder`; mteb runs its own protocol per task and, when
``results_dir`` is given, writes its own result layout there (``results/<model>/<revision>/<Task>.json``,
``model_meta.json``, and ``predictions/<Task>_predictions.json``), atomically. sparsecse reads the
per-item values back (:mod:`sparsecse.evaluation.mteb_items`) for intervals and for ``sparsecse compare``.

Everything that can be checked is checked before the model loads: task names (with close names when
one is unknown), local task files, and each task's data (a hub task whose data is neither cached nor
reachable is refused in one sentence).

Example::

    evaluate_mteb("runs/small", tasks="STSBenchmark,my_faq_dir", results_dir="runs/small_mteb")["mteb"]["tasks"]
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sparsecse.artifacts.files import atomic_dir, hash_path
from sparsecse.artifacts.model_names import local_model_dir
from sparsecse.artifacts.remote_code import with_trust_option
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.mteb_items import item_interval, plain_parts, task_items
from sparsecse.evaluation.mteb_local import is_local_task, local_task
from sparsecse.evaluation.mteb_model import MtebEncoder, model_prompts
from sparsecse.evaluation.runner import _gated, _pooling
from sparsecse.modeling.encoder import SentenceEncoder, resolve_precision
from sparsecse.pruning.masks import model_for_mask
from sparsecse.serving.loading import load_encoder
from sparsecse.serving.runtime import is_encoder
from sparsecse.stage_config import stage_config

MTEB_REQUIREMENT = "mteb>=2"


def import_mteb():
    """The mteb package, or one sentence saying how to install it."""
    try:
        import mteb
    except ImportError:
        raise SparseCSEError(f"MTEB tasks need the mteb package: pip install 'sparsecse[mteb]' (or "
                             f"'{MTEB_REQUIREMENT}').") from None
    if int(mteb.__version__.split(".")[0]) < 2:
        raise SparseCSEError(f"MTEB tasks need mteb 2 or newer, not {mteb.__version__}: pip install -U "
                             f"'{MTEB_REQUIREMENT}'.")
    return mteb


def split_names(spec: str) -> list[str]:
    """The items of ``--mteb A,B``, keeping commas inside parentheses (``MTEB(eng, v2)`` is one name)."""
    return [s.strip() for s in re.split(r",(?![^()]*\))", spec) if s.strip()]


def _unknown(name: str, mteb) -> SparseCSEError:
    with warnings.catch_warnings():  # mteb warns about every beta task it lists
        warnings.simplefilter("ignore")
        tasks = mteb.get_tasks(exclude_superseded=False, exclude_private=False, exclude_beta=False)
    known = [t.metadata.name for t in tasks] + [b.name for b in mteb.get_benchmarks()]
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
    return SparseCSEError(f"{name!r} is neither an mteb task or benchmark{hint} nor a local task directory "
                          "holding task.json.")


def resolve_mteb_tasks(tasks) -> list:
    """mteb task objects for ``tasks``: a comma-separated string or a list of mteb task names, benchmark names,
    local task directories (:mod:`sparsecse.evaluation.mteb_local`) or mteb task objects.

    Args:
        tasks: what ``--mteb`` gives, or a list.

    Returns:
        The tasks, each once, in order (a benchmark adds its tasks).
    """
    mteb = import_mteb()
    items = split_names(tasks) if isinstance(tasks, str) else list(tasks or [])
    if not items:
        raise SparseCSEError("--mteb names no task; give mteb task or benchmark names, or local task directories.")
    resolved = []
    for item in items:
        if isinstance(item, mteb.AbsTask):
            resolved.append(item)
        elif is_local_task(item):
            resolved.append(local_task(item))
        else:
            try:
                resolved.extend(mteb.get_benchmark(str(item)).tasks)
            except KeyError:
                try:
                    resolved.append(mteb.get_task(str(item)))
                except KeyError:
                    raise _unknown(str(item), mteb) from None
    unique: dict[str, Any] = {}
    for task in resolved:
        name, earlier = task.metadata.name, unique.get(task.metadata.name)
        paths = [str(t.metadata.dataset.get("path", "")) for t in (task, earlier)] if earlier is not None else []
        if paths and paths[0] != paths[1] and any(is_local_task(p) for p in paths):
            raise SparseCSEError(f"Two mteb tasks of --mteb are named {name!r} ({_where(earlier)} and "
                                 f"{_where(task)}); give each local task its own name in its task.json.")
        unique.setdefault(name, task)
    return list(unique.values())


def _where(task) -> str:
    path = str(task.metadata.dataset.get("path", ""))
    return path if is_local_task(path) else "mteb's task"


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_DATASETS_OFFLINE", "0") not in ("", "0")


def load_task_data(tasks: list) -> None:
    """Read every task's data now (local files, or the datasets cache / hub); one sentence for a task whose
    data cannot be had (offline and not cached, or unreachable)."""
    for task in tasks:
        if task.data_loaded:
            continue
        try:
            task.load_data()
        except SparseCSEError:
            raise
        except Exception as exc:  # datasets/huggingface_hub raise many kinds (ConnectionError, OSError, ...)
            source = task.metadata.dataset.get("path", "?")
            if _offline():
                raise SparseCSEError(f"The mteb task {task.metadata.name} needs its data ({source}) from the Hugging "
                                     "Face hub, which is not in the local datasets cache and cannot be fetched "
                                     "offline (HF_HUB_OFFLINE=1).") from None
            raise SparseCSEError(f"The data of the mteb task {task.metadata.name} ({source}) could not be loaded "
                                 f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}).") from None


@dataclass(frozen=True)
class MtebConfig:
    """How :func:`evaluate_mteb` runs: ``tasks`` (names, benchmarks, local directories or task objects),
    ``results_dir`` (mteb's result layout; None: nothing written), ``prompts`` (added to the model
    directory's own sentence-transformers prompts, and winning over them), encoding settings, and
    ``bootstrap`` replicates of the per-task intervals (0: none) drawn with ``bootstrap_seed``."""

    tasks: Any = None
    results_dir: str | os.PathLike | None = None
    overwrite: bool = False
    prompts: dict = field(default_factory=dict)
    pooling: str | None = None
    batch_size: int | None = None
    device: str | None = None
    precision: str = "fp32"
    show_progress: bool = False
    bootstrap: int = 0
    bootstrap_seed: int = 0


def model_identity(model, encoder, mask) -> tuple[str, str]:
    """(name, revision) of the evaluated model in mteb's layout: a hub name as is, a directory as
    ``local/<folder>``, ``+mask-<file>`` when gated; the revision fingerprints the weights and the mask."""
    source = str(encoder.source or model or "model")
    directory = local_model_dir(source) if not is_encoder(model) else None
    name = f"local/{Path(source).name}" if directory or os.path.isdir(source) else source
    fingerprint = hash_path(directory or source)[:12] if (directory or os.path.isdir(source)) else "no_revision"
    if mask is not None:
        mask_name = Path(str(mask)).stem if isinstance(mask, (str, os.PathLike)) else "mask"
        name += f"+mask-{mask_name}"
        fingerprint += "-" + (hash_path(mask)[:8] if isinstance(mask, (str, os.PathLike)) else "object")
    return name, fingerprint


@with_trust_option
def evaluate_mteb(model=None, mask=None, config: MtebConfig | None = None) -> dict[str, Any]:
    """Evaluate ``model`` (None = the embedded default, a name/directory, or a loaded encoder) on mteb tasks.

    Args:
        model: what ``sparsecse eval --model`` takes, or an encoder.
        mask: None, a mask file or a Mask, attached as gates for the evaluation (torch models only).
        config: an :class:`MtebConfig` (None: its defaults).

    Returns:
        A dictionary with ``model``, ``mask``, ``pooling``, ``settings``, ``timing`` and ``mteb``: per task
        (``mteb["tasks"][name]``) its ``type``, ``main_score``, ``score`` (x 100; a task with per-item values
        reports the score they give), ``splits`` and, where recovered, ``parts`` (the per-item values) and
        ``ci`` (with ``bootstrap``); beside them ``results_dir``, ``model_name``, ``revision``, ``version``
        and ``prompts``.
    """
    start = time.perf_counter()
    c = stage_config(MtebConfig, config, "evaluate_mteb()'s config")
    tasks = prepare_mteb(c.tasks, c.prompts)
    if mask is not None and model is None:
        model = model_for_mask(mask)
    encoder = model if is_encoder(model) else load_encoder(model, pooling=c.pooling, device=c.device)
    if not isinstance(encoder, SentenceEncoder) and (mask is not None or
                                                     (c.pooling or encoder.pooling) != encoder.pooling):
        raise SparseCSEError(f"{encoder.source} is an exported model, which only encodes as it was exported; "
                             "--mteb with a mask or another pooling needs the torch model directory.")
    if mask is not None and not is_encoder(model):
        model_for_mask(mask, model)
    prompts = {**model_prompts_of(encoder, model), **(c.prompts or {})}
    name, revision = model_identity(model, encoder, mask)
    precision = resolve_precision(c.precision, c.device) if isinstance(encoder, SentenceEncoder) else c.precision
    with _gated(encoder, mask) as mask_info, _pooling(encoder, c.pooling):

        wrapped = MtebEncoder(encoder, name=name, revision=revision, prompts=prompts, batch_size=c.batch_size,
                              precision=precision, show_progress=c.show_progress)
        with _results_directory(c.results_dir, c.overwrite) as directory:
            task_results = _run(wrapped, tasks, directory, c.show_progress)
            block = _collect(tasks, task_results, directory, c)
        pooling = c.pooling or encoder.pooling
    block.update(results_dir=str(c.results_dir) if c.results_dir else None, model_name=name, revision=revision,
                 version=import_mteb().__version__, prompts=prompts)
    return {"model": encoder.source if encoder.source else str(model), "mask": mask_info, "pooling": pooling,
            "mteb": block,
            "settings": {"precision": precision, "batch_size": c.batch_size, "max_length": encoder.max_length,
                         "device": str(encoder.device)},
            "timing": {"total_s": round(time.perf_counter() - start, 3), "texts_encoded": wrapped.texts_encoded}}


def model_prompts_of(encoder, model) -> dict[str, str]:
    """The sentence-transformers prompts the model's directory declares (none for a hub name or object)."""

    source = encoder.source if encoder.source else model
    return model_prompts(source if isinstance(source, (str, os.PathLike)) else None)


@contextlib.contextmanager
def _results_directory(results_dir, overwrite: bool):
    """Where mteb writes: a temporary directory renamed to ``results_dir`` on success, or one thrown away."""
    if results_dir is None:
        with tempfile.TemporaryDirectory(prefix="sparsecse-mteb-") as tmp:
            yield Path(tmp)
        return
    with atomic_dir(results_dir, overwrite=overwrite) as tmp:
        yield tmp


@contextlib.contextmanager
def _datasets_progress(show: bool):
    """The datasets library's progress bars (mteb maps its data with them) off unless ``show``."""
    import datasets

    was_enabled = datasets.is_progress_bar_enabled()
    if not show:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was_enabled:
            datasets.enable_progress_bars()


def _run(wrapped, tasks: list, directory: Path, show_progress: bool) -> list:
    mteb = import_mteb()
    with _datasets_progress(show_progress):
        result = mteb.evaluate(wrapped, tasks, cache=mteb.ResultCache(directory), overwrite_strategy="always",
                               prediction_folder=directory / "predictions", co2_tracker=False,
                               show_progress_bar=show_progress, raise_error=True,
                               encode_kwargs={"batch_size": wrapped.batch_size or 32,
                                              "show_progress_bar": show_progress})
    return list(result.task_results)


def _collect(tasks: list, task_results: list, directory: Path, c: MtebConfig) -> dict[str, Any]:
    by_name = {t.metadata.name: t for t in tasks}
    out: dict[str, Any] = {"tasks": {}}
    for result in task_results:
        task = by_name[result.task_name]
        path = directory / "predictions" / f"{result.task_name}_predictions.json"
        predictions = json.loads(path.read_text()) if path.is_file() else {}
        parts = task_items(task, predictions, result.scores)
        entry: dict[str, Any] = {
            "type": task.metadata.type, "main_score": task.metadata.main_score,
            "score": (float(np.mean([p["score"] for p in parts])) if parts else 100 * float(result.get_score())),
            "splits": {split: {e["hf_subset"]: 100 * float(e["main_score"]) for e in entries}
                       for split, entries in result.scores.items()},
            "dataset": dict(task.metadata.dataset)}
        if parts:
            entry["parts"] = plain_parts(parts)
            if c.bootstrap:
                entry["ci"] = item_interval(parts, c.bootstrap, c.bootstrap_seed, result.task_name)
        out["tasks"][result.task_name] = entry
    if c.bootstrap:
        out["bootstrap"] = {"replicates": c.bootstrap, "seed": c.bootstrap_seed,
                            "method": "percentile, items resampled (queries, pairs or test items)"}
    return out


def mteb_results_dir(out: str | os.PathLike) -> Path:
    """Where ``eval --out OUT --mteb`` writes mteb's result layout: ``OUT``'s name without suffix, ``_mteb``."""
    out = Path(out)
    return out.with_name(f"{out.stem}_mteb")


def prepare_mteb(tasks, prompts: dict | None = None) -> list:
    """The mteb tasks of ``--mteb``, resolved and their data read, and the prompts checked against them, so that
    every refusal comes before any work.

    Args:
        tasks: the ``--mteb`` value (names, benchmarks and local task directories, comma-separated).
        prompts: ``--mteb-prompt``'s {name: text} (:func:`parse_prompts`); each name must apply to a task.

    Returns:
        The task objects, data loaded (pass them as :class:`MtebConfig` ``tasks``).
    """
    resolved = resolve_mteb_tasks(tasks)
    check_prompt_names(prompts or {}, resolved)
    load_task_data(resolved)
    return resolved


ROLES = ("query", "document")


def check_prompt_names(prompts: dict, tasks: list) -> None:
    """Every ``--mteb-prompt`` name is a role, or the type or name of a task that runs, alone or joined to a role
    by '-' (what mteb's prompt lookup can pick); one sentence listing the valid names otherwise."""
    bases = list(dict.fromkeys([t.metadata.type for t in tasks] + [t.metadata.name for t in tasks]))
    valid = [*ROLES, *bases, *(f"{b}-{r}" for b in bases for r in ROLES)]
    unknown = [name for name in prompts if name not in valid]
    if unknown:
        raise SparseCSEError(f"--mteb-prompt {unknown[0]!r} names no role, task type or task of this run, so it "
                             f"would never be used; the names are {', '.join(valid)}.")


def local_directories(tasks: list) -> list[str]:
    """The directories of the local tasks among ``tasks`` (inputs an output must not overwrite)."""
    return [str(t.metadata.dataset["path"]) for t in tasks if is_local_task(t.metadata.dataset["path"])]


def parse_prompts(items) -> dict[str, str]:
    """``{name: text}`` from ``--mteb-prompt NAME=TEXT`` options (one sentence for an item without ``=``)."""
    prompts = {}
    for item in items or ():
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise SparseCSEError(f"--mteb-prompt {item!r} must be NAME=TEXT (NAME a task name, a task type, query, "
                                 "document, or one of those joined to query/document by '-').")
        prompts[name.strip()] = text
    return prompts


def with_mteb(results, mteb_results: dict[str, Any]) -> dict[str, Any]:
    """``evaluate``'s results (or None when only mteb tasks ran) with the ``"mteb"`` block of ``evaluate_mteb``."""
    if results is None:
        return {"model": mteb_results["model"], "mask": mteb_results["mask"], "pooling": mteb_results["pooling"],
                "tasks": [], "scores": {}, "settings": {**mteb_results["settings"], "data_dir": None},
                "timing": mteb_results["timing"], "mteb": mteb_results["mteb"]}
    merged = dict(results)
    merged["timing"] = {**merged["timing"], "mteb_s": mteb_results["timing"]["total_s"]}
    merged["mteb"] = mteb_results["mteb"]
    return merged


def without_items(results: dict[str, Any]) -> dict[str, Any]:
    """``results`` without the per-item mteb values (for printing)."""
    if "mteb" not in results:
        return results
    tasks = {t: {k: v for k, v in e.items() if k != "parts"} for t, e in results["mteb"]["tasks"].items()}
    return {**results, "mteb": {**results["mteb"], "tasks": tasks}}


def mteb_lines(block: dict[str, Any]) -> list[str]:
    """One line per mteb task: its score x 100, its interval when bootstrapped, its type and main metric."""
    rows = [(name, f"{e['score']:.2f}", f"  [{e['ci'][0]:.2f}, {e['ci'][1]:.2f}]" if "ci" in e else "",
             f"{e['type']}, {e['main_score']}") for name, e in block["tasks"].items()]
    width = max([len(r[0]) for r in rows] + [4])
    lines = [f"{name:<{width}}  {score:>8}{ci}  ({what})" for name, score, ci, what in rows]
    where = f"; mteb's results in {block['results_dir']}" if block.get("results_dir") else ""
    return lines + [f"(mteb {block['version']}, x 100{where})"]
