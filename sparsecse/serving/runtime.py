"""The interface every encoder offers, and the shared part of encoders that run an exported graph.

:class:`~sparsecse.serving.runtime.Encoder` is what ``evaluate``, ``compare`` and the benchmarks need from a model: ``encode``
plus a few facts (``dim``, ``pooling``, ``max_length``, ``source``, ``device``, ``tokenizer``).
:class:`~sparsecse.modeling.encoder.SentenceEncoder` (torch), :class:`~sparsecse.serving.onnx_encoder.OnnxEncoder`
and :class:`~sparsecse.serving.openvino_encoder.OpenVinoEncoder` all satisfy it;
:func:`~sparsecse.serving.loading.load_encoder` picks one by what a directory holds.
:class:`RuntimeEncoder` is all of an exported format's loader but opening and running its graph.

    >>> encoder = load_encoder("runs/minilm-openvino")  # any of the three  # doctest: +SKIP
    >>> encoder.encode(["A man plays a guitar."]).shape  # doctest: +SKIP
    (1, 384)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Protocol, runtime_checkable

import numpy as np
import torch
from tqdm.auto import tqdm

from sparsecse.artifacts.export_formats import get_format
from sparsecse.artifacts.exported_model import export_settings
from sparsecse.artifacts.remote_code import allow_code
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.encoder import (DEFAULT_BATCH_SIZE, check_tokenizer_files, configured_max_length,
                                        padded_batches)


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


def check_exported_load(path: str, settings: dict | None, what: str, pooling: str | None,
                        device, file: str | None) -> str:
    """Refusals shared by the exported-model loaders; returns the graph file to load.

    Args:
        path: the exported directory.
        settings: its format's entry in ``sparsecse_config.json`` (None: not such a directory).
        what: the format's title, for the messages.
        pooling: the pooling asked for (None: the directory's own, the only one its graph has).
        device: the device asked for (None or the CPU).
        file: the graph file asked for (None: the one the export chose).

    Returns:
        The graph file, relative to ``path``.
    """
    if settings is None:
        raise SparseCSEError(f"{path} is not a directory written by sparsecse export --format {what}.")
    if device is not None and torch.device(device).type != "cpu":
        raise SparseCSEError(f"Exported {what} models run on the CPU, not on {device}.")
    if pooling is not None and pooling != settings["pooling"]:
        raise SparseCSEError(f"{path} was exported with {settings['pooling']} pooling, which is part of its "
                             f"graph; export the model again with --pooling {pooling}.")
    file = file or settings["file"]
    if not isinstance(file, str) or not (Path(path) / file).resolve().is_relative_to(Path(path).resolve()):
        raise SparseCSEError(f"The config of {path} names the {what} file {file!r}, which is not inside the "
                             "directory; export the model again.")
    if not (Path(path) / file).is_file():
        raise SparseCSEError(f"The {what} file {Path(path) / file} does not exist.")
    return file


def load_tokenizer(path: str):
    """The tokenizer saved in an exported directory (one sentence when it cannot be loaded)."""
    from transformers import AutoTokenizer

    check_tokenizer_files(path)
    try:
        return AutoTokenizer.from_pretrained(path, trust_remote_code=allow_code(path))
    except Exception as exc:
        raise SparseCSEError(f"Cannot load the tokenizer from {path} ({exc}).") from None


class RuntimeEncoder:
    """An exported graph (tokenizer -> pooled, maybe normalised embedding) behind :class:`~sparsecse.serving.runtime.Encoder`.

    A format's loader subclasses it and gives ``format`` (its registered name), :meth:`open_graph` and
    :meth:`run_batch`; :meth:`load` does the rest (the directory's settings, the refusals, the packages,
    the tokenizer). Batching is the torch encoder's: each distinct sentence once, sorted by token count, at
    most ``batch_size`` sentences and ``max_tokens`` padded tokens per batch. An exported model only
    encodes: masks, training, shrinking and other poolings need the torch directory it was exported from.

    Args:
        graph: what :meth:`open_graph` returned (an inference session, a compiled model, ...).
        tokenizer: the directory's tokenizer.
        pooling: the pooling in the graph.
        max_length: the tokenizer's truncation.
        dim: the embedding size.
        source: the directory.
        file: the graph file in it.
        settings: the format's entry of the directory's config.
    """

    format: str | None = None  # the registered export format the class loads

    def __init__(self, graph, tokenizer, pooling: str, max_length: int, dim: int, source: str, file: str,
                 settings: dict | None = None):
        self.graph = graph
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.max_length = int(max_length)
        self._dim = int(dim)
        self.source = source
        self.file = file
        self.settings = dict(settings or {})
        self.input_names = list(self.graph_inputs(graph))
        self.pooling_source = "export"
        self.extra_config: dict = {}

    @classmethod
    def load(cls, name_or_path, pooling: str | None = None, max_length: int | None = None,
             device: str | torch.device | None = None, file: str | None = None, threads: int | None = None,
             ) -> "RuntimeEncoder":
        """Load an exported directory of the class's format.

        Args:
            name_or_path: the directory.
            pooling: refused unless the directory's own (its graph pools).
            max_length: the tokenizer's truncation (default: the directory's).
            device: refused unless the CPU (where the runtimes run).
            file: a graph of the directory (default: the one the export chose).
            threads: the runtime's threads (default: torch's).

        Returns:
            The encoder.
        """
        path = str(name_or_path)
        fmt = get_format(cls.format)
        settings = export_settings(path, fmt.name)
        file = check_exported_load(path, settings, fmt.title, pooling, device, file)
        fmt.require()
        tokenizer = load_tokenizer(path)
        graph = cls.open_graph(Path(path), file, settings, threads)
        return cls(graph, tokenizer, settings["pooling"], max_length or configured_max_length(path) or 512,
                   settings["dim"], source=path, file=file, settings=settings)

    @classmethod
    def open_graph(cls, path: Path, file: str, settings: dict[str, Any], threads: int | None) -> Any:
        """The graph ``file`` of the directory ``path``, ready to run on ``threads`` threads; one sentence when it
        cannot be loaded or is not what ``settings`` (the format's entry of the directory's config) promises."""
        raise NotImplementedError

    def graph_inputs(self, graph) -> list[str]:
        """The names of the graph's inputs, in order (default: those the directory's config records)."""
        return list(self.settings.get("inputs", []))

    @property
    def runtime(self) -> str:
        """The runtime's name, for messages (the format's title)."""
        return get_format(self.format).title if self.format else "exported graph"

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
