"""Checkpoint serialisation without pickle: tensors go to safetensors, the structure around them to JSON.

Any nest of dicts (any key type), lists, tuples, tensors, numpy arrays and JSON scalars round-trips
through :func:`write_state` / :func:`read_state` (optimizer and scheduler state dicts, RNG states).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sparsecse.errors import SparseCSEError

_TENSOR, _ARRAY, _TUPLE, _DICT = "__tensor__", "__ndarray__", "__tuple__", "__dict__"


def _split(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """The JSON skeleton of ``obj``; its tensors are moved into ``tensors`` under numbered keys."""
    if isinstance(obj, torch.Tensor):
        key = str(len(tensors))
        # clone: safetensors refuses tensors that share storage (tied or sliced weights)
        tensors[key] = obj.detach().cpu().contiguous().clone()
        return {_TENSOR: key}
    if isinstance(obj, np.ndarray):
        return {_ARRAY: _split(torch.from_numpy(np.ascontiguousarray(obj)), tensors), "dtype": str(obj.dtype)}
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj) and not ({_TENSOR, _ARRAY, _TUPLE, _DICT} & set(obj)):
            return {k: _split(v, tensors) for k, v in obj.items()}
        return {_DICT: [[_split(k, tensors), _split(v, tensors)] for k, v in obj.items()]}
    if isinstance(obj, tuple):
        return {_TUPLE: [_split(v, tensors) for v in obj]}
    if isinstance(obj, list):
        return [_split(v, tensors) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    raise SparseCSEError(f"Cannot store a {type(obj).__name__} in a checkpoint.")


def _join(skeleton: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(skeleton, list):
        return [_join(v, tensors) for v in skeleton]
    if not isinstance(skeleton, dict):
        return skeleton
    if _TENSOR in skeleton:
        return tensors[skeleton[_TENSOR]]
    if _ARRAY in skeleton:
        return _join(skeleton[_ARRAY], tensors).numpy().astype(skeleton["dtype"])
    if _TUPLE in skeleton:
        return tuple(_join(v, tensors) for v in skeleton[_TUPLE])
    if _DICT in skeleton:
        return {_hashable(_join(k, tensors)): _join(v, tensors) for k, v in skeleton[_DICT]}
    return {k: _join(v, tensors) for k, v in skeleton.items()}


def _hashable(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key


def write_state(directory: Path, name: str, obj: Any) -> None:
    """Write ``name.safetensors`` (tensors) and ``name.json`` (structure) into ``directory``."""
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}
    skeleton = _split(obj, tensors)
    save_file(tensors, str(directory / f"{name}.safetensors"))
    (directory / f"{name}.json").write_text(json.dumps(skeleton) + "\n")


def read_state(directory: Path, name: str, device: str | torch.device = "cpu") -> Any:
    """The state ``name`` saved in ``directory`` (tensors and JSON data), its tensors on ``device``.

    Args:
        directory: the checkpoint.
        name: which state.
        device: where its tensors go.

    Returns:
        The state.
    """
    from safetensors.torch import load_file

    device = torch.device(device)
    # a CPU process of a multi-process run is on "cpu:0" (its process index), which safetensors refuses
    where = "cpu" if device.type == "cpu" else str(device)
    try:
        tensors = load_file(str(directory / f"{name}.safetensors"), device=where)
        skeleton = json.loads((directory / f"{name}.json").read_text())
    except Exception as exc:  # OSError, json's ValueError, safetensors' own error type for a truncated file
        raise SparseCSEError(f"the checkpoint is incomplete or corrupt ({name}: "
                             f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__})") \
            from None
    return _join(skeleton, tensors)


# ---------------------------------------------------------------------------------- random states
def capture_rng() -> dict[str, Any]:
    """Every random stream training touches: Python, NumPy, torch CPU and (if present) CUDA."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Set Python's, NumPy's, torch's (and CUDA's) random states to ``state``."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"].cpu())
