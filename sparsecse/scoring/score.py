"""Gate importance from alignment and uniformity: ``E_D |∂L_score/∂gate|`` for every head and neuron.

:func:`score` runs the model once over STS-B (:mod:`sparsecse.scoring.gradients`: one forward and one
backward per batch give both gradients exactly) and returns a :class:`~sparsecse.scoring.scores.GateScores`
holding ∂L_align/∂gate and ∂L_uniform/∂gate per batch, so the importance at every λ and under every criterion
(:mod:`sparsecse.scoring.criteria`) is exact later, without running the model again. E_b weights each batch
by its number of positive pairs, so a short last batch (28 of 64 pairs on STS-B train) counts for what it
holds.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

from sparsecse.artifacts.files import make_manifest
from sparsecse.artifacts.remote_code import with_trust_option
from sparsecse.data.paths import resolve_data_dir
from sparsecse.data.eval_data import load_eval_data
from sparsecse.data.sts import Pair, read_sts_benchmark
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.flops import shape_record
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.scoring.gradients import POSITIVE_THRESHOLD, compute_gradients, make_batches, pair_batches
from sparsecse.scoring.scores import TENSORS, GateScores
from sparsecse.stage_config import stage_config


@dataclass(frozen=True)
class ScoringConfig:
    """How gate scores are computed (:func:`score`'s config): STS-B ``split`` of ``data_dir``,
    ``batch_size`` positive pairs per batch drawn with ``seed``, at most ``max_batches`` batches, pairs with
    gold score above ``positive_threshold`` as positives, a progress bar if ``show_progress``. ``dev`` (a pairs
    file or a task name, :func:`~sparsecse.data.eval_data.load_eval_data`) replaces STS-B ``split``: its
    positive pairs (scored pairs above 0.8 of the score range, or query and positive) and its sentences."""

    data_dir: str | os.PathLike | None = None
    split: str = "train"
    batch_size: int = 64
    seed: int = 0
    max_batches: int | None = None
    positive_threshold: float = POSITIVE_THRESHOLD
    show_progress: bool = False
    dev: str | os.PathLike | None = None


@with_trust_option
def score(model: str | os.PathLike | SentenceEncoder | None = None, config: ScoringConfig | None = None, *,
          pooling: str | None = None, device: str | None = None) -> GateScores:
    """Score every head and FFN neuron of ``model`` (a name, a directory or a loaded
    :class:`~sparsecse.modeling.encoder.SentenceEncoder`; default: the embedded model) on an STS-B split.

    Args:
        model: the model to score.
        config: how (a :class:`ScoringConfig`: data, split or dev set, batch size, seed, ...; default: its
            defaults, STS-B train).
        pooling: how a model not loaded yet is pooled (default: its own).
        device: where a model not loaded yet runs.

    Returns:
        The per-batch gate gradients and their manifest (:class:`~sparsecse.scoring.scores.GateScores`).

    >>> scores = score("all-MiniLM-L6-v2", ScoringConfig(split="dev"))  # doctest: +SKIP
    >>> scores.head_scores(0.5).shape  # doctest: +SKIP
    torch.Size([6, 12])
    """
    c = stage_config(ScoringConfig, config, "score()'s config")
    batches, data_input, data_params = _batches(c)  # the data is checked before the model loads
    encoder = model if isinstance(model, SentenceEncoder) else SentenceEncoder.load(model, pooling=pooling,
                                                                                    device=device)
    shape = shape_record(encoder.model)  # what every budget is costed from; refuses a shrunk model
    torch.manual_seed(c.seed)
    start = time.perf_counter()
    grads = compute_gradients(encoder, batches, show_progress=c.show_progress)
    seconds = time.perf_counter() - start
    for name, grad in zip(TENSORS, grads):
        bad = (~torch.isfinite(grad)).flatten(1).any(1).nonzero().flatten().tolist()
        if bad:  # e.g. a batch whose positive pairs are all identical sentences: log E||h-h+||^2 = log 0
            raise SparseCSEError(f"Scoring gave non-finite {name} in batch(es) {', '.join(map(str, bad[:5]))} "
                                 "(a batch whose positive pairs are all identical sentences has no alignment "
                                 "gradient); use a larger --batch-size.")
    manifest = make_manifest(
        "scores",
        inputs={"model": encoder.source, **data_input},
        params={**data_params, "batch_size": c.batch_size, "max_batches": c.max_batches,
                "loss": "lambda*log E||h-h+||^2 + (1-lambda)*log E exp(-2||h_i-h_j||^2)"},
        seed=c.seed,
        model=os.path.abspath(encoder.source) if os.path.isdir(encoder.source) else encoder.source,  # not cwd-bound
        pooling=encoder.pooling,
        pooling_source=encoder.pooling_source,
        max_length=encoder.max_length,
        shape=shape,
        num_batches=len(batches),
        num_positive_pairs=sum(len(b.pairs) for b in batches),
        batch_weighting="positive pairs per batch (tensor batch_sizes)",
        seconds=round(seconds, 3),
    )
    return GateScores(*grads, manifest=manifest, batch_sizes=torch.tensor([len(b.pairs) for b in batches]))


def _batches(c: ScoringConfig) -> tuple[list, dict, dict]:
    """The scoring batches of ``c``'s data, and what the manifest records of that data (inputs, params)."""
    if c.dev is None:
        pairs = read_sts_benchmark(c.data_dir, c.split)
        return (make_batches(pairs, c.batch_size, c.seed, c.positive_threshold, c.max_batches),
                {"stsb": resolve_data_dir(c.data_dir) / "STS" / "STSBenchmark" / f"sts-{c.split}.csv"},
                {"split": c.split, "positive_threshold": c.positive_threshold})
    dev = load_eval_data(c.dev, "dev", c.data_dir)
    which = ("query and positive rows" if dev.positive_threshold is None else
             f"score > {dev.positive_threshold:g}, 0.8 of the way up {dev.score_range[0]:g}-{dev.score_range[1]:g}")
    batches = pair_batches([Pair(a, b, 1.0) for a, b in dev.positive_pairs], dev.sentences, c.batch_size, c.seed,
                           c.max_batches, which=f"{dev.name}: {which}")
    return (batches, {"dev": dev.source.get("path")},
            {"dev": dev.describe(), "positive_pairs": which, "uniformity_sentences": len(dev.sentences)})
