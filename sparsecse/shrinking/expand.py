"""A shrunk model of the custom layout (layers of different widths) spread back over one shape, so that it can be
pruned again.

Gates, scoring and pruning need layers of one shape. A custom-layout model records which source heads each layer
kept (``kept_heads``) and each layer's FFN width (``intermediate_sizes``), so it can be laid out again at its
source's head count and FFN width: each kept head goes back to its source index, each layer's neurons to the first
``intermediate_sizes[i]`` places, and every other head and neuron gets zero weights. A head whose query, key and
value rows and output columns are zero adds nothing (its context is zero, and so is its share of the output
projection), nor does a neuron whose rows and column are zero (act(0) = 0, or act(gate) * 0), so the expanded model
computes what the shrunk one does. The :class:`~sparsecse.pruning.masks.Mask` that marks the units it really has is
the starting point of a pruning path (:class:`~sparsecse.shrinking.iterative.PrunePath`): pruning goes on within
it, and shrinking the result removes the empty units with the pruned ones, keeping the source's head indices and
layers (``kept_heads``, ``kept_layers``).

    >>> from sparsecse.modeling.encoder import SentenceEncoder
    >>> from sparsecse.shrinking.iterative import prune_and_shrink
    >>> from sparsecse.shrinking.shrink import ShrinkConfig
    >>> small = SentenceEncoder.load("runs/t2x/model")  # doctest: +SKIP
    >>> path = pruning_path(small)  # doctest: +SKIP
    >>> shrink = ShrinkConfig(reconstruct="train_sentences.txt")  # doctest: +SKIP
    >>> result, smaller = prune_and_shrink(path, "smaller", keep_flops=0.95 * path.kept, steps=1,
    ...                                    shrink=shrink)  # doctest: +SKIP
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from sparsecse.errors import SparseCSEError
from sparsecse.modeling import SHRUNK_CONFIGS, SHRUNK_MODELS
from sparsecse.modeling.adapters import base_model_type, get_adapter
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.modeling.flops import shape_record
from sparsecse.modeling.kv_groups import kv_group_size
from sparsecse.modeling.modeling_sparsecse import resolve
from sparsecse.pruning.masks import Mask
from sparsecse.pruning.prune import kept_costs
from sparsecse.shrinking.iterative import PrunePath
from sparsecse.shrinking.surgery import removed_channels

UNIFORM_FIELDS = ("kept_heads", "intermediate_sizes")  # the per-layer shapes the expanded config lays out again


def expanded_model(model: nn.Module) -> tuple[nn.Module, Mask]:
    """``model`` (a shrunk ``sparsecse-<base>`` model) at its source's head count and FFN width in every layer, and
    the mask of the units it really has (see the module docstring).

    Args:
        model: a shrunk model (its config records ``kept_heads`` and ``intermediate_sizes``).

    Returns:
        (the expanded model, in ``model``'s mode, device and dtype; its mask).
    """
    config = model.config
    base = base_model_type(config)
    if base not in SHRUNK_MODELS or getattr(config, "kept_heads", None) is None:
        raise SparseCSEError(f"Only a shrunk sparsecse model can be laid out at one shape again, not a "
                             f"{config.model_type!r} model.")
    heads, width = int(config.num_attention_heads), int(config.intermediate_size)
    sizes = [int(n) for n in config.intermediate_sizes]
    if max(sizes) > width:
        raise SparseCSEError(f"A layer of this model has {max(sizes)} FFN neurons, more than its source's {width}.")
    fields = {**config.to_dict(), "kept_heads": [list(range(heads))] * len(sizes),
              "intermediate_sizes": [width] * len(sizes)}
    wide = SHRUNK_MODELS[base](SHRUNK_CONFIGS[base].from_dict(fields))
    reference = next(model.parameters())
    wide = wide.to(device=reference.device, dtype=reference.dtype)
    head_mask = torch.zeros(len(sizes), heads, dtype=torch.bool)
    for i, kept in enumerate(config.kept_heads):
        head_mask[i, kept] = True
    neuron_mask = torch.arange(width)[None, :] < torch.tensor(sizes)[:, None]
    mask = Mask(head_mask, neuron_mask)
    adapter, group = get_adapter(wide), kv_group_size(wide)
    small_params = dict(model.named_parameters())
    with torch.no_grad():
        for name, param in wide.named_parameters():  # shapes that do not depend on the units are copied as they are
            if param.shape == small_params[name].shape:
                param.copy_(small_params[name])
        for i, (layer, small) in enumerate(zip(adapter.layer_modules(wide), adapter.layer_modules(model))):
            cut = removed_channels(layer, adapter.layout, head_mask[i].tolist(), neuron_mask[i].tolist(), group)
            for path, (rows, columns) in cut.items():
                _place(resolve(layer, path), resolve(small, path), rows, columns)
    wide.train(model.training)
    return wide, mask


def _place(wide: nn.Linear, small: nn.Linear, rows: list[int], columns: list[int]) -> None:
    """Zero ``wide`` and write ``small``'s weights into the rows and columns it keeps (all but ``rows`` and
    ``columns``, in order, as the channel pruners left them)."""
    keep_rows = _kept(wide.out_features, rows)
    keep_columns = _kept(wide.in_features, columns)
    wide.weight.zero_()
    wide.weight[keep_rows[:, None], keep_columns[None, :]] = small.weight
    if wide.bias is not None:
        wide.bias.zero_()
        wide.bias[keep_rows] = small.bias


def _kept(size: int, removed: list[int]) -> torch.Tensor:
    keep = torch.ones(size, dtype=torch.bool)
    keep[removed] = False
    return keep.nonzero().flatten()


def pruning_path(encoder: SentenceEncoder, seq_len: int = 128) -> PrunePath:
    """A pruning path that goes on from ``encoder``'s shrunk model: its expanded model (:func:`expanded_model`), the
    mask of its units, the same model as the reconstruction's reference, and the kept fraction of the expanded
    layers' FLOPs (at ``seq_len``) where it stands. ``encoder`` is left as it is."""
    wide, mask = expanded_model(encoder.model)
    mask.manifest.update(kept_costs(shape_record(wide), mask, seq_len))
    expanded = SentenceEncoder(wide, encoder.tokenizer, encoder.pooling, encoder.max_length, encoder.source,
                               encoder.pooling_source, {k: v for k, v in encoder.extra_config.items() if k != "shape"},
                               copy.deepcopy(encoder.dense))
    return PrunePath(expanded, mask, copy.deepcopy(wide), "keep_flops", [])
