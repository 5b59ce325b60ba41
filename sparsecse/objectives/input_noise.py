"""Input-embedding noise (Park 2023, §4.1.2): SimCSE whose two dropout views also see noisy token
embeddings.

``noise=gaussian`` adds N(0, σ²) to every token's input embedding (the thesis's GNI, σ = 0.001);
``noise=gaussian_dropout`` multiplies it element-wise by N(1, σ²) (Gaussian dropout, same σ). Each
view draws its own noise. The noise enters through ``inputs_embeds`` (the word-embedding lookup),
before position embeddings, LayerNorm and the model's own dropout.
"""

from __future__ import annotations

import torch

from sparsecse.objectives import validation
from sparsecse.objectives.base import ObjectiveOutput
from sparsecse.objectives.losses import info_nce
from sparsecse.objectives.simcse import SimCSE, two_views

NOISES = ("gaussian", "gaussian_dropout")


def doubled_token_embeddings(encoder, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """[2B, T, d] word embeddings of the batch stacked twice (the rows :func:`~sparsecse.objectives.simcse.two_views` encodes)."""
    ids = batch["input_ids"]
    return encoder.model.get_input_embeddings()(torch.cat([ids, ids], 0))


def contrastive_loss(objective: SimCSE, batch: dict[str, torch.Tensor],
                     inputs_embeds: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """SimCSE's (loss, logits) on ``batch``, optionally reading ``inputs_embeds`` [2B, T, d] instead of ids."""
    embeds = {} if inputs_embeds is None else {"input_ids": None, "inputs_embeds": inputs_embeds}
    z1, z2 = two_views(objective.encoder, batch, **embeds)
    return info_nce(objective.project(z1), objective.project(z2), objective.params["temperature"])


def in_batch_accuracy(logits: torch.Tensor) -> float:
    """How often each anchor's most similar candidate is its own positive."""
    return float((logits.argmax(-1) == torch.arange(logits.shape[0], device=logits.device)).float().mean())


def add_noise(embeds: torch.Tensor, noise: str, sigma: float) -> torch.Tensor:
    """``embeds`` with noise added (``gaussian``) or multiplied in (``gaussian_dropout``, mean 1).

    Args:
        embeds: the token embeddings.
        noise: the kind of noise.
        sigma: its standard deviation.

    Returns:
        The noisy embeddings.
    """
    draw = torch.randn_like(embeds) * sigma
    return embeds + draw if noise == "gaussian" else embeds * (1.0 + draw)


class InputNoise(SimCSE):
    """SimCSE with Gaussian noise on the input token embeddings of both views."""
    name = "input_noise"
    description = ("SimCSE with Gaussian noise added to (gaussian) or multiplied into (gaussian_dropout, mean 1) "
                   "the input token embeddings of both views.")
    paper = ("Park 2023 (SNU master's thesis): BERT-base STS avg 75.57±0.70 (gaussian), 75.17±1.18 "
             "(gaussian_dropout) vs SimCSE 74.80±1.12 (5 seeds)")
    defaults = {"temperature": 0.05, "mlp": True, "noise": "gaussian", "sigma": 0.001}
    checks = {"noise": validation.one_of(*NOISES), "sigma": validation.non_negative}

    def __init__(self, encoder, **params):
        super().__init__(encoder, **params)
        validation.choice("noise", self.params["noise"], NOISES)
        self.sigma = validation.non_negative("sigma", self.params["sigma"])

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        """The contrastive loss of a batch whose two views have noisy token embeddings."""
        embeds = add_noise(doubled_token_embeddings(self.encoder, batch), self.params["noise"], self.sigma)
        loss, logits = contrastive_loss(self, batch, embeds)
        return ObjectiveOutput(loss, {"loss": float(loss.detach()), "acc": in_batch_accuracy(logits)})
