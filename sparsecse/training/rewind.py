"""``rewind``: back to the initial weights, the mask's units removed, retrained with any objective.

The surviving units start from the initial checkpoint (by default the one recorded in the scored
model's lineage). Architectures that ``sparsecse.shrinking.shrink`` supports (BERT, RoBERTa, XLM-R,
CamemBERT, ELECTRA) are trained physically shrunk: the pruned units do not exist, and each step is
cheaper. Others (DistilBERT) are trained full size with every weight and bias of the pruned units
set to zero: a zeroed unit outputs exactly 0 and receives exactly zero gradient (its input and
output weights are both zero), so the optimizer leaves it at zero and the saved model computes the
same as one with the units removed.
"""

from __future__ import annotations

import dataclasses

import os
import sys

import torch

from sparsecse.modeling.encoder import SentenceEncoder, resolve_model
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.adapters import layer_parts
from sparsecse.artifacts.files import hash_path
from sparsecse.artifacts.destinations import check_destination
from sparsecse.pruning.masks import Mask, model_for_mask
from sparsecse.objectives.distill import with_default_teacher
from sparsecse.artifacts.remote_code import with_trust_option
from sparsecse.training.config import TrainingConfig
from sparsecse.training.distributed import launched_rank
from sparsecse.artifacts.model_dir import model_lineage
from sparsecse.training.api import (TrainResult, training_config, absolute_path, check_inputs, check_out,
                                    checked_dev_set, run, run_inputs, source_hash)
from sparsecse.modeling.adapters import base_model_type
from sparsecse.shrinking.surgery import shrink_encoder
from sparsecse.shrinking.surgery import mask_digest
from sparsecse.modeling import SHRUNK_CONFIGS


def resolve_init(mask: Mask, init: str | os.PathLike | None) -> tuple[str, str | None]:
    """(the checkpoint to rewind to, the scored model): ``init``, else the scored model's lineage
    ``init``, else the scored model itself."""
    scored = mask.manifest.get("model")
    if init is not None:
        model_for_mask(mask, init)  # a mask that records no model: says it is taken to fit --init
        return resolve_model(init), scored
    if not scored:
        raise SparseCSEError("The mask does not record which model was scored; pass --init.")
    model_for_mask(mask)  # the recorded model still exists and is the one scored (digest)
    lineage = model_lineage(scored) or {}
    recorded = lineage.get("init")
    if recorded:
        if os.path.isdir(recorded) or not os.path.isabs(recorded):
            check_recorded_hash(recorded, lineage.get("init_sha256"), scored)
            return resolve_model(recorded), scored
        raise SparseCSEError(f"The initial checkpoint {recorded} recorded in {scored}'s lineage no longer exists; "
                             f"pass --init.")
    return resolve_model(scored), scored


def check_recorded_hash(recorded: str, expected: str | None, scored: str) -> None:
    """The initial checkpoint must still be the one the lineage hashed (or is changed by a later run)."""
    if not expected or not os.path.isdir(recorded):
        return
    if os.path.abspath(recorded) == os.path.abspath(scored):
        raise SparseCSEError(f"The lineage of {scored} names itself as its initial checkpoint (it was trained "
                             f"with --out equal to --model); pass --init.")
    if hash_path(recorded) != expected:
        raise SparseCSEError(f"The initial checkpoint {recorded} recorded in {scored}'s lineage has changed since "
                             f"{scored} was trained from it (its sha256 differs); pass --init to rewind to it "
                             f"anyway, or to the original checkpoint.")


@torch.no_grad()
def zero_pruned_units(model, mask: Mask) -> None:
    """Zero every weight and bias that feeds or reads a pruned head or FFN neuron."""
    for part, heads, neurons in zip(layer_parts(model), mask.head_mask, mask.neuron_mask):
        d = part.head_dim
        for head in (~heads).nonzero().flatten().tolist():
            rows = slice(head * d, (head + 1) * d)
            for proj in (part.query, part.key, part.value):
                proj.weight[rows] = 0
                proj.bias[rows] = 0
            part.attn_out.weight[:, rows] = 0
        gone = (~neurons).nonzero().flatten()
        part.ffn_in.weight[gone] = 0
        part.ffn_in.bias[gone] = 0
        part.ffn_out.weight[:, gone] = 0


