"""The model card (``README.md``) of every model directory sparsecse writes, in sentence-transformers' layout.

A card is rendered from a plain dictionary of facts (:func:`render_card`), so each writer passes what it
knows: :func:`model_facts` reads what a directory itself records (config.json, the sentence-transformers
files, ``sparsecse_config.json``'s lineage, shape and shrink manifest, ``manifest.json`` of a training run),
and a recipe run or ``compress --speedup`` adds its evaluation, speed, memory and target. The card is YAML
front matter (``base_model``, ``library_name``, ``pipeline_tag``, ``tags``, ``model-index``) and the
sections Model Details, Usage, Evaluation, Compression (with its Target), Training, Framework Versions and
Citation; a section with no facts is left out, and no figure is ever printed as ``None`` or ``nan``.

The facts (every key optional but ``details``)::

    {"title": str, "base_model": str, "description": str,
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
     "methods": [citation keys, see CITATIONS], "versions": {package: version}}

Example::

    write_card("runs/small", model_facts("runs/small"))
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterable

from sparsecse.artifacts import model_store
from sparsecse.artifacts.model_dir import read_model_config
from sparsecse.artifacts.model_names import DEFAULT_MODEL_NAME, MODELS_ENV, default_model_path

CARD = "README.md"
MODEL_PLACEHOLDER = "path/to/this/directory"  # the Usage snippet's model; a user puts the directory or hub id there
USAGE_SENTENCES = ("A man is playing a guitar.", "Someone is playing an instrument.")
STS_LABEL = "STS avg (7 tasks)"

CITATIONS = {
    "sparsecse": ("SparseCSE", """@article{an2023sparse,
  title = {Sparse Contrastive Learning of Sentence Embeddings},
  author = {An, Ruize and Zhang, Chen and Song, Dawei},
  journal = {arXiv preprint arXiv:2311.03881},
  year = {2023}
}"""),
    "sentence-bert": ("Sentence-BERT (the sentence-transformers library)", """@inproceedings{reimers2019sentence,
  title = {Sentence-BERT: Sentence Embeddings using Siamese BERT-Networks},
  author = {Reimers, Nils and Gurevych, Iryna},
  booktitle = {Proceedings of EMNLP-IJCNLP},
  year = {2019}
}"""),
    "simcse": ("SimCSE", """@inproceedings{gao2021simcse,
  title = {SimCSE: Simple Contrastive Learning of Sentence Embeddings},
  author = {Gao, Tianyu and Yao, Xingcheng and Chen, Danqi},
  booktitle = {Proceedings of EMNLP},
  year = {2021}
}"""),
    "diffcse": ("DiffCSE", """@inproceedings{chuang2022diffcse,
  title = {DiffCSE: Difference-based Contrastive Learning for Sentence Embeddings},
  author = {Chuang, Yung-Sung and Dangovski, Rumen and Luo, Hongyin and Zhang, Yang and Chang, Shiyu and
            Solja{\\v{c}}i{\\'c}, Marin and Li, Shang-Wen and Yih, Wen-tau and Kim, Yoon and Glass, James},
  booktitle = {Proceedings of NAACL},
  year = {2022}
}"""),
    "infocse": ("InfoCSE", """@inproceedings{wu2022infocse,
  title = {InfoCSE: Information-aggregated Contrastive Learning of Sentence Embeddings},
  author = {Wu, Xing and Gao, Chaochen and Lin, Zijia and Han, Jizhong and Wang, Zhongyuan and Hu, Songlin},
  booktitle = {Findings of EMNLP},
  year = {2022}
}"""),
    "distillation": ("embedding distillation (sentence-transformers' MSE recipe)", """@inproceedings{reimers2020making,
  title = {Making Monolingual Sentence Embeddings Multilingual using Knowledge Distillation},
  author = {Reimers, Nils and Gurevych, Iryna},
  booktitle = {Proceedings of EMNLP},
  year = {2020}
}"""),
    "kprune": ("the reconstruction of the kept units (mask search and layer-wise refit)", """@inproceedings{kwon2022fast,
  title = {A Fast Post-Training Pruning Framework for Transformers},
  author = {Kwon, Woosuk and Kim, Sehoon and Mahoney, Michael W. and Hassoun, Joseph and Keutzer, Kurt and
            Gholami, Amir},
  booktitle = {Advances in Neural Information Processing Systems},
  year = {2022}
}"""),
    "halp": ("latency-aware pruning for a speed target (HALP)", """@inproceedings{shen2022structural,
  title = {Structural Pruning via Latency-Saliency Knapsack},
  author = {Shen, Maying and Yin, Hongxu and Molchanov, Pavlo and Mao, Lei and Liu, Jianna and Alvarez, Jose M.},
  booktitle = {Advances in Neural Information Processing Systems},
  year = {2022}
}"""),
    "nncf": ("int8 quantization with NNCF / OpenVINO", """@article{kozlov2020neural,
  title = {Neural Network Compression Framework for fast model inference},
  author = {Kozlov, Alexander and Lazarevich, Ivan and Shamporov, Vasily and Lyalyushkin, Nikolay and
            Gorbachev, Yury},
  journal = {arXiv preprint arXiv:2002.08679},
  year = {2020}
}"""),
    "senteval": ("SentEval (the transfer tasks' protocol)", """@inproceedings{conneau2018senteval,
  title = {SentEval: An Evaluation Toolkit for Universal Sentence Representations},
  author = {Conneau, Alexis and Kiela, Douwe},
  booktitle = {Proceedings of LREC},
  year = {2018}
}"""),
    "mteb": ("MTEB", """@inproceedings{muennighoff2023mteb,
  title = {MTEB: Massive Text Embedding Benchmark},
  author = {Muennighoff, Niklas and Tazi, Nouamane and Magne, Lo{\\"i}c and Reimers, Nils},
  booktitle = {Proceedings of EACL},
  year = {2023}
}"""),
}
OBJECTIVE_METHODS = {"simcse": "simcse", "diffcse": "diffcse", "infocse": "infocse", "distill": "distillation"}
POOLING_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
                 "pooling_mode_max_tokens": "max", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
                 "pooling_mode_lasttoken": "last token", "pooling_mode_weightedmean_tokens": "weighted mean"}


# ------------------------------------------------------------------------------------------- names
def base_model_name(model: str) -> str:
    """The input model as a model card names it: the hub name of the embedded default, the name of a model
    installed in sparsecse's model store or of a local copy found through ``$SPARSECSE_MODELS`` (never this
    machine's path), else as given.

    Args:
        model: a model name or directory.

    Returns:
        The name a card prints.
    """
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
            "remote_code": bool(config.get("auto_map"))}


def _layers(config: dict, own: dict, before: dict) -> list[dict[str, int]]:
    """Each layer's kept heads and FFN neurons (inert zero padding left out) against the source model's."""
    kept_heads, widths = config.get("kept_heads"), config.get("intermediate_sizes")
    if not kept_heads or not widths:
        return []
    padding = (own.get("shape") or {}).get("ffn_zero_padding") or [0] * len(widths)
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
            "corpus": corpus.get("path") if isinstance(corpus, dict) else corpus,
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
        facts["base_model"] = base_model_name(source)
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
    facts["title"] = f"{facts.get('base_model', root.name)}, {kind} by sparsecse" if kind else root.name
    return facts


# ------------------------------------------------------------------------------------------- rendering
def _known(value: Any) -> bool:
    """A value worth printing: not None, not nan, not an empty container."""
    if value is None:
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    if isinstance(value, (list, tuple, dict, str, set)) and not value:
        return False
    return True


def _ci(ci, signed: bool = False) -> str:
    if not ci or len(ci) != 2 or not all(_known(x) for x in ci):
        return ""
    return f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if signed else f" [{ci[0]:.2f}, {ci[1]:.2f}]"


def _size(n: int) -> str:
    return f"{n / 2 ** 20:.1f} MiB" if n >= 2 ** 20 else f"{n / 2 ** 10:.1f} KiB"


def _count(n: int) -> str:
    return f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n:,}"


def _memory(memory: dict[str, Any], peak: str, runtime: str) -> str:
    text = _size(memory[peak])
    if _known(memory.get(runtime)):
        text += f", {_size(max(0, memory[peak] - memory[runtime]))} above the Python and torch runtime"
    return text


def front_matter(facts: dict[str, Any]) -> dict[str, Any]:
    """The card's YAML metadata: sentence-transformers' fields, and the STS, transfer, user's-file and MTEB
    scores as a ``model-index`` (fractions, as sentence-transformers writes them).

    Args:
        facts: the card's facts.

    Returns:
        The metadata as a dictionary.
    """
    meta: dict[str, Any] = {}
    if _known(facts.get("base_model")):
        meta["base_model"] = facts["base_model"]
    meta.update(library_name="sentence-transformers", pipeline_tag="sentence-similarity")
    tags = ["sentence-transformers", "sentence-similarity", "feature-extraction", "sparsecse"]
    compression, training = facts.get("compression") or {}, facts.get("training") or {}
    if compression.get("layers"):
        tags.append("pruned")
    if "distillation" in (facts.get("methods") or []):
        tags.append("distilled")
    meta["tags"] = tags + sorted(set(facts.get("tags") or ()) - set(tags))
    if _known(training.get("recipe")):
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
               for task, score in (ev.get("sts") or {}).items() if _known(score)]
    results += [entry("text-classification", "Text Classification", task, "accuracy", "Accuracy", d["acc"])
                for task, d in (ev.get("transfer") or {}).items() if _known(d.get("acc"))]
    for key in ("dev_set", "test_set"):
        user = ev.get(key) or {}
        if _known(user.get("score")):
            kind = "information-retrieval" if user.get("kind") == "positives" else "semantic-similarity"
            results.append(entry(kind, kind.replace("-", " ").title(), user.get("name") or key,
                                 str(user.get("metric") or "score"), str(user.get("metric") or "score"), user["score"]))
    for task in ev.get("mteb") or []:
        if _known(task.get("main_score")):
            score = float(task["main_score"]) * (100 if float(task["main_score"]) <= 1 else 1)
            results.append(entry("mteb", "MTEB", str(task.get("task")), "main_score", "Main Score", score))
    return results


def _model_details(facts: dict[str, Any]) -> list[str]:
    d = facts.get("details") or {}
    rows = [("Base model", f"`{facts['base_model']}`" if _known(facts.get("base_model")) else None),
            ("Architecture", f"{d.get('architecture')}, {d.get('layers')} layers, hidden size {d.get('hidden_size')}"
             if _known(d.get("architecture")) and _known(d.get("layers")) else None),
            ("Maximum sequence length", f"{d['max_seq_length']} tokens" if _known(d.get("max_seq_length")) else None),
            ("Output dimension", d.get("output_dim")),
            ("Similarity function", d.get("similarity") or "cosine similarity"),
            ("Pooling", d.get("pooling")),
            ("Normalized embeddings", "yes (a Normalize module)" if d.get("normalized") else None)]
    lines = ["## Model Details", ""]
    if _known(facts.get("description")):
        lines += [facts["description"].strip(), ""]
    lines += [f"- **{name}:** {value}" for name, value in rows if _known(value)]
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
                  "config.json's `auto_map`); `trust_remote_code=True` runs that code."]
    lines += ["", "```python", "from sentence_transformers import SentenceTransformer", "", load,
              "sentences = [" + ", ".join(json.dumps(s) for s in USAGE_SENTENCES) + "]",
              "embeddings = model.encode(sentences)",
              "print(embeddings.shape)" + (f"  # (2, {details['output_dim']})" if _known(details.get("output_dim")) else ""),
              "similarities = model.similarity(embeddings, embeddings)", "print(similarities)", "```", ""]
    return lines


def _evaluation(ev: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    sts = {t: s for t, s in (ev.get("sts") or {}).items() if _known(s)}
    if sts:
        boot = f"{ev['bootstrap']} " if _known(ev.get("bootstrap")) else ""
        lines += ["### Semantic textual similarity", "",
                  f"Spearman x 100 of cosine similarities (SentEval protocol); 95% intervals from {boot}bootstrap "
                  "resamples of the test pairs (`sts_results.json`, where present, holds the per-pair similarities: "
                  "`sparsecse compare` recomputes them).", "", "| task | score |", "|---|---:|"]
        lines += [f"| {task} | {score:.2f} |" for task, score in sts.items()]
        if _known(ev.get("sts_avg")):
            lines.append(f"| **{STS_LABEL}** | **{ev['sts_avg']:.2f}**{_ci(ev.get('sts_avg_ci'))} |")
        if _known(ev.get("stsb_dev")):
            lines.append(f"| STS-B dev (the checkpoint choice) | {ev['stsb_dev']:.2f} |")
        versus = ev.get("versus") or {}
        if _known(versus.get("difference")):
            lines += ["", f"Against `{versus['model']}` ({versus['sts_avg']:.2f}): **{versus['difference']:+.2f}**"
                          f"{_ci(versus.get('paired_ci'), signed=True)} (paired bootstrap, this model minus it)."]
        lines.append("")
    elif _known(ev.get("stsb_dev")):
        lines += [f"STS-B dev (Spearman x 100, the checkpoint choice): {ev['stsb_dev']:.2f}.", ""]
    lines += _transfer(ev)
    lines += _user_sets(ev)
    lines += _mteb(ev.get("mteb") or [])
    if _known(ev.get("note")):
        lines += [ev["note"], ""]
    return ["## Evaluation", "", *lines] if lines else []


def _transfer_cell(d: dict[str, Any]) -> str:
    cell = f"{d['acc']:.2f}"
    if _known(d.get("ci")):
        cell += _ci(d["ci"])
    elif _known(d.get("fold_std")):
        cell += f" ± {d['fold_std']:.2f} (folds)"
    if _known(d.get("f1")):
        cell += f" (F1 {d['f1']:.2f})"
    return cell


def _diff_cell(d: dict[str, Any] | None) -> str:
    if not d or not _known(d.get("diff")):
        return "—"
    if _known(d.get("ci")):
        return f"{d['diff']:+.2f}{_ci(d['ci'], signed=True)}"
    spread = f" ± {d['fold_std']:.2f}" if _known(d.get("fold_std")) else ""
    agree = f" ({d['folds_agree']} folds agree)" if _known(d.get("folds_agree")) else ""
    return f"{d['diff']:+.2f}{spread}{agree}"


def _transfer(ev: dict[str, Any]) -> list[str]:
    tasks = {t: d for t, d in (ev.get("transfer") or {}).items() if _known((d or {}).get("acc"))}
    if not tasks:
        return []
    versus = ev.get("transfer_versus") or {}
    paired = versus.get("tasks") or {}
    settings = f" ({ev['transfer_settings']})" if _known(ev.get("transfer_settings")) else ""
    lines = ["### Transfer tasks (SentEval)", "",
             f"Accuracy x 100 of a logistic regression on the frozen embeddings{settings}. MR, CR, SUBJ and MPQA are "
             "cross-validated: ± is the spread (standard deviation) of the outer folds; SST2, TREC and MRPC have a "
             "test set: a 95% bootstrap interval over its items."
             + (f" The last column is this model minus `{versus['model']}` on the same folds or test items "
                "(paired)." if paired else ""), "",
             "| task | accuracy |" + (" difference |" if paired else ""), "|---|---:|" + ("---:|" if paired else "")]
    for task, d in tasks.items():
        lines.append(f"| {task} | {_transfer_cell(d)} |" + (f" {_diff_cell(paired.get(task))} |" if paired else ""))
    if _known(ev.get("transfer_avg")):
        avg_diff = f" {versus['avg_diff']:+.2f} |" if paired and _known(versus.get("avg_diff")) else (
            " — |" if paired else "")
        lines.append(f"| **average ({len(tasks)} tasks)** | **{ev['transfer_avg']:.2f}** |" + avg_diff)
    return lines + [""]


def _user_sets(ev: dict[str, Any]) -> list[str]:
    sets = [(key, ev[key]) for key in ("dev_set", "test_set") if _known((ev.get(key) or {}).get("score"))]
    if not sets:
        return []
    lines = ["### Your data", "", "| split | file | kind | metric | score | pairs or queries | recall@1 | MRR@10 |",
             "|---|---|---|---|---:|---:|---:|---:|"]
    for key, s in sets:
        extra = [f"{s[k]:.2f}" if _known(s.get(k)) else "—" for k in ("recall@1", "mrr@10")]
        n = f"{s['n']:,}" if _known(s.get("n")) else "—"
        lines.append(f"| {key.split('_')[0]} | {s.get('name') or '—'} | {s.get('kind') or '—'} | {s.get('metric') or '—'} "
                     f"| {s['score']:.2f}{_ci(s.get('ci'))} | {n} | {extra[0]} | {extra[1]} |")
    return lines + [""]


def _mteb(tasks: list[dict[str, Any]]) -> list[str]:
    rows = [t for t in tasks if _known(t.get("main_score"))]
    if not rows:
        return []
    lines = ["### MTEB", "", "| task | main score |", "|---|---:|"]
    for t in rows:
        lines.append(f"| {t.get('task')} | {t['main_score']:.4f}{_ci(t.get('ci'))} |")
    return lines + [""]


def _compression(c: dict[str, Any], base: str | None) -> list[str]:
    lines: list[str] = []
    layers = c.get("layers") or []
    if layers:
        lines += ["Kept units per layer (the rest were removed; FFN widths leave out inert zero padding):", "",
                  "| layer | attention heads kept | FFN neurons kept |", "|---:|---:|---:|"]
        lines += [f"| {r['layer']} | {r['heads']} / {r['heads_total']} | {r['ffn']} / {r['ffn_total']} |" for r in layers]
        lines.append("")
    sizes = []
    if _known(c.get("parameters")):
        b, a = c["parameters"]
        sizes.append(f"- **Parameters:** {_count(a)} of {_count(b)} ({a / b:.3f} kept)")
    if _known(c.get("flops_per_token")):
        b, a = c["flops_per_token"]
        seq = f" at {c['seq_len']} tokens" if _known(c.get("seq_len")) else ""
        sizes.append(f"- **Layer FLOPs per token{seq}:** {a / b:.3f} of the source model's")
    if _known(c.get("file_size_bytes")):
        sizes.append(f"- **Weight files:** {_size(c['file_size_bytes'])}")
    speed = c.get("speed") or {}
    if _known(speed.get("speedup")):
        ref = f"; `{speed['reference']}`: {speed['reference_speedup']:.2f}x" if _known(
            speed.get("reference_speedup")) and _known(speed.get("reference")) else ""
        threads = f", {speed['threads']} threads" if _known(speed.get("threads")) else ""
        sentences = f", {speed['sentences']}" if _known(speed.get("sentences")) else ""
        sizes.append(f"- **Encode speed-up over `{base or 'the input model'}`:** {speed['speedup']:.2f}x{ref} "
                     f"({speed.get('engine', 'torch fp32')}{threads}{sentences}); CPU: {speed.get('cpu', 'not recorded')}")
    memory = c.get("memory") or {}
    if _known(memory.get("peak_rss_bytes")):
        sizes.append(f"- **Peak memory while encoding:** {_memory(memory, 'peak_rss_bytes', 'runtime_rss_bytes')}"
                     + (f"; `{base or 'the input model'}`: "
                        f"{_memory(memory, 'input_peak_rss_bytes', 'input_runtime_rss_bytes')}"
                        if _known(memory.get("input_peak_rss_bytes")) else "")
                     + f" ({memory.get('method', 'peak resident set size of the encoding process')})")
    if sizes:
        lines += sizes + [""]
    lines += _target(c.get("target") or {})
    return ["## Compression", "", *lines] if lines else []


def _target(t: dict[str, Any]) -> list[str]:
    if not t:
        return []
    asked = []
    if _known(t.get("speedup")):
        asked.append(f"a {t['speedup']:g}x speed-up")
    if _known(t.get("max_drop")):
        asked.append(f"at most {t['max_drop']:g} points lost on dev")
    engine = ", ".join(str(x) for x in (t.get("engine"), f"batch {t['batch_size']}" if _known(t.get("batch_size"))
                                        else None) if _known(x))
    lines = ["### Target", ""]
    if asked:
        met = {True: "met", False: "**not met**"}.get(t.get("met"), "")
        lines.append(f"Asked for {' and '.join(asked)}" + (f" on {engine}" if engine else "") + (f": {met}." if met else "."))
        lines.append("")
    rows = [("Measured speed-up", f"{t['measured_speedup']:.2f}x" if _known(t.get("measured_speedup")) else None),
            ("Latency p50 / p95", f"{t['latency_ms']['p50']:.1f} / {t['latency_ms']['p95']:.1f} ms"
             if _known((t.get("latency_ms") or {}).get("p50")) and _known(t["latency_ms"].get("p95")) else None),
            ("Throughput", f"{t['throughput']:.1f} sentences/s" if _known(t.get("throughput")) else None),
            ("Parameters", _count(t["params"]) if _known(t.get("params")) else None),
            ("File size", _size(t["file_size_bytes"]) if _known(t.get("file_size_bytes")) else None),
            ("CPU features", " ".join(t["cpu_features"]) if _known(t.get("cpu_features")) else None),
            ("Candidates", f"`{t['candidates_table']}`" + (f", plotted in `{t['candidates_plot']}`"
                                                            if _known(t.get("candidates_plot")) else "")
             if _known(t.get("candidates_table")) else None)]
    lines += [f"- **{name}:** {value}" for name, value in rows if _known(value)]
    return lines + [""]


def _training_section(t: dict[str, Any]) -> list[str]:
    rows = [("Recipe", f"`{t['recipe']}`" if _known(t.get("recipe")) else None),
            ("Made by", f"`{t['made_by']}`" if _known(t.get("made_by")) else None),
            ("Corpus", f"`{t['corpus']}`" if _known(t.get("corpus")) else None),
            ("Corpus sentences", f"{t['corpus_sentences']:,}" if _known(t.get("corpus_sentences")) else None),
            ("Losses", ", ".join(t["losses"]) if _known(t.get("losses")) else None),
            ("Steps", t.get("steps")), ("Batch size", t.get("batch_size")), ("Learning rate", t.get("lr")),
            ("Final loss", f"{t['final_loss']:.4f}" if _known(t.get("final_loss")) else None),
            ("Checkpoint", t.get("selected"))]
    lines = [f"- **{name}:** {value}" for name, value in rows if _known(value)]
    if _known(t.get("stages")):
        lines += ["", "Stages:", "", *[f"{i}. {s}" for i, s in enumerate(t["stages"], 1)]]
    seconds = {k: v for k, v in (t.get("seconds") or {}).items() if _known(v)}
    if seconds:
        lines += ["", "| stage | wall time |", "|---|---:|", *[f"| {k} | {v / 60:.1f} min |" for k, v in seconds.items()],
                  f"| total | {sum(seconds.values()) / 60:.1f} min |"]
    if _known(t.get("command")):
        lines += ["", "The command that rebuilds it:", "", "```bash", t["command"], "```"]
    if _known(t.get("recipe_yaml")):
        lines += ["", "The recipe as it ran (`recipe.yaml`):", "", "```yaml", t["recipe_yaml"].rstrip(), "```"]
    return ["## Training Details", "", *lines, ""] if lines else []


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

    base = facts.get("base_model") if _known(facts.get("base_model")) else None
    evaluation = facts.get("evaluation") or {}
    lines = ["---", yaml.safe_dump(front_matter(facts), sort_keys=False, allow_unicode=True).rstrip(), "---", "",
             f"# {facts.get('title') or base or 'A sparsecse model'}", "",
             "A [sentence-transformers](https://www.sbert.net) model written by sparsecse: it maps sentences to "
             "dense vectors for semantic similarity, search, clustering and classification.", ""]
    lines += _model_details(facts)
    lines += usage_lines(facts.get("details") or {})
    lines += _evaluation(evaluation)
    lines += _compression(facts.get("compression") or {}, base)
    lines += _training_section(facts.get("training") or {})
    versions = {k: v for k, v in (facts.get("versions") or {}).items() if _known(v)}
    if versions:
        lines += ["## Framework Versions", "", *[f"- {k}: {v}" for k, v in versions.items()], ""]
    lines += _citations(facts.get("methods") or [], evaluation)
    return "\n".join(lines).rstrip() + "\n"


def write_card(model_dir: str | os.PathLike, facts: dict[str, Any] | None = None) -> Path:
    """Write ``README.md`` into a model directory being assembled (callers make the directory appear
    atomically).

    Args:
        model_dir: the directory.
        facts: the card's facts; default :func:`model_facts` of the directory.

    Returns:
        The card's path.
    """
    path = Path(model_dir) / CARD
    path.write_text(render_card(model_facts(model_dir) if facts is None else facts), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------- reading
def read_front_matter(card: str) -> dict[str, Any]:
    """The YAML metadata of a model card's text ({} without front matter).

    Args:
        card: the card's text.

    Returns:
        The metadata.
    """
    import yaml

    if not card.startswith("---\n"):
        return {}
    end = card.index("\n---", 4)
    return yaml.safe_load(card[4:end]) or {}


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
