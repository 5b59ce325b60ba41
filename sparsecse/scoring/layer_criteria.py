"""Layer importance: how much each whole transformer layer matters, for removing layers (depth pruning).

Each criterion is one class behind one interface and is registered by name in ``LAYER_CRITERIA``, as the
unit criteria are (:mod:`sparsecse.scoring.criteria`). A layer criterion sees, for every batch of sentences,
each layer's input and output hidden states and the mask of real tokens, and returns one importance per
layer (higher: more important, removed last). :func:`layer_scores` runs the model over sentences and
collects them; :func:`layers_to_remove` names the ``k`` least important layers.

- ``block_influence`` (ShortGPT, Men et al. 2024): ``BI_i = 1 − E_t cos(x_i,t, x_{i+1},t)``, the mean over
  real tokens t of one minus the cosine of the layer's input and output hidden state. A layer whose output
  points where its input did changes little of what the next layers read, so it goes first; it needs only
  forward passes over unlabelled sentences (no gradients, no labels), and ShortGPT found removing layers
  by it beats removing them by their perplexity or by their position.

The hidden states are read with hooks on the layer modules themselves (the adapter's layer list), so the
input and output are exactly the layer's, in every family (not the model's ``hidden_states`` tuple, whose
last entry some families give after the final norm).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Sequence

from sparsecse.errors import SparseCSEError
from sparsecse.modeling.adapters import layer_modules

if TYPE_CHECKING:
    import torch

LAYER_CRITERIA: dict[str, "LayerCriterion"] = {}


def register_layer_criterion(cls: type["LayerCriterion"]) -> type["LayerCriterion"]:
    """Class decorator: add one instance of ``cls`` to ``LAYER_CRITERIA`` under ``cls.name``.

    Args:
        cls: a :class:`LayerCriterion` subclass with its ``name`` and ``summary`` set.

    Returns:
        ``cls`` itself.
    """
    LAYER_CRITERIA[cls.name] = cls()
    return cls


class LayerCriterion:
    """One layer-importance criterion. :meth:`per_batch` gives, for one batch, each layer's summed
    statistic and the number of tokens it was summed over; the importance is the total sum over the total
    count, then :meth:`normalize`\\ d."""

    name: ClassVar[str]
    summary: ClassVar[str]

    def per_batch(self, inputs: "torch.Tensor", outputs: "torch.Tensor",
                  token_mask: "torch.Tensor") -> "tuple[torch.Tensor, torch.Tensor]":
        """One batch's contribution (the method a criterion must define).

        Args:
            inputs: each layer's input hidden states, [L, N, T, d].
            outputs: each layer's output hidden states, [L, N, T, d].
            token_mask: 1 for real tokens, 0 for padding, [N, T].

        Returns:
            (summed statistic [L], count [L]).
        """
        raise NotImplementedError

    def normalize(self, mean: "torch.Tensor") -> "torch.Tensor":
        """The importance from the mean statistic [L] (default: unchanged); higher is more important."""
        return mean


@register_layer_criterion
class BlockInfluence(LayerCriterion):
    """ShortGPT's Block Influence: 1 − the mean cosine of a layer's input and output over real tokens."""

    name, summary = "block_influence", "1 - E cos(layer input, layer output)"

    def per_batch(self, inputs, outputs, token_mask):
        """Summed ``1 − cos`` over the real tokens of the batch, and their number, per layer."""
        import torch

        cosine = torch.nn.functional.cosine_similarity(inputs.double(), outputs.double(), dim=-1, eps=1e-12)
        weights = token_mask.to(cosine.dtype)
        return ((1.0 - cosine) * weights).sum((1, 2)), weights.sum().expand(cosine.shape[0])


def get_layer_criterion(name: str) -> LayerCriterion:
    """The registered layer criterion called ``name``; refuses an unknown one in one sentence."""
    if name not in LAYER_CRITERIA:
        raise SparseCSEError(f"Unknown layer criterion {name!r}; choose {', '.join(LAYER_CRITERIA)}.")
    return LAYER_CRITERIA[name]


def _hidden(args, kwargs):
    return args[0] if args else kwargs["hidden_states"]


def layer_scores(encoder, sentences: Sequence[str], criterion: str = "block_influence",
                 batch_size: int = 32) -> "torch.Tensor":
    """Each layer's importance under a layer ``criterion``, measured over ``sentences``.

    Args:
        encoder: a :class:`~sparsecse.modeling.encoder.SentenceEncoder` (any family an adapter describes).
        sentences: the sentences whose real tokens are averaged over (dev or corpus sentences).
        criterion: a name in ``LAYER_CRITERIA``.
        batch_size: sentences per forward pass.

    Returns:
        A float64 tensor with one score per layer; higher is more important.
    """
    import torch

    chosen = get_layer_criterion(criterion)
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
