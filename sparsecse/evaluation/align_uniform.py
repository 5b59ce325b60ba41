"""Alignment and uniformity of a model on STS-B, as SimCSE plots them (Wang & Isola 2020).

Alignment: E ||f(x) - f(x+)||^2 over the pairs with gold score > 4 (normalised embeddings).
Uniformity: log E exp(-2 ||f(x) - f(y)||^2) over all distinct sentences of the split.
Both come from :mod:`sparsecse.scoring.alignment`; smaller is better for both.
"""

from __future__ import annotations

from typing import Sequence

import torch

from sparsecse.scoring.alignment import alignment_metric, uniformity_metric
from sparsecse.data.sts import Pair
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.embedding import normalize_text
from sparsecse.evaluation.sts import Embed

POSITIVE_THRESHOLD = 4.0


def alignment_uniformity(pairs: Sequence[Pair], embed: Embed, threshold: float = POSITIVE_THRESHOLD) -> dict:
    """Alignment of the positive STS-B pairs and uniformity of all sentences (Wang & Isola 2020).

    Args:
        pairs: STS-B pairs; those above ``threshold`` are positives.
        embed: sentences -> normalised embeddings.
        threshold: the gold score above which a pair is a positive.

    Returns:
        ``alignment`` and ``uniformity``.
    """
    positives = [p for p in pairs if p.score > threshold]
    if not positives:
        raise SparseCSEError(f"No STS-B pair has a gold score above {threshold}; alignment needs positive pairs.")
    sentences = list(dict.fromkeys(normalize_text(s) for p in pairs for s in (p.s1, p.s2)))
    if len(sentences) < 2:
        raise SparseCSEError("Uniformity needs at least two distinct sentences.")
    a = torch.from_numpy(embed([p.s1 for p in positives])).double()
    b = torch.from_numpy(embed([p.s2 for p in positives])).double()
    everything = torch.from_numpy(embed(sentences)).double()
    return {
        "alignment": float(alignment_metric(a, b)),
        "uniformity": float(uniformity_metric(everything)),
        "positive_pairs": len(positives),
        "sentences": len(sentences),
    }
