"""Retraining-free reconstruction of a pruned encoder (Kwon et al. 2022's mask tuning).

After a mask removes heads and FFN neurons, each layer is refit so that its sublayers' outputs match
the dense model's on a few thousand unlabeled sentences, layer by layer from the bottom: every layer
sees the already-reconstructed layers below it. For each sublayer (attention, FFN) the statistics of
a linear least-squares problem are gathered from one pass over the sentences:

- inputs ``x``: what enters the output projection for the kept units (kept heads' context, kept
  neurons' activations) in the pruned model;
- target ``y``: the dense model's output projection result (``target="sublayer"``), or that plus the
  difference between the dense and the pruned residual streams (``target="residual"``, Kwon's choice:
  the pre-LayerNorm sum ``x_res + sublayer(x)`` of the pruned model is matched to the dense one's, so
  a layer also corrects the drift of the layers below).

Then either per-unit scales of the kept units are solved for (``method="scales"``, Kwon), or the whole
output projection over the kept units (``method="full"``); the bias is refit in both. A ridge term
pulls the solution towards the current weights, so the error on the sentences never grows (the
current weights are a feasible point); a system that stays ill-conditioned falls back to the scales.
Everything is folded into the output projections: the shrunk model has the usual shape and no
run-time cost. Only :class:`sparsecse.modeling.adapters.LayerParts` and the layer modules are used, so any
architecture that gates.py adapts works.
"""

from __future__ import annotations

import math

import os
import random
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from torch import nn

from sparsecse.data.corpus import read_corpus
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.adapters import LayerParts, layer_parts
from sparsecse.artifacts.files import sha256_file
from sparsecse.shrinking.least_squares import NormalEquations, fit_projection  # noqa: F401
from sparsecse.pruning.masks import Mask

from sparsecse.shrinking.reconstruction_settings import (DEFAULT_METHOD, DEFAULT_RIDGE, DEFAULT_SENTENCES,  # noqa: F401
                                                DEFAULT_TARGET, DEFAULT_WEIGHTING, METHODS, TARGETS, WEIGHTINGS)



class _Stop(Exception):
    """Raised by a hook to end a forward pass early once what is needed was seen."""


# ---------------------------------------------------------------------------------------- corpus
@dataclass
class Calibration:
    """The sentences the reconstruction fits on, and where they came from."""

    sentences: list[str]
    corpus: str | None = None
    corpus_sha256: str | None = None
    seed: int = 0

    def describe(self) -> dict[str, Any]:
        """Where the sentences came from, for manifests: corpus, its hash, how many, the sample's seed."""
        return {"corpus": self.corpus, "corpus_sha256": self.corpus_sha256, "sentences": len(self.sentences),
                "sample_seed": self.seed}


def calibration_sentences(corpus: str | os.PathLike, count: int = DEFAULT_SENTENCES, seed: int = 0) -> Calibration:
    """``count`` sentences of a one-sentence-per-line file (all of them if it has fewer), a seeded
    random sample in file order. Raises :class:`~sparsecse.errors.SparseCSEError` for a missing or empty file."""
    if count < 1:
        raise SparseCSEError(f"The number of reconstruction sentences must be at least 1, not {count}.")
    sentences = read_corpus(corpus)
    if len(sentences) > count:
        keep = sorted(random.Random(seed).sample(range(len(sentences)), count))
        sentences = [sentences[i] for i in keep]
    return Calibration(sentences, str(corpus), sha256_file(corpus), seed)


def token_batches(tokenizer, sentences: Sequence[str], batch_size: int = 64,
                  max_length: int = 128) -> list[dict[str, torch.Tensor]]:
    """Length-sorted padded batches (little padding) of the tokenized sentences."""
    features = tokenizer(list(sentences), truncation=True, max_length=max_length)
    order = sorted(range(len(sentences)), key=lambda i: len(features["input_ids"][i]))
    batches = []
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        rows = {key: [values[i] for i in idx] for key, values in features.items()}
        batches.append(dict(tokenizer.pad(rows, return_tensors="pt")))
    return batches


