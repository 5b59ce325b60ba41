"""Parameters and FLOPs per token of dense and shrunk encoders (any layer shapes, read from the model).

FLOPs count the matrix multiplications of the transformer layers, 2 per multiply-add (the usual
convention): the Q/K/V and attention-output projections, the attention scores and weighted sum
(which grow with the sequence length), and the two FFN projections. Embedding lookups, the pooler
(once per sentence) and elementwise work (bias, GELU, softmax, LayerNorm) are left out; they are
under 1% of the total for BERT-like models.

Per unit (d the model width, d_h the head size, n the sequence length), which is also the cost model
of the budgeted pruning search (:mod:`sparsecse.pruning.budget`), so a mask's recorded cost and the counted
cost of its shrunk model are the same numbers:

- a head: 8·d·d_h (its Q, K, V rows and output-projection columns: 4·d·d_h multiply-adds) plus
  4·n·d_h (its scores q·k and weighted sum of v: 2·n·d_h multiply-adds); 4·d·d_h + 3·d_h parameters;
- an FFN neuron: 4·d (its input row and output column); 2·d + 1 parameters;
- every layer also holds 6·d parameters that no unit owns (attention-output and FFN-output biases,
  two LayerNorms) and that stay when all its units go.
"""

from __future__ import annotations

import os
from pathlib import Path

from torch import nn

from sparsecse.modeling.adapters import layer_parts
from sparsecse.modeling.adapters import model_shape
from sparsecse.modeling.encoder import SentenceEncoder

WEIGHT_SUFFIXES = (".safetensors", ".bin")


def _module(model) -> nn.Module:

    return model.model if isinstance(model, SentenceEncoder) else model


def count_parameters(model, part: str = "all") -> int:
    """Parameters of the whole backbone (``part="all"``) or of its transformer layers only (``"layers"``)."""
    model = _module(model)
    if part == "all":
        return sum(p.numel() for p in model.parameters())
    if part == "layers":
        return sum(p.numel() for layer in model.encoder.layer for p in layer.parameters())
    raise ValueError(f"part must be 'all' or 'layers', not {part!r}")


def head_flops(hidden: int, head_dim: int, seq_len: int = 128) -> int:
    """FLOPs per token of one attention head (see the module docstring)."""
    projections = 4 * hidden * head_dim  # Q, K, V, attention output
    attention = 2 * seq_len * head_dim  # scores q.k and weighted sum of v
    return 2 * (projections + attention)


def neuron_flops(hidden: int) -> int:
    """FLOPs per token of one FFN intermediate neuron."""
    return 2 * 2 * hidden


def head_params(hidden: int, head_dim: int) -> int:
    """Parameters of one head: Q, K, V rows and biases, output-projection columns."""
    return 4 * hidden * head_dim + 3 * head_dim


def neuron_params(hidden: int) -> int:
    """Parameters of one FFN neuron: input row and bias, output column."""
    return 2 * hidden + 1


def layer_fixed_params(hidden: int) -> int:
    """Parameters of a layer that no head or neuron owns: two output biases and two LayerNorms."""
    return 6 * hidden


def layer_flops_per_token(model, seq_len: int = 128) -> list[int]:
    """FLOPs each transformer layer spends on one token of a ``seq_len``-token sequence."""
    flops = []
    for part in layer_parts(_module(model)):
        hidden = part.query.in_features
        flops.append(part.num_heads * head_flops(hidden, part.head_dim, seq_len)
                     + part.ffn_size * neuron_flops(hidden))
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
