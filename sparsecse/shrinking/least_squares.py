"""Weighted linear least squares for refitting an output projection (reconstruction's solver).

Statistics of ``y ≈ x W^T + b`` are accumulated batch by batch (:class:`NormalEquations`), then either the
whole projection over the kept inputs (:func:`solve_full`) or one scale per kept unit (:func:`solve_scales`,
Kwon et al. 2022) is solved, with a ridge towards the current weights so the fitted error never grows
(:func:`fit_projection` keeps whichever is better and falls back to scales when the system is ill-conditioned).
"""

from __future__ import annotations


from typing import Any, Sequence

import torch

MAX_CONDITION = 1e10  # above this (after the ridge) the full refit falls back to scales


class NormalEquations:
    """Running sums for the (token-weighted) least-squares fit y ≈ W x + b over tokens (float64)."""

    def __init__(self, inputs: int, outputs: int):
        self.xtx = torch.zeros(inputs, inputs, dtype=torch.float64)
        self.xty = torch.zeros(inputs, outputs, dtype=torch.float64)
        self.sx = torch.zeros(inputs, dtype=torch.float64)
        self.sy = torch.zeros(outputs, dtype=torch.float64)
        self.yy = 0.0
        self.n = 0.0  # total weight
        self.tokens = 0

    def add(self, x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor | None = None) -> None:
        """Add tokens (rows of ``x`` and ``y``), each counted ``weight`` times (default once)."""
        x, y = x.double().cpu(), y.double().cpu()
        w = torch.ones(x.shape[0], dtype=torch.float64) if weight is None else weight.double().cpu()
        xw = x * w[:, None]
        self.xtx += x.T @ xw
        self.xty += xw.T @ y
        self.sx += xw.sum(0)
        self.sy += (y * w[:, None]).sum(0)
        self.yy += float((w * (y * y).sum(1)).sum())
        self.n += float(w.sum())
        self.tokens += x.shape[0]

    def centered(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(Σ x̃ x̃ᵀ, Σ x̃ ỹᵀ) with x̃, ỹ the deviations from the token means."""
        return (self.xtx - torch.outer(self.sx, self.sx) / self.n,
                self.xty - torch.outer(self.sx, self.sy) / self.n)

    def error(self, weight: torch.Tensor, bias: torch.Tensor) -> float:
        """Σ ‖W x + b − y‖² over the tokens seen (``weight`` [outputs, inputs])."""
        w, b = weight.double(), bias.double()
        value = (torch.einsum("oi,ij,oj->", w, self.xtx, w) + 2 * b @ (w @ self.sx) + self.n * b @ b
                 - 2 * torch.einsum("oi,io->", w, self.xty) - 2 * b @ self.sy + self.yy)
        return max(float(value), 0.0)

    def best_bias(self, weight: torch.Tensor) -> torch.Tensor:
        """The bias minimising the error for a fixed ``weight``: the mean residual."""
        return (self.sy - weight.double() @ self.sx) / self.n


def _ridge_solve(gram: torch.Tensor, rhs: torch.Tensor, prior: torch.Tensor, ridge: float
                 ) -> tuple[torch.Tensor | None, float]:
    """argmin ‖·‖² + λ‖θ − prior‖²: (gram + λI)⁻¹(rhs + λ·prior), λ = ridge × mean diagonal;
    (None, condition number) if the system is too ill-conditioned to trust."""
    if gram.shape[0] == 0:
        return prior.clone(), 1.0
    lam = ridge * float(gram.diagonal().mean().clamp_min(0))
    system = gram + lam * torch.eye(gram.shape[0], dtype=gram.dtype)
    eig = torch.linalg.eigvalsh(system)
    condition = float(eig[-1] / eig[0]) if eig[0] > 0 else float("inf")
    if not condition < MAX_CONDITION:
        return None, condition
    solution = torch.linalg.solve(system, rhs + lam * prior)
    return (solution if torch.isfinite(solution).all() else None), condition


def _group_matrix(groups: Sequence[Sequence[int]], width: int) -> torch.Tensor:
    """[width, units] indicator of which input columns belong to which unit."""
    p = torch.zeros(width, len(groups), dtype=torch.float64)
    for u, cols in enumerate(groups):
        p[list(cols), u] = 1.0
    return p


def solve_scales(eq: NormalEquations, weight: torch.Tensor, groups: Sequence[Sequence[int]], ridge: float
                 ) -> tuple[torch.Tensor | None, float]:
    """Per-unit scales m (unit u's columns of ``weight`` multiplied by m_u), ridge towards 1."""
    c, r = eq.centered()
    w = weight.double()
    p = _group_matrix(groups, w.shape[1])
    gram = p.T @ ((w.T @ w) * c) @ p
    rhs = p.T @ torch.einsum("id,di->i", r, w)
    scales, condition = _ridge_solve(gram, rhs, torch.ones(len(groups), dtype=torch.float64), ridge)
    return (None if scales is None else w * (p @ scales)), condition


def solve_full(eq: NormalEquations, weight: torch.Tensor, ridge: float) -> tuple[torch.Tensor | None, float]:
    """The whole projection over the kept inputs, ridge towards the current weights."""
    c, r = eq.centered()
    w = weight.double()
    solution, condition = _ridge_solve(c, r, w.T, ridge)
    return (None if solution is None else solution.T), condition


def fit_projection(eq: NormalEquations, weight: torch.Tensor, bias: torch.Tensor,
                   groups: Sequence[Sequence[int]], method: str, ridge: float
                   ) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """New (weight, bias) for one output projection restricted to its kept inputs, and a report.

    Never worse on the fitted tokens than (``weight``, ``bias``): if the solution's error is not
    below the current one, the current weights are kept.
    """
    before = eq.error(weight, bias)
    info: dict[str, Any] = {"method": method, "tokens": eq.tokens, "inputs": weight.shape[1]}
    new_weight, condition = solve_full(eq, weight, ridge) if method == "full" else (None, None)
    if method == "full":
        info["condition"] = condition
        if new_weight is None:
            info["fallback"] = f"full refit ill-conditioned (condition number {condition:.3g}); per-unit scales used"
    if new_weight is None:
        new_weight, condition = solve_scales(eq, weight, groups, ridge)
        info["method_used"] = "scales"
    else:
        info["method_used"] = method
    if new_weight is None:
        info.update(method_used="none", fallback=f"scales ill-conditioned (condition number {condition:.3g}); "
                                                 "weights left unchanged")
        new_weight = weight.double()
    new_bias = eq.best_bias(new_weight)
    after = eq.error(new_weight, new_bias)
    if not after <= before:
        new_weight, new_bias, after = weight.double(), bias.double(), before
        info["method_used"] = "none"
    energy = max(eq.yy, 1e-300)
    info.update(error_before=before / energy, error_after=after / energy)
    return new_weight.to(weight.dtype), new_bias.to(bias.dtype), info


# ---------------------------------------------------------------------------------------- the layer loop
