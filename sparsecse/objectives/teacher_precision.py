"""The precision a teacher embeds its corpus in, and the check that it is exact enough.

``fp32`` is the torch model as it is. ``bf16`` is torch autocast, about twice as fast where the CPU
(AVX512-BF16, AMX) or GPU runs bf16 natively, and emulated and slower elsewhere. ``int8`` is the teacher
converted to an OpenVINO graph and quantized by NNCF (post-training, calibrated on a seeded sample of the
corpus), the graph ``sparsecse export --format openvino --quantize int8`` writes, compiled in memory; it runs
on the CPU.

Whichever is used, a seeded sample of the corpus is embedded in fp32 too. The smallest and mean cosine are
recorded, and the precision is refused below ``MIN_COSINE``.

    >>> encode = teacher_encoder(teacher, "int8", corpus_sentences)  # doctest: +SKIP
    >>> check = precision_check(teacher, corpus_sentences, "int8", normalize=False, encode=encode)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from sparsecse.errors import SparseCSEError
from sparsecse.exporting.config import CALIBRATION_SIZE as CALIBRATION_SENTENCES  # the size export calibrates on
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.serving.openvino_convert import in_memory_encoder
from sparsecse.serving.openvino_encoder import OpenVinoEncoder

PRECISIONS = ("fp32", "bf16", "int8")
CHECK_SENTENCES = 64  # embedded in fp32 too; their cosines are recorded
MIN_COSINE = {"bf16": 0.99, "int8": 0.99}  # below this smallest cosine on the sample, the precision is refused

Encode = Callable[..., np.ndarray]


def seeded_sample(sentences: Sequence[str], size: int, seed: int = 0) -> list[str]:
    """At most ``size`` of ``sentences``, drawn with ``seed``, in corpus order."""
    pick = sorted(np.random.default_rng(seed).permutation(len(sentences))[:size].tolist())
    return [sentences[i] for i in pick]


def int8_encoder(encoder: SentenceEncoder, sentences: Sequence[str]) -> OpenVinoEncoder:
    """``encoder`` as an OpenVINO int8 graph with its own pooling and no normalisation. NNCF calibrates it on
    a seeded sample of ``CALIBRATION_SENTENCES`` of ``sentences``. The graph is compiled in memory, and
    ``encoder`` is left as it was."""
    return in_memory_encoder(encoder, calibration=seeded_sample(sentences, CALIBRATION_SENTENCES))


def teacher_encoder(encoder: SentenceEncoder, precision: str, sentences: Sequence[str]) -> Encode:
    """A function that embeds texts like ``encoder.encode`` (same keywords) at ``precision``.
    For int8, the graph is calibrated on ``sentences``."""
    if precision not in PRECISIONS:
        raise SparseCSEError(f"The teacher precision must be one of {', '.join(PRECISIONS)}, not {precision!r}.")
    if precision == "int8":
        graph = int8_encoder(encoder, sentences)
        return lambda texts, **options: graph.encode(texts, **options)
    return lambda texts, **options: encoder.encode(texts, precision=precision, **options)


def precision_check(encoder: SentenceEncoder, sentences: Sequence[str], precision: str, normalize: bool,
                    encode: Encode | None = None) -> dict[str, Any]:
    """Embed a seeded sample of ``sentences`` in fp32 and through ``encode`` (default: ``encoder`` at
    ``precision``). Returns their smallest and mean cosine. The precision is refused below
    ``MIN_COSINE``."""
    encode = encode or teacher_encoder(encoder, precision, sentences)
    texts = seeded_sample(sentences, CHECK_SENTENCES)
    exact = np.asarray(encoder.encode(texts, normalize=normalize), dtype=np.float64)
    fast = np.asarray(encode(texts, normalize=normalize), dtype=np.float64)
    cos = (exact * fast).sum(1) / np.maximum(np.linalg.norm(exact, axis=1) * np.linalg.norm(fast, axis=1), 1e-12)
    bound = MIN_COSINE[precision]
    check = {"precision": precision, "sample": len(texts), "min_cosine": float(cos.min()),
             "mean_cosine": float(cos.mean()), "bound": bound}
    if not check["min_cosine"] >= bound:
        raise SparseCSEError(f"The teacher's {precision} embeddings differ from its fp32 ones (smallest cosine "
                             f"{check['min_cosine']:.4f} on {len(texts)} sentences, below {bound}); use "
                             "teacher_precision=fp32.")
    return check
