"""Physical pruning: remove a mask's pruned heads and FFN neurons, leaving a smaller dense model, for every
architecture through its adapter's description (:class:`~sparsecse.modeling.adapters.UnitLayout`).

From the layout and the mask, :func:`removed_channels` computes the channels each projection loses:

- a removed query head: its ``head_dim`` rows of every query projection (a fused q/k/v projection: its
  rows in the q block, and in the k and v blocks where its key/value head goes) and its columns of the
  attention output projection;
- a key/value head, only when every query head of its group is gone (``num_key_value_heads``): its rows
  of the key and value projections;
- a removed FFN neuron: its row of every FFN input projection (the value and gate halves of a gated FFN,
  fused or not) and its column of the FFN output projection.

torch-pruning's channel pruners (``prune_linear_out_channels`` / ``prune_linear_in_channels``) remove
them. Its dependency graph is not used: it does not model heads (it cannot trace ``view(.., heads,
head_dim)`` + rotary + SDPA into head-sized channel groups), and the adapter already knows which channels
go together. Rotary embeddings and q/k norms act within a head, which stays whole.

Layers end with different head counts and FFN widths, recorded in a ``sparsecse-<base>`` config (with
the layout) whose modeling code ships inside the saved directory (:mod:`sparsecse.modeling.modeling_sparsecse`):
it builds layers of those sizes, and the cut weights load into it strictly, so a mismatch between the
cut and the rebuilt shapes cannot pass unnoticed. A layer that loses every head keeps its FFN and adds
only the attention output projection's bias, exactly what the gated model computes with all that
layer's head gates at 0 (the pruner never empties a layer unless asked to).

A mask may also remove whole layers (``Mask.layer_mask``): they leave the layer list, and the shrunk
config records ``num_hidden_layers`` (the layers kept), ``kept_layers`` (their indices in the source
model) and ``source_layers``; every per-layer config list (``layer_types``: ModernBERT's local/global
alternation, Qwen3's and Gemma-3's sliding-window layers) keeps the kept layers' entries, so a kept layer
keeps its attention type.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import torch
from torch import nn

from sparsecse.errors import SparseCSEError
from sparsecse.modeling import SHRUNK_CONFIGS, SHRUNK_MODELS
from sparsecse.modeling.adapters import ArchitectureAdapter, UnitLayout, backbone, base_model_type, get_adapter
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.modeling.kv_groups import kv_group_size, kv_keep
from sparsecse.modeling.modeling_sparsecse import head_feature_index, replace_module, resolve
from sparsecse.pruning.masks import Mask, check_mask_kv_groups

MISSING_TORCH_PRUNING = "Shrinking needs torch-pruning (pip install torch-pruning)."

# Config fields that describe the saved object rather than the architecture; never copied over.
_CONFIG_FIELDS_NOT_COPIED = {"model_type", "architectures", "auto_map", "transformers_version", "_name_or_path",
                             "kept_heads", "intermediate_sizes", "has_pooler", "unit_layout", "kept_layers",
                             "source_layers"}
# Config fields holding one entry per layer: a shrunk config keeps the kept layers' entries.
PER_LAYER_CONFIG_FIELDS = ("layer_types",)


def _torch_pruning():
    try:
        import torch_pruning
    except ImportError:
        raise SparseCSEError(MISSING_TORCH_PRUNING) from None
    return torch_pruning


def _check_shrinkable(model: nn.Module) -> str:
    base = base_model_type(model.config)
    if base not in SHRUNK_MODELS:
        raise SparseCSEError(
            f"Shrinking supports {', '.join(SHRUNK_MODELS)} models, not {base!r}; "
            "evaluate this model with the mask applied instead (sparsecse eval --mask)."
        )
    return base


def mask_digest(mask: Mask) -> str:
    """sha256 of the mask's keep/remove bits (independent of how or where the mask was saved)."""
    h = hashlib.sha256()
    for tensor in (mask.head_mask, mask.neuron_mask) + (() if mask.layer_mask is None else (mask.layer_mask,)):
        h.update(str(tuple(tensor.shape)).encode())
        h.update(tensor.to(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def shrunk_config(model: nn.Module, mask: Mask, padding: list[int] | None = None):
    """The ``sparsecse-<base>`` config of ``model`` with ``mask``'s heads and neurons removed (and
    ``padding[i]`` zero neurons appended to layer i's FFN), recording its adapter's unit layout.

    Args:
        model: the model the mask fits.
        mask: which heads and neurons stay.
        padding: zero neurons per layer (:func:`ffn_padding`); None for none.

    Returns:
        The shrunk config.
    """
    config = model.config
    base = _check_shrinkable(model)
    layers = mask.shape[0]
    kept = mask.kept_layers
    prior_heads = getattr(config, "kept_heads", None) or [list(range(mask.shape[1]))] * layers
    prior_layers = getattr(config, "kept_layers", None) or list(range(layers))
    kept_heads = [[prior_heads[i][h] for h in mask.head_mask[i].nonzero().flatten().tolist()] for i in kept]
    fields = {k: v for k, v in config.to_dict().items() if k not in _CONFIG_FIELDS_NOT_COPIED}
    for name in PER_LAYER_CONFIG_FIELDS:
        if isinstance(fields.get(name), list) and len(fields[name]) == layers:
            fields[name] = [fields[name][i] for i in kept]
    widths = [n + pad for n, pad in zip(mask.neuron_mask.sum(1).tolist(), padding or [0] * layers)]
    new = SHRUNK_CONFIGS[base].from_dict({
        **fields, "num_hidden_layers": len(kept), "kept_heads": kept_heads,
        "intermediate_sizes": [widths[i] for i in kept],
        "kept_layers": [prior_layers[i] for i in kept],
        "source_layers": getattr(config, "source_layers", None) or layers,
        "unit_layout": get_adapter(model).layout.to_dict(), "has_pooler": getattr(model, "pooler", None) is not None})
    new._attn_implementation = config._attn_implementation
    return new


def zero_neurons_are_inert(model: nn.Module) -> bool:
    """Whether an FFN neuron with zero weights outputs 0: always in a gated FFN (act(gate) * 0), otherwise
    where the activation maps 0 to 0 (GELU, ReLU; not a shifted one)."""
    adapter = get_adapter(model)
    if adapter.layout.ffn_activation is None:
        return True
    activation = resolve(adapter.layer_modules(model)[0], adapter.layout.ffn_activation)
    return activation(torch.zeros(1)).abs().item() == 0


def ffn_padding(model: nn.Module, mask: Mask, align_ffn: int = 1) -> list[int]:
    """Zero neurons to append to each layer so its FFN width is a multiple of ``align_ffn``.

    No padding if a zero neuron would not be inert (:func:`zero_neurons_are_inert`).

    Args:
        model: the model the mask fits.
        mask: which neurons stay.
        align_ffn: the multiple (1: no padding).

    Returns:
        Zero neurons per layer.
    """
    if align_ffn < 1:
        raise SparseCSEError(f"The FFN alignment must be at least 1, not {align_ffn}.")
    if align_ffn == 1 or not zero_neurons_are_inert(model):
        return [0] * mask.shape[0]
    padding = [-kept % align_ffn for kept in mask.neuron_mask.sum(1).tolist()]
    ffn = mask.shape[2]
    too_wide = [i for i, (kept, pad) in enumerate(zip(mask.neuron_mask.sum(1).tolist(), padding)) if kept + pad > ffn]
    if too_wide:  # the padding reuses removed neurons (zeroed), so it cannot exceed the model's FFN width
        raise SparseCSEError(f"--align-ffn {align_ffn} would make layer {too_wide[0]}'s FFN wider than the model's "
                             f"{ffn} neurons; use a smaller alignment (e.g. 8) or 1.")
    return padding


def removed_channels(layer: nn.Module, layout: UnitLayout, head_keep: Sequence[bool], neuron_keep: Sequence[bool],
                     group: int = 1) -> dict[str, tuple[list[int], list[int]]]:
    """The channels one layer loses: projection path -> (output channels, input channels).

    Args:
        layer: a transformer layer at its full shape.
        layout: its family's layout.
        head_keep: per query head, whether it stays.
        neuron_keep: per FFN neuron, whether it stays.
        group: query heads per key/value head.

    Returns:
        For every projection that loses something, the indices of its removed rows and columns.
    """
    head_dim = getattr(resolve(layer, layout.attention), layout.head_dim)
    heads, width = len(head_keep), len(neuron_keep)
    gone = [h for h, keep in enumerate(head_keep) if not keep]
    kept_kv = kv_keep(torch.as_tensor(list(head_keep), dtype=torch.bool)[None], group)[0]
    gone_kv = (~kept_kv).nonzero().flatten().tolist()
    q, kv = _features(gone, head_dim), _features(gone_kv, head_dim)
    if layout.fused_qkv:
        q_rows, kv_rows = heads * head_dim, heads // group * head_dim
        query_rows = q + [q_rows + f for f in kv] + [q_rows + kv_rows + f for f in kv]
    else:
        query_rows = q
    removed = {path: (query_rows, []) for path in layout.query}
    removed.update({path: (kv, []) for path in layout.key_value})
    removed[layout.attn_out] = ([], q)
    neurons = [i for i, keep in enumerate(neuron_keep) if not keep]
    removed.update({path: ([i + half * width for half in range(layout.ffn_halves) for i in neurons], [])
                    for path in layout.ffn_in})
    removed[layout.ffn_out] = ([], neurons)
    return {path: cut for path, cut in removed.items() if cut[0] or cut[1]}


def _features(heads: Sequence[int], head_dim: int) -> list[int]:
    return [int(i) for i in head_feature_index(heads, head_dim).tolist()]


def append_zero_neurons(layer: nn.Module, layout: UnitLayout, count: int) -> None:
    """Add ``count`` FFN neurons whose weights and biases are 0, in place (at the end of each half of a
    fused gated projection).

    Such a neuron outputs act(0) = 0 (or act(gate) * 0), so the layer computes exactly what it did; its
    gradients are 0 too (its input rows and output column are all 0), so training leaves it at 0. It only
    rounds the FFN width up to what fast matrix kernels want (a width that is not a multiple of 8 runs
    ~30% slower per neuron on CPUs).
    """
    if count == 0:
        return
    for path in layout.ffn_in:
        linear = resolve(layer, path)
        for name in ("weight", "bias"):
            param = getattr(linear, name)
            if param is not None:
                halves = param.detach().chunk(layout.ffn_halves, 0)
                zeros = halves[0].new_zeros(count, *halves[0].shape[1:])
                grown = torch.cat([t for half in halves for t in (half, zeros)])
                setattr(linear, name, nn.Parameter(grown, requires_grad=param.requires_grad))
        linear.out_features += layout.ffn_halves * count
    ffn_out = resolve(layer, layout.ffn_out)
    weight = ffn_out.weight
    ffn_out.weight = nn.Parameter(torch.cat([weight.detach(), weight.new_zeros(weight.shape[0], count)], 1),
                                  requires_grad=weight.requires_grad)
    ffn_out.in_features += count


def cut_layers(model: nn.Module, adapter: ArchitectureAdapter, mask: Mask, padding: Sequence[int]) -> None:
    """Remove ``mask``'s units from ``model``'s layers in place with torch-pruning's channel pruners, and
    append ``padding[i]`` inert neurons to layer i's FFN; then drop the layers the mask removes whole from
    the layer list (the kept ones renumber from 0, as the shrunk model's layer list does)."""
    tp = _torch_pruning()
    group = kv_group_size(model)
    layers = adapter.layer_modules(model)
    for layer, heads, neurons, pad, keep in zip(layers, mask.head_mask, mask.neuron_mask, padding,
                                                mask.layer_keep.tolist()):
        if not keep:
            continue
        for path, (rows, columns) in removed_channels(layer, adapter.layout, heads.tolist(), neurons.tolist(),
                                                      group).items():
            linear = resolve(layer, path)
            if rows:
                tp.prune_linear_out_channels(linear, rows)
            if columns:
                tp.prune_linear_in_channels(linear, columns)
        append_zero_neurons(layer, adapter.layout, pad)
    if mask.layer_mask is not None:
        replace_module(backbone(model), adapter.layout.layers, nn.ModuleList([layers[i] for i in mask.kept_layers]))


def shrink_model(model: nn.Module, mask: Mask, align_ffn: int = 1) -> nn.Module:
    """A ``sparsecse-<base>`` model holding ``model``'s weights minus the mask's pruned units.

    With ``align_ffn`` > 1 each layer's FFN is rounded up to a multiple of it with inert zero neurons
    (:func:`append_zero_neurons`). ``model`` itself is cut down in place on the way (its layers lose
    the pruned rows/columns), so use the returned model afterwards.

    Args:
        model: a model of a registered family whose layers all have their full shape.
        mask: which heads and neurons stay (refused in one sentence if it does not fit).
        align_ffn: FFN widths are padded to multiples of this.

    Returns:
        The shrunk model, in ``model``'s training mode, device and dtype.
    """
    base = _check_shrinkable(model)
    mask.check_fits(model)
    check_mask_kv_groups(mask, model)
    padding = ffn_padding(model, mask, align_ffn)
    config = shrunk_config(model, mask, padding)
    cut_layers(model, get_adapter(model), mask, padding)
    reference = next(model.parameters())
    shrunk = SHRUNK_MODELS[base](config).to(device=reference.device, dtype=reference.dtype)
    try:
        shrunk.load_state_dict(model.state_dict(), strict=True)
    except RuntimeError as exc:  # a mismatch here is a bug in the layout or the modeling code
        raise RuntimeError(f"The shrunk model's shapes do not match the pruned weights: {exc}") from None
    shrunk.train(model.training)
    return shrunk


def shrink_encoder(encoder: SentenceEncoder, mask: Mask, align_ffn: int = 1) -> SentenceEncoder:
    """Physically remove ``mask``'s pruned heads and neurons from ``encoder.model``; returns ``encoder``.

    Afterwards ``encoder.model`` is a smaller model (uneven layers) that encodes, trains with autograd
    (build the optimizer after shrinking) and saves with :func:`~sparsecse.shrinking.shrink.save_model_dir`. Raises
    :class:`~sparsecse.errors.SparseCSEError` if the mask does not fit the model. Detach any gates first.
    ``align_ffn`` (default 1: exact) pads FFN widths with inert zero neurons, for speed; leave it at 1
    when training with objectives that perturb weights, which would bring those neurons to life.
    """
    encoder.model = shrink_model(encoder.model, mask, align_ffn)
    kept = [mask.neuron_mask.sum(1).tolist()[i] for i in mask.kept_layers]
    encoder.extra_config["shape"] = {
        "kept_layers": encoder.model.config.kept_layers,
        "heads_per_layer": encoder.model.config.heads_per_layer,
        "ffn_per_layer": kept,
        "ffn_zero_padding": [width - n for width, n in zip(encoder.model.config.intermediate_sizes, kept)],
    }
    return encoder
