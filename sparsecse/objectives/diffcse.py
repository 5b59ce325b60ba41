"""DiffCSE (Chuang et al. 2022): SimCSE + λ · conditional replaced-token detection (RTD).

A frozen masked LM (the generator) fills randomly masked positions with its argmax token; a
discriminator with the encoder's architecture reads the edited sentence with the sentence
embedding h in place of the first position's embedding output and predicts, per token, whether it
was replaced. The RTD loss reaches the encoder only through h. Generator and discriminator are
train-only; the saved model is the encoder alone.

As the published code (voidism/DiffCSE) does:

- The discriminator starts from the dense pretrained weights: those of the checkpoint the encoder
  was loaded from (``discriminator=`` names another), so a rewound, shrunk encoder still gets a
  full-size discriminator loaded from its initial checkpoint.
- h replaces position 0 of the embedding layer's output (after position/type embeddings, LayerNorm
  and dropout), so h enters the first transformer layer as it is.
- The RTD loss is the mean over all batch x length positions, padding and position 0 included (label
  "original" there): the scale on which λ = 0.005 was tuned.
- h is the projected embedding (the BatchNorm projector's output); both dropout views are edited
  and detected, each with its own mask.
- Training defaults follow the paper's Table 12: batch 64, 2 epochs, and lr 7e-6 / mask ratio 0.30
  for BERT-base, lr 1e-5 / mask ratio 0.20 for RoBERTa-base (other backbones take BERT-base's).

Departures (also in the README, "Fidelity to the papers"):

- Only the masked positions are rewritten (the published code takes the generator's argmax at every
  position, so an unmasked token the generator would change is also "replaced"); the generator sees
  [MASK] at each of them (the published collator uses BERT's 80/10/10).
- The generator runs in eval mode (no dropout): argmax replacement is then deterministic given the mask.
- h is the pooled embedding the encoder is evaluated on (its own pooling), projected.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from sparsecse.errors import SparseCSEError
from sparsecse.objectives import validation
from sparsecse.objectives.base import ObjectiveOutput
from sparsecse.objectives.losses import info_nce
from sparsecse.objectives.masked_lm import (FrozenPartsMixin, MaskedLM, choose_positions, corrupt,
                                            load_masked_lm, mask_token_id)
from sparsecse.objectives.simcse import SimCSE, initializer_range, reference_init
from sparsecse.objectives.backbones import with_backbone_defaults
from sparsecse.modeling.encoder import SentenceEncoder


class ProjectionMLP(nn.Module):
    """DiffCSE's train-only projector: Linear-BN-ReLU-Linear-BN (last BN without affine), width 2d;
    the linear layers initialised N(0, std) as the reference code's ``init_weights()`` leaves them."""

    def __init__(self, dim: int, std: float = 0.02):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, 2 * dim, bias=False), nn.BatchNorm1d(2 * dim), nn.ReLU(),
            nn.Linear(2 * dim, dim, bias=False), nn.BatchNorm1d(dim, affine=False),
        )
        reference_init(self, std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The projection of ``x``."""
        return self.net(x)


def copy_architecture(model: nn.Module) -> nn.Module:
    """A new model of ``model``'s class and config holding a copy of its current weights.

    Built from the config rather than deep-copied, so gates hooked onto ``model`` do not come along.
    """
    try:
        twin = type(model)(copy.deepcopy(model.config))
        twin.load_state_dict(model.state_dict(), strict=True)
    except Exception as exc:
        raise SparseCSEError(f"Cannot build a copy of the encoder's architecture ({type(exc).__name__}: {exc}).") \
            from None
    return twin


def pretrained_discriminator(encoder, source: str | None) -> nn.Module:
    """The transformer of ``source`` (default: the checkpoint ``encoder`` was loaded from), as loaded
    from disk, on the encoder's device and dtype and trainable; a copy of the encoder's own weights when
    it was not loaded from a checkpoint."""

    source = source or encoder.source
    if source:
        twin = SentenceEncoder.load(source, device="cpu").model
        if twin.get_input_embeddings().weight.shape != encoder.model.get_input_embeddings().weight.shape:
            raise SparseCSEError(f"The discriminator {source} does not share the encoder's vocabulary and width.")
    else:
        twin = copy_architecture(encoder.model)
    reference = next(encoder.model.parameters())
    twin.to(device=reference.device, dtype=reference.dtype)
    for p in twin.parameters():
        p.requires_grad_(True)
    return twin.train(encoder.model.training)


def embedding_output_module(model: nn.Module) -> nn.Module:
    """The module whose output enters the first transformer layer (ELECTRA projects its embeddings)."""
    return getattr(model, "embeddings_project", None) or model.embeddings


class DiffCSE(FrozenPartsMixin, SimCSE):
    """DiffCSE (Chuang et al. 2022): SimCSE plus replaced-token detection conditioned on the sentence embedding."""
    name = "diffcse"
    description = ("SimCSE + λ·replaced-token detection by a discriminator conditioned on the sentence "
                   "embedding; a frozen masked LM makes the edits.")
    paper = "Chuang et al. 2022 (DiffCSE, NAACL): BERT-base STS avg 78.49 (SimCSE 76.25)"
    defaults = {"temperature": 0.05, "mlp": True, "batchnorm": True, "generator": None,
                "mask_ratio": 0.30, "lambda_weight": 0.005, "discriminator": None}
    checks = {"batchnorm": validation.flag, "generator": validation.text, "mask_ratio": validation.fraction,
              "lambda_weight": validation.non_negative, "discriminator": validation.optional(validation.text)}
    # the paper's Table 12 (STS): BERT-base, and RoBERTa-base where it differs
    backbone_defaults = {"roberta-base": {"mask_ratio": 0.20}}
    training_defaults = {"lr": 7e-6, "epochs": 2, "batch_size": 64}
    backbone_training_defaults = {"roberta-base": {"lr": 1e-5}}
    requires = {"generator": "a masked LM with the encoder's vocabulary, by name or path; "
                             "the paper uses distilbert-base-uncased for BERT"}

    def __init__(self, encoder, **params):
        super().__init__(encoder, **with_backbone_defaults(type(self), getattr(encoder, "config", None), params))
        self.mask_ratio = validation.fraction("mask_ratio", self.params["mask_ratio"])
        self.lambda_weight = validation.non_negative("lambda_weight", self.params["lambda_weight"])
        if validation.flag("batchnorm", self.params["batchnorm"]):
            self.mlp = ProjectionMLP(encoder.dim, initializer_range(encoder))
        self.mask_id = mask_token_id(encoder.tokenizer, "DiffCSE")
        self.special_ids = list(encoder.tokenizer.all_special_ids)
        self._set_frozen("generator", load_masked_lm(self.params["generator"], encoder, "generator").model)
        self.discriminator = pretrained_discriminator(encoder, self.params["discriminator"])
        self.rtd_head = reference_init(nn.Linear(encoder.dim, 2), initializer_range(encoder))
        self.to(encoder.device)

    @property
    def generator(self) -> MaskedLM:
        """The frozen masked LM that makes the edits."""
        return MaskedLM(self.frozen_parts()["generator"], str(self.params["generator"]))

    @torch.no_grad()
    def edit(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        """(edited ids, replaced bool [B,T], masked bool [B,T]): masked positions get the generator's argmax."""
        masked = choose_positions(input_ids, attention_mask, self.special_ids, self.mask_ratio)
        edited = input_ids.clone()
        if masked.any():
            generator = self.generator
            corrupted = corrupt(input_ids, masked, self.mask_id, len(self.encoder.tokenizer), keep_or_random=False)
            hidden = generator.backbone(input_ids=corrupted, attention_mask=attention_mask).last_hidden_state
            edited[masked] = generator.head(hidden[masked]).argmax(-1)
        return edited, edited != input_ids, masked

    def rtd_logits(self, h: torch.Tensor, edited: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """[B, T, 2] replaced/original logits of the discriminator reading ``edited`` with ``h`` in place
        of position 0 of its embedding output."""

        def put_h_first(module, args, output):
            return torch.cat([h.unsqueeze(1).to(output.dtype), output[:, 1:]], dim=1)

        handle = embedding_output_module(self.discriminator).register_forward_hook(put_h_first)
        try:
            extra = {k: v for k, v in batch.items() if k not in ("input_ids", "attention_mask")}
            hidden = self.discriminator(input_ids=edited, attention_mask=batch["attention_mask"],
                                        **extra).last_hidden_state
        finally:
            handle.remove()
        return self.rtd_head(hidden)

    def rtd_loss(self, h: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """Cross-entropy averaged over all batch x length positions (padding and position 0 count as
        "original"), as the published code computes it; accuracy and replaced share over real tokens."""
        edited, replaced, _ = self.edit(batch["input_ids"], batch["attention_mask"])
        logits = self.rtd_logits(h, edited, batch)
        labels = replaced.long()
        loss = F.cross_entropy(logits.reshape(-1, 2), labels.reshape(-1))
        real = batch["attention_mask"].bool()
        hits = logits[real].argmax(-1) == labels[real]
        logs = {"rtd_loss": float(loss.detach()), "rtd_acc": float(hits.float().mean()),
                "replaced_frac": float(labels[real].float().mean())}
        return loss, logs

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        """The contrastive loss plus λ times the replaced-token detection loss of a batch."""
        doubled = {k: torch.cat([v, v], 0) for k, v in batch.items()}
        z = self.project(self.encoder(**doubled))
        z1, z2 = z.chunk(2, dim=0)
        cl_loss, logits = info_nce(z1, z2, self.params["temperature"])
        rtd, logs = self.rtd_loss(z, doubled)
        loss = cl_loss + self.lambda_weight * rtd
        acc = (logits.argmax(-1) == torch.arange(logits.shape[0], device=logits.device)).float().mean()
        return ObjectiveOutput(loss, {"loss": float(loss.detach()), "simcse_loss": float(cl_loss.detach()),
                                      "acc": float(acc), **logs})
