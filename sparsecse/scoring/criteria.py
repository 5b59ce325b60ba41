"""The importance criteria: how a unit's per-batch gate gradients become one importance score.

Each criterion is one class behind one interface (as Torch-Pruning's importance classes are) and is
registered by name in ``CRITERIA``. Every user of a criterion reads this registry: :meth:`GateScores.head_scores
<sparsecse.scoring.scores.GateScores.head_scores>`, :func:`~sparsecse.pruning.prune.prune` (and its default per
target kind, :func:`default_criterion`), the sweep, and the ``--criterion`` choices of ``prune``, ``compress`` and
``sweep`` (``cli/options.py``). Adding a criterion is one class here::

    @register
    class MeanGrad(Criterion):
        name, summary = "mean_grad", "|E g|"

        def per_batch(self, grad):
            return grad

        def normalize(self, scores):
            return scores.abs()

With ``g_b = λ·g_align + (1−λ)·g_uniform``, the gradient of L_score(λ) for batch b (exact for every λ, since
both gradients are stored), the criteria are:

- ``abs_grad`` (the paper's, the default for a sparsity): ``E_b |g_b|``;
- ``layer_norm``: the same, with each layer's head scores (and, separately, its neuron scores) divided by
  their L2 norm before the global ranking (Michel et al. 2019);
- ``fisher`` (the default for a kept-FLOPs or kept-parameters budget): ``E_b g_b²``, the empirical Fisher
  of the gate (Kwon et al. 2022).

E_b weighs each batch by its share of the positive pairs. A criterion's ``unit`` says what it ranks:
``gate`` (heads and neurons, the three above) or ``layer`` (whole layers, for removing layers;
:mod:`sparsecse.scoring.layer_criteria` measures them):

- ``block_influence`` (ShortGPT, Men et al. 2024): ``1 − E_t cos(x_i,t, x_{i+1},t)``, the mean over real tokens of
  one minus the cosine of a layer's input and output hidden state;
- ``embedding_fidelity`` (the default for layers; greedy, :class:`GreedyLayerCriterion`): layers removed one at a
  time, each time the one whose removal keeps the model's sentence embeddings closest to the input model's
  (``1 − E cos``).

One registry holds both; a setting that takes one unit's criterion refuses the other's by name. torch is imported
when a criterion runs, not with this module, so the command line reads the names without loading it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from sparsecse.errors import SparseCSEError

if TYPE_CHECKING:
    import torch

CRITERIA: dict[str, "Criterion"] = {}


def register(cls: type["Criterion"]) -> type["Criterion"]:
    """Class decorator: add one instance of ``cls`` to ``CRITERIA`` under ``cls.name``.

    Args:
        cls: a :class:`Criterion` subclass with its ``name`` and ``summary`` set.

    Returns:
        ``cls`` itself.
    """
    CRITERIA[cls.name] = cls()
    return cls


class Criterion:
    """One importance criterion. :meth:`per_batch` turns the gradients ``g`` [B, L, U] of L_score(λ) into a
    per-batch importance; the importance is its weighted mean over the batches, then normalized (``normalize``).

    ``name`` is what ``--criterion`` and the mask manifests say, ``summary`` how ``--help`` describes it, and
    ``default_for`` the target kinds (``"sparsity"``, ``"budget"``, ``"layers"``) for which it is the default;
    ``unit`` what it ranks: ``gate`` (heads and neurons, from gate gradients) or ``layer`` (whole layers, from
    each layer's input and output hidden states: :class:`LayerCriterion`)."""

    name: ClassVar[str]
    summary: ClassVar[str]
    default_for: ClassVar[tuple[str, ...]] = ()
    unit: ClassVar[str] = "gate"

    def per_batch(self, grad: "torch.Tensor") -> "torch.Tensor":
        """The importance each batch gives each unit (the method a criterion must define).

        Args:
            grad: the per-batch gradients of L_score(λ) with respect to the gates, [B, L, U] (B batches, L
                layers, U heads or neurons per layer).

        Returns:
            The per-batch importance, [B, L, U].
        """
        raise NotImplementedError

    def normalize(self, scores: "torch.Tensor") -> "torch.Tensor":
        """The final importance from the batch mean (override to rescale; default: unchanged).

        Args:
            scores: the weighted mean over batches of :meth:`per_batch`, [L, U].

        Returns:
            The importance, [L, U]; higher means more important (kept first).
        """
        return scores

    def __call__(self, grad_align: "torch.Tensor", grad_uniform: "torch.Tensor", lam: float,
                 weights: "torch.Tensor | None" = None) -> "torch.Tensor":
        """Each unit's importance at alignment weight ``lam``.

        Args:
            grad_align: per-batch gradients of L_align with respect to the gates, [B, L, U].
            grad_uniform: per-batch gradients of L_uniform, [B, L, U].
            lam: λ in [0, 1]; the gradient of batch b is ``λ·g_align + (1−λ)·g_uniform``.
            weights: each batch's weight, [B], summing to 1 (None: equal weights).

        Returns:
            The importance, [L, U].

        >>> import torch
        >>> g = torch.tensor([[[1.0, -2.0]], [[3.0, 0.0]]])  # 2 batches, 1 layer, 2 units
        >>> get_criterion("fisher")(g, torch.zeros_like(g), lam=1.0)
        tensor([[5., 2.]])
        >>> get_criterion("abs_grad")(g, torch.zeros_like(g), lam=0.5, weights=torch.tensor([0.75, 0.25]))
        tensor([[0.7500, 0.7500]])
        """
        import torch

        grad = lam * grad_align + (1.0 - lam) * grad_uniform
        if weights is None:
            weights = torch.full((grad.shape[0],), 1.0 / grad.shape[0])
        per_batch = self.per_batch(grad)
        return self.normalize(torch.einsum("b,b...->...", weights.to(per_batch.dtype), per_batch))


@register
class AbsGrad(Criterion):
    """``E_b |g_b|``: the paper's criterion, the default for a sparsity."""

    name, summary, default_for = "abs_grad", "E|g|", ("sparsity",)

    def per_batch(self, grad):
        """``|g|``."""
        return grad.abs()


@register
class LayerNormalized(AbsGrad):
    """``E_b |g_b|`` divided per layer by its L2 norm (heads and neurons separately; Michel et al. 2019)."""

    name, summary, default_for = "layer_norm", "E|g| normalised per layer", ()

    def normalize(self, scores):
        """Each layer's scores divided by their L2 norm (a layer of zeros stays zero)."""
        import torch

        norms = scores.norm(dim=-1, keepdim=True)
        return scores / torch.where(norms > 0, norms, torch.ones_like(norms))


@register
class Fisher(Criterion):
    """``E_b g_b²``, the empirical Fisher of the gate (Kwon et al. 2022): the default for a budget, which
    compares heads with neurons and so needs importances on one scale."""

    name, summary, default_for = "fisher", "E[g^2]", ("budget",)

    def per_batch(self, grad):
        """``g²``."""
        return grad.square()


class LayerCriterion(Criterion):
    """A criterion that ranks whole layers. :meth:`per_batch` gives, for one batch, each layer's summed
    statistic and the number of tokens it was summed over; the importance is the total sum over the total
    count, then normalized, ``normalize`` (higher: more important, removed last)."""

    unit: ClassVar[str] = "layer"

    def per_batch(self, inputs: "torch.Tensor", outputs: "torch.Tensor",  # type: ignore[override]
                  token_mask: "torch.Tensor") -> "tuple[torch.Tensor, torch.Tensor]":
        """One batch's contribution (the method a layer criterion must define).

        Args:
            inputs: each layer's input hidden states, [L, N, T, d].
            outputs: each layer's output hidden states, [L, N, T, d].
            token_mask: 1 for real tokens, 0 for padding, [N, T].

        Returns:
            (summed statistic [L], count [L]).
        """
        raise NotImplementedError


@register
class BlockInfluence(LayerCriterion):
    """ShortGPT's Block Influence: 1 − the mean cosine of a layer's input and output over real tokens."""

    name, summary, default_for = "block_influence", "1 - E cos(layer input, layer output)", ()

    def per_batch(self, inputs, outputs, token_mask):
        """Summed ``1 − cos`` over the real tokens of the batch, and their number, per layer."""
        import torch

        cosine = torch.nn.functional.cosine_similarity(inputs.double(), outputs.double(), dim=-1, eps=1e-12)
        weights = token_mask.to(cosine.dtype)
        return ((1.0 - cosine) * weights).sum((1, 2)), weights.sum().expand(cosine.shape[0])


class GreedyLayerCriterion(Criterion):
    """A criterion that orders whole layers by removing them one at a time: at each step, the layer whose removal
    (the layers removed before it staying removed) moves the model's sentence embeddings least by its ``cost``
    goes next (:func:`sparsecse.scoring.layer_criteria.removal_order`). It judges a set of layers by what the
    model without them computes, where a per-layer statistic judges each layer alone."""

    unit: ClassVar[str] = "layer"

    def cost(self, embeddings: "torch.Tensor", reference: "torch.Tensor") -> float:
        """How far ``embeddings`` (the model without some layers, [N, d]) are from ``reference`` (the input
        model's, [N, d]); lower is better (the method a greedy criterion must define)."""
        raise NotImplementedError


@register
class EmbeddingFidelity(GreedyLayerCriterion):
    """1 − the mean cosine between the sentence embeddings of the model without the layers and the input model's:
    the distillation that recovers a cut model starts closest to its teacher. The default for layers: on
    all-MiniLM-L6-v2 it ranks every 3-layer cut tried in the order of its STS-B dev score after a short recovery
    (``benchmarks/layer_choice.py``)."""

    name, summary, default_for = ("embedding_fidelity", "greedy: 1 - E cos(sentence embedding without the layers, "
                                  "the input's)", ("layers",))

    def cost(self, embeddings, reference):
        """``1 − E cos``."""
        import torch

        cosine = torch.nn.functional.cosine_similarity(embeddings.double(), reference.double(), dim=-1, eps=1e-12)
        return float(1.0 - cosine.mean())


def criterion_names(unit: str = "gate") -> tuple[str, ...]:
    """The registered criteria that rank ``unit`` (``gate``: heads and neurons; ``layer``: whole layers)."""
    return tuple(name for name, c in CRITERIA.items() if c.unit == unit)


def get_criterion(name: str, unit: str = "gate") -> Criterion:
    """The registered criterion called ``name`` that ranks ``unit``.

    Args:
        name: a name in ``CRITERIA`` (``abs_grad``, ``layer_norm``, ``fisher``, ``block_influence`` or one
            registered since).
        unit: ``gate`` (heads and neurons) or ``layer`` (whole layers).

    Returns:
        The criterion instance.

    Raises:
        SparseCSEError: an unknown name, in one sentence listing the known ones.
    """
    if name not in CRITERIA or CRITERIA[name].unit != unit:
        kind = "layer criterion" if unit == "layer" else "criterion"
        raise SparseCSEError(f"Unknown {kind} {name!r}; choose {', '.join(criterion_names(unit))}.")
    return CRITERIA[name]


def check_criterion(name: str) -> str:
    """``name`` if it is a registered criterion (else :class:`~sparsecse.errors.SparseCSEError`)."""
    return get_criterion(name).name


def default_criterion(kind: str) -> str:
    """The criterion used when none is given, for a target ``kind``: ``sparsity``, ``layers`` (which layers to
    remove first), or a budget (``budget``, ``keep_flops``, ``keep_params``). A sparsity takes the paper's ``abs_grad``; a budget, which compares heads
    with neurons, the one that measured best there (all-MiniLM-L6-v2 at kept FLOPs 0.5 after ``shrink
    --reconstruct``, on the 7-task STS average: docs/results/guide-measurements.md, from the scoring guide)."""
    kind = kind if kind in ("sparsity", "layers") else "budget"
    return next(c.name for c in CRITERIA.values() if kind in c.default_for)


def check_lambda(lam: float) -> float:
    """``lam`` as a float if it lies in [0, 1] (the alignment weight λ of L_score)."""
    lam = float(lam)
    if not 0.0 <= lam <= 1.0:
        raise SparseCSEError(f"lambda must lie in [0, 1]; got {lam!r}.")
    return lam


def combine(grad_align: "torch.Tensor", grad_uniform: "torch.Tensor", lam: float, criterion: str = "abs_grad",
            weights: "torch.Tensor | None" = None) -> "torch.Tensor":
    """Per-unit importance [L, U] from per-batch gradients [B, L, U] at λ = ``lam`` under the registered
    ``criterion``; ``weights`` [B] sum to 1 (None: equal weights)."""
    lam = check_lambda(lam)
    return get_criterion(criterion)(grad_align, grad_uniform, lam, weights)
