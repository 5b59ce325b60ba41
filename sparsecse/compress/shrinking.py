"""Physical pruning: remove a mask's pruned heads and FFN neurons, leaving a smaller dense model.

Per removed head: its query/key/value rows and its attention-output columns; per removed neuron: its
FFN-input row and bias and its FFN-output column. Layers end with different head counts and FFN
widths, recorded in a ``sparsecse-<base>`` config whose modeling code ships inside the saved directory
(:mod:`sparsecse.modeling`), so it reloads with sparsecse, ``transformers.AutoModel`` and
sentence-transformers (``trust_remote_code=True``).

A layer that loses every head keeps its FFN and drops its attention block: the attention sublayer then
adds only the output projection's bias before its LayerNorm, exactly what the gated model computes
with all that layer's head gates at 0 (the pruner never empties a layer unless asked to).

torch-pruning is not used for the surgery: its dependency graph does not know Hugging Face head
counts, and the code that re-cuts layers at load time must ship inside the model directory without
extra dependencies, so one small slicing function (:func:`sparsecse.modeling.modeling_sparsecse.shrink_layer`) serves
both the pruning here and the reload.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.errors import SparseCSEError
from sparsecse.compress.flops import size_report
from sparsecse.artifacts.files import atomic_dir, check_destination, hash_path, make_manifest, sha256_file
from sparsecse.artifacts.inputs import read_inputs
from sparsecse.compress.masks import Mask, model_for_mask
from sparsecse.modeling import SHRUNK_CONFIGS, SHRUNK_MODELS, ShrunkConfigMixin, shrink_layer
from sparsecse.compress.reconstruction import ReconstructionPlan, reconstruction_plan
from sparsecse.artifacts.remote_code import with_trust_option
from sparsecse.stage_config import configure

# Config fields that describe the saved object rather than the architecture; never copied over.
_CONFIG_FIELDS_NOT_COPIED = {"model_type", "architectures", "auto_map", "transformers_version", "_name_or_path",
                             "kept_heads", "intermediate_sizes", "has_pooler"}


def base_model_type(config) -> str:
    """The architecture a (possibly already shrunk) model is built on: bert, roberta, ..."""
    if isinstance(config, ShrunkConfigMixin) or hasattr(config, "base_model_type"):
        return config.base_model_type
    return config.model_type


def is_shrunk(model: nn.Module) -> bool:
    return hasattr(model.config, "kept_heads") and hasattr(model.config, "base_model_type")


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
    activation = model.encoder.layer[0].intermediate.intermediate_act_fn
    if align_ffn == 1 or activation(torch.zeros(1)).abs().item() != 0:
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
    (build the optimizer after shrinking) and saves with :func:`save_model_dir`. Raises
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


def save_model_dir(
    encoder: SentenceEncoder,
    out: str | os.PathLike,
    lineage: dict[str, Any] | None = None,
    manifest: dict[str, Any] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a dense or shrunk encoder as a model directory, atomically.

    The directory holds the Hugging Face files (plus the shipped modeling code for a shrunk model),
    the sentence-transformers files, and ``sparsecse_config.json`` with the pooling, ``lineage``
    (merged over any lineage the encoder was loaded with) and ``manifest`` (the command that wrote
    this directory; a manifest the encoder was loaded with is not carried over).
    """
    extra: dict[str, Any] = {"manifest": manifest}
    if lineage is not None:
        extra["lineage"] = {**encoder.extra_config.get("lineage", {}), **lineage}
    with atomic_dir(out, overwrite=overwrite) as tmp:
        encoder.save(tmp, extra_config=extra)
    return Path(out)


@dataclass
class ShrinkResult:
    encoder: SentenceEncoder
    before: dict[str, Any]
    after: dict[str, Any]
    lineage: dict[str, Any]
    out: Path | None = None
    mask_summary: dict[str, Any] = field(default_factory=dict)
    reconstruction: dict[str, Any] | None = None

    def ratios(self) -> dict[str, float]:
        keys = ("parameters", "layer_parameters", "flops_per_token", "weights_bytes")
        return {k: self.before[k] / self.after[k] for k in keys if self.before.get(k) and self.after.get(k)}

    def to_dict(self) -> dict[str, Any]:
        return {"out": str(self.out) if self.out else None, "before": self.before, "after": self.after,
                "ratios": self.ratios(), "lineage": self.lineage, "mask": self.mask_summary,
                "reconstruction": self.reconstruction}


