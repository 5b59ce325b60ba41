"""The model card (``README.md``) of every model directory sparsecse writes, in sentence-transformers' layout.

A card is rendered from a plain dictionary of facts (:func:`render_card`), so each writer passes what it
knows: :func:`~sparsecse.cards.facts.model_facts` reads what a directory itself records (config.json, the sentence-transformers
files, ``sparsecse_config.json``'s lineage, shape and shrink manifest, ``manifest.json`` of a training run),
and a recipe run or ``compress --speedup`` adds its evaluation, speed, memory and target. The card is YAML
front matter (``base_model``, ``library_name``, ``pipeline_tag``, ``tags``, ``model-index``) and the
sections Model Details, Usage, Evaluation, Compression (with its Target), Training, Framework Versions and
Citation; a section with no facts is left out, and no figure is ever printed as ``None`` or ``nan``.

The facts (every key optional but ``details``; ``base_model`` is a hub id, ``input_name`` how the text names
the input model when it has none, ``language`` and ``license`` are the input model's own card's)::

    {"title": str, "base_model": str, "input_name": str, "language": str | [str], "license": str, "description": str,
     "details": {"architecture", "layers", "hidden_size", "max_seq_length", "output_dim", "similarity",
                 "pooling", "remote_code"},
     "evaluation": {"stsb_dev", "sts": {task: score}, "sts_avg", "sts_avg_ci", "bootstrap", "versus": {...},
                    "transfer": {task: {"acc", "ci" | "fold_std", "f1"}}, "transfer_avg", "transfer_settings",
                    "transfer_versus": {"model", "avg_diff", "tasks": {task: {"diff", "ci" | "fold_std"}}},
                    "dev_set" | "test_set": {"name", "kind", "metric", "score", "ci", "n", "recall@1", "mrr@10"},
                    "mteb": [{"task", "main_score", "ci"?, ...}], "note": str},
     "compression": {"layers": [{"layer", "heads", "heads_total", "ffn", "ffn_total"}],
                     "parameters": [before, after], "flops_per_token": [before, after], "seq_len",
                     "file_size_bytes", "speed": {...}, "memory": {...}, "target": {...}},
     "training": {"recipe", "made_by", "stages": [str], "corpus", "corpus_sentences", "losses": [str], "steps",
                  "batch_size", "lr", "selected", "final_loss", "command", "recipe_yaml", "seconds": {stage: s}},
     "methods": [citation keys of :data:`~sparsecse.cards.citations.CITATIONS`], "versions": {package: version}}

Example::

    write_card("runs/small", model_facts("runs/small"))
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

from sparsecse.artifacts.model_dir import CARD
from sparsecse.cards.facts import CARRIED_METADATA, model_facts
from sparsecse.cards.sections import compression_section, evaluation_section, known, training_section
from sparsecse.cards.citations import CITATIONS

MODEL_PLACEHOLDER = "path/to/this/directory"  # the Usage snippet's model; a user puts the directory or hub id there
USAGE_SENTENCES = ("A man is playing a guitar.", "Someone is playing an instrument.")


def front_matter(facts: dict[str, Any]) -> dict[str, Any]:
    """The card's YAML metadata: sentence-transformers' fields, and the STS, transfer, user's-file and MTEB
    scores as a ``model-index`` (fractions, as sentence-transformers writes them).

    Args:
        facts: the card's facts.

    Returns:
        The metadata as a dictionary.
    """
    meta: dict[str, Any] = {key: facts[key] for key in CARRIED_METADATA if known(facts.get(key))}
    if known(facts.get("base_model")):
        meta["base_model"] = facts["base_model"]
    meta.update(library_name="sentence-transformers", pipeline_tag="sentence-similarity")
    tags = ["sentence-transformers", "sentence-similarity", "feature-extraction", "sparsecse"]
    compression, training = facts.get("compression") or {}, facts.get("training") or {}
    if compression.get("layers"):
        tags.append("pruned")
    if "distillation" in (facts.get("methods") or []):
        tags.append("distilled")
    meta["tags"] = tags + sorted(set(facts.get("tags") or ()) - set(tags))
    if known(training.get("recipe")):
        meta["sparsecse_recipe"] = training["recipe"]
    results = _index_results(facts.get("evaluation") or {})
    if results:
        meta["model-index"] = [{"name": facts.get("title") or facts.get("base_model") or "model", "results": results}]
    return meta


def _index_results(ev: dict[str, Any]) -> list[dict[str, Any]]:
    def entry(kind, kind_name, dataset, metric, metric_name, value):
        return {"task": {"type": kind, "name": kind_name}, "dataset": {"name": dataset, "type": dataset.lower()},
                "metrics": [{"type": metric, "value": round(float(value) / 100, 6), "name": metric_name}]}

    results = [entry("semantic-similarity", "Semantic Similarity", task, "spearman_cosine", "Spearman Cosine", score)
               for task, score in (ev.get("sts") or {}).items() if known(score)]
    results += [entry("text-classification", "Text Classification", task, "accuracy", "Accuracy", d["acc"])
                for task, d in (ev.get("transfer") or {}).items() if known(d.get("acc"))]
    for key in ("dev_set", "test_set"):
        user = ev.get(key) or {}
        if known(user.get("score")):
            kind = "information-retrieval" if user.get("kind") == "positives" else "semantic-similarity"
            results.append(entry(kind, kind.replace("-", " ").title(), user.get("name") or key,
                                 str(user.get("metric") or "score"), str(user.get("metric") or "score"), user["score"]))
    for task in ev.get("mteb") or []:
        if known(task.get("main_score")):
            score = float(task["main_score"]) * (100 if float(task["main_score"]) <= 1 else 1)
            results.append(entry("mteb", "MTEB", str(task.get("task")), "main_score", "Main Score", score))
    return results


def _input_name(facts: dict[str, Any]) -> str | None:
    """How the card names its input model: its hub id, else its display name (a directory of the user's own)."""
    for key in ("base_model", "input_name"):
        if known(facts.get(key)):
            return str(facts[key])
    return None


def _model_details(facts: dict[str, Any]) -> list[str]:
    d = facts.get("details") or {}
    base = _input_name(facts)
    rows = [("Base model", f"`{base}`" if base else None),
            ("Architecture", f"{d.get('architecture')}, {d.get('layers')} layers, hidden size {d.get('hidden_size')}"
             if known(d.get("architecture")) and known(d.get("layers")) else None),
            ("Maximum sequence length", f"{d['max_seq_length']} tokens" if known(d.get("max_seq_length")) else None),
            ("Output dimension", d.get("output_dim")),
            ("Similarity function", d.get("similarity") or "cosine similarity"),
            ("Pooling", d.get("pooling")),
            ("Normalized embeddings", "yes (a Normalize module)" if d.get("normalized") else None)]
    lines = ["## Model Details", ""]
    if known(facts.get("description")):
        lines += [facts["description"].strip(), ""]
    lines += [f"- **{name}:** {value}" for name, value in rows if known(value)]
    return lines + [""]


def usage_lines(details: dict[str, Any]) -> list[str]:
    """The Usage section: a sentence-transformers snippet that runs as written once ``MODEL_PLACEHOLDER`` is
    the directory (or its hub id); a directory with sparsecse's modeling code loads it with
    ``trust_remote_code=True``.

    Args:
        details: the card's ``details`` facts (``remote_code`` decides the loading argument).

    Returns:
        The section's markdown lines.
    """
    remote = details.get("remote_code")
    load = f'model = SentenceTransformer("{MODEL_PLACEHOLDER}"' + (", trust_remote_code=True)" if remote else ")")
    lines = ["## Usage", "", "```bash", "pip install -U sentence-transformers", "```", "",
             f"Replace `{MODEL_PLACEHOLDER}` with this directory (or its hub id once uploaded)."]
    if remote:
        lines += ["Its layers have their own sizes, so it ships its modeling code (`modeling_sparsecse.py`, named in "
                  "config.json's `auto_map`); `trust_remote_code=True` runs that code. Runtimes that refuse or cannot "
                  "run custom code do not load it: text-embeddings-inference, Infinity, vLLM, optimum's ONNX export, "
                  "sentence-transformers' `backend=\"onnx\"`/`\"openvino\"` and fastembed. `sparsecse compress "
                  "--layout stock` makes a model of the input's own architecture, which they all load."]
    elif details.get("layout") == "stock":
        lines += [f"It is a plain `{details.get('architecture')}` model (one FFN width for every layer, no custom code), "
                  "so every runtime that serves its architecture loads it; `sparsecse export --model DIR --format onnx` "
                  "(or `openvino`) writes the graphs inside this directory, for `SentenceTransformer(DIR, "
                  "backend=\"onnx\")`."]
    lines += ["", "```python", "from sentence_transformers import SentenceTransformer", "", load,
              "sentences = [" + ", ".join(json.dumps(s) for s in USAGE_SENTENCES) + "]",
              "embeddings = model.encode(sentences)",
              "print(embeddings.shape)" + (f"  # (2, {details['output_dim']})" if known(details.get("output_dim")) else ""),
              "similarities = model.similarity(embeddings, embeddings)", "print(similarities)", "```", ""]
    return lines


def _citations(methods: Iterable[str], evaluation: dict[str, Any]) -> list[str]:
    keys = ["sparsecse", "sentence-bert", *[k for k in CITATIONS if k in set(methods)
                                            and k not in ("sparsecse", "sentence-bert")]]
    if evaluation.get("transfer") and "senteval" not in keys:
        keys.append("senteval")
    if evaluation.get("mteb") and "mteb" not in keys:
        keys.append("mteb")
    lines = ["## Citation", ""]
    for key in keys:
        what, bibtex = CITATIONS[key]
        lines += [f"{what}:", "", "```bibtex", bibtex, "```", ""]
    return lines


def render_card(facts: dict[str, Any]) -> str:
    """The model card's text (front matter and sections) from ``facts`` (see the module's docstring).

    Args:
        facts: what is known of the model; a section whose facts are missing is left out.

    Returns:
        The markdown text of ``README.md``.
    """
    import yaml

    base = _input_name(facts)
    evaluation = facts.get("evaluation") or {}
    lines = ["---", yaml.safe_dump(front_matter(facts), sort_keys=False, allow_unicode=True).rstrip(), "---", "",
             f"# {facts.get('title') or base or 'A sparsecse model'}", "",
             "A [sentence-transformers](https://www.sbert.net) model written by sparsecse: it maps sentences to "
             "dense vectors for semantic similarity, search, clustering and classification.", ""]
    lines += _model_details(facts)
    lines += usage_lines(facts.get("details") or {})
    lines += evaluation_section(evaluation)
    lines += compression_section(facts.get("compression") or {}, base)
    lines += training_section(facts.get("training") or {})
    versions = {k: v for k, v in (facts.get("versions") or {}).items() if known(v)}
    if versions:
        lines += ["## Framework Versions", "", *[f"- {k}: {v}" for k, v in versions.items()], ""]
    lines += _citations(facts.get("methods") or [], evaluation)
    return "\n".join(lines).rstrip() + "\n"


def write_card(model_dir: str | os.PathLike, facts: dict[str, Any] | None = None) -> Path:
    """Write ``README.md`` into a model directory being assembled (callers make the directory appear
    atomically).

    Args:
        model_dir: the directory.
        facts: the card's facts; default :func:`~sparsecse.cards.facts.model_facts` of the directory.

    Returns:
        The card's path.
    """
    path = Path(model_dir) / CARD
    path.write_text(render_card(model_facts(model_dir) if facts is None else facts), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------- reading
def card_sections(card: str) -> list[str]:
    """The titles of a card's ``##`` sections, in order.

    Args:
        card: the card's text.

    Returns:
        The section titles.
    """
    return [line[3:].strip() for line in card.splitlines() if line.startswith("## ")]


def usage_code(card: str) -> str:
    """The Python snippet of a card's Usage section, as written.

    Args:
        card: the card's text.

    Returns:
        The code between the section's python fence and its end.
    """
    section = card.split("\n## Usage\n", 1)[1]
    return section.split("```python\n", 1)[1].split("\n```", 1)[0] + "\n"
