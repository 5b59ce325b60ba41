"""Masked-LM pieces shared by DiffCSE (frozen generator) and InfoCSE (auxiliary MLM network).

Loads any ``*ForMaskedLM`` checkpoint by name or path, checks that it reads the encoder's token
ids, splits it into backbone / layer stack / prediction head, and masks token positions.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn

from sparsecse.errors import SparseCSEError
from sparsecse.artifacts.remote_code import allow_code
from sparsecse.modeling.encoder import _first_line, resolve_model


@dataclass
class MaskedLM:
    """A loaded masked LM: ``backbone`` (embeddings + layers) and ``head`` (hidden -> vocab logits)."""

    model: nn.Module
    source: str

    @property
    def backbone(self) -> nn.Module:
        """The masked LM's bare encoder."""
        return self.model.base_model

    @property
    def hidden_size(self) -> int:
        """The masked LM's hidden size."""
        config = self.model.config
        return int(getattr(config, "hidden_size", None) or config.dim)

    @property
    def head(self) -> nn.Module:
        """The masked LM's prediction head."""
        return prediction_head(self.model)

    def layers(self) -> nn.ModuleList:
        """The masked LM's transformer layers."""
        return layer_stack(self.backbone)[0]


def load_masked_lm(name_or_path: str, encoder, role: str) -> MaskedLM:
    """Load a masked LM that must share the encoder's vocabulary; ``role`` names it in errors."""
    from transformers import AutoModelForMaskedLM


    from transformers.utils import logging as hf_logging

    path = resolve_model(name_or_path)
    trust = allow_code(path, f"{role} directory")
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # missing weights are reported below, in one sentence
    try:
        model, info = AutoModelForMaskedLM.from_pretrained(path, output_loading_info=True, trust_remote_code=trust)
    except Exception as exc:
        raise SparseCSEError(f"Cannot load the {role} masked LM from {path} ({_first_line(exc)}).") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    missing = sorted(info.get("missing_keys") or [])
    if missing:
        raise SparseCSEError(
            f"The {role} at {path} is not a trained masked language model: it lacks {missing[0]}"
            f"{f' and {len(missing) - 1} more weights' if len(missing) > 1 else ''}."
        )
    check_same_vocabulary(path, model.config, encoder.tokenizer, role)
    prediction_head(model)  # fails early on an unsupported head layout
    layer_stack(model.base_model)
    model.to(encoder.device)
    return MaskedLM(model, str(path))


def check_same_vocabulary(path: str, config, tokenizer, role: str) -> None:
    """The masked LM must read the encoder's token ids: same vocabulary (or, lacking a tokenizer, size)."""
    from transformers import AutoTokenizer

    try:
        own = AutoTokenizer.from_pretrained(path, trust_remote_code=allow_code(path))
    except Exception:
        own = None
    if own is not None:
        if own.get_vocab() != tokenizer.get_vocab():
            raise SparseCSEError(
                f"The {role} at {path} uses a different vocabulary from the encoder; "
                "pick a masked LM with the encoder's tokenizer."
            )
    elif int(config.vocab_size) != len(tokenizer):
        raise SparseCSEError(
            f"The {role} at {path} has {config.vocab_size} tokens but the encoder's tokenizer has "
            f"{len(tokenizer)}; pick a masked LM with the encoder's tokenizer."
        )


def prediction_head(model: nn.Module) -> nn.Module:
    """The module mapping final hidden states to vocabulary logits, for the common MLM layouts."""
    if hasattr(model, "cls") and hasattr(model.cls, "predictions"):  # BERT
        return model.cls
    if hasattr(model, "lm_head"):  # RoBERTa, XLM-R, CamemBERT
        return model.lm_head
    if hasattr(model, "vocab_projector"):  # DistilBERT
        return nn.Sequential(model.vocab_transform, model.activation, model.vocab_layer_norm,
                             model.vocab_projector)
    if hasattr(model, "generator_lm_head"):  # ELECTRA generator
        return nn.Sequential(model.generator_predictions, model.generator_lm_head)
    raise SparseCSEError(f"Unsupported masked LM {type(model).__name__}: cannot find its prediction head.")


def layer_stack(backbone: nn.Module) -> tuple[nn.ModuleList, nn.Module, str]:
    """(layer list, its parent module, attribute name) of a BERT-like or DistilBERT backbone."""
    for parent_name in ("encoder", "transformer"):
        parent = getattr(backbone, parent_name, None)
        layers = getattr(parent, "layer", None)
        if isinstance(layers, nn.ModuleList):
            return layers, parent, "layer"
    raise SparseCSEError(f"Unsupported masked LM backbone {type(backbone).__name__}: cannot find its layers.")


