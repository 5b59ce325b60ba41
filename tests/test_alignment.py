import numpy as np
import pytest
import torch

from sparsecse.scoring.alignment import alignment_loss, alignment_metric, uniformity_loss


def _normalise(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_alignment_and_uniformity_match_numpy():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(7, 5)), rng.normal(size=(7, 5))
    xn, yn = _normalise(x), _normalise(y)
    align = np.mean(np.sum((xn - yn) ** 2, axis=1))
    sq = [np.sum((xn[i] - xn[j]) ** 2) for i in range(7) for j in range(i + 1, 7)]
    uniform = np.log(np.mean(np.exp(-2 * np.array(sq))))
    tx, ty = torch.tensor(x), torch.tensor(y)
    assert alignment_metric(tx, ty).item() == pytest.approx(align, rel=1e-10)
    assert alignment_loss(tx, ty).item() == pytest.approx(np.log(align), rel=1e-10)
    assert uniformity_loss(tx).item() == pytest.approx(uniform, rel=1e-10)


def test_uniformity_gradient_is_finite_for_duplicate_rows():
    x = torch.randn(4, 3, dtype=torch.double)
    x = torch.cat([x, x[:1]]).requires_grad_()
    uniformity_loss(x).backward()
    assert torch.isfinite(x.grad).all()