# ---------------------------------------------------------------------------------------- model access
def layer_modules(model: nn.Module) -> list[nn.Module]:
    """Each transformer layer's module: the innermost module holding both its query and FFN output."""
    names = {id(module): name for name, module in model.named_modules()}
    modules = dict(model.named_modules())
    layers = []
    for part in layer_parts(model):
        a, b = names[id(part.query)].split("."), names[id(part.ffn_out)].split(".")
        common = []
        for x, y in zip(a, b):
            if x != y:
                break
            common.append(x)
        layers.append(modules[".".join(common)])
    return layers


@dataclass
class _LayerCall:
    """What the encoder hands its first layer for one batch; reused to call any layer by itself."""

    hidden: torch.Tensor
    args: tuple
    kwargs: dict
    valid: torch.Tensor  # bool [batch, tokens]: real (not padding) tokens


def capture_layer_calls(model: nn.Module, batches: Sequence[dict[str, torch.Tensor]]) -> list[_LayerCall]:
    """Run the embeddings of every batch and record the first layer's call (its input and arguments)."""
    first = layer_modules(model)[0]
    device = next(model.parameters()).device
    calls: list[_LayerCall] = []
    seen: dict[str, Any] = {}

    def hook(module, args, kwargs):
        seen["args"], seen["kwargs"] = args, dict(kwargs)
        raise _Stop

    handle = first.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        for batch in batches:
            batch = {k: v.to(device) for k, v in batch.items()}
            try:
                model(**batch)
            except _Stop:
                pass
            args, kwargs = seen.pop("args"), seen.pop("kwargs")
            if args:
                hidden, args = args[0], tuple(args[1:])
            else:
                hidden = kwargs.pop("hidden_states")
            calls.append(_LayerCall(hidden, args, kwargs, batch["attention_mask"].bool()))
    finally:
        handle.remove()
    return calls


def _call_layer(layer: nn.Module, hidden: torch.Tensor, call: _LayerCall) -> torch.Tensor:
    out = layer(hidden, *call.args, **call.kwargs)
    return out[0] if isinstance(out, (tuple, list)) else out


@dataclass
class _Seen:
    """Tensors recorded by hooks during one layer call."""

    values: dict[str, torch.Tensor] = field(default_factory=dict)


def _record(seen: _Seen, parts: LayerParts, stop_after_attention: bool = False) -> list:
    """Hooks that record a layer's sublayer inputs, outputs and residual inputs."""

    def pre(name):
        def hook(module, args):
            seen.values[name] = args[0]
        return hook

    def post(name, stop=False):
        def hook(module, args, output):
            seen.values[name + "_in"] = args[0]
            seen.values[name + "_out"] = output
            if stop:
                raise _Stop
        return hook

    return [parts.query.register_forward_pre_hook(pre("attention_res")),
            parts.attn_out.register_forward_hook(post("attention", stop_after_attention)),
            parts.ffn_in.register_forward_pre_hook(pre("ffn_res")),
            parts.ffn_out.register_forward_hook(post("ffn"))]


def _run_layer(layer: nn.Module, parts: LayerParts, hidden: torch.Tensor, call: _LayerCall,
               attention_only: bool = False) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
    """(layer output or None if stopped after the attention, recorded tensors at the real tokens)."""
    seen = _Seen()
    handles = _record(seen, parts, stop_after_attention=attention_only)
    try:
        try:
            out = _call_layer(layer, hidden, call)
        except _Stop:
            out = None
    finally:
        for handle in handles:
            handle.remove()
    return out, {k: v[call.valid].double() for k, v in seen.values.items()}


# ---------------------------------------------------------------------------------------- least squares
def check_settings(method: str, target: str, ridge: float, weighting: str = "none") -> None:
    """Refuse (one sentence) an unknown method, target or weighting, or a ridge that is not a finite number >= 0."""
    if method not in METHODS:
        raise SparseCSEError(f"Unknown reconstruction method {method!r}; choose one of {', '.join(METHODS)}.")
    if target not in TARGETS:
        raise SparseCSEError(f"Unknown reconstruction target {target!r}; choose one of {', '.join(TARGETS)}.")
    if not (math.isfinite(float(ridge)) and ridge >= 0):
        raise SparseCSEError(f"The ridge term must be a finite number >= 0, not {ridge!r}.")
    if weighting not in WEIGHTINGS:
        raise SparseCSEError(f"Unknown reconstruction weighting {weighting!r}; choose one of {', '.join(WEIGHTINGS)}.")

