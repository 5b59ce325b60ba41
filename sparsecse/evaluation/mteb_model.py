"""Any encoder sparsecse evaluates, seen by mteb (>= 2) as a model: the encode protocol mteb documents.

mteb hands a model a DataLoader of batches (``batch["text"]``), the task's metadata, the split, the subset
and the role of the texts (``prompt_type``: query or document). :class:`MtebEncoder` wraps a sparsecse
encoder (a :class:`~sparsecse.modeling.encoder.SentenceEncoder`, gated by a mask or not, a shrunk model, or
an exported ONNX/OpenVINO :class:`~sparsecse.serving.runtime.RuntimeEncoder`) and encodes every text of a
call in one pass of the encoder's own length-sorted batches. Decoder embedders read a prompt before the
text: ``prompts`` maps a task name, a task type or a role (``"query"``, ``"document"``, or compounds like
``"Retrieval-query"``) to the text put in front, chosen in mteb's order of precedence (task name and
role first, the role alone last); a model directory's ``config_sentence_transformers.json`` prompts are
read by :func:`model_prompts`.

Example::

    model = MtebEncoder(load_encoder("runs/small"), name="local/small", revision="abc123",
                        prompts={"query": "Instruct: find the answer\\nQuery: "})
    mteb.evaluate(model, mteb.get_tasks(["STSBenchmark"]))
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ModelMeta, ScoringFunction

from sparsecse.errors import SparseCSEError

ST_CONFIG = "config_sentence_transformers.json"


def model_prompts(model_dir: str | os.PathLike | None) -> dict[str, str]:
    """The prompts a sentence-transformers model directory declares (``{"query": ..., "document": ...}``).

    Args:
        model_dir: a model directory, or a name / None (no prompts then).

    Returns:
        The prompts by name (empty when the directory declares none).
    """
    path = Path(model_dir) / ST_CONFIG if model_dir is not None and Path(model_dir).is_dir() else None
    if path is None or not path.is_file():
        return {}
    try:
        prompts = json.loads(path.read_text(encoding="utf-8")).get("prompts") or {}
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        raise SparseCSEError(f"{path} is not a JSON object, so its prompts cannot be read.") from None
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise SparseCSEError(f"{path}: \"prompts\" must map names to texts.")
    return {k: v for k, v in prompts.items() if v}


class MtebEncoder(AbsEncoder):
    """A sparsecse encoder behind mteb's encoder protocol (``encode``, ``similarity``, ``mteb_model_meta``).

    Args:
        encoder: what ``load_encoder`` returns (or a caller's SentenceEncoder, gates attached or not).
        name: the model's name in mteb's result layout (``results/<name>/<revision>/<Task>.json``).
        revision: a fingerprint of the weights (and mask) evaluated.
        prompts: {task name | task type | role | "<task or type>-<role>": text put before each input}.
        batch_size: sentences per encoding batch (None: the encoder's default).
        precision: fp32, bf16 or fp16 (torch encoders).
        show_progress: a progress bar per encode call.
    """

    def __init__(self, encoder, name: str, revision: str, prompts: dict[str, str] | None = None,
                 batch_size: int | None = None, precision: str = "fp32", show_progress: bool = False):
        self.model = encoder
        self.model_prompts = dict(prompts or {}) or None
        self.batch_size = batch_size
        self.precision = precision
        self.show_progress = show_progress
        self.texts_encoded = 0
        self.mteb_model_meta = ModelMeta.create_empty(overwrites={
            "name": name, "revision": revision, "embed_dim": int(encoder.dim), "max_tokens": encoder.max_length,
            "similarity_fn_name": ScoringFunction.COSINE, "framework": ["PyTorch"], "modalities": ["text"],
            "open_weights": True, "languages": None})

    def encode(self, inputs, *, task_metadata, hf_split: str, hf_subset: str, prompt_type=None,
               **kwargs: Any) -> np.ndarray:
        """Embeddings [N, dim] (float32) of every text the DataLoader ``inputs`` yields, in order.

        Args:
            inputs: mteb's DataLoader of batches, each a dict with ``"text"``.
            task_metadata: the task's metadata (picks the prompt by task name and type).
            hf_split: the split being evaluated (unused: the same text gets the same embedding).
            hf_subset: the subset being evaluated (unused).
            prompt_type: ``PromptType.query`` / ``PromptType.document`` or None.
            **kwargs: mteb's encode settings (its batch size is ignored: the encoder batches by length).

        Returns:
            A float32 array, one row per text.
        """
        texts = [text for batch in inputs for text in batch["text"]]
        name = self.get_prompt_name(task_metadata, prompt_type) if self.model_prompts else None
        prefix = self.model_prompts[name] if name else ""
        self.texts_encoded += len(texts)
        if not texts:
            return np.zeros((0, self.model.dim), dtype=np.float32)
        embeddings = self.model.encode([prefix + t for t in texts], batch_size=self.batch_size,
                                       precision=self.precision, show_progress=self.show_progress,
                                       desc=f"{task_metadata.name} {prompt_type.value if prompt_type else 'texts'}")
        return np.asarray(embeddings, dtype=np.float32)
