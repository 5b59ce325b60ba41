"""What a model directory records about itself, as the facts of its model card
(:mod:`sparsecse.cards.model_card`): config.json, the sentence-transformers files, ``sparsecse_config.json``
(lineage, per-layer shape, the shrink manifest with sizes before and after) and a training run's
``manifest.json``; and how a card names its input model (:func:`~sparsecse.cards.facts.hub_id` for
``base_model``, :func:`~sparsecse.cards.facts.base_model_name` in its text,
:func:`~sparsecse.cards.facts.portable_path` for paths: never a path of this machine) and what it carries over
from the input's own card (:func:`~sparsecse.cards.facts.input_metadata`: ``language`` and ``license``).

Example::

    model_facts("runs/small")["compression"]["layers"][0]  # {"layer": 0, "heads": 3, "heads_total": 4, ...}
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from sparsecse.artifacts import model_store
from sparsecse.artifacts.model_dir import read_model_config
from sparsecse.artifacts.model_names import (DEFAULT_ALIASES, DEFAULT_MODEL_NAME, MODELS_ENV, default_model_path,
                                              local_model_dir, looks_like_path)
from sparsecse.cards.citations import OBJECTIVE_METHODS
from sparsecse.errors import SparseCSEError

POOLING_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
                 "pooling_mode_max_tokens": "max", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
                 "pooling_mode_lasttoken": "last token", "pooling_mode_weightedmean_tokens": "weighted mean"}


# ------------------------------------------------------------------------------------------- names
CARRIED_METADATA = ("language", "license")  # what a card takes over from its input model's own card


def _same_dir(a: str, b: str | os.PathLike | None) -> bool:
    return b is not None and os.path.isdir(a) and os.path.isdir(b) and os.path.samefile(a, b)


def _short_hub_id(name: str) -> str:
    """A hub name without an organization as sentence-transformers loads it: under ``sentence-transformers/``,
    unless it is one of the original transformers models (``bert-base-uncased``, ...), which keep their name."""
    try:
        from sentence_transformers.util import ORIGINAL_TRANSFORMER_MODELS
    except ImportError:  # without sentence-transformers, a short name is loaded by transformers as it is
        return name
    return name if name.lower() in ORIGINAL_TRANSFORMER_MODELS else f"sentence-transformers/{name}"


def hub_id(model: str | os.PathLike | None) -> str | None:
    """The Hugging Face hub id of the input model, for a card's ``base_model``: the embedded default's, a model of
    sparsecse's store by its hub id, a local copy found through ``$SPARSECSE_MODELS`` or a hub name as
    sentence-transformers resolves its name (``paraphrase-MiniLM-L3-v2`` is
    ``sentence-transformers/paraphrase-MiniLM-L3-v2``); None for a directory of the user's own.

    Args:
        model: a model name or directory (None: the embedded default).

    Returns:
        The hub id, or None.
    """
    if model in DEFAULT_ALIASES:
        return DEFAULT_MODEL_NAME
    model = os.fspath(model)
    try:
        if _same_dir(model, default_model_path()):
            return DEFAULT_MODEL_NAME
    except SparseCSEError:  # the default model's package is absent
        pass
    stored = model_store.lookup(model)
    if stored is not None:
        return stored.hub_id
    for known in model_store.KNOWN_MODELS.values():
        if _same_dir(model, model_store.installed_path(known.name)):
            return known.hub_id
    parent = os.path.dirname(os.path.abspath(model))
    if os.path.isdir(model):
        for folder in filter(None, os.environ.get(MODELS_ENV, "").split(os.pathsep)):
            if _same_dir(parent, folder):
                return _short_hub_id(os.path.basename(os.path.abspath(model)))
        return None
    if looks_like_path(model) or not model.strip():
        return None
    return model if "/" in model else _short_hub_id(model)


def base_model_name(model: str | os.PathLike | None) -> str:
    """The input model as a card names it in its text and rebuild command: its hub id (:func:`hub_id`), else
    ``path/to/`` and the directory's name (never this machine's path).

    Args:
        model: a model name or directory.

    Returns:
        The name a card prints.
    """
    return hub_id(model) or portable_path(model, always=True)


def portable_path(path: str | os.PathLike, always: bool = False) -> str:
    """A path as a card prints it: as the user named it when that says nothing of this machine (a relative path
    that stays below the working directory), else ``path/to/`` and its last name.

    Args:
        path: the path.
        always: print the placeholder whatever the path (a model directory of the user's own).

    Returns:
        The text.
    """
    text = os.fspath(path)
    if always or os.path.isabs(text) or text.startswith("~") or ".." in Path(text).parts:
        return f"path/to/{os.path.basename(os.path.normpath(text))}"
    return text


def read_front_matter(card: str) -> dict[str, Any]:
    """The YAML metadata of a model card's text ({} without front matter, or with front matter that does not parse).

    Args:
        card: the card's text.

    Returns:
        The metadata.
    """
    import yaml

    if not card.startswith("---\n") or "\n---" not in card[3:]:
        return {}
    try:
        meta = yaml.safe_load(card[4:card.index("\n---", 3)])
    except yaml.YAMLError:
        return {}
    return meta if isinstance(meta, dict) else {}


def input_metadata(model: str) -> dict[str, Any]:
    """What a card carries over from its input model's own card (``README.md`` front matter of a local
    directory): ``language`` and ``license``, where it has them.

    Args:
        model: the input model (a name or directory).

    Returns:
        The fields found ({} for a hub name with no local copy, or a directory without a card).
    """
    path = local_model_dir(model)
    try:
        card = (Path(path) / "README.md").read_text(encoding="utf-8") if path else ""
    except OSError:
        return {}
    meta = read_front_matter(card)
    return {key: meta[key] for key in CARRIED_METADATA if meta.get(key)}


# ------------------------------------------------------------------------------------------- facts
def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _modules(root: Path) -> list[dict[str, Any]]:
    try:
        modules = json.loads((root / "modules.json").read_text())
    except (OSError, ValueError):
        return []
    return modules if isinstance(modules, list) else []


def lineage_source(lineage: dict[str, Any] | None) -> str | None:
    """The first model of a lineage chain: at the deepest stage, the initial weights of a training run, else
    the model it was shrunk from, else the model its mask was scored on (a shrink merges its lineage over
    the training run's, so one stage may name several).

    Args:
        lineage: ``sparsecse_config.json``'s ``lineage`` (each stage's ``parent`` nested in it).

    Returns:
        A model name or path, or None for no lineage.
    """
    source = None
    while isinstance(lineage, dict):
        for key in ("init", "shrunk_from", "mask_scored_model", "scored_model"):
            if lineage.get(key):
                source = str(lineage[key])
                break
        lineage = lineage.get("parent")
    return source


def _lineage_methods(lineage: dict[str, Any] | None) -> set[str]:
    methods: set[str] = set()
    while isinstance(lineage, dict):
        if lineage.get("objective") in OBJECTIVE_METHODS:
            methods.add(OBJECTIVE_METHODS[lineage["objective"]])
        lineage = lineage.get("parent")
    return methods


def _details(root: Path, config: dict, st_config: dict, own: dict) -> dict[str, Any]:
    modules = _modules(root)
    pooling_dir = next((m.get("path") for m in modules if str(m.get("type", "")).endswith("Pooling")), "1_Pooling")
    pooling_config = _json(root / pooling_dir / "config.json") if pooling_dir else {}
    pooling = next((name for key, name in POOLING_MODES.items() if pooling_config.get(key)), None)
    output_dim = pooling_config.get("word_embedding_dimension") or config.get("hidden_size")
    for module in modules:
        if str(module.get("type", "")).endswith("Dense"):
            output_dim = _json(root / module.get("path", "") / "config.json").get("out_features", output_dim)
    normalized = any(str(m.get("type", "")).endswith("Normalize") for m in modules)
    return {"architecture": config.get("model_type"), "layers": config.get("num_hidden_layers"),
            "hidden_size": config.get("hidden_size"),
            "max_seq_length": st_config.get("max_seq_length") or own.get("max_length"),
            "output_dim": output_dim, "similarity": "cosine similarity",
            "pooling": own.get("pooling") or pooling, "normalized": normalized,
            "remote_code": bool(config.get("auto_map")), "layout": (own.get("shape") or {}).get("layout")}


def _layers(config: dict, own: dict, before: dict) -> list[dict[str, int]]:
    """Each layer's kept heads and FFN neurons (inert zero padding left out) against the source model's (a stock
    model's config states one shape for every layer; sparsecse_config.json's shape holds what each kept)."""
    shape = own.get("shape") or {}
    kept_heads, widths = config.get("kept_heads"), config.get("intermediate_sizes")
    if shape.get("layout") == "stock" and shape.get("heads_per_layer") and shape.get("ffn_per_layer"):
        kept_heads = [range(n) for n in shape["heads_per_layer"]]
        widths = [n + p for n, p in zip(shape["ffn_per_layer"], shape.get("ffn_zero_padding") or [0] * len(kept_heads))]
    if not kept_heads or not widths:
        return []
    padding = shape.get("ffn_zero_padding") or [0] * len(widths)
    heads_total = before.get("heads_per_layer") or [config.get("num_attention_heads")] * len(kept_heads)
    ffn_total = before.get("ffn_per_layer") or [config.get("intermediate_size")] * len(widths)
    return [{"layer": i, "heads": len(kept_heads[i]), "heads_total": int(heads_total[i]),
             "ffn": int(widths[i]) - int(padding[i]), "ffn_total": int(ffn_total[i])} for i in range(len(widths))]


def weights_size(model_dir: str | os.PathLike) -> int | None:
    """Bytes of a model directory's weight files (``*.safetensors`` and ``*.bin``, modules' included).

    Args:
        model_dir: the directory.

    Returns:
        The total, or None when it holds no weight file.
    """
    files = [p for pattern in ("*.safetensors", "*.bin", "*/*.safetensors", "*/*.bin")
             for p in Path(model_dir).glob(pattern) if p.is_file()]
    return sum(p.stat().st_size for p in files) if files else None


def _training(manifest: dict[str, Any]) -> dict[str, Any]:
    """A ``train``/``rewind`` run's settings and outcome, from its manifest.json."""
    if manifest.get("kind") not in ("train_model", "rewind_model"):
        return {}
    params, result = manifest.get("params") or {}, manifest.get("result") or {}
    objective = params.get("objective")
    loss = objective
    if objective == "distill":
        loss = f"distill ({(params.get('objective_params') or {}).get('loss', 'mse')})"
    corpus = (manifest.get("inputs") or {}).get("corpus")
    return {"made_by": "sparsecse " + manifest["kind"].replace("_model", ""), "losses": [loss] if loss else [],
            "corpus": portable_path(corpus.get("path") if isinstance(corpus, dict) else corpus) if corpus else None,
            "corpus_sentences": params.get("corpus_sentences"), "steps": result.get("steps"),
            "batch_size": params.get("batch_size"), "lr": params.get("lr"), "selected": manifest.get("selected"),
            "final_loss": result.get("final_loss"), "stsb_dev": result.get("stsb_dev")}


