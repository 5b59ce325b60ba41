"""A torch encoder as an OpenVINO model in memory, fp32 or NNCF int8: what ``sparsecse export --format
openvino`` saves (:mod:`sparsecse.exporting.openvino_export`) and what an int8 teacher runs without files
(:mod:`sparsecse.objectives.teacher_precision`).

The model is converted by OpenVINO's own converter (``openvino.convert_model``) from the function every
exported model computes (:class:`~sparsecse.serving.graph.EmbeddingGraph`), with dynamic batch and sequence
axes. int8 is NNCF's post-training static quantization (``nncf.quantize``, transformer model type, which keeps
softmax and LayerNorm in float), one calibration item per sentence.

    >>> encoder = in_memory_encoder(SentenceEncoder.load("runs/minilm-f50"), calibration=sentences)  # doctest: +SKIP
    >>> encoder.precision  # doctest: +SKIP
    'int8_static'
"""

from __future__ import annotations

import copy
import warnings
from typing import Sequence

import numpy as np
import torch
from torch import nn

from sparsecse.modeling.adapters import get_adapter
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.serving.graph import OUTPUTS, EmbeddingGraph, example_inputs
from sparsecse.serving.openvino_encoder import OPENVINO, OpenVinoEncoder, compile_ir, require_openvino

IN_MEMORY = "in memory"  # the file name an in-memory encoder reports


def require_nncf():
    """The nncf module (OpenVINO int8); one sentence naming the extra to install when it is missing."""
    OPENVINO.require(quantize="int8")
    import nncf

    return nncf


class _BiasOnly(nn.Module):
    """What ``nn.Linear(0, n)`` computes (its bias on every position), without a zero-size MatMul,
    which OpenVINO's CPU plugin leaves uninitialised instead of zero (a headless layer's output)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.bias = linear.bias if linear.bias is not None else nn.Parameter(torch.zeros(linear.out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The bias at every position of ``x``."""
        return self.bias.expand(*x.shape[:-1], self.bias.shape[0])


def replace_zero_input_linears(module: nn.Module) -> int:
    """Swap every ``nn.Linear`` with no input features for ``_BiasOnly``, in place; returns how many."""
    targets = [(name, child) for name, child in module.named_modules()
               if isinstance(child, nn.Linear) and child.in_features == 0]
    for name, linear in targets:
        parent_name, _, attr = name.rpartition(".")
        setattr(module.get_submodule(parent_name) if parent_name else module, attr, _BiasOnly(linear))
    return len(targets)


def convert(encoder: SentenceEncoder, normalize: bool):
    """The encoder as an ``openvino.Model`` with named inputs and outputs.

    Headless layers' zero-input projections become their bias first, so this changes ``encoder`` in place.

    Args:
        encoder: a CPU fp32 encoder in eval mode.
        normalize: whether the embedding output is L2-normalised.

    Returns:
        (the model, its input names).
    """
    ov = require_openvino()
    replace_zero_input_linears(encoder.model)
    if get_adapter(encoder.model).query_may_see_no_key and hasattr(encoder.model, "set_attn_implementation"):
        # a query that sees no key (a padding position left of a left-padded sentence, or outside a local
        # window: the family's adapter says so) makes OpenVINO's converted SDPA return NaN, which the zero
        # attention weights of later layers then carry into every token (0 * NaN); the eager attention's
        # finite mask (the dtype's minimum, not -inf) keeps such rows finite, and the real tokens exact
        encoder.model.set_attn_implementation("eager")
    names, inputs = example_inputs(encoder)
    graph = EmbeddingGraph(encoder, names, normalize).eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python-constant branches
        model = ov.convert_model(graph, example_input=inputs)
    for port, name in zip(model.inputs, names):
        port.get_tensor().set_names({name})
    for port, name in zip(model.outputs, OUTPUTS):
        port.get_tensor().set_names({name})
    return model, names


def quantize_nncf(model, encoder: SentenceEncoder, sentences: Sequence[str], names: list[str]):
    """NNCF post-training int8 quantization of ``model`` (from :func:`convert`), transformer model type,
    calibrated on ``sentences`` (one item each, tokenized by ``encoder``); returns the quantized model."""
    nncf = require_nncf()
    items = []
    for sentence in sentences:
        tokens = encoder.tokenizer([sentence], truncation=True, max_length=encoder.max_length, return_tensors="np")
        if "token_type_ids" not in tokens:
            tokens["token_type_ids"] = np.zeros_like(tokens["input_ids"])
        items.append({n: tokens[n].astype(np.int64) for n in names})
    return nncf.quantize(model, nncf.Dataset(items), model_type=nncf.ModelType.TRANSFORMER,
                         subset_size=len(items))


def in_memory_encoder(encoder: SentenceEncoder, calibration: Sequence[str] | None = None,
                      normalize: bool = False) -> OpenVinoEncoder:
    """``encoder`` converted and compiled in memory, with its own pooling; ``encoder`` is left as it was.

    Args:
        encoder: the torch encoder.
        calibration: sentences to calibrate NNCF int8 on; None keeps fp32.
        normalize: whether the embedding is L2-normalised in the graph.

    Returns:
        An :class:`~sparsecse.serving.openvino_encoder.OpenVinoEncoder` whose ``precision`` is ``fp32`` or
        ``int8_static``.
    """
    require_openvino()
    if calibration is not None:
        require_nncf()
    source = copy.deepcopy(encoder).to("cpu")  # the conversion changes the model in place
    source.model.float().eval()
    model, names = convert(source, normalize)
    kind = "fp32"
    if calibration is not None:
        model, kind = quantize_nncf(model, source, list(calibration), names), "int8_static"
    return OpenVinoEncoder(compile_ir(model), encoder.tokenizer, encoder.pooling, encoder.max_length, encoder.dim,
                           source=str(encoder.source), file=IN_MEMORY, settings={"files": {IN_MEMORY: kind}})
