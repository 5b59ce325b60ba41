"""The sentence-transformers files of a model directory (:func:`~sparsecse.modeling.st_dense.write_sentence_transformers_config`: modules.json,
the pooling config, sentence_bert_config.json), so ``SentenceTransformer(dir)`` reproduces sparsecse's embeddings;
and a sentence-transformers ``Dense`` module after pooling (e.g. a distilled student's projection to its
teacher's embedding size), read from and written to a model directory in sentence-transformers' layout:
a ``modules.json`` entry ``sentence_transformers.models.Dense`` whose folder holds ``config.json``
(in_features, out_features, bias, activation_function) and ``model.safetensors`` (``linear.weight``,
``linear.bias``). Only the identity activation is supported: that is what a distillation projection uses.

Example::

    dense = read_dense("student_dir")   # nn.Linear or None
    write_dense("out_dir", dense)       # -> out_dir/2_Dense/{config.json, model.safetensors}
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn

from sparsecse.errors import SparseCSEError

DENSE_TYPE = "sentence_transformers.models.Dense"
DENSE_DIR = "2_Dense"
IDENTITY = "torch.nn.modules.linear.Identity"


def dense_entry(model_dir: str | os.PathLike) -> dict | None:
    """The Dense entry of ``model_dir``'s modules.json, if any."""
    try:
        modules = json.loads((Path(model_dir) / "modules.json").read_text())
    except (OSError, ValueError):
        return None
    found = [m for m in modules if isinstance(m, dict) and str(m.get("type", "")).endswith("models.Dense")]
    if len(found) > 1:
        raise SparseCSEError(f"The model directory {model_dir} stacks {len(found)} Dense modules; sparsecse "
                             "supports one.")
    return found[0] if found else None


def read_dense(model_dir: str | os.PathLike) -> nn.Linear | None:
    """The directory's Dense module as an ``nn.Linear`` (None when it has none)."""
    entry = dense_entry(model_dir)
    if entry is None:
        return None
    folder = Path(model_dir) / str(entry.get("path", DENSE_DIR))
    if not os.path.realpath(folder).startswith(os.path.realpath(model_dir) + os.sep):
        raise SparseCSEError(f"The Dense module's folder {entry.get('path')!r} in {model_dir}/modules.json is not "
                             "inside the model directory.")
    try:
        config = json.loads((folder / "config.json").read_text())
        if not isinstance(config, dict):
            raise ValueError
    except (OSError, ValueError):
        raise SparseCSEError(f"The Dense module {folder} has no readable config.json.") from None
    activation = config.get("activation_function", "torch.nn.modules.activation.Tanh")
    if activation != IDENTITY or config.get("use_residual"):
        raise SparseCSEError(f"The Dense module {folder} applies {activation}; sparsecse reads only a linear "
                             "projection (identity activation, no residual).")
    try:
        linear = nn.Linear(int(config["in_features"]), int(config["out_features"]),
                           bias=bool(config.get("bias", True)))
    except (KeyError, TypeError, ValueError, RuntimeError):
        raise SparseCSEError(f"The Dense module's config {folder / 'config.json'} lacks valid in_features and "
                             "out_features.") from None
    state = _dense_weights(folder)
    try:
        linear.load_state_dict({str(k).removeprefix("linear."): v for k, v in state.items()})
    except (RuntimeError, TypeError, AttributeError) as exc:
        raise SparseCSEError(f"The Dense module {folder} does not match its config ({str(exc).splitlines()[0]}).") \
            from None
    return linear


def _dense_weights(folder: Path) -> dict:
    """The Dense module's tensors: model.safetensors, else pytorch_model.bin through torch's weights-only
    loader (tensors and plain containers only); a file either refuses is one sentence, never a traceback."""
    if (folder / "model.safetensors").is_file():
        from safetensors.torch import load_file

        file = folder / "model.safetensors"
        try:
            state = load_file(str(file))
        except Exception as exc:  # safetensors raises several types for damaged files
            raise SparseCSEError(f"The Dense module's weights {file} are not a readable safetensors file "
                                 f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}).") from None
    elif (folder / "pytorch_model.bin").is_file():
        file = folder / "pytorch_model.bin"
        try:
            state = torch.load(file, map_location="cpu", weights_only=True)
        except Exception as exc:  # the weights-only unpickler refuses anything but tensors and containers
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SparseCSEError(f"The Dense module's weights {file} cannot be loaded safely (torch's weights-only "
                                 f"loader refuses it: {first[:200]}); convert them to model.safetensors.") from None
    else:
        raise SparseCSEError(f"The Dense module {folder} has no weights (model.safetensors).")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise SparseCSEError(f"The Dense module's weights {file} do not hold a dictionary of tensors.")
    return state


def write_dense(out: str | os.PathLike, linear: nn.Linear) -> dict:
    """Write ``linear`` as ``out/2_Dense`` and return its modules.json entry (index 2)."""
    from safetensors.torch import save_file

    folder = Path(out) / DENSE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    config = {"in_features": linear.in_features, "out_features": linear.out_features,
              "bias": linear.bias is not None, "activation_function": IDENTITY}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    state = {f"linear.{k}": v.detach().float().cpu().contiguous() for k, v in linear.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"))
    return {"idx": 2, "name": "2", "path": DENSE_DIR, "type": DENSE_TYPE}


def write_sentence_transformers_config(out: Path, pooling: str, dim: int, max_length: int,
                                       normalize: bool = False, dense: nn.Linear | None = None) -> None:
    """modules.json + pooling config so ``SentenceTransformer(out)`` reproduces our embeddings
    (followed by a Dense module if ``dense``, then a Normalize module if ``normalize``; ``dim`` is the
    pooled hidden size).

    ``cls`` (pooler output) has no sentence-transformers pooling equivalent; it is saved as CLS
    token pooling and sparsecse reads its own config first.
    """
    (out / "1_Pooling").mkdir(exist_ok=True)
    pool_cfg = {
        "word_embedding_dimension": dim,
        "pooling_mode_cls_token": pooling not in ("mean", "last"),
        "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
    }
    if pooling == "last":  # written only where used, so older directories' files stay byte-identical
        pool_cfg["pooling_mode_lasttoken"] = True
    (out / "1_Pooling" / "config.json").write_text(json.dumps(pool_cfg, indent=2) + "\n")
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if dense is not None:
        modules.append(write_dense(out, dense))
    if normalize:
        i = len(modules)
        (out / f"{i}_Normalize").mkdir(exist_ok=True)
        modules.append({"idx": i, "name": str(i), "path": f"{i}_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
    (out / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")
    (out / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_length, "do_lower_case": False}, indent=2) + "\n"
    )
