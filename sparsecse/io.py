"""Artifact plumbing shared by every command: manifests, hashes, atomic output, tensor files."""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import platform
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from sparsecse.errors import SparseCSEError

MANIFEST_KEY = "sparsecse_manifest"


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def hash_path(path: str | os.PathLike) -> str:
    """sha256 of a file, or of a directory's weight/config files (names and contents, sorted)."""
    p = Path(path)
    if p.is_file():
        return sha256_file(p)
    if not p.is_dir():
        return "unavailable"
    h = hashlib.sha256()
    for f in sorted(p.rglob("*")):
        if f.is_file() and f.suffix in {".safetensors", ".json", ".txt", ".bin", ".model", ".py"}:
            h.update(str(f.relative_to(p)).encode())
            h.update(sha256_file(f).encode())
    return h.hexdigest()


def library_versions() -> dict[str, str]:
    import numpy
    import transformers

    from sparsecse import __version__

    return {
        "sparsecse": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": numpy.__version__,
    }


def make_manifest(
    kind: str,
    inputs: Mapping[str, str | os.PathLike | None] | None = None,
    params: Mapping[str, Any] | None = None,
    seed: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """What produced an artifact: its inputs (with hashes), parameters, seed and library versions."""
    recorded_inputs = {}
    for name, value in (inputs or {}).items():
        if value is None:
            continue
        value = str(value)
        recorded_inputs[name] = {
            "path": value,
            "sha256": hash_path(value) if os.path.exists(value) else None,
        }
    manifest: dict[str, Any] = {
        "kind": kind,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "inputs": recorded_inputs,
        "params": dict(params or {}),
        "seed": seed,
        "versions": library_versions(),
    }
    manifest.update(extra)
    return manifest


def refuse_existing(out: str | os.PathLike, overwrite: bool) -> None:
    out = Path(out)
    if out.exists() and not overwrite:
        raise SparseCSEError(f"{out} already exists; choose another --out or pass --overwrite.")


@contextlib.contextmanager
def atomic_dir(out: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary directory beside ``out``; rename it to ``out`` only if the block succeeds."""
    out = Path(out)
    refuse_existing(out, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out.exists():
        old = out.with_name(f".{out.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old) if out.is_dir() else out.unlink()
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)


@contextlib.contextmanager
def atomic_file(out: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary file path beside ``out``; move it into place only if the block succeeds."""
    out = Path(out)
    refuse_existing(out, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, out)


def write_json(path: str | os.PathLike, obj: Any, overwrite: bool = True) -> None:
    with atomic_file(path, overwrite=overwrite) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def sidecar_path(path: str | os.PathLike) -> Path:
    """The human-readable JSON manifest that travels beside a tensor file."""
    p = Path(path)
    return p.with_suffix(".json") if p.suffix == ".safetensors" else p.with_name(p.name + ".json")


def save_tensors(
    path: str | os.PathLike,
    tensors: Mapping[str, torch.Tensor],
    manifest: Mapping[str, Any],
    overwrite: bool = False,
) -> Path:
    """Write tensors as safetensors with the manifest embedded, plus a JSON sidecar copy."""
    from safetensors.torch import save_file

    path = Path(path)
    side = sidecar_path(path)
    refuse_existing(path, overwrite)
    payload = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    with atomic_file(path, overwrite=overwrite) as tmp:
        save_file(payload, str(tmp), metadata={MANIFEST_KEY: json.dumps(manifest, default=str)})
        write_json(side, manifest, overwrite=True)
    return path


def load_tensors(path: str | os.PathLike, what: str = "tensor file") -> tuple[dict[str, torch.Tensor], dict]:
    """Read a safetensors file written by :func:`save_tensors`; never unpickles anything."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise SparseCSEError(f"The {what} {path} does not exist.")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        manifest = json.loads(meta.get(MANIFEST_KEY, "{}"))
    except Exception as exc:  # safetensors raises several types for corrupt files
        raise SparseCSEError(f"The {what} {path} is not a readable safetensors file ({exc}).") from None
    return tensors, manifest