@dataclass
class ReconstructionReport:
    """What a reconstruction did: its settings, the per-layer errors before and after, the tokens it fit on and its
    time."""
    method: str
    target: str
    ridge: float
    layers: list[dict[str, Any]]
    seconds: float
    calibration: dict[str, Any] = field(default_factory=dict)
    tokens: int = 0
    weighting: str = "none"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as manifests record it."""
        return {**self.calibration, "method": self.method, "target": self.target, "ridge": self.ridge,
                "weighting": self.weighting, "tokens": self.tokens, "seconds": round(self.seconds, 2),
                "layers": self.layers}


def _kept_columns(keep: torch.Tensor, width: int) -> tuple[torch.Tensor, list[list[int]]]:
    """Input columns of the kept units (``keep`` bool per unit, each ``width`` columns) and their groups."""
    units = keep.nonzero().flatten().tolist()
    cols = [[u * width + j for j in range(width)] for u in units]
    flat = torch.tensor([c for group in cols for c in group], dtype=torch.long)
    groups = [list(range(i * width, (i + 1) * width)) for i in range(len(units))]
    return flat, groups


@torch.no_grad()
def _refit(pruned_linear: nn.Linear, columns: torch.Tensor, groups, eq: NormalEquations, method: str,
           ridge: float) -> dict[str, Any]:
    weight = pruned_linear.weight.detach()[:, columns.to(pruned_linear.weight.device)].cpu()
    bias = pruned_linear.bias.detach().cpu() if pruned_linear.bias is not None else torch.zeros(weight.shape[0])
    new_weight, new_bias, info = fit_projection(eq, weight, bias, groups, method, ridge)
    device = pruned_linear.weight.device
    pruned_linear.weight[:, columns.to(device)] = new_weight.to(device)
    if pruned_linear.bias is not None:
        pruned_linear.bias.copy_(new_bias.to(device))
    return info


@torch.no_grad()
def reconstruct(dense: nn.Module, pruned: nn.Module, mask: Mask, batches: Sequence[dict[str, torch.Tensor]],
                method: str = "scales", target: str = "residual", ridge: float = 1e-3,
                show_progress: bool = False, weighting: str = "none") -> ReconstructionReport:
    """Refit ``pruned`` (a copy of ``dense`` of the same shape) in place so that, with ``mask``
    applied, each layer's sublayer outputs match ``dense``'s on ``batches`` (tokenized sentences).

    Only the attention and FFN output projections change (columns of kept units and the bias); the
    pruned units' columns are left as they are (shrinking removes them). Returns the per-layer relative
    errors (Σ‖ŷ − y‖² / Σ‖y‖² over the real tokens) before and after.

    ``weighting="layernorm"`` weighs each token by 1/σ², σ the standard deviation of the dense model's
    pre-LayerNorm sum at that token: the LayerNorm that follows divides by σ, so this fits what the next
    layer sees rather than letting a few tokens of very large norm (special tokens, outlier
    dimensions) decide the fit.
    """
    check_settings(method, target, ridge, weighting)
    if not batches:
        raise SparseCSEError("Reconstruction needs at least one sentence.")
    mask.check_fits(dense)
    mask.check_fits(pruned)
    from tqdm.auto import tqdm

    start = time.perf_counter()
    was_training = (dense.training, pruned.training)
    dense.eval()
    pruned.eval()
    dense_layers, pruned_layers = layer_modules(dense), layer_modules(pruned)
    dense_parts, pruned_parts = layer_parts(dense), layer_parts(pruned)
    calls = capture_layer_calls(dense, batches)
    dense_h = [call.hidden for call in calls]
    pruned_h = list(dense_h)  # the embeddings are not pruned
    tokens = sum(int(call.valid.sum()) for call in calls)
    gates = mask.apply(pruned)
    report_layers = []
    bar = tqdm(total=len(dense_layers) * len(calls) * 4, desc="reconstructing", unit="batch",
               disable=not show_progress)
    try:
        for i, (d_layer, p_layer, d_parts, p_parts) in enumerate(zip(dense_layers, pruned_layers, dense_parts,
                                                                      pruned_parts)):
            targets = {"attention": [], "ffn": []}
            weights = {"attention": [], "ffn": []}
            for b, call in enumerate(calls):
                out, seen = _run_layer(d_layer, d_parts, dense_h[b], call)
                for name in targets:
                    y = seen[name + "_out"]
                    pre_norm = y + seen[name + "_res"]  # what the LayerNorm after the sublayer receives
                    weights[name].append(1.0 / pre_norm.var(-1, unbiased=False).clamp_min(1e-12)
                                         if weighting == "layernorm" else None)
                    # residual target: the dense pre-LayerNorm sum minus the pruned residual, added below
                    targets[name].append((pre_norm if target == "residual" else y).float())
                dense_h[b] = out
                bar.update()
            layer_info: dict[str, Any] = {"layer": i}
            for name, linear, keep, width, attention_only in (
                    ("attention", p_parts.attn_out, mask.head_mask[i], p_parts.head_dim, True),
                    ("ffn", p_parts.ffn_out, mask.neuron_mask[i], 1, False)):
                columns, groups = _kept_columns(keep, width)
                eq = NormalEquations(len(columns), linear.out_features)
                for b, call in enumerate(calls):
                    _, seen = _run_layer(p_layer, p_parts, pruned_h[b], call, attention_only=attention_only)
                    y = targets[name][b]
                    if target == "residual":
                        y = y - seen[name + "_res"]
                    eq.add(seen[name + "_in"][:, columns], y, weights[name][b])
                    bar.update()
                layer_info[name] = _refit(linear, columns, groups, eq, method, ridge)
            for b, call in enumerate(calls):
                pruned_h[b] = _call_layer(p_layer, pruned_h[b], call)
                bar.update()
            report_layers.append(layer_info)
    finally:
        bar.close()
        gates.detach()
        dense.train(was_training[0])
        pruned.train(was_training[1])
    return ReconstructionReport(method, target, ridge, report_layers, time.perf_counter() - start, tokens=tokens,
                                weighting=weighting)


@dataclass(frozen=True)
class ReconstructionPlan:
    """Checked inputs of a reconstruction (made before any model is loaded), then ``run``."""

    calibration: Calibration
    method: str = DEFAULT_METHOD
    target: str = DEFAULT_TARGET
    ridge: float = DEFAULT_RIDGE
    max_length: int = 128
    batch_size: int = 64
    weighting: str = DEFAULT_WEIGHTING

    @classmethod
    def prepare(cls, corpus: str | os.PathLike, sentences: int = DEFAULT_SENTENCES, method: str = DEFAULT_METHOD,
                target: str = DEFAULT_TARGET, ridge: float = DEFAULT_RIDGE, max_length: int = 128,
                batch_size: int = 64, seed: int = 0, weighting: str = DEFAULT_WEIGHTING) -> "ReconstructionPlan":
        """A plan with its settings checked and its ``sentences`` drawn from ``corpus`` (seeded), before any model
        loads."""
        check_settings(method, target, ridge, weighting)
        if max_length < 2 or batch_size < 1:
            raise SparseCSEError("Reconstruction needs max_length >= 2 and batch_size >= 1.")
        return cls(calibration_sentences(corpus, sentences, seed), method, target, ridge, max_length, batch_size,
                   weighting)

    def run(self, encoder, mask: Mask, show_progress: bool = False) -> ReconstructionReport:
        """Reconstruct ``encoder.model`` (full size, before shrinking) in place for ``mask``."""
        import copy

        dense = copy.deepcopy(encoder.model)
        batches = token_batches(encoder.tokenizer, self.calibration.sentences, self.batch_size, self.max_length)
        report = reconstruct(dense, encoder.model, mask, batches, self.method, self.target, self.ridge,
                             show_progress=show_progress, weighting=self.weighting)
        report.calibration = {**self.calibration.describe(), "max_length": self.max_length}
        return report


def reconstruction_plan(reconstruct: str | os.PathLike | ReconstructionPlan | None,
                        sentences: int = DEFAULT_SENTENCES) -> ReconstructionPlan | None:
    """A plan from a corpus path (default settings) or a ready plan; None for no reconstruction."""
    if reconstruct is None or isinstance(reconstruct, ReconstructionPlan):
        return reconstruct
    return ReconstructionPlan.prepare(reconstruct, sentences)
