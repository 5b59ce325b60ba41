"""The shrink stage: load a model, refit its kept units if asked (:mod:`sparsecse.shrinking.reconstruction`),
remove a mask's heads and neurons (:mod:`sparsecse.shrinking.surgery`) and save the smaller model directory
with its lineage and manifest (:func:`~sparsecse.shrinking.shrink.shrink`, under one :class:`~sparsecse.shrinking.shrink.ShrinkConfig`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparsecse.artifacts.files import atomic_dir, hash_path, make_manifest, sha256_file

from sparsecse.artifacts.destinations import check_destination
from sparsecse.artifacts.inputs import read_inputs
from sparsecse.cards.model_card import write_card
from sparsecse.artifacts.remote_code import with_trust_option
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.encoder import SentenceEncoder, resolve_model
from sparsecse.modeling.flops import size_report
from sparsecse.pruning.masks import Mask, model_for_mask
from sparsecse.pruning.uniform import DEFAULT_LAYOUT, check_layout
from sparsecse.shrinking.reconstruction import ReconstructionPlan, reconstruction_plan
from sparsecse.shrinking.stock import STOCK, to_stock
from sparsecse.shrinking.surgery import ffn_padding, mask_digest, shrink_encoder
from sparsecse.stage_config import stage_config


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
    this directory; a manifest the encoder was loaded with is not carried over), and its model card
    (``README.md``, :mod:`sparsecse.cards.model_card`).
    """
    extra: dict[str, Any] = {"manifest": manifest}
    if lineage is not None:
        extra["lineage"] = {**encoder.extra_config.get("lineage", {}), **lineage}
    with atomic_dir(out, overwrite=overwrite) as tmp:
        encoder.save(tmp, extra_config=extra)
        write_card(tmp)
    return Path(out)


@dataclass
class ShrinkResult:
    """What :func:`shrink` did: the shrunk encoder, sizes ``before`` and ``after``, the ``lineage`` written into
    the directory, where it was saved (``out``), the mask summary and the reconstruction report."""

    encoder: SentenceEncoder
    before: dict[str, Any]
    after: dict[str, Any]
    lineage: dict[str, Any]
    out: Path | None = None
    mask_summary: dict[str, Any] = field(default_factory=dict)
    reconstruction: dict[str, Any] | None = None

    def ratios(self) -> dict[str, float]:
        """before / after for parameters, layer parameters, FLOPs per token and weight-file bytes."""
        keys = ("parameters", "layer_parameters", "flops_per_token", "weights_bytes")
        return {k: self.before[k] / self.after[k] for k in keys if self.before.get(k) and self.after.get(k)}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: what ``sparsecse shrink --json`` prints."""
        return {"out": str(self.out) if self.out else None, "before": self.before, "after": self.after,
                "ratios": self.ratios(), "lineage": self.lineage, "mask": self.mask_summary,
                "reconstruction": self.reconstruction}


@dataclass(frozen=True)
class ShrinkConfig:
    """How :func:`shrink` builds the smaller model: FLOPs counted at ``seq_len`` tokens; FFN widths padded
    to multiples of ``align_ffn`` with inert zero neurons (1 keeps exactly the mask's neurons);
    ``reconstruct`` (a corpus file, or a :class:`~sparsecse.shrinking.reconstruction.ReconstructionPlan`)
    refits the kept units on ``reconstruct_sentences`` of its sentences before the removal; ``layout``
    ``"stock"`` rebuilds the smaller model as the family's own class (:mod:`sparsecse.shrinking.stock`: the mask
    must keep a uniform shape), ``"custom"`` as a ``sparsecse-<family>`` model with each layer's own width."""

    pooling: str | None = None
    device: str | None = None
    seq_len: int = 128
    align_ffn: int = 8
    reconstruct: "str | os.PathLike | ReconstructionPlan | None" = None
    reconstruct_sentences: int = 2048
    show_progress: bool = False
    layout: str = DEFAULT_LAYOUT


