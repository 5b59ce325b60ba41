"""A table of sentence embeddings: each distinct sentence is encoded once and looked up after."""

from __future__ import annotations

import time
from typing import Iterable

import numpy as np

from sparsecse.data.text import normalize_text  # noqa: F401 (evaluation modules import it from here)


class EmbeddingTable:
    """Float32 embeddings of whitespace-normalised sentences, encoded on first use in large calls.

    Collect the sentences of every task first (:meth:`add`) so that one length-sorted pass encodes
    them all; then ``__call__`` only looks rows up.
    """

    def __init__(self, encoder, batch_size: int | None = None, precision: str = "fp32",
                 show_progress: bool = False):
        self.encoder = encoder
        self.batch_size = batch_size
        self.precision = precision
        self.show_progress = show_progress
        self._rows: dict[str, int] = {}
        self._blocks: list[np.ndarray] = []
        self._matrix = np.zeros((0, encoder.dim), dtype=np.float32)
        self.seconds = 0.0

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, sentences: Iterable[str], desc: str = "encoding") -> None:
        """Encode the sentences not in the table yet (normalised, each once) and add their rows.

        Args:
            sentences: the sentences.
            desc: the progress bar's label.
        """
        new = [s for s in dict.fromkeys(map(normalize_text, sentences)) if s not in self._rows]
        if not new:
            return
        start = time.perf_counter()
        emb = self.encoder.encode(new, batch_size=self.batch_size, precision=self.precision,
                                  show_progress=self.show_progress, desc=desc)
        self.seconds += time.perf_counter() - start
        for sentence in new:
            self._rows[sentence] = len(self._rows)
        self._blocks.append(np.asarray(emb, dtype=np.float32))

    def __call__(self, sentences: Iterable[str]) -> np.ndarray:
        keys = [normalize_text(s) for s in sentences]
        self.add(keys)
        if self._blocks:
            self._matrix = np.concatenate([self._matrix, *self._blocks])
            self._blocks = []
        return self._matrix[[self._rows[k] for k in keys]]
