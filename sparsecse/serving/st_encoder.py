"""A model directory served as most users serve a sentence encoder: loaded by sentence-transformers, embedding with
its ``encode``. Speed targets time torch models this way by default (:class:`~sparsecse.targets.spec.Target`'s
``loader``), since a request's cost is the model's plus the loader's per-call work (tokenizing, its modules,
moving the embeddings to numpy), and that fixed part weighs most at batch 1, where a speed-up is the ratio users
see only when it is timed through what they run.

    >>> encoder = SentenceTransformersEncoder.load("runs/minilm-2x/model")  # doctest: +SKIP
    >>> encoder.encode(["A man plays a guitar."], batch_size=1).shape  # doctest: +SKIP
    (1, 384)
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np

from sparsecse.artifacts.model_names import resolve_model
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.adapters import register_auto_classes

NAME = "sentence-transformers"


def available() -> bool:
    """Whether sentence-transformers is installed (the ``st`` extra)."""
    return importlib.util.find_spec("sentence_transformers") is not None


class SentenceTransformersEncoder:
    """A sentence-transformers model behind the encode interface timings use (``encode``, ``tokenizer``,
    ``max_length``, ``source``, and ``model``: the transformers backbone, as
    :class:`~sparsecse.modeling.encoder.SentenceEncoder` has it).

    Args:
        sentence_transformer: a loaded ``sentence_transformers.SentenceTransformer``.
        source: the directory or name it was loaded from.
    """

    def __init__(self, sentence_transformer, source: str):
        self.sentence_transformer, self.source = sentence_transformer, source
        self.model = sentence_transformer[0].auto_model
        self.tokenizer, self.max_length = sentence_transformer.tokenizer, int(sentence_transformer.max_seq_length)

    @property
    def config(self):
        """The backbone's transformers config."""
        return self.model.config

    @classmethod
    def load(cls, name_or_path: str | os.PathLike, device: str = "cpu") -> "SentenceTransformersEncoder":
        """The directory (or a name sparsecse resolves) loaded by sentence-transformers on ``device``; sparsecse's
        own shrunk model types load with the installed code, as they do for a user without the Python files."""
        if not available():
            raise SparseCSEError("Timing through sentence-transformers needs it installed (pip install "
                                 "'sparsecse[st]'), or time through sparsecse's loader (--set target.loader=sparsecse).")
        from sentence_transformers import SentenceTransformer

        register_auto_classes()
        path = resolve_model(name_or_path)
        return cls(SentenceTransformer(str(path), device=device, trust_remote_code=False), str(path))

    def encode(self, sentences, batch_size: int = 32, **_) -> np.ndarray:
        """The embeddings of ``sentences`` (float32, numpy), as ``SentenceTransformer.encode`` gives them."""
        return self.sentence_transformer.encode(list(sentences), batch_size=int(batch_size), show_progress_bar=False,
                                 convert_to_numpy=True)
