"""The interface every encoder offers, and the shared part of encoders that run an exported graph.

:class:`~sparsecse.deploy.runtime.Encoder` is what ``evaluate``, ``compare`` and the benchmarks need from a model: ``encode``
plus a few facts (``dim``, ``pooling``, ``max_length``, ``source``, ``device``, ``tokenizer``).
:class:`~sparsecse.modeling.encoder.SentenceEncoder` (torch), :class:`~sparsecse.deploy.onnx_encoder.OnnxEncoder`
and :class:`~sparsecse.deploy.openvino_encoder.OpenVinoEncoder` all satisfy it;
:func:`~sparsecse.deploy.loading.load_encoder` picks one by what a directory holds.

    >>> encoder = load_encoder("runs/minilm-openvino")      # any of the three
    >>> encoder.encode(["A man plays a guitar."]).shape
    (1, 384)
"""

from __future__ import annotations

import os
from typing import Iterable, Protocol, runtime_checkable

import numpy as np
import torch
from tqdm.auto import tqdm

from sparsecse.modeling.encoder import DEFAULT_BATCH_SIZE, padded_batches
from sparsecse.errors import SparseCSEError


@runtime_checkable
class Encoder(Protocol):
    """Sentences in, float32 embeddings out (numpy by default), in length-sorted batches."""

    source: str | None
    pooling: str
    max_length: int
    tokenizer: object

    @property
    def dim(self) -> int:
        """The embedding size."""

    @property
    def device(self) -> torch.device:
        """Where the model runs."""

    def encode(self, sentences: Iterable[str], batch_size: int | None = None, show_progress: bool = False,
               normalize: bool = False, convert_to_numpy: bool = True, desc: str = "encoding",
               precision: str = "fp32", max_tokens: int | None = None):
        """Embeddings [N, dim] of ``sentences``, in order."""


def is_encoder(obj) -> bool:
    """Whether ``obj`` is a loaded encoder (not a name or path, which also have an ``encode``)."""
    return not isinstance(obj, (str, bytes, os.PathLike)) and isinstance(obj, Encoder)


class RuntimeEncoder:
    """An exported graph (tokenizer -> pooled, maybe normalised embedding) behind :class:`~sparsecse.deploy.runtime.Encoder`.

    Subclasses load the graph and implement :meth:`run_batch`; batching is the torch encoder's:
    each distinct sentence once, sorted by token count, at most ``batch_size`` sentences and
    ``max_tokens`` padded tokens per batch. An exported model only encodes: masks, training,
    shrinking and other poolings need the torch directory it was exported from.
    """

    runtime = "exported graph"

    def __init__(self, tokenizer, pooling: str, max_length: int, dim: int, source: str, file: str,
                 settings: dict, input_names: list[str]):
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.max_length = int(max_length)
        self._dim = int(dim)
        self.source = source
        self.file = file
        self.settings = dict(settings)
        self.input_names = list(input_names)
        self.pooling_source = "export"
        self.extra_config: dict = {}

    @property
    def dim(self) -> int:
        """The embedding size."""
        return self._dim

    @property
    def device(self) -> torch.device:
        """Always the CPU (the runtimes run there)."""
        return torch.device("cpu")

    @property
    def precision(self) -> str:
        """The graph's kind as the export recorded it (fp32, int8, int8_static)."""
        return self.settings.get("files", {}).get(self.file, "fp32")

    def run_batch(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """Embeddings (batch x dim) of one padded batch of int64 token arrays named like the graph's inputs."""
        raise NotImplementedError

    def encode(self, sentences: Iterable[str], batch_size: int | None = None, show_progress: bool = False,
               normalize: bool = False, convert_to_numpy: bool = True, desc: str = "encoding",
               precision: str = "fp32", max_tokens: int | None = None):
        """Embed ``sentences`` (float32, one row each); ``precision`` must stay fp32 (the graph has its own)."""
        if precision != "fp32":
            raise SparseCSEError(f"An exported {self.runtime} model runs at the precision it was exported with; "
                                 f"leave the precision at fp32, not {precision}.")
        sentences = list(sentences)
        unique = list(dict.fromkeys(sentences))
        batch_size = int(DEFAULT_BATCH_SIZE["cpu"] if batch_size is None else batch_size)
        if batch_size < 1:
            raise SparseCSEError(f"The batch size must be at least 1, not {batch_size}.")
        emb_unique = np.empty((len(unique), self.dim), dtype=np.float32)
        with tqdm(total=len(unique), desc=desc, disable=not show_progress, unit="sent", leave=False) as bar:
            for idx, batch in padded_batches(self.tokenizer, unique, self.max_length, batch_size,
                                             int(max_tokens or batch_size * 64), "np"):
                if "token_type_ids" not in batch:
                    batch["token_type_ids"] = np.zeros_like(batch["input_ids"])
                feeds = {name: np.ascontiguousarray(batch[name], dtype=np.int64) for name in self.input_names}
                emb_unique[idx] = self.run_batch(feeds)
                bar.update(len(idx))
        position = {s: i for i, s in enumerate(unique)}
        emb = emb_unique[[position[s] for s in sentences]] if sentences else emb_unique
        if normalize:
            emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
        return emb if convert_to_numpy else torch.from_numpy(np.ascontiguousarray(emb))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.source!r}, file={self.file!r}, pooling={self.pooling!r})"
