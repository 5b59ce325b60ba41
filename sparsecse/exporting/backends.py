"""``sparsecse export`` without ``--out``: a stock model's graphs written inside its own directory, in
sentence-transformers' backend layout, so the one directory serves every runtime:

- ``onnx/model.onnx`` (and ``onnx/model_qint8.onnx``, or the static ``onnx/model_qint8_static.onnx``) for
  ``SentenceTransformer(dir, backend="onnx")`` (``model_kwargs={"file_name": "onnx/model_qint8.onnx"}`` picks
  the int8 graph);
- ``openvino/openvino_model.xml`` (and ``openvino/openvino_model_qint8_quantized.xml``) for
  ``backend="openvino"``.

sentence-transformers hands these to optimum's ``ORTModelForFeatureExtraction`` / ``OVModelForFeatureExtraction``,
which read the directory's ``config.json``: a stock model's is the family's own (:mod:`sparsecse.shrinking.stock`),
so no custom code runs anywhere. A custom-layout model keeps ``--out`` (its own exported directory, with a
base-architecture config that only sparsecse's loaders run correctly). The graphs are the ones ``export --out``
writes (:func:`~sparsecse.exporting.export.write_export`, each checked against the torch model); the export's
manifest goes beside them as ``sparsecse_export.json`` (with the graphs' speed when the caller measures it: the
``measure`` hook, which the command line fills from :mod:`sparsecse.targets.backend_speed`), and the model's own
files are left as they were, but for the card's Backends section (:mod:`sparsecse.cards.backends`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from sparsecse.artifacts.export_formats import get_format
from sparsecse.artifacts.exported_model import EXPORT_MANIFEST
from sparsecse.artifacts.files import atomic_dir
from sparsecse.artifacts.model_dir import read_model_config
from sparsecse.artifacts.remote_code import custom_code, is_own_model_dir
from sparsecse.cards.backends import update_card
from sparsecse.errors import SparseCSEError
from sparsecse.exporting.config import ExportConfig
from sparsecse.exporting.export import write_export
from sparsecse.exporting.result import ExportResult
from sparsecse.modeling.encoder import resolve_model


def check_stock_dir(model) -> Path:
    """``model`` as a path once it is a stock model directory (the family's own ``model_type``, no custom
    code); one sentence otherwise."""
    path = None if model is None else Path(resolve_model(model))  # never into the installed default model
    if path is None or not path.is_dir():
        raise SparseCSEError(f"export without --out writes into a model directory, and {model} is not one; "
                             "give --out.")
    if is_own_model_dir(path) or custom_code(path):
        raise SparseCSEError(f"{path} is a custom-layout model, which runtimes load only with its own code; export it "
                             "with --out, or make a stock one with `sparsecse compress --layout stock`.")
    return path


def export_into_model(model, config: ExportConfig, overwrite: bool = False,
                      measure: Callable[[Path, ExportResult], dict[str, Any]] | None = None) -> ExportResult:
    """Write ``config``'s format's graphs into the stock model directory ``model`` (module docstring).

    Args:
        model: a stock model directory.
        config: the checked export config (format, quantization, calibration).
        overwrite: replace the format's folder if the model already has one.
        measure: called with the complete exported directory (graphs, tokenizer, sparsecse's loader config) and
            the result before the graphs move into the model; what it returns is stored as the export manifest's
            ``speed`` (the model card's Backends section shows it).

    Returns:
        The :class:`~sparsecse.exporting.result.ExportResult` (``out``: the model directory; file paths
        relative to it).
    """
    path = check_stock_dir(model)
    fmt = get_format(config.format)
    folder = Path(fmt.files["fp32"]).parent
    if str(folder) in ("", "."):
        raise SparseCSEError(f"The {fmt.title} format writes no folder of its own, so it cannot go inside a model "
                             "directory; give --out.")
    if (path / folder).exists() and not overwrite:
        raise SparseCSEError(f"{path / folder} exists; pass --overwrite to replace it.")
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.{fmt.name}-", suffix=".tmp", dir=path.parent))
    try:
        result = write_export(path, staging / "export", config)
        manifest = read_model_config(staging / "export").get("manifest")
        speed = measure(staging / "export", result) if measure is not None else None
        with atomic_dir(path / folder, overwrite=overwrite) as tmp:
            for item in (staging / "export" / folder).iterdir():
                shutil.move(str(item), tmp / item.name)
            record = {"format": fmt.name, "files": result.kinds, "manifest": manifest}
            (tmp / EXPORT_MANIFEST).write_text(json.dumps({**record, "speed": speed} if speed else record,
                                                          indent=2) + "\n")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    update_card(path)  # its Backends section, from every backend folder the model now has
    result.out, result.speed = path, speed or {}
    return result
