"""Parameters and FLOPs per token of dense and shrunk encoders (any layer shapes, read from the model).

FLOPs count the matrix multiplications of the transformer layers, 2 per multiply-add (the usual
convention): the Q/K/V and attention-output projections, the attention scores and weighted sum
(which grow with the sequence length), and the two FFN projections. Embedding lookups, the pooler
(once per sentence) and elementwise work (bias, GELU, softmax, LayerNorm) are left out; they are
under 1% of the total for BERT-like models.
"""

from __future__ import annotations

import os
from pathlib import Path

from torch import nn

from sparsecse.gates import layer_parts

WEIGHT_SUFFIXES = (".safetensors", ".bin")


def _module(model) -> nn.Module:
    from sparsecse.encoder import SentenceEncoder

    return model.model if isinstance(model, SentenceEncoder) else model


def count_parameters(model, part: str = "all") -> int:
    """Parameters of the whole backbone (``part="all"``) or of its transformer layers only (``"layers"``)."""
    model = _module(model)
    if part == "all":
        return sum(p.numel() for p in model.parameters())
    if part == "layers":
        return sum(p.numel() for layer in model.encoder.layer for p in layer.parameters())
    raise ValueError(f"part must be 'all' or 'layers', not {part!r}")


def layer_flops_per_token(model, seq_len: int = 128) -> list[int]:
    """FLOPs each transformer layer spends on one token of a ``seq_len``-token sequence."""
    flops = []
    for part in layer_parts(_module(model)):
        hidden = part.query.in_features
        attn_width = part.num_heads * part.head_dim
        projections = 4 * hidden * attn_width  # Q, K, V, attention output
        attention = 2 * seq_len * attn_width  # scores q.k and weighted sum of v
        ffn = 2 * hidden * part.ffn_size
        flops.append(2 * (projections + attention + ffn))
    return flops


def flops_per_token(model, seq_len: int = 128) -> int:
    """Matrix-multiplication FLOPs of all transformer layers for one token (see the module docstring)."""
    return sum(layer_flops_per_token(model, seq_len))


def weights_file_bytes(model_dir: str | os.PathLike | None) -> int | None:
    """Bytes of a model directory's weight files (safetensors, else .bin); None if not a local directory."""
    if model_dir is None or not Path(model_dir).is_dir():
        return None
    root = Path(model_dir)
    for suffix in WEIGHT_SUFFIXES:
        files = sorted(root.glob(f"*{suffix}"))
        if files:
            return sum(f.stat().st_size for f in files)
    return None


def size_report(model, seq_len: int = 128, model_dir: str | os.PathLike | None = None) -> dict:
    """Parameters, per-layer shapes, FLOPs per token (and weight-file bytes given a directory)."""
    from sparsecse.gates import model_shape

    heads, ffn = model_shape(_module(model))
    report = {
        "parameters": count_parameters(model),
        "layer_parameters": count_parameters(model, "layers"),
        "heads_per_layer": heads,
        "ffn_per_layer": ffn,
        "flops_per_token": flops_per_token(model, seq_len),
        "flops_seq_len": seq_len,
    }
    size = weights_file_bytes(model_dir)
    if size is not None:
        report["weights_bytes"] = size
    return report
