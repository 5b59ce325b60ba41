"""A seeded sample of a corpus to calibrate int8 activations on (ONNX static and OpenVINO/NNCF).

    >>> sentences, record = calibration_sample("wiki1m_sample.txt", size=300, seed=0)  # doctest: +SKIP
    >>> record["size"], record["seed"]  # doctest: +SKIP
    (300, 0)
"""

from __future__ import annotations

import hashlib
import os
import random

from sparsecse.artifacts.files import sha256_file
from sparsecse.data.corpus import read_corpus
from sparsecse.errors import SparseCSEError
from sparsecse.exporting.config import CALIBRATION_SEED as DEFAULT_SEED
from sparsecse.exporting.config import CALIBRATION_SIZE as DEFAULT_SIZE


def calibration_sample(corpus: str | os.PathLike, size: int = DEFAULT_SIZE,
                       seed: int = DEFAULT_SEED) -> tuple[list[str], dict]:
    """``size`` distinct sentences of ``corpus`` (one per line) drawn with ``seed``, and the record of
    the draw for the manifest (corpus path and hash, sentences available, size, seed, sample hash).
    A corpus with fewer distinct sentences gives all of them, in shuffled order."""
    if int(size) < 1:
        raise SparseCSEError(f"The calibration sample needs at least 1 sentence, not {size}.")
    try:
        distinct = list(dict.fromkeys(read_corpus(corpus)))
    except SparseCSEError as exc:
        raise SparseCSEError(f"Bad calibration corpus: {exc}") from None
    sample = random.Random(seed).sample(distinct, min(int(size), len(distinct)))
    record = {"corpus": str(corpus), "corpus_sha256": sha256_file(corpus), "corpus_sentences": len(distinct),
              "size": len(sample), "requested_size": int(size), "seed": int(seed),
              "sample_sha256": hashlib.sha256("\n".join(sample).encode()).hexdigest()}
    return sample, record