def remove_units(encoder: SentenceEncoder, mask: Mask) -> str:
    """Shrink ``encoder`` physically where supported, else zero the units' weights; returns the method."""

    mask.check_fits(encoder.model)
    if base_model_type(encoder.config) in SHRUNK_CONFIGS:
        shrink_encoder(encoder, mask)
        return "shrunk"
    zero_pruned_units(encoder.model, mask)
    return "zeroed"


NO_LINEAGE = "the scored model itself (it records no initial checkpoint)"


def init_origin(init, scored: str | None) -> str:
    """Where the rewind's starting weights come from; warns on stderr when that is the scored model
    itself, which restarts from the weights that were scored rather than from the initial ones."""
    if init is not None:
        return "argument"
    if (model_lineage(scored) or {}).get("init"):
        return "lineage"
    if launched_rank():  # the first process of a data-parallel run warns for all of them
        return NO_LINEAGE
    print(f"Warning: {scored} records no initial checkpoint (it was not trained by sparsecse), so rewinding "
          f"starts from its own weights, not from weights before training; pass --init to choose them.",
          file=sys.stderr, flush=True)
    return NO_LINEAGE


@with_trust_option
def rewind(mask, corpus=None, out=None, init=None, objective: str | None = None, objective_args=None, *,
           pooling: str | None = None, seed: int | None = None, config: TrainingConfig | None = None) -> TrainResult:
    """Reset to ``init``'s weights, remove ``mask``'s pruned units and retrain with ``objective``.

    ``mask`` is a :class:`~sparsecse.pruning.masks.Mask` or a mask file. ``init`` left out: the initial checkpoint in the
    scored model's lineage, else the scored model. The pooling is the scored model's (as recorded in
    the mask) unless given. ``config`` as for :func:`sparsecse.training.api.train`.
    """
    from accelerate.utils import set_seed


    config = training_config(config, "rewind", objective=objective, objective_args=objective_args, seed=seed)
    objective, objective_args, seed = config.objective, config.objective_args, config.seed
    check_out("rewind", out, config.resume, config.overwrite,
              inputs=run_inputs(None, objective, objective_args, config.data_dir, default_model=False, dev=config.dev,
                                mask=None if isinstance(mask, Mask) else mask, init=init,
                                corpus=corpus if isinstance(corpus, (str, os.PathLike)) else None))
    check_inputs("rewind", corpus, objective, objective_args, config.lr, config.device)
    checked_dev_set(config)  # before the model loads
    mask_path = None if isinstance(mask, Mask) else absolute_path(str(mask))
    mask = mask if isinstance(mask, Mask) else Mask.load(mask)
    init_path, scored = resolve_init(mask, init)
    init_path, scored = absolute_path(init_path), absolute_path(scored)
    check_destination(out, True, inputs={"initial checkpoint": init_path, "scored model": scored})
    init_source = init_origin(init, scored)
    set_seed(seed)
    encoder = SentenceEncoder.load(init_path, pooling=pooling or mask.manifest.get("pooling"), device="cpu")
    method = remove_units(encoder, mask)
    lineage = {"stage": "rewind", "init": init_path, "init_sha256": source_hash(init_path),
               "objective": objective, "mask": mask_path, "mask_digest": mask_digest(mask),
               "init_source": init_source, "removal": method, "scored_model": scored,
               "sparsity": mask.manifest.get("sparsity"), "budget": mask.manifest.get("budget"),
               "lambda": mask.manifest.get("lambda")}
    objective_args = with_default_teacher(objective, objective_args, scored)  # distill: the dense model
    parent = model_lineage(scored) if scored else None
    if parent:
        lineage["parent"] = parent
    config = dataclasses.replace(config, objective_args=objective_args)
    return run("rewind", encoder, corpus, out, config, lineage,
               {"init": init_path, "mask": mask_path, "scored_model": scored}, {"mask_digest": lineage["mask_digest"]})
