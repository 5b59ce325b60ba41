"""Layer importance: how much each whole transformer layer matters, for removing layers (depth pruning).

A layer criterion is a criterion like the others: a class registered in the one registry of
:mod:`sparsecse.scoring.criteria` (``CRITERIA``), with ``unit = "layer"`` (``block_influence``, ShortGPT's Block
Influence, is the default: :func:`~sparsecse.scoring.criteria.default_criterion` for ``layers``). It sees, for every
batch of sentences, each layer's input and output hidden states and the mask of real tokens, and returns one
importance per layer (higher: more important, removed last). :func:`layer_scores` runs the model over sentences
and collects them; :func:`layers_to_remove` names the ``k`` least important layers.

The hidden states are read with hooks on the layer modules themselves (the adapter's layer list), so the
input and output are exactly the layer's, in every family (not the model's ``hidden_states`` tuple, whose
last entry some families give after the final norm).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from sparsecse.errors import SparseCSEError
from sparsecse.modeling.adapters import layer_modules
from sparsecse.scoring.criteria import default_criterion, get_criterion

if TYPE_CHECKING:
    import torch


def _hidden(args, kwargs):
    return args[0] if args else kwargs["hidden_states"]


def layer_scores(encoder, sentences: Sequence[str], criterion: str | None = None,
                 batch_size: int = 32) -> "torch.Tensor":
    """Each layer's importance under a layer ``criterion``, measured over ``sentences``.

    Args:
        encoder: a :class:`~sparsecse.modeling.encoder.SentenceEncoder` (any family an adapter describes).
        sentences: the sentences whose real tokens are averaged over (dev or corpus sentences).
        criterion: a layer criterion's name (``criterion_names("layer")``); None: the default for layers.
        batch_size: sentences per forward pass.

    Returns:
        A float64 tensor with one score per layer; higher is more important.
    """
    import torch

    chosen = get_criterion(criterion or default_criterion("layers"), unit="layer")
    if not sentences:
        raise SparseCSEError("Layer scores need at least one sentence.")
    layers = layer_modules(encoder.model)
    seen: dict[int, tuple] = {}

    def recorder(i):
        def hook(module, args, kwargs, output):
            seen[i] = (_hidden(args, kwargs), output[0] if isinstance(output, tuple) else output)
        return hook

    handles = [layer.register_forward_hook(recorder(i), with_kwargs=True) for i, layer in enumerate(layers)]
    total = count = torch.zeros(len(layers), dtype=torch.float64)
    try:
        with torch.inference_mode():
            for start in range(0, len(sentences), batch_size):
                batch = encoder.tokenize(sentences[start:start + batch_size])
                seen.clear()
                encoder.transformer_outputs(**batch)
                inputs = torch.stack([seen[i][0] for i in range(len(layers))]).float().cpu()
                outputs = torch.stack([seen[i][1] for i in range(len(layers))]).float().cpu()
                part, n = chosen.per_batch(inputs, outputs, batch["attention_mask"].cpu())
                total, count = total + part, count + n
    finally:
        for handle in handles:
            handle.remove()
    return chosen.normalize(total / count)


def removal_ranking(scores: "torch.Tensor") -> list[int]:
    """Every layer, least important first (lowest score; ties: the later layer first)."""
    return sorted(range(len(scores)), key=lambda i: (float(scores[i]), -i))


def check_removable(layers: int, k: int) -> int:
    """``k`` if a model of ``layers`` layers can lose that many (0 to layers − 1; one must stay)."""
    if not 0 <= int(k) < layers:
        raise SparseCSEError(f"A model with {layers} layers can lose 0 to {layers - 1} of them, not {k}.")
    return int(k)


def layers_to_remove(scores: "torch.Tensor", k: int) -> list[int]:
    """The ``k`` least important layers (:func:`removal_ranking`), sorted by index.

    Args:
        scores: one importance per layer (:func:`layer_scores`).
        k: how many layers to remove, 0 to layers − 1.

    Returns:
        Their indices, increasing.
    """
    return sorted(removal_ranking(scores)[:check_removable(len(scores), k)])
