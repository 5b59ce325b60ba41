"""mteb tasks from local files: a directory with ``task.json`` and JSON Lines data, read without the hub.

mteb (>= 2) loads a task's data from the Hugging Face hub; a custom task subclasses the task type and
supplies its own data (its ``load_data``). :func:`local_task` builds such a task from a directory, so
``sparsecse eval --mteb DIR`` runs a user's own retrieval, reranking, classification, clustering or STS
set through mteb's own protocol. The directory holds ``task.json``::

    {"name": "MyFAQ", "type": "Retrieval", "description": "our support questions",
     "main_score": "ndcg_at_10", "settings": {}}

(``type`` one of Retrieval, Reranking, Classification, Clustering, STS; ``main_score`` defaults to mteb's for the type; ``settings`` sets
the mteb task class's own attributes, e.g. ``n_experiments`` or ``samples_per_label`` of a
classification task) and, by type, these files (one JSON object per line):

- Retrieval: ``corpus.jsonl`` (``id``, ``text``, optional ``title``), ``queries.jsonl`` (``id``,
  ``text``), ``qrels.jsonl`` (``query-id``, ``corpus-id``, ``score``: relevance, > 0 is relevant).
- Reranking: the same and ``top_ranked.jsonl`` (``query-id``, ``corpus-ids``: the candidates to rank).
- Classification: ``train.jsonl`` and ``test.jsonl`` (``text``, ``label``).
- Clustering: ``test.jsonl`` (``text``, ``label``).
- STS: ``test.jsonl`` (``sentence1``, ``sentence2``, ``score``); ``task.json`` may give ``min_score``
  and ``max_score`` (default 0 and 5).

Example::

    task = local_task("my_faq")          # an mteb AbsTaskRetrieval with its data loaded
    task.metadata.name, task.metadata.main_score
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from sparsecse.data.text_files import json_lines, read_text, what_is
from sparsecse.errors import SparseCSEError

TASK_FILE = "task.json"
MAIN_SCORES = {"Retrieval": "ndcg_at_10", "Reranking": "map_at_1000", "Classification": "accuracy",
               "Clustering": "v_measure", "STS": "cosine_spearman"}
LOCAL_TYPES = tuple(MAIN_SCORES)
FILES = {"Retrieval": ("corpus", "queries", "qrels"), "Reranking": ("corpus", "queries", "qrels", "top_ranked"),
         "Classification": ("train", "test"), "Clustering": ("test",), "STS": ("test",)}
# each file's fields and what each holds: text, an id (text or whole number), a relevance (a whole number), a score
# (a finite number), a label (text or whole number), ids (a list of ids)
FIELDS = {"corpus": {"id": "id", "text": "text"}, "queries": {"id": "id", "text": "text"},
          "qrels": {"query-id": "id", "corpus-id": "id", "score": "relevance"},
          "top_ranked": {"query-id": "id", "corpus-ids": "ids"}, "train": {"text": "text", "label": "label"},
          "test": {"Classification": {"text": "text", "label": "label"}, "Clustering": {"text": "text", "label": "label"},
                   "STS": {"sentence1": "text", "sentence2": "text", "score": "score"}}}
# the mteb task attributes a task.json may set, by type (each is a class attribute of mteb's task type), and
# what each holds: a whole number >= 1, a fraction in (0, 1], a flag, a list of whole numbers >= 1; "|None": or null
SETTINGS = {"Retrieval": {"k_values": "counts", "ignore_identical_ids": "flag"}, "Reranking": {"k_values": "counts"},
            "Classification": {"n_experiments": "count", "samples_per_label": "count"},
            "Clustering": {"n_clusters": "count", "max_documents_per_cluster": "count",
                           "max_fraction_of_documents_to_embed": "fraction|None", "max_document_to_embed": "count|None",
                           "k_mean_batch_size": "count"},
            "STS": {}}
SETTING_TEXT = {"count": "a whole number of at least 1", "fraction": "a number in (0, 1]", "flag": "true or false",
                "counts": "a non-empty list of whole numbers of at least 1"}
# the main scores mteb reports for each type (retrieval and reranking: METRIC_at_K for K in the task's k_values)
RANKING_METRICS = ("ndcg", "map", "recall", "precision", "mrr", "hit_rate")
MAIN_SCORE_NAMES = {"Classification": ("accuracy", "f1", "f1_weighted", "precision", "precision_weighted", "recall",
                                       "recall_weighted"),
                    "Clustering": ("v_measure",),
                    "STS": ("cosine_spearman", "cosine_pearson", "manhattan_spearman", "manhattan_pearson",
                            "euclidean_spearman", "euclidean_pearson", "spearman", "pearson")}
DEFAULT_K_VALUES = (1, 3, 5, 10, 20, 100, 1000)


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) or (
        isinstance(value, float) and math.isfinite(value) and value.is_integer())


def _fits(kind: str, value) -> bool:
    """Whether ``value`` holds what a field or setting of ``kind`` holds (see FIELDS and SETTINGS)."""
    if kind.endswith("|None"):
        return value is None or _fits(kind[:-5], value)
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    plain_int = isinstance(value, int) and not isinstance(value, bool)
    return {"text": isinstance(value, str), "id": isinstance(value, str) or plain_int,
            "label": isinstance(value, str) or plain_int, "relevance": number and _whole(value),
            "score": number, "ids": isinstance(value, list) and all(_fits("id", v) for v in value),
            "count": number and _whole(value) and value >= 1, "fraction": number and 0 < value <= 1,
            "flag": isinstance(value, bool),
            "counts": isinstance(value, list) and bool(value) and all(_fits("count", v) for v in value)}[kind]


FIELD_TEXT = {"text": "text", "id": "text or a whole number", "label": "text or a whole number",
              "relevance": "a whole number", "score": "a finite number", "ids": "a list of ids"}


def is_local_task(spec: str | os.PathLike) -> bool:
    """Whether ``spec`` (an item of ``--mteb``) names a local task directory rather than an mteb name."""
    return Path(spec).is_dir()


def read_jsonl(path: Path, fields: dict[str, str]) -> list[dict[str, Any]]:
    """The objects of a JSON Lines file, each checked to hold ``fields`` of their kinds (one sentence naming the
    line otherwise).

    Args:
        path: the file.
        fields: {key every object must have: what it holds} (the kinds of ``FIELDS``).

    Returns:
        The objects, in file order (blank lines skipped).
    """
    if not path.is_file():
        raise SparseCSEError(f"The local mteb task file {path} {what_is(path)}.")
    rows = []
    for number, row in json_lines(path, read_text(path, "local mteb task file")[0]):
        missing = [f for f in fields if f not in row]
        if missing:
            raise SparseCSEError(f"{path} line {number} lacks {', '.join(missing)} (each line needs "
                                 f"{', '.join(fields)}).")
        wrong = next((f for f, kind in fields.items() if not _fits(kind, row[f])), None)
        if wrong is not None:
            raise SparseCSEError(f"{path} line {number}: {wrong} must be {FIELD_TEXT[fields[wrong]]}, not "
                                 f"{json.dumps(row[wrong])[:80]}.")
        rows.append(row)
    if not rows:
        raise SparseCSEError(f"{path} holds no rows.")
    return rows


def _read_spec(directory: Path) -> dict[str, Any]:
    path = directory / TASK_FILE
    if not path.is_file():
        raise SparseCSEError(f"{directory} is not a local mteb task: it has no {TASK_FILE} (see the MTEB tasks "
                             "guide for the layout).")
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SparseCSEError(f"{path} is not valid JSON ({exc}).") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not spec["name"].strip():
        raise SparseCSEError(f"{path} must be a JSON object with a non-empty \"name\".")
    if spec.get("type") not in LOCAL_TYPES:
        raise SparseCSEError(f"{path}: \"type\" must be one of {', '.join(LOCAL_TYPES)}, not {spec.get('type')!r}.")
    _check_name(path, spec["name"])
    for key in ("description", "language", "main_score"):
        if key in spec and not (isinstance(spec[key], str) and spec[key].strip()):
            raise SparseCSEError(f"{path}: \"{key}\" must be non-empty text, not {json.dumps(spec[key])[:80]}.")
    kind, settings = spec["type"], spec.get("settings", {})
    unknown = sorted(set(settings) - set(SETTINGS[kind])) if isinstance(settings, dict) else ["settings"]
    if unknown:
        raise SparseCSEError(f"{path}: {', '.join(unknown)} is not a setting of a {kind} task (choose from "
                             f"{', '.join(SETTINGS[kind]) or 'none'}).")
    for key, value in settings.items():
        if not _fits(SETTINGS[kind][key], value):
            allowed = SETTINGS[kind][key]
            text = SETTING_TEXT[allowed.split("|")[0]] + (" or null" if allowed.endswith("|None") else "")
            raise SparseCSEError(f"{path}: the setting {key} must be {text}, not {json.dumps(value)[:80]}.")
    _check_main_score(path, kind, spec.get("main_score", MAIN_SCORES[kind]), settings)
    if kind == "STS":
        _check_range(path, spec)
    return spec


def _check_name(path: Path, name: str) -> None:
    """A task's name becomes mteb's file names (``NAME.json``): it must be a plain file name."""
    if name != name.strip() or name in (".", "..") or any(c in name for c in "/\\\0") or Path(name).is_absolute():
        raise SparseCSEError(f"{path}: the task name {name!r} must be a plain file name (no path separators, not "
                             "'.' or '..', no surrounding spaces), since mteb names its result files after it.")


def main_scores(kind: str, settings: dict | None = None) -> list[str]:
    """The main scores mteb reports for a local task of ``kind`` (ranking metrics at the task's k values)."""
    if kind in ("Retrieval", "Reranking"):
        ks = (settings or {}).get("k_values") or DEFAULT_K_VALUES
        return [f"{metric}_at_{int(k)}" for metric in RANKING_METRICS for k in ks]
    return list(MAIN_SCORE_NAMES[kind])


def _check_main_score(path: Path, kind: str, main_score: str, settings: dict) -> None:
    known = main_scores(kind, settings)
    if main_score not in known:
        shown = ", ".join(known[:12]) + (", ..." if len(known) > 12 else "")
        raise SparseCSEError(f"{path}: \"main_score\" {main_score!r} is not a score mteb reports for a {kind} task "
                             f"(choose from {shown}).")


def _check_range(path: Path, spec: dict) -> None:
    """An STS task's ``min_score`` and ``max_score``: finite numbers, the first below the second."""
    bounds = {key: spec.get(key, default) for key, default in (("min_score", 0), ("max_score", 5))}
    for key, value in bounds.items():
        if not _fits("score", value):
            raise SparseCSEError(f"{path}: \"{key}\" must be a finite number, not {json.dumps(value)[:80]}.")
    if not bounds["min_score"] < bounds["max_score"]:
        raise SparseCSEError(f"{path}: \"min_score\" ({bounds['min_score']:g}) must be below \"max_score\" "
                             f"({bounds['max_score']:g}); mteb rescales the gold scores by that range.")


def _datasets(kind: str, directory: Path) -> dict[str, Any]:
    """The mteb ``dataset`` of one local task: {"default": {split: data}} in the shape its type reads."""
    from datasets import Dataset, DatasetDict

    fields = {name: FIELDS[name][kind] if name == "test" else FIELDS[name] for name in FILES[kind]}
    rows = {name: read_jsonl(directory / f"{name}.jsonl", fields[name]) for name in FILES[kind]}
    if kind in ("Retrieval", "Reranking"):
        corpus = Dataset.from_list([{"id": str(r["id"]), "text": str(r["text"]), "title": str(r.get("title", ""))}
                                    for r in rows["corpus"]])
        queries = Dataset.from_list([{"id": str(r["id"]), "text": str(r["text"])} for r in rows["queries"]])
        qrels: dict[str, dict[str, int]] = {}
        for r in rows["qrels"]:
            qrels.setdefault(str(r["query-id"]), {})[str(r["corpus-id"])] = int(r["score"])
        _check_ids(directory, qrels, set(queries["id"]), set(corpus["id"]))
        top = ({str(r["query-id"]): [str(d) for d in r["corpus-ids"]] for r in rows["top_ranked"]}
               if kind == "Reranking" else None)
        if top is not None:
            _check_ids(directory, {q: dict.fromkeys(ids, 1) for q, ids in top.items()}, set(queries["id"]),
                       set(corpus["id"]), what="top_ranked.jsonl")
        return {"default": {"test": {"corpus": corpus, "queries": queries, "relevant_docs": qrels,
                                     "top_ranked": top}}}
    if kind == "STS":
        test = Dataset.from_list([{"sentence1": str(r["sentence1"]), "sentence2": str(r["sentence2"]),
                                   "score": float(r["score"])} for r in rows["test"]])
        return {"default": DatasetDict({"test": test})}
    if kind == "Clustering":
        test = Dataset.from_list([{"sentences": str(r["text"]), "labels": str(r["label"])} for r in rows["test"]])
        return {"default": DatasetDict({"test": test})}
    labels = sorted({str(r["label"]) for split in ("train", "test") for r in rows[split]})
    index = {label: i for i, label in enumerate(labels)}  # mteb's classifiers take integer labels
    return {"default": DatasetDict({split: Dataset.from_list([{"text": str(r["text"]), "label": index[str(r["label"])]}
                                                              for r in rows[split]]) for split in ("train", "test")})}


def _check_ids(directory: Path, qrels: dict, query_ids: set, corpus_ids: set, what: str = "qrels.jsonl") -> None:
    for query, docs in qrels.items():
        if query not in query_ids:
            raise SparseCSEError(f"{directory / what} names the query {query!r}, which queries.jsonl lacks.")
        unknown = [d for d in docs if d not in corpus_ids]
        if unknown:
            raise SparseCSEError(f"{directory / what} names the document {unknown[0]!r}, which corpus.jsonl lacks.")


def _abstask(kind: str):
    import mteb.abstasks as abstasks

    return {"Retrieval": abstasks.AbsTaskRetrieval, "Reranking": abstasks.AbsTaskRetrieval,
            "Classification": abstasks.AbsTaskClassification, "Clustering": abstasks.AbsTaskClustering,
            "STS": abstasks.AbsTaskSTS}[kind]


def local_task(directory: str | os.PathLike):
    """The mteb task a local directory describes, with its data read (see the module docstring for the layout).

    Args:
        directory: a folder holding ``task.json`` and the JSON Lines files of its type.

    Returns:
        An instance of a subclass of mteb's task type (``AbsTaskRetrieval``, ``AbsTaskClassification``,
        ``AbsTaskClustering`` or ``AbsTaskSTS``) whose ``load_data`` supplies the local data.
    """
    from mteb import TaskMetadata

    directory = Path(directory)
    spec = _read_spec(directory)
    kind = spec["type"]
    data = _datasets(kind, directory)  # read first: a bad file is refused before mteb sees the task
    digest = _files_digest(directory, kind)
    try:
        metadata = TaskMetadata(
            name=spec["name"], description=spec.get("description", f"local {kind} task from {directory}"),
            dataset={"path": str(directory.resolve()), "revision": digest[:12]}, type=kind, category="t2t",
            eval_splits=["test"], eval_langs=[spec.get("language", "eng-Latn")],
            main_score=spec.get("main_score", MAIN_SCORES[kind]), modalities=["text"])
    except ValueError as exc:  # pydantic's ValidationError
        raise SparseCSEError(f"{directory / TASK_FILE} does not describe a valid mteb task "
                             f"({str(exc).splitlines()[-1].strip()}).") from None

    def load_data(self, num_proc=None, **kwargs):
        self.dataset = data
        self.data_loaded = True

    attributes = {"metadata": metadata, "load_data": load_data, **spec.get("settings", {})}
    if kind == "Clustering":  # mteb embeds a 4% sample of a hub corpus by default; a local set is embedded whole
        attributes.setdefault("max_fraction_of_documents_to_embed", None)
    if kind == "STS":  # the range of the gold scores (mteb rescales them to [0, 1])
        attributes.update(min_score=spec.get("min_score", 0), max_score=spec.get("max_score", 5))
    task_class = type(f"Local{kind}Task", (_abstask(kind),), attributes)
    return task_class()


def _files_digest(directory: Path, kind: str) -> str:
    import hashlib

    digest = hashlib.sha256()
    for name in (TASK_FILE, *(f"{f}.jsonl" for f in FILES[kind])):
        digest.update(name.encode() + b"\0" + (directory / name).read_bytes())
    return digest.hexdigest()
