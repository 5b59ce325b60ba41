"""``sparsecse export``: a dense or shrunk model directory as the files of a registered export format
(:mod:`sparsecse.artifacts.export_formats`: ONNX, OpenVINO, ...), fp32 or quantized, under one
:class:`~sparsecse.exporting.config.ExportConfig`.

A format's writer only writes its graph files; every step around it is here, once: the calibration sample,
the source model checked and loaded, the directory assembled atomically (nothing is left behind on an
error) with the tokenizer, a base-architecture ``config.json``, sentence-transformers' module files and
``sparsecse_config.json``, every graph checked against the torch model through the format's own loader
(minimum cosine in the manifest; the fp32 graph must reproduce it), and the manifest.

    >>> from sparsecse.exporting.config import ExportConfig
    >>> config = ExportConfig(quantize="int8", calibration="corpus.txt")
    >>> export("small", "small-onnx", config=config).files  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

from sparsecse.artifacts.export_formats import get_format
from sparsecse.artifacts.files import atomic_dir, hash_path, make_manifest
from sparsecse.artifacts.model_dir import write_model_config
from sparsecse.artifacts.remote_code import with_trust_option
from sparsecse.errors import SparseCSEError
from sparsecse.evaluation.sts import cosine_rows
from sparsecse.exporting import onnx_export, openvino_export  # noqa: F401 (they provide the built-in writers)
from sparsecse.exporting.calibration import calibration_sample
from sparsecse.exporting.config import ExportConfig
from sparsecse.exporting.result import ExportResult
from sparsecse.exporting.source import base_architecture_config, load_source
from sparsecse.modeling.st_dense import write_sentence_transformers_config
from sparsecse.serving import loading  # noqa: F401 (the built-in formats' loaders, for the check against torch)
from sparsecse.serving.graph import CHECK_SENTENCES
from sparsecse.stage_config import stage_config

FP32_MIN_COSINE = 0.9999  # below this the graph does not compute the model: a bug, not rounding


@with_trust_option
def export(model: str | os.PathLike | None = None, out: str | os.PathLike | None = None, format: str | None = None,
           *, overwrite: bool = False, config: ExportConfig | None = None) -> ExportResult:
    """Export ``model`` (a dense or shrunk directory, or the default model) to the directory ``out``.

    ONNX (fp32, or int8 dynamic or, with a ``calibration`` corpus, static), OpenVINO (fp32, or NNCF int8 on a
    ``calibration`` corpus), or any other registered format. Every graph is checked against the torch model on
    a few sentences (minimum cosine in the manifest); the fp32 one must match it (cosine >= 0.9999).

    Args:
        model: a model directory or name (None: the default model).
        out: the directory to write (refused if it exists, unless ``overwrite``).
        format: a registered format's name; replaces the config's own.
        overwrite: replace ``out``.
        config: an :class:`~sparsecse.exporting.config.ExportConfig` (None: its defaults).

    Returns:
        An :class:`~sparsecse.exporting.result.ExportResult`: the files, their kinds and sizes, the graph
        sparsecse runs, the check against torch.

    Example::

        export("small", "small-onnx", config=ExportConfig(quantize="int8", calibration="corpus.txt")).files
    """
    c = stage_config(ExportConfig, config, "export()'s config")
    c = (dataclasses.replace(c, format=format) if format else c).check()
    return write_export(model, out, c, overwrite)


def verify(fmt, directory: Path, kinds: dict[str, str], reference) -> dict[str, float]:
    """The smallest cosine of each written graph's embeddings (loaded by the format's loader) to the torch
    model's ``reference`` ones, by kind; refuses a fp32 graph below ``FP32_MIN_COSINE``."""
    verification = {}
    for file, kind in kinds.items():
        exported = fmt.load(directory, file=file).encode(CHECK_SENTENCES)
        verification[f"{kind}_min_cosine"] = round(float(cosine_rows(exported, reference).min()), 6)
    if verification["fp32_min_cosine"] < FP32_MIN_COSINE:
        raise SparseCSEError(f"The exported {fmt.title} model does not reproduce the torch model (minimum cosine "
                             f"{verification['fp32_min_cosine']:.6f}); nothing was written.")
    return verification


def write_export(model: str | os.PathLike | None, out: str | os.PathLike | None, config: ExportConfig,
                 overwrite: bool = False) -> ExportResult:
    """Export ``model`` to ``out`` as ``config`` says: the steps every format shares around its writer.

    Args:
        model: a model directory or name (None: the default model).
        out: the directory to write.
        config: the checked export config.
        overwrite: replace ``out``.

    Returns:
        The :class:`~sparsecse.exporting.result.ExportResult`.
    """
    start = time.perf_counter()
    c = config.check()
    fmt = get_format(c.format)
    if out is None:
        raise SparseCSEError("export needs an output directory (--out).")
    fmt.require(export=True, quantize=c.quantize)
    sentences, sample = (calibration_sample(c.calibration, c.calibration_size, c.calibration_seed)
                         if c.calibration is not None else (None, None))
    source, encoder, normalize, reference = load_source(model, out, overwrite, c.pooling)
    with atomic_dir(out, overwrite=overwrite) as tmp:
        written = fmt.write(encoder, tmp, normalize, c, sentences)
        kinds = {fmt.files[kind]: kind for kind in written.kinds}
        files = list(kinds)
        encoder.tokenizer.save_pretrained(tmp)
        (tmp / "config.json").write_text(json.dumps(base_architecture_config(encoder), indent=2) + "\n")
        write_sentence_transformers_config(tmp, encoder.pooling, encoder.dim, encoder.max_length, normalize)
        settings = {"file": files[-1], "files": kinds, "pooling": encoder.pooling, "normalize": normalize,
                    "dim": encoder.dim, **written.settings}
        model_config = {"pooling": encoder.pooling, "max_length": encoder.max_length, fmt.name: settings}
        write_model_config(tmp, model_config)  # the loaders read it for the check
        verification = verify(fmt, tmp, kinds, reference)
        sizes = {f: fmt.file_size(tmp, f) for f in files}
        params = {"format": fmt.name, "quantize": c.quantize, "pooling": encoder.pooling, "normalize": normalize,
                  **written.params}
        if sample is not None:
            params["calibration"] = sample
        lineage = {**encoder.extra_config.get("lineage", {}), "exported_from": str(source),
                   "exported_from_sha256": hash_path(source) if os.path.exists(source) else None}
        model_config.update(
            shape=encoder.extra_config.get("shape"), lineage=lineage,
            manifest=make_manifest(f"{fmt.name}_export", inputs={"model": source, "calibration": c.calibration},
                                   params=params, seed=c.calibration_seed if sample is not None else None,
                                   files=sizes, verification=verification, runtime_versions=fmt.versions(c.quantize)),
        )
        write_model_config(tmp, model_config)
    return ExportResult(Path(out), sizes, files[-1], encoder.pooling, normalize, verification,
                        time.perf_counter() - start, kinds=kinds)
