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
  two LayerNorms) and that stay when all its units go;
- a layer removed whole costs nothing: its units and what no unit owns go with it.
"""

from __future__ import annotations

import os
from pathlib import Path

from torch import nn

from sparsecse.modeling.adapters import layer_modules, layer_parts
from sparsecse.modeling.adapters import model_shape, uniform_shape
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
        return sum(p.numel() for layer in layer_modules(model) for p in layer.parameters())
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


def query_head_flops(hidden: int, head_dim: int, seq_len: int = 128) -> int:
    """FLOPs per token of one query head under grouped-query attention: its q_proj rows and o_proj
    columns (2·d·d_h multiply-adds) plus scores and weighted sum (2·n·d_h)."""
    return 2 * (2 * hidden * head_dim + 2 * seq_len * head_dim)


def kv_head_flops(hidden: int, head_dim: int) -> int:
    """FLOPs per token of one key/value head (its k_proj and v_proj rows), paid once for its group."""
    return 2 * 2 * hidden * head_dim


def gated_neuron_flops(hidden: int) -> int:
    """FLOPs per token of one GeGLU/SwiGLU neuron: its gate row, value row and output column."""
    return 2 * 3 * hidden


def layer_flops_per_token(model, seq_len: int = 128) -> list[int]:
    """FLOPs each transformer layer spends on one token of a ``seq_len``-token sequence (with grouped
    key/value heads and gated FFNs counted at their real shapes: :func:`query_head_flops`,
    :func:`kv_head_flops`, :func:`gated_neuron_flops`)."""
    flops = []
    for part in layer_parts(_module(model)):
        if part.kv_heads is None and part.ffn_gate is None:  # BERT-era layers: unchanged
            hidden = part.query.in_features
            flops.append(part.num_heads * head_flops(hidden, part.head_dim, seq_len)
                         + part.ffn_size * neuron_flops(hidden))
            continue
        hidden = part.attn_out.out_features
        attention = (part.num_heads * query_head_flops(hidden, part.head_dim, seq_len)
                     + part.num_kv_heads * kv_head_flops(hidden, part.head_dim))
        ffn = part.ffn_size * (gated_neuron_flops(hidden) if part.ffn_gate is not None else neuron_flops(hidden))
        flops.append(attention + ffn)
    return flops


def shape_record(model) -> dict[str, int]:
    """The shape of a dense model that every budget is costed from: what a score manifest records and
    what ``UnitCosts.from_shape`` (:mod:`sparsecse.pruning.budget`) reads, so the early budget check of
    ``compress``, the pruning search and the counted cost of the shrunk model (:func:`flops_per_token`,
    :func:`count_parameters`) use one source.

    Args:
        model: a :class:`~sparsecse.modeling.encoder.SentenceEncoder` or a backbone whose layers all have
            one shape (:func:`~sparsecse.modeling.adapters.uniform_shape`; a shrunk model is refused).

    Returns:
        ``layers``, ``heads``, ``ffn``, ``hidden``, ``head_dim``, and for today's encoders (ModernBERT,
        Qwen3, Gemma-3) the fields of :func:`shape_extras`.
    """
    model = _module(model)
    layers, heads, ffn = uniform_shape(model)
    return {"layers": layers, "heads": heads, "ffn": ffn, "hidden": int(model.config.hidden_size),
            "head_dim": int(layer_parts(model)[0].head_dim), **shape_extras(model)}


def shape_extras(model) -> dict[str, int]:
    """What a score manifest's shape records beyond layers/heads/ffn/hidden/head_dim for today's encoders
    (key/value heads per layer, FFN matrices per neuron, unit parameters: :func:`unit_costs_of_model`);
    nothing for the BERT-era ones, whose manifests stay as they were."""
    part = layer_parts(_module(model))[0]
    if part.kv_heads is None and part.ffn_gate is None:
        return {}
    return {"kv_heads": part.num_kv_heads, "ffn_matrices": 3 if part.ffn_gate is not None else 2,
            **unit_costs_of_model(model)}


def _bias(linear: nn.Linear) -> int:
    return int(linear.bias is not None)


def unit_costs_of_model(model) -> dict[str, int]:
    """Parameters of one query head, one key/value head (0 where each head has its own key and value,
    which then count in the head), one FFN neuron, and of what no unit owns in all layers together,
    read from a dense model's real module shapes (biases included where the model has them); where layers
    differ in what no unit owns (ModernBERT's first layer has no attention norm), also that part per layer
    (``layer_fixed_params``: what a removed layer takes with it). For the score manifest's shape of today's
    encoders (ModernBERT, Qwen3, Gemma-3)."""
    model = _module(model)
    parts = layer_parts(model)
    part = parts[0]
    d, dh = part.attn_out.out_features, part.head_dim
    out_cols = dh * d
    if part.query is part.key:  # fused Wqkv: a head's rows in each of the q, k and v blocks
        head = 3 * (d * dh + dh * _bias(part.query)) + out_cols
        kv = 0
    else:
        head = d * dh + dh * _bias(part.query) + out_cols
        kv = 2 * (d * dh + dh * _bias(part.key))
        if part.kv_heads is None:
            head, kv = head + kv, 0
    # its output column, and its input row(s) with their biases: gate and value rows in a gated FFN
    neuron = d + (d + _bias(part.ffn_in)) * (2 if part.ffn_gate is not None else 1)
    layer_fixed = [sum(t.numel() for t in layer.parameters()) - (p.num_heads * head + p.num_kv_heads * kv
                                                                 + p.ffn_size * neuron)
                   for layer, p in zip(layer_modules(model), parts)]
    return {"head_params": head, "kv_head_params": kv, "neuron_params": neuron, "fixed_params": sum(layer_fixed),
            **({"layer_fixed_params": layer_fixed} if len(set(layer_fixed)) > 1 else {})}


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
