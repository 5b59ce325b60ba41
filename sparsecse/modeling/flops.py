"""Parameters and FLOPs per token of dense and shrunk encoders (any layer shapes, read from the model).

FLOPs count the matrix multiplications of the transformer layers, 2 per multiply-add (the usual
convention): the Q/K/V and attention-output projections, the attention scores and weighted sum
(which grow with the sequence length), and the two FFN projections. Embedding lookups, the pooler
(once per sentence) and elementwise work (bias, GELU, softmax, LayerNorm) are left out; they are
under 1% of the total for BERT-like models.

Per unit (d the model width, d_h the head size, n the sequence length), which is also the cost model
of the budgeted pruning search (:mod:`sparsecse.pruning.budget`), so a mask's recorded cost and the counted
cost of its shrunk model are the same numbers. What a unit is made of is its family's
:class:`~sparsecse.modeling.adapters.FamilyCost` (no family is named here):

- a query head: 4·d·d_h (its Q rows and output-projection columns: 2·d·d_h multiply-adds) plus
  4·n·d_h (its scores q·k and weighted sum of v: 2·n·d_h multiply-adds);
- a key/value head: 4·d·d_h (its K and V rows), once per query head, or once per group of query heads
  in a family with grouped key/value heads;
- an FFN neuron: 4·d (its input row and output column), 6·d in a gated FFN (its gate and value rows);
- parameters are read off the model's modules, biases included where it has them; what no unit owns
  (output biases, norms: BERT's 6·d per layer) stays when all a layer's units go;
- a layer removed whole costs nothing: its units and what no unit owns go with it.
"""

from __future__ import annotations

import os
from pathlib import Path

from torch import nn

from sparsecse.modeling.adapters import get_adapter, layer_modules, layer_parts
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


def query_head_flops(hidden: int, head_dim: int, seq_len: int = 128) -> int:
    """FLOPs per token of one query head: its q rows and output-projection columns (2·d·d_h multiply-adds)
    plus scores and weighted sum (2·n·d_h).

    Args:
        hidden: the model width d.
        head_dim: the head size d_h.
        seq_len: the sequence length n.

    Returns:
        The FLOPs (2 per multiply-add).
    """
    return 2 * (2 * hidden * head_dim + 2 * seq_len * head_dim)


def kv_head_flops(hidden: int, head_dim: int) -> int:
    """FLOPs per token of one key/value head (its k and v rows), paid once for its group (in a family
    without grouped key/value heads, once per head).

    Args:
        hidden: the model width d.
        head_dim: the head size d_h.

    Returns:
        The FLOPs (2 per multiply-add).
    """
    return 2 * 2 * hidden * head_dim


def neuron_flops(hidden: int, matrices: int = 2) -> int:
    """FLOPs per token of one FFN neuron.

    Args:
        hidden: the model width d.
        matrices: the matrices the neuron has a row or column in
            (:attr:`~sparsecse.modeling.adapters.FamilyCost.ffn_matrices`: 2, or 3 in a gated FFN).

    Returns:
        The FLOPs (2 per multiply-add).
    """
    return 2 * matrices * hidden


def layer_flops_per_token(model, seq_len: int = 128) -> list[int]:
    """FLOPs each transformer layer spends on one token of a ``seq_len``-token sequence, its units at their
    real shapes and costed by its family's :class:`~sparsecse.modeling.adapters.FamilyCost`: query heads
    (:func:`query_head_flops`), key/value heads (:func:`kv_head_flops`, one per query head where the family
    has no groups) and FFN neurons (:func:`neuron_flops`)."""
    model = _module(model)
    matrices = get_adapter(model).cost.ffn_matrices
    flops = []
    for part in layer_parts(model):
        hidden = part.attn_out.out_features
        flops.append(part.num_heads * query_head_flops(hidden, part.head_dim, seq_len)
                     + part.num_kv_heads * kv_head_flops(hidden, part.head_dim)
                     + part.ffn_size * neuron_flops(hidden, matrices))
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
        ``layers``, ``heads``, ``ffn``, ``hidden``, ``head_dim``, and the unit costs of :func:`shape_extras`.
    """
    model = _module(model)
    layers, heads, ffn = uniform_shape(model)
    return {"layers": layers, "heads": heads, "ffn": ffn, "hidden": int(model.config.hidden_size),
            "head_dim": int(layer_parts(model)[0].head_dim), **shape_extras(model)}


def shape_extras(model) -> dict[str, int]:
    """What a score manifest's shape records beyond layers/heads/ffn/hidden/head_dim: key/value heads per
    layer, FFN matrices per neuron (the family's :class:`~sparsecse.modeling.adapters.FamilyCost`) and the
    unit parameters of :func:`unit_costs_of_model`."""
    model = _module(model)
    return {"kv_heads": layer_parts(model)[0].num_kv_heads, "ffn_matrices": get_adapter(model).cost.ffn_matrices,
            **unit_costs_of_model(model)}


def recorded_costs(shape: dict) -> dict[str, int]:
    """The unit-cost fields of a shape record (:func:`shape_extras`). A record written before records held
    them (then only BERT-era families were scored) gets what they were for those: one key/value per query
    head, a two-matrix FFN, biased projections and two LayerNorms per layer (6·d parameters no unit owns).

    Args:
        shape: the record (``layers``, ``heads``, ``hidden`` and ``head_dim`` at least).

    Returns:
        ``kv_heads``, ``ffn_matrices``, ``head_params``, ``kv_head_params``, ``neuron_params``,
        ``fixed_params``.
    """
    d, dh = int(shape["hidden"]), int(shape["head_dim"])
    written_before = {"kv_heads": int(shape["heads"]), "ffn_matrices": 2, "head_params": 4 * d * dh + 3 * dh,
                      "kv_head_params": 0, "neuron_params": 2 * d + 1, "fixed_params": int(shape["layers"]) * 6 * d}
    return {key: int(value if shape.get(key) is None else shape[key]) for key, value in written_before.items()}


def _bias(linear: nn.Linear) -> int:
    return int(linear.bias is not None)


def unit_costs_of_model(model) -> dict[str, int]:
    """Parameters of one query head, one key/value head (0 where each head has its own key and value,
    which then count in the head), one FFN neuron, and of what no unit owns in all layers together,
    read from a dense model's real module shapes (biases included where the model has them) as its
    family's :class:`~sparsecse.modeling.adapters.FamilyCost` divides them into units; where layers differ
    in what no unit owns (ModernBERT's first layer has no attention norm), also that part per layer
    (``layer_fixed_params``: what a removed layer takes with it)."""
    model = _module(model)
    cost = get_adapter(model).cost
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
        if not cost.grouped_kv:
            head, kv = head + kv, 0
    # its output column, and its input row(s) with their biases: gate and value rows in a gated FFN
    neuron = d + (d + _bias(part.ffn_in)) * (cost.ffn_matrices - 1)
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
