"""Layer importance: how much each whole transformer layer matters, for removing layers (depth pruning).

A layer criterion is a criterion like the others: a class registered in the one registry of
:mod:`sparsecse.scoring.criteria` (``CRITERIA``), with ``unit = "layer"``, of one of two kinds:

- a per-layer statistic (``block_influence``, ShortGPT's Block Influence): it sees, for every batch of sentences,
  each layer's input and output hidden states and the mask of real tokens, and returns one importance per layer
  (higher: more important, removed last). :func:`layer_scores` runs the model over sentences and collects them;
  :func:`layers_to_remove` names the ``k`` least important layers.
- greedy (``embedding_fidelity``, the default: :func:`~sparsecse.scoring.criteria.default_criterion` for
  ``layers``): :func:`greedy_order` removes layers one at a time, each time the one whose removal moves the sentence
  embeddings least. A removed layer passes its input on unchanged, as a model without it computes.

:func:`removal_order` gives every layer in the order a depth cut removes them, under either kind.

The hidden states are read with hooks on the layer modules themselves (the adapter's layer list), so the
input and output are exactly the layer's, in every family (not the model's ``hidden_states`` tuple, whose
last entry some families give after the final norm).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import contextlib

from sparsecse.errors import SparseCSEError
from sparsecse.modeling.adapters import layer_modules
from sparsecse.scoring.criteria import GreedyLayerCriterion, default_criterion, get_criterion

PER_LAYER_DEFAULT = "block_influence"  # layer_scores' criterion when none is named (a per-layer statistic)
GREEDY_SENTENCES = 256  # sentences a greedy criterion embeds per trial (evenly spread over the ones given)

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
        criterion: a per-layer layer criterion's name (``criterion_names("layer")``, not a greedy one); None:
            ``PER_LAYER_DEFAULT``.
        batch_size: sentences per forward pass.

    Returns:
        A float64 tensor with one score per layer; higher is more important.
    """
    import torch

    chosen = get_criterion(criterion or PER_LAYER_DEFAULT, unit="layer")
    if isinstance(chosen, GreedyLayerCriterion):
        raise SparseCSEError(f"The layer criterion {chosen.name} gives a removal order, not one score per layer.")
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


def removal_order(encoder, sentences: Sequence[str], criterion: str | None = None, batch_size: int = 32,
                  limit: int | None = None) -> list[int]:
    """Every layer of ``encoder``, least important first: the order depth cuts remove them in (removing k + 1 layers
    removes the k of the smaller cut and one more).

    Args:
        encoder: a :class:`~sparsecse.modeling.encoder.SentenceEncoder`.
        sentences: the sentences the criterion measures on (the dev sentences).
        criterion: a layer criterion's name; None: the default for layers.
        batch_size: sentences per forward pass.
        limit: for a greedy criterion, the most layers any cut removes: only that many steps are taken, and the
            layers no cut removes follow in index order (None: every step).

    Returns:
        Layer indices; the first k are the layers a cut of k removes.
    """
    chosen = get_criterion(criterion or default_criterion("layers"), unit="layer")
    if isinstance(chosen, GreedyLayerCriterion):
        return greedy_order(encoder, sentences, chosen, batch_size, limit)
    return removal_ranking(layer_scores(encoder, sentences, chosen.name, batch_size))


@contextlib.contextmanager
def _skipped(layers, skip: set[int]):
    """Inside the block, each layer in ``skip`` passes its input hidden states on unchanged."""
    def hook(module, args, kwargs, output):
        hidden = _hidden(args, kwargs)
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

    handles = [layers[i].register_forward_hook(hook, with_kwargs=True) for i in sorted(skip)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def greedy_order(encoder, sentences: Sequence[str], criterion: GreedyLayerCriterion, batch_size: int = 32,
                 limit: int | None = None) -> list[int]:
    """The removal order of a greedy layer criterion (see the module docstring): ``limit`` steps (None: until one
    layer is left), each removing the layer whose removal, with those removed before, costs least
    (``criterion.cost`` of the embeddings against the input model's; ties: the later layer), then the layers
    never removed in index order. Measured on at most ``GREEDY_SENTENCES`` of ``sentences``, evenly spread."""
    import torch

    layers = layer_modules(encoder.model)
    steps = len(layers) - 1 if limit is None else check_removable(len(layers), limit)
    picked = list(sentences)
    if len(picked) > GREEDY_SENTENCES:
        picked = [picked[round(i * (len(picked) - 1) / (GREEDY_SENTENCES - 1))] for i in range(GREEDY_SENTENCES)]
    if not picked:
        raise SparseCSEError("Layer scores need at least one sentence.")

    def embed(skip: set[int]) -> "torch.Tensor":
        with _skipped(layers, skip):
            return torch.as_tensor(encoder.encode(picked, batch_size=batch_size, convert_to_numpy=False))

    reference = embed(set())
    removed: list[int] = []
    for _ in range(steps):
        costs = {i: criterion.cost(embed({*removed, i}), reference) for i in range(len(layers)) if i not in removed}
        removed.append(min(costs, key=lambda i: (costs[i], -i)))
    return removed + [i for i in range(len(layers)) if i not in removed]