class PassThroughEmbeddings(nn.Module):
    """Stands in for a backbone's embedding layer so that ``inputs_embeds`` enter the first layer as is.

    BERT-like backbones call their embeddings with keywords, DistilBERT with
    ``(input_ids, inputs_embeds, position_ids)`` positionally; both are handled.
    """

    def forward(self, input_ids=None, *args, inputs_embeds=None, **kwargs):
        """The hidden states given (``inputs_embeds``) unchanged: a layer stack fed hidden states."""
        if inputs_embeds is None and args:
            inputs_embeds = args[0]
        if inputs_embeds is None:
            raise ValueError("a layer stack takes inputs_embeds (hidden states), not input_ids")
        return inputs_embeds


def truncated_backbone(backbone: nn.Module, keep: slice, copy_layers: bool) -> nn.Module:
    """A copy of ``backbone`` (sharing nothing when ``copy_layers``) that runs only ``layers[keep]``.

    The embedding layer is kept (shared) for the lower part and replaced by a pass-through for an
    upper part, so hidden states can be fed in through ``inputs_embeds``.
    """
    layers, parent, attr = layer_stack(backbone)
    embeddings = backbone.embeddings
    kept = [copy.deepcopy(layer) if copy_layers else layer for layer in list(layers)[keep]]
    # Copy the backbone without its embeddings or layers (they can be large), then plug parts in.
    backbone.embeddings, placeholder = PassThroughEmbeddings(), nn.ModuleList()
    setattr(parent, attr, placeholder)
    try:
        part = copy.deepcopy(backbone)
    finally:
        backbone.embeddings = embeddings
        setattr(parent, attr, layers)
    setattr(layer_stack(part)[1], attr, nn.ModuleList(kept))
    if keep.start in (None, 0):
        part.embeddings = embeddings
    return part


def choose_positions(input_ids: torch.Tensor, attention_mask: torch.Tensor, special_ids: list[int],
                     ratio: float) -> torch.Tensor:
    """Bool [B, T]: each real, non-special token independently with probability ``ratio``."""
    maskable = attention_mask.bool() & ~torch.isin(input_ids, torch.tensor(special_ids, device=input_ids.device))
    return (torch.rand(input_ids.shape, device=input_ids.device) < ratio) & maskable


def corrupt(input_ids: torch.Tensor, positions: torch.Tensor, mask_token_id: int, vocab_size: int,
            keep_or_random: bool) -> torch.Tensor:
    """[MASK] at ``positions``; with ``keep_or_random`` BERT's 80% [MASK] / 10% random / 10% unchanged."""
    corrupted = input_ids.clone()
    if not keep_or_random:
        corrupted[positions] = mask_token_id
        return corrupted
    draw = torch.rand(input_ids.shape, device=input_ids.device)
    corrupted[positions & (draw < 0.8)] = mask_token_id
    random_slots = positions & (draw >= 0.8) & (draw < 0.9)
    corrupted[random_slots] = torch.randint(vocab_size, input_ids.shape, device=input_ids.device)[random_slots]
    return corrupted


def mask_token_id(tokenizer, role: str) -> int:
    """The tokenizer's mask token (one sentence where it has none).

    Args:
        tokenizer: the tokenizer.
        role: what needs the mask token, for the refusal.

    Returns:
        Its id.
    """
    if tokenizer.mask_token_id is None:
        raise SparseCSEError(f"{role} needs a tokenizer with a mask token; this encoder's tokenizer has none.")
    return int(tokenizer.mask_token_id)


def freeze(module: nn.Module) -> nn.Module:
    """``module`` in eval mode with no parameter trained; returns it."""
    module.eval()
    for p in module.parameters():
        p.requires_grad_(False)
    return module


class FrozenPartsMixin:
    """Keeps frozen helper networks out of the module tree, so the optimizer, ``state_dict`` and
    ``train()`` never see them (they stay in eval mode), while ``.to()`` / ``.cuda()`` still move them.

    Put it before :class:`~torch.nn.Module` subclasses in the bases.
    """

    def _set_frozen(self, name: str, module: nn.Module) -> None:
        self.__dict__.setdefault("_frozen_parts", {})[name] = freeze(module)

    def frozen_parts(self) -> dict[str, nn.Module]:
        """The objective's frozen modules, by name (kept out of its trained state)."""
        return dict(self.__dict__.get("_frozen_parts", {}))

    def _apply(self, fn, *args, **kwargs):
        result = super()._apply(fn, *args, **kwargs)
        for module in self.__dict__.get("_frozen_parts", {}).values():
            module._apply(fn, *args, **kwargs)
        return result
