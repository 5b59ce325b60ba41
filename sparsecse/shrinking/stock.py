"""The stock layout: a shrunk model rebuilt as its family's own architecture class (``BertModel`` with a
``BertConfig``, ``Qwen3Model`` with a ``Qwen3Config``...), so its directory has the family's
``model_type``, no ``auto_map`` and no Python files, and every runtime that loads the family loads it
with no custom code (text-embeddings-inference, optimum's ONNX export, sentence-transformers' ONNX and
OpenVINO backends).

A family's config can state: the layers (``num_hidden_layers``; the kept ones renumber from 0 and every
per-layer field such as ``layer_types`` keeps the kept layers' entries), one FFN width for every layer
(``intermediate_size``), and, where it states a head size of its own (``head_dim``: Qwen3, Gemma-3), one
head count for every layer, ``num_key_value_heads`` groups of equal size. A BERT-like config derives its
head size from ``hidden_size / num_attention_heads``, so there every head must stay. A shrunk model of
another shape is refused in one sentence (prune it with ``layout="stock"``:
:mod:`sparsecse.pruning.uniform`). The weights are those of the shrunk model, loaded strictly.
"""

from __future__ import annotations

from torch import nn

from sparsecse.errors import SparseCSEError
from sparsecse.modeling.adapters import base_model_type
from sparsecse.shrinking.surgery import _CONFIG_FIELDS_NOT_COPIED

STOCK = "stock"


def family_states_head_size(base: str) -> bool:
    """Whether the family ``base``'s own config has a head size field (``head_dim``)."""
    from transformers import CONFIG_MAPPING

    return "head_dim" in CONFIG_MAPPING[base]().to_dict()


def _uniform_heads(config, base: str) -> dict[str, int]:
    """The head fields of the stock config of a shrunk ``config``, or a one-sentence refusal."""
    kept = getattr(config, "kept_heads", None)
    heads = config.num_attention_heads
    if kept is None:
        return {}
    counts = {len(row) for row in kept}
    if counts == {heads} and all(row == list(range(heads)) for row in kept):
        return {}
    if len(counts) != 1 or not family_states_head_size(base):
        raise SparseCSEError(f"This {base} model keeps {sorted(counts)} heads per layer of {heads}; a stock {base} "
                             "model keeps every head" + (" (its config has no head size of its own)"
                                                         if not family_states_head_size(base) else
                                                         " or one count in every layer") +
                             ", so prune it with the stock layout.")
    group = config.query_heads_per_kv_head
    kept_kv = config.kept_kv_heads
    per_group = [[sum(1 for h in row if h // group == kv) for kv in kv_row] for row, kv_row in zip(kept, kept_kv)]
    sizes = {n for row in per_group for n in row}
    if len({len(row) for row in kept_kv}) != 1 or len(sizes) != 1:
        raise SparseCSEError(f"This {base} model's kept heads do not form key/value groups of one size in every "
                             "layer, which a stock config cannot state; prune it with the stock layout.")
    fields = {"num_attention_heads": counts.pop()}
    if getattr(config, "num_key_value_heads", None):
        fields["num_key_value_heads"] = len(kept_kv[0])
    return fields


def stock_config(config):
    """The family's own config for a shrunk (or dense) model's ``config``: the same fields, with the kept layer
    count, the one FFN width and (where stated) the one head count; refused in one sentence where the layers
    differ in shape.

    Args:
        config: a ``sparsecse-<family>`` config (or a family config, returned as a copy).

    Returns:
        A config of the family's own class.
    """
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig

    base = base_model_type(config)
    fields = {k: v for k, v in config.to_dict().items() if k not in _CONFIG_FIELDS_NOT_COPIED}
    widths = getattr(config, "intermediate_sizes", None) or [config.intermediate_size]
    if len(set(widths)) != 1:
        raise SparseCSEError(f"This {base} model's layers keep different FFN widths ({min(widths)} to {max(widths)} "
                             "neurons), which a stock config cannot state; prune it with the stock layout.")
    fields.update(_uniform_heads(config, base), intermediate_size=int(widths[0]))
    try:
        new = AutoConfig.for_model(base, **fields)
    except (ValueError, TypeError, StrictDataclassError) as exc:  # the family's own checks (e.g. heads dividing the hidden size)
        reason = (str(exc).strip().splitlines() or [""])[-1].split(": ", 1)[-1].strip().rstrip(".")
        raise SparseCSEError(f"A stock {base} config cannot state this model's shape ({reason}); prune it with the "
                             "stock layout.") from None
    new._attn_implementation = getattr(config, "_attn_implementation", None)
    return new


def to_stock(model: nn.Module) -> nn.Module:
    """``model`` (a shrunk model of uniform layers) as its family's own model class, holding the same weights.

    Args:
        model: a shrunk or dense model of a registered family.

    Returns:
        The family's model (``AutoModel``'s class for its config), in ``model``'s mode, device and dtype.
    """
    from transformers import AutoModel

    config = stock_config(model.config)
    model_class = AutoModel._model_mapping[type(config)]
    pooler = getattr(model, "pooler", None) is not None
    try:
        stock = model_class(config, add_pooling_layer=pooler)
    except TypeError:  # a family whose model has no pooler option
        stock = model_class(config)
    reference = next(model.parameters())
    stock = stock.to(device=reference.device, dtype=reference.dtype)
    try:
        stock.load_state_dict(model.state_dict(), strict=True)
    except RuntimeError as exc:  # a mismatch here is a bug in the stock config
        raise RuntimeError(f"The stock model's shapes do not match the shrunk weights: {exc}") from None
    stock.train(model.training)
    return stock
