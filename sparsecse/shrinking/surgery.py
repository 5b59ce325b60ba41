"""Physical pruning: remove a mask's pruned heads and FFN neurons, leaving a smaller dense model.

Per removed head: its query/key/value rows and its attention-output columns; per removed neuron: its
FFN-input row and bias and its FFN-output column. Layers end with different head counts and FFN
widths, recorded in a ``sparsecse-<base>`` config whose modeling code ships inside the saved directory
(:mod:`sparsecse.modeling`), so it reloads with sparsecse, ``transformers.AutoModel`` and
sentence-transformers (``trust_remote_code=True``).

A layer that loses every head keeps its FFN and drops its attention block: the attention sublayer then
adds only the output projection's bias before its LayerNorm, exactly what the gated model computes
with all that layer's head gates at 0 (the pruner never empties a layer unless asked to).

For the BERT-era architectures torch-pruning is not used for the surgery: its dependency graph does
not know Hugging Face head counts, and the code that re-cuts layers at load time must ship inside the
model directory without extra dependencies, so one small slicing function
(:func:`sparsecse.modeling.modeling_sparsecse.shrink_layer`) serves both the pruning here and the reload
(tests/test_shrink.py checks it against torch-pruning's channel pruners, weight for weight). ModernBERT,
Qwen3 and Gemma-3 text models are cut by torch-pruning (:mod:`sparsecse.modeling.surgery`: its dependency
graph for the gated FFNs, its channel pruners for heads and grouped key/value heads) and rebuilt at load
time by :mod:`sparsecse.modeling.modeling_sparsecse_modern`.
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn

from sparsecse.errors import SparseCSEError
from sparsecse.modeling import MODERN_SHRUNK_CONFIGS, SHRUNK_CONFIGS, SHRUNK_MODELS, ShrunkConfigMixin, shrink_layer
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.modeling.surgery import shrink_modern_layers
from sparsecse.pruning.masks import Mask, check_mask_kv_groups

# Config fields that describe the saved object rather than the architecture; never copied over.
_CONFIG_FIELDS_NOT_COPIED = {"model_type", "architectures", "auto_map", "transformers_version", "_name_or_path",
                             "kept_heads", "intermediate_sizes", "has_pooler"}


def base_model_type(config) -> str:
    """The architecture a (possibly already shrunk) model is built on: bert, roberta, ..."""
    if isinstance(config, ShrunkConfigMixin) or hasattr(config, "base_model_type"):
        return config.base_model_type
    return config.model_type


def _check_shrinkable(model: nn.Module) -> str:
    base = base_model_type(model.config)
    if base not in SHRUNK_CONFIGS:
        raise SparseCSEError(
            f"Shrinking supports {', '.join(SHRUNK_CONFIGS)} models, not {base!r}; "
            "evaluate this model with the mask applied instead (sparsecse eval --mask)."
        )
    return base


def mask_digest(mask: Mask) -> str:
    """sha256 of the mask's keep/remove bits (independent of how or where the mask was saved)."""
    h = hashlib.sha256()
    for tensor in (mask.head_mask, mask.neuron_mask):
        h.update(str(tuple(tensor.shape)).encode())
        h.update(tensor.to(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def shrunk_config(model: nn.Module, mask: Mask, padding: list[int] | None = None):
    """The ``sparsecse-<base>`` config of ``model`` with ``mask``'s heads and neurons removed (and
    ``padding[i]`` zero neurons appended to layer i's FFN)."""
    config = model.config
    base = _check_shrinkable(model)
    layers = mask.shape[0]
    prior_heads = getattr(config, "kept_heads", None) or [list(range(mask.shape[1]))] * layers
    kept_heads = [[prior_heads[i][h] for h in row.nonzero().flatten().tolist()]
                  for i, row in enumerate(mask.head_mask)]
    fields = {k: v for k, v in config.to_dict().items() if k not in _CONFIG_FIELDS_NOT_COPIED}
    cls = SHRUNK_CONFIGS[base]
    widths = [kept + pad for kept, pad in zip(mask.neuron_mask.sum(1).tolist(), padding or [0] * layers)]
    new = cls.from_dict({**fields, "kept_heads": kept_heads, "intermediate_sizes": widths,
                         "has_pooler": getattr(model, "pooler", None) is not None})
    new._attn_implementation = config._attn_implementation
    return new


def ffn_padding(model: nn.Module, mask: Mask, align_ffn: int = 1) -> list[int]:
    """Zero neurons to append to each layer so its FFN width is a multiple of ``align_ffn``.

    No padding if the activation is not 0 at 0 (a zero neuron would then not be inert).
    """
    if align_ffn < 1:
        raise SparseCSEError(f"The FFN alignment must be at least 1, not {align_ffn}.")
    modern = base_model_type(model.config) in MODERN_SHRUNK_CONFIGS  # gated FFN: act(gate) * 0 = 0, always inert
    activation = None if modern else model.encoder.layer[0].intermediate.intermediate_act_fn
    if align_ffn == 1 or not modern and activation(torch.zeros(1)).abs().item() != 0:
        return [0] * mask.shape[0]
    padding = [-kept % align_ffn for kept in mask.neuron_mask.sum(1).tolist()]
    ffn = mask.shape[2]
    too_wide = [i for i, (kept, pad) in enumerate(zip(mask.neuron_mask.sum(1).tolist(), padding)) if kept + pad > ffn]
    if too_wide:  # the padding reuses removed neurons (zeroed), so it cannot exceed the model's FFN width
        raise SparseCSEError(f"--align-ffn {align_ffn} would make layer {too_wide[0]}'s FFN wider than the model's "
                             f"{ffn} neurons; use a smaller alignment (e.g. 8) or 1.")
    return padding


def append_zero_neurons(layer: nn.Module, count: int) -> None:
    """Add ``count`` FFN neurons whose weights and bias are 0, in place.

    Such a neuron outputs act(0) = 0, so the layer computes exactly what it did; its gradients are 0
    too (its input row and output column are both 0), so training leaves it at 0. It only rounds the
    FFN width up to what fast matrix kernels want (a width that is not a multiple of 8 runs ~30% slower
    per neuron on CPUs).
    """
    if count == 0:
        return
    ffn_in, ffn_out = layer.intermediate.dense, layer.output.dense
    grow = [(ffn_in, "weight", 0), (ffn_in, "bias", 0), (ffn_out, "weight", 1)]
    for linear, name, dim in grow:
        param = getattr(linear, name)
        shape = list(param.shape)
        shape[dim] = count
        setattr(linear, name, nn.Parameter(torch.cat([param.detach(), param.new_zeros(shape)], dim),
                                           requires_grad=param.requires_grad))
    ffn_in.out_features += count
    ffn_out.in_features += count


def shrink_model(model: nn.Module, mask: Mask, align_ffn: int = 1) -> nn.Module:
    """A ``sparsecse-<base>`` model holding ``model``'s weights minus the mask's pruned units.

    With ``align_ffn`` > 1 each layer's FFN is rounded up to a multiple of it with inert zero neurons
    (:func:`append_zero_neurons`). ``model`` itself is cut down in place on the way (its layers lose
    the pruned rows/columns), so use the returned model afterwards.
    """
    _check_shrinkable(model)
    mask.check_fits(model)
    padding = ffn_padding(model, mask, align_ffn)
    config = shrunk_config(model, mask, padding)
    if config.base_model_type in MODERN_SHRUNK_CONFIGS:  # ModernBERT, Qwen3, Gemma-3: cut by torch-pruning
        check_mask_kv_groups(mask, model)
        shrink_modern_layers(model, mask.head_mask, mask.neuron_mask, padding)
    else:
        for layer, heads, neurons, pad in zip(model.encoder.layer, mask.head_mask, mask.neuron_mask, padding):
            shrink_layer(layer, heads.nonzero().flatten().tolist(), neurons.nonzero().flatten())
            append_zero_neurons(layer, pad)
    reference = next(model.parameters())
    shrunk = SHRUNK_MODELS[config.base_model_type](config).to(device=reference.device, dtype=reference.dtype)
    try:
        shrunk.load_state_dict(model.state_dict(), strict=True)
    except RuntimeError as exc:  # a mismatch here is a bug in shrink_layer / the modeling code
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
    kept = mask.neuron_mask.sum(1).tolist()
    encoder.extra_config["shape"] = {
        "heads_per_layer": encoder.model.config.heads_per_layer,
        "ffn_per_layer": kept,
        "ffn_zero_padding": [width - n for width, n in zip(encoder.model.config.intermediate_sizes, kept)],
    }
    return encoder
