"""Adversarial weight perturbation for SimCSE (Park 2023, §4.2; AWP of Wu, Xia & Wang 2020),
optionally with FGSM on the input token embeddings.

Each step: (1) the SimCSE loss at the current weights gives, by its gradient, the ascent direction;
(2) every weight matrix W moves to W + γ·‖W‖·g/‖g‖ (layer-wise relative size γ, as in AWP) and,
with ``fgsm=true``, the token embeddings move by ε·sign(∂L/∂embeddings); (3) the loss at that
worst-case point is returned, so the training loop's backward gives the gradient there; (4)
``after_backward`` puts the exact original weights back before the optimizer step, which then
updates the original weights with the worst-case gradient. A step costs about two SimCSE steps.

γ = 5e-3 is AWP's default (the thesis gives no value); ε = 1e-3 matches the thesis's input-noise
scale (it gives none for FGSM either). Only matrices (dim ≥ 2) are perturbed, as in AWP; biases and
LayerNorm parameters stay put. Weights whose units are masked out get a zero gradient and stay put.
"""

from __future__ import annotations

import torch
from torch import nn

from sparsecse.objectives import validation
from sparsecse.objectives.base import ObjectiveOutput
from sparsecse.objectives.input_noise import contrastive_loss, doubled_token_embeddings, in_batch_accuracy
from sparsecse.objectives.simcse import SimCSE

_EPS = 1e-12


class WeightPerturbation(SimCSE):
    """SimCSE trained at adversarially perturbed weights (AWP), optionally with FGSM on the input embeddings."""
    name = "weight_perturbation"
    description = ("SimCSE trained at adversarially perturbed weights (AWP, direction from the contrastive "
                   "loss gradient), optionally with FGSM on the input embeddings; ~2x the step cost.")
    paper = ("Park 2023 (SNU master's thesis): BERT-base STS avg 75.25±0.74 (AWP), 75.66±0.54 (AWP + FGSM) "
             "vs SimCSE 74.80±1.12 (5 seeds)")
    defaults = {"temperature": 0.05, "mlp": True, "gamma": 5e-3, "fgsm": False, "fgsm_epsilon": 1e-3}
    checks = {"gamma": validation.non_negative, "fgsm": validation.flag, "fgsm_epsilon": validation.non_negative}

    def __init__(self, encoder, **params):
        super().__init__(encoder, **params)
        self.gamma = validation.non_negative("gamma", self.params["gamma"])
        self.fgsm_epsilon = validation.non_negative("fgsm_epsilon", self.params["fgsm_epsilon"])
        self.use_fgsm = validation.flag("fgsm", self.params["fgsm"])
        self._saved: list[tuple[nn.Parameter, torch.Tensor]] = []

    def perturbed_parameters(self) -> list[nn.Parameter]:
        """Trainable weight matrices of the encoder and of this objective's head."""
        params = [*self.encoder.parameters(), *self.parameters()]
        unique = {id(p): p for p in params if p.requires_grad and p.dim() >= 2}
        return list(unique.values())

    @property
    def perturbed(self) -> bool:
        """Whether the weights are perturbed now (restored after the backward pass)."""
        return bool(self._saved)

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        """The contrastive loss of a batch at the perturbed weights (the clean loss without gradients)."""
        self.after_backward()  # never stack perturbations if a previous step skipped the restore
        if not torch.is_grad_enabled():
            loss, logits = contrastive_loss(self, batch)
            return ObjectiveOutput(loss, {"loss": float(loss.detach()), "acc": in_batch_accuracy(logits)})
        use_fgsm = self.use_fgsm
        weights = self.perturbed_parameters()
        embeds = doubled_token_embeddings(self.encoder, batch) if use_fgsm else None
        clean_loss, _ = contrastive_loss(self, batch, embeds)
        targets = weights + ([embeds] if use_fgsm else [])
        grads = torch.autograd.grad(clean_loss, targets, allow_unused=True)
        self._perturb(weights, grads[: len(weights)])
        adversarial = None
        if use_fgsm and grads[-1] is not None:
            adversarial = doubled_token_embeddings(self.encoder, batch) + self.fgsm_epsilon * grads[-1].sign()
        loss, logits = contrastive_loss(self, batch, adversarial)
        return ObjectiveOutput(loss, {"loss": float(loss.detach()), "clean_loss": float(clean_loss.detach()),
                                      "acc": in_batch_accuracy(logits)})

    @torch.no_grad()
    def _perturb(self, weights: list[nn.Parameter], grads) -> None:
        for weight, grad in zip(weights, grads):
            if grad is None or self.gamma == 0:
                continue
            self._saved.append((weight, weight.detach().clone()))
            weight.add_(grad, alpha=float(self.gamma * weight.norm() / (grad.norm() + _EPS)))

    @torch.no_grad()
    def after_backward(self) -> None:
        """Put back the exact unperturbed weights (their .grad, from the perturbed point, stays)."""
        for weight, original in self._saved:
            weight.copy_(original)
        self._saved.clear()