@with_trust_option
def shrink(model: str | os.PathLike | None = None, mask: Mask | str | os.PathLike | None = None,
           out: str | os.PathLike | None = None, overwrite: bool = False,
           config: ShrinkConfig | None = None) -> ShrinkResult:
    """Load ``model``, remove ``mask``'s units and (given ``out``) save the smaller model directory.

    ``mask`` is a :class:`~sparsecse.pruning.masks.Mask` or a mask file; ``config`` a :class:`ShrinkConfig`
    (None: its defaults; ``pooling``, ``device``, ``seq_len``, ``align_ffn``, ``reconstruct``,
    ``reconstruct_sentences``, ``show_progress``). The directory's ``sparsecse_config.json``
    records the pooling, a manifest and the lineage (source model and its hash, mask and its hash); its
    config.json records each layer's kept heads and FFN width. Reconstruction:
    :mod:`sparsecse.shrinking.reconstruction`.

    Example::

        shrink("all-MiniLM-L6-v2", "mask-f0.5-l0.5.safetensors", "small",
               config=ShrinkConfig(reconstruct="corpus.txt")).ratios()
    """
    c = stage_config(ShrinkConfig, config, "shrink()'s config")
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
    ffn_padding(encoder.model, mask, c.align_ffn)  # an impossible --align-ffn fails before any work
    rebuilt = plan.run(encoder, mask, c.show_progress).to_dict() if plan else None
    lineage = shrink_lineage(encoder.source, mask, mask_path, mask.manifest.get("model"))
    return remove_units(encoder, mask, c, lineage, out, overwrite, reconstruction=rebuilt)


MASK_SUMMARY = ("sparsity", "budget", "lambda", "criterion", "criterion_default", "scope", "method",
                "kept_flops_ratio", "kept_params_ratio")


def mask_summary(mask: Mask) -> dict[str, Any]:
    """What a shrunk model's manifest says of its mask: the target (sparsity or budget), λ, criterion, scope,
    method and kept ratios that its manifest records, and the units removed."""
    summary = {k: mask.manifest[k] for k in MASK_SUMMARY if k in mask.manifest}
    summary.update(heads_pruned=mask.heads_pruned, neurons_pruned=mask.neurons_pruned)
    return summary


def shrink_lineage(source: str, mask: Mask, mask_path: str | None = None,
                   scored_model: str | None = None) -> dict[str, Any]:
    """A shrunk model's lineage: the model it was cut from and the mask (file and hash when it was read from
    one, and always the digest of its bits), and the model the mask was scored on."""
    return {
        "shrunk_from": source,
        "shrunk_from_sha256": hash_path(source) if source and os.path.exists(source) else None,
        "mask": mask_path,
        "mask_sha256": sha256_file(mask_path) if mask_path else None,
        "mask_digest": mask_digest(mask),
        "mask_scored_model": scored_model,
    }


def remove_units(encoder: SentenceEncoder, mask: Mask, config: ShrinkConfig, lineage: dict[str, Any],
                 out: str | os.PathLike | None = None, overwrite: bool = False,
                 reconstruction: dict[str, Any] | None = None, **manifest: Any) -> ShrinkResult:
    """The end of every shrink (:func:`shrink`, :func:`~sparsecse.shrinking.iterative.shrink_iterative`):
    remove ``mask``'s units from ``encoder`` (full size, reconstructed or not) with ``config``'s ``seq_len``
    and ``align_ffn``, and given ``out`` save the model directory with ``lineage`` and a manifest (its mask
    summary, sizes before and after, ``reconstruction`` and any ``manifest`` entries)."""
    source = encoder.source
    before = size_report(encoder.model, config.seq_len, model_dir=source)
    shrink_encoder(encoder, mask, config.align_ffn)
    if check_layout(config.layout) == STOCK:
        encoder.model = to_stock(encoder.model)
        encoder.extra_config["shape"]["layout"] = STOCK
    summary = mask_summary(mask)
    after = size_report(encoder.model, config.seq_len)
    result = ShrinkResult(encoder, before, after, lineage, mask_summary=summary, reconstruction=reconstruction)
    if out is not None:
        manifest = make_manifest("shrunk_model", inputs={"model": source, "mask": lineage.get("mask")},
                                 params={"pooling": encoder.pooling, "seq_len": config.seq_len,
                                         "align_ffn": config.align_ffn, "layout": config.layout},
                                 mask=summary, before=before, after=after, reconstruction=reconstruction, **manifest)
        result.out = save_model_dir(encoder, out, lineage=lineage, manifest=manifest, overwrite=overwrite)
        result.after["weights_bytes"] = size_report(encoder.model, config.seq_len, model_dir=out).get("weights_bytes")
    return result