def model_facts(model_dir: str | os.PathLike) -> dict[str, Any]:
    """What a model directory records about itself, as card facts (see the module's docstring).

    Args:
        model_dir: a model directory sparsecse wrote (or any sentence-transformers directory).

    Returns:
        ``title``, ``base_model``, ``details``, and where recorded ``compression`` (per-layer kept units,
        parameters and FLOPs before and after, weight bytes), ``training``, ``evaluation`` (STS-B dev of
        a training run), ``methods`` and ``versions``.
    """
    root = Path(model_dir)
    config, own = _json(root / "config.json"), read_model_config(root)
    lineage = own.get("lineage") if isinstance(own.get("lineage"), dict) else None
    shrink_manifest = own.get("manifest") if isinstance(own.get("manifest"), dict) else {}
    run_manifest = _json(root / "manifest.json")
    before = shrink_manifest.get("before") or {}
    after = shrink_manifest.get("after") or {}
    facts: dict[str, Any] = {"details": _details(root, config, _json(root / "sentence_bert_config.json"), own)}
    source = lineage_source(lineage)
    if source:
        facts.update(input_name=base_model_name(source), **input_metadata(source))
        if hub_id(source):
            facts["base_model"] = hub_id(source)
    compression: dict[str, Any] = {"layers": _layers(config, own, before), "file_size_bytes": weights_size(root)}
    if before.get("parameters") and after.get("parameters"):
        compression["parameters"] = [before["parameters"], after["parameters"]]
    if before.get("flops_per_token") and after.get("flops_per_token"):
        compression["flops_per_token"] = [before["flops_per_token"], after["flops_per_token"]]
        compression["seq_len"] = after.get("flops_seq_len")
    if compression["layers"] or "parameters" in compression:
        facts["compression"] = compression
    methods = _lineage_methods(lineage)
    if compression["layers"]:
        methods.add("sparsecse")
    if shrink_manifest.get("reconstruction"):
        methods.add("kprune")
    training = _training(run_manifest)
    if training:
        facts["training"] = training
        if training.get("stsb_dev") is not None:
            facts["evaluation"] = {"stsb_dev": training["stsb_dev"]}
    facts["methods"] = sorted(methods)
    facts["versions"] = run_manifest.get("versions") or shrink_manifest.get("versions") or {}
    kind = {"train_model": "trained", "rewind_model": "rewound", "shrunk_model": "shrunk"}.get(
        run_manifest.get("kind") or shrink_manifest.get("kind"))
    facts["title"] = f"{facts.get('input_name', root.name)}, {kind} by sparsecse" if kind else root.name
    return facts
