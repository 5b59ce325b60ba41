"""Matplotlib figures (PNG/SVG by the file suffix), drawn off-screen."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: str | os.PathLike) -> Path:
    from sparsecse.io import atomic_file

    out = Path(out)
    with atomic_file(out, overwrite=True) as tmp:
        fig.savefig(tmp, format=out.suffix.lstrip(".") or "png", dpi=150, bbox_inches="tight")
    _pyplot().close(fig)
    return out


def head_importance_heatmap(head_scores, out: str | os.PathLike, pruned=None, title: str | None = None) -> Path:
    """Layers x heads heat map of importance; ``pruned`` (bool [L, H], True = removed) marks heads with x."""
    plt = _pyplot()
    scores = np.asarray(head_scores, dtype=float)
    layers, heads = scores.shape
    fig, ax = plt.subplots(figsize=(0.45 * heads + 2, 0.45 * layers + 1.2))
    image = ax.imshow(scores, cmap="viridis", aspect="auto")
    fig.colorbar(image, ax=ax, label="importance E|dL/dξ|")
    if pruned is not None:
        ys, xs = np.nonzero(np.asarray(pruned, dtype=bool))
        ax.scatter(xs, ys, marker="x", color="red", s=60, label="pruned")
        if len(xs):
            ax.legend(loc="upper right", bbox_to_anchor=(1.0, 1.18), fontsize=8)
    ax.set_xticks(range(heads))
    ax.set_yticks(range(layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title or "Head importance")
    return _save(fig, out)