@dataclass(frozen=True)
class ShrinkConfig:
    """How :func:`shrink` builds the smaller model: FLOPs counted at ``seq_len`` tokens; FFN widths padded
    to multiples of ``align_ffn`` with inert zero neurons (1 keeps exactly the mask's neurons);
    ``reconstruct`` (a corpus file, or a :class:`~sparsecse.compress.reconstruction.ReconstructionPlan`)
    refits the kept units on ``reconstruct_sentences`` of its sentences before the removal."""

    pooling: str | None = None
    device: str | None = None
    seq_len: int = 128
    align_ffn: int = 8
    reconstruct: "str | os.PathLike | ReconstructionPlan | None" = None
    reconstruct_sentences: int = 2048
    show_progress: bool = False


@with_trust_option
def shrink(model: str | os.PathLike | None = None, mask: Mask | str | os.PathLike | None = None,
           out: str | os.PathLike | None = None, overwrite: bool = False, config: ShrinkConfig | None = None,
           **options) -> ShrinkResult:
    """Load ``model``, remove ``mask``'s units and (given ``out``) save the smaller model directory.

    ``mask`` is a :class:`~sparsecse.compress.masks.Mask` or a mask file; ``config`` a :class:`ShrinkConfig`
    (or its fields by name in ``options``: ``pooling``, ``device``, ``seq_len``, ``align_ffn``,
    ``reconstruct``, ``reconstruct_sentences``, ``show_progress``). The directory's ``sparsecse_config.json``
    records the pooling, a manifest and the lineage (source model and its hash, mask and its hash); its
    config.json records each layer's kept heads and FFN width. Reconstruction:
    :mod:`sparsecse.compress.reconstruction`.

    Example::

        shrink("all-MiniLM-L6-v2", "mask-f0.5-l0.5.safetensors", "small", reconstruct="corpus.txt").ratios()
    """
    c = configure(ShrinkConfig, config, options, "shrink")
    seq_len, align_ffn = c.seq_len, c.align_ffn
    if mask is None:
        raise SparseCSEError("shrink needs a mask (--mask).")
    mask_path = None if isinstance(mask, Mask) else str(mask)
    mask = mask if isinstance(mask, Mask) else Mask.load(mask)
    model = model_for_mask(mask, model)
    if out is not None:  # after the mask names its model: that model is an input too
        check_destination(out, overwrite, inputs=read_inputs(model=model, mask=mask_path))
    plan = reconstruction_plan(c.reconstruct, c.reconstruct_sentences)
    encoder = SentenceEncoder.load(model, pooling=c.pooling, device=c.device)
    mask.check_fits(encoder.model)
    ffn_padding(encoder.model, mask, align_ffn)  # an impossible --align-ffn fails before any work
    source = encoder.source
    before = size_report(encoder.model, seq_len, model_dir=source)
    rebuilt = plan.run(encoder, mask, c.show_progress).to_dict() if plan else None
    shrink_encoder(encoder, mask, align_ffn)
    lineage = {
        "shrunk_from": source,
        "shrunk_from_sha256": hash_path(source) if source and os.path.exists(source) else None,
        "mask": mask_path,
        "mask_sha256": sha256_file(mask_path) if mask_path else None,
        "mask_digest": mask_digest(mask),
        "mask_scored_model": mask.manifest.get("model"),
    }
    mask_summary = {k: mask.manifest[k] for k in ("sparsity", "lambda", "scope") if k in mask.manifest}
    mask_summary.update(heads_pruned=mask.heads_pruned, neurons_pruned=mask.neurons_pruned)
    after = size_report(encoder.model, seq_len)
    result = ShrinkResult(encoder, before, after, lineage, mask_summary=mask_summary, reconstruction=rebuilt)
    if out is not None:
        manifest = make_manifest("shrunk_model", inputs={"model": source, "mask": mask_path},
                                 params={"pooling": encoder.pooling, "seq_len": seq_len, "align_ffn": align_ffn},
                                 mask=mask_summary, before=before, after=after, reconstruction=rebuilt)
        result.out = save_model_dir(encoder, out, lineage=lineage, manifest=manifest, overwrite=overwrite)
        result.after["weights_bytes"] = size_report(encoder.model, seq_len, model_dir=out).get("weights_bytes")
    return result
