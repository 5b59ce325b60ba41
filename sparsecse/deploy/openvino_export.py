"""``sparsecse export --format openvino``: the model as an OpenVINO IR, optionally NNCF int8.

The IR is converted by OpenVINO's own converter (``openvino.convert_model``) from the same torch
module the ONNX export traces (``EmbeddingGraph``: backbone + pooling
+ L2 normalisation where the model has it), with dynamic batch and sequence axes, and saved in
fp32 (no fp16 compression). int8 is NNCF's post-training static quantization (``nncf.quantize``,
transformer model type) calibrated on a seeded sample of a corpus, one sentence per calibration
item; the sample's seed, size and hashes go into the manifest. Both IRs are checked against the
torch model; the fp32 one must match it.

    >>> export_openvino("runs/minilm-f50", "runs/minilm-f50-ov",
    ...                 ExportConfig("openvino", quantize="int8", calibration="wiki1m_sample.txt"))
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from sparsecse.deploy.calibration import calibration_sample
from sparsecse.deploy.export_config import ExportConfig
from sparsecse.artifacts.exported_model import MISSING_OPENVINO
from sparsecse.artifacts.model_dir import write_model_config
from sparsecse.deploy.openvino_encoder import FP32_XML, INT8_XML, OpenVinoEncoder, require_openvino
from sparsecse.modeling.adapters import get_adapter
from sparsecse.modeling.encoder import SentenceEncoder
from sparsecse.modeling.st_dense import write_sentence_transformers_config
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.sts import cosine_rows
from sparsecse.deploy.graph import (CHECK_SENTENCES, FP32_MIN_COSINE, INPUTS, EmbeddingGraph, ExportResult,
                                    base_architecture_config, load_source)
from sparsecse.artifacts.files import atomic_dir, hash_path, make_manifest
from sparsecse.deploy.onnx_encoder import EMBEDDING_OUTPUT


def require_nncf():
    """The nncf module (OpenVINO int8); one sentence naming the extra to install when it is missing."""
    try:
        import nncf
    except ImportError:
        raise SparseCSEError(MISSING_OPENVINO) from None
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
    """The encoder as an ``openvino.Model`` with named inputs and outputs; returns (model, input names).
    Headless layers' zero-input projections become their bias first (changes ``encoder`` in place)."""
    ov = require_openvino()
    replace_zero_input_linears(encoder.model)
    if get_adapter(encoder.model).gated_ffn and hasattr(encoder.model, "set_attn_implementation"):
        # ModernBERT / Qwen3 / Gemma-3: a query that sees no key (a padding position left of a left-padded
        # sentence, or outside a local window) makes OpenVINO's converted SDPA return NaN, which the zero
        # attention weights of later layers then carry into every token (0 * NaN); the eager attention's
        # finite mask (the dtype's minimum, not -inf) keeps such rows finite, and the real tokens exact
        encoder.model.set_attn_implementation("eager")
    batch = encoder.tokenizer(CHECK_SENTENCES[:2], padding=True, return_tensors="pt")
    names = [n for n in INPUTS if n in batch]
    graph = EmbeddingGraph(encoder, names, normalize).eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python-constant branches
        model = ov.convert_model(graph, example_input=tuple(batch[n] for n in names))
    for port, name in zip(model.inputs, names):
        port.get_tensor().set_names({name})
    for port, name in zip(model.outputs, ["last_hidden_state", EMBEDDING_OUTPUT]):
        port.get_tensor().set_names({name})
    return model, names


def quantize_nncf(model, encoder: SentenceEncoder, sentences: list[str], names: list[str]):
    """NNCF post-training int8 quantization, transformer model type, one calibration item per sentence."""
    nncf = require_nncf()
    items = []
    for sentence in sentences:
        tokens = encoder.tokenizer([sentence], truncation=True, max_length=encoder.max_length, return_tensors="np")
        if "token_type_ids" not in tokens:
            tokens["token_type_ids"] = np.zeros_like(tokens["input_ids"])
        items.append({n: tokens[n].astype(np.int64) for n in names})
    return nncf.quantize(model, nncf.Dataset(items), model_type=nncf.ModelType.TRANSFORMER,
                         subset_size=len(items))


def openvino_versions() -> dict[str, str]:
    """The openvino (and nncf) versions, for the manifest."""
    import openvino

    versions = {"openvino": openvino.__version__}
    try:
        import nncf

        versions["nncf"] = nncf.__version__
    except ImportError:
        pass
    return versions


def export_openvino(model: str | os.PathLike | None = None, out: str | os.PathLike | None = None,
                    config: ExportConfig | None = None, overwrite: bool = False) -> ExportResult:
    """Export ``model`` (dense or shrunk directory, or the default) as OpenVINO IR to ``out``.

    Always writes ``openvino/openvino_model.xml``; ``quantize="int8"`` (needs ``calibration``, a
    one-sentence-per-line corpus) adds ``openvino/openvino_model_qint8_quantized.xml`` and makes it
    the IR sparsecse runs (``config``: an :class:`~sparsecse.deploy.export_config.ExportConfig`).
    """
    start = time.perf_counter()
    c = (config or ExportConfig(format="openvino")).check()
    quantize, calibration, pooling = c.quantize, c.calibration, c.pooling
    calibration_size, calibration_seed = c.calibration_size, c.calibration_seed
    if quantize not in (None, "int8"):
        raise SparseCSEError(f"Unknown quantization {quantize!r}; choose int8 or none.")
    if quantize and calibration is None:
        raise SparseCSEError("OpenVINO int8 is calibrated on sample sentences: pass --calibration CORPUS "
                             "(one sentence per line).")
    if calibration is not None and not quantize:
        raise SparseCSEError("--calibration only serves --quantize int8; add it or leave the corpus out.")
    if out is None:
        raise SparseCSEError("export needs an output directory (--out).")
    ov = require_openvino()
    if quantize:
        require_nncf()
        sentences, sample = calibration_sample(calibration, calibration_size, calibration_seed)
    source, encoder, normalize, reference = load_source(model, out, overwrite, pooling)
    with atomic_dir(out, overwrite=overwrite) as tmp:
        ir, names = convert(encoder, normalize)
        kinds = {FP32_XML: "fp32"}
        (tmp / FP32_XML).parent.mkdir(parents=True, exist_ok=True)
        ov.save_model(ir, tmp / FP32_XML, compress_to_fp16=False)
        if quantize:
            ov.save_model(quantize_nncf(ir, encoder, sentences, names), tmp / INT8_XML, compress_to_fp16=False)
            kinds[INT8_XML] = "int8_static"
        files = list(kinds)
        encoder.tokenizer.save_pretrained(tmp)
        (tmp / "config.json").write_text(json.dumps(base_architecture_config(encoder), indent=2) + "\n")
        write_sentence_transformers_config(tmp, encoder.pooling, encoder.dim, encoder.max_length, normalize)
        settings = {"file": files[-1], "files": kinds, "pooling": encoder.pooling, "normalize": normalize,
                    "dim": encoder.dim, "inputs": names, "outputs": ["last_hidden_state", EMBEDDING_OUTPUT]}
        config = {"pooling": encoder.pooling, "max_length": encoder.max_length, "openvino": settings}
        write_model_config(tmp, config)
        verification = {}
        for file in files:
            exported = OpenVinoEncoder.load(tmp, file=file).encode(CHECK_SENTENCES)
            verification[f"{kinds[file]}_min_cosine"] = round(float(cosine_rows(exported, reference).min()), 6)
        if verification["fp32_min_cosine"] < FP32_MIN_COSINE:
            raise SparseCSEError(f"The OpenVINO model does not reproduce the torch model (minimum cosine "
                                 f"{verification['fp32_min_cosine']:.6f}); nothing was written.")
        sizes = {f: (tmp / f).stat().st_size + (tmp / f).with_suffix(".bin").stat().st_size for f in files}
        lineage = {**encoder.extra_config.get("lineage", {}), "exported_from": str(source),
                   "exported_from_sha256": hash_path(source) if os.path.exists(source) else None}
        params = {"format": "openvino", "quantize": quantize, "quantization": "nncf_static" if quantize else None,
                  "pooling": encoder.pooling, "normalize": normalize, "converter": "openvino.convert_model"}
        if quantize:
            params.update(calibration=sample, nncf={"model_type": "transformer", "subset_size": len(sentences)})
        config.update(
            shape=encoder.extra_config.get("shape"), lineage=lineage,
            manifest=make_manifest("openvino_export", inputs={"model": source, "calibration": calibration},
                                   params=params, seed=calibration_seed if quantize else None, files=sizes,
                                   verification=verification, runtime_versions=openvino_versions()),
        )
        write_model_config(tmp, config)
    return ExportResult(Path(out), sizes, files[-1], encoder.pooling, normalize, verification,
                        time.perf_counter() - start, kinds=kinds)
