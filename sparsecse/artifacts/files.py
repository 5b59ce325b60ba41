"""Artifact plumbing shared by every command: manifests, hashes, atomic output, tensor files."""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import glob
import hashlib
import json
import math
import os
import platform
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from sparsecse.errors import SparseCSEError
from sparsecse.artifacts.locks import FileLock, process_alive
from sparsecse.artifacts.remote_code import remote_code_trusted
from sparsecse import __version__
from sparsecse.artifacts.destinations import check_destination, refuse_existing, sidecar_path, temp_prefix

MANIFEST_KEY = "sparsecse_manifest"


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """sha256 of a file's bytes, read in chunks.

    Args:
        path: the file.
        chunk: bytes read at a time.

    Returns:
        The hex digest.
    """
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
    """The versions of sparsecse, Python and the libraries a result depends on, for manifests (and the Framework
    Versions of a model card): sentence-transformers where it is installed, and tokenizers."""
    from importlib import metadata

    import numpy
    import transformers

    versions = {
        "sparsecse": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": numpy.__version__,
    }
    for package in ("sentence-transformers", "tokenizers"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:  # sentence-transformers is optional (the `st` extra)
            pass
    return versions


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
        "trust_remote_code": remote_code_trusted(),  # whether model directories could run their own code
        "versions": library_versions(),
    }
    manifest.update(extra)
    return manifest


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _normal_mode(path: Path, directory: bool) -> None:
    """mkstemp/mkdtemp create 0600/0700; give the output what a plain open()/mkdir() would."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


def clean_stale_temporaries(out: Path) -> list[Path]:
    """Remove the hidden temporaries (``.NAME.PID.xxxx.tmp``) that killed runs writing ``out`` left
    beside it; a temporary of a process that still runs is kept. Called under ``out``'s writer lock,
    so no live writer (on any host sharing the file system) owns one of them."""
    removed = []
    try:
        candidates = list(out.parent.glob(f".{glob.escape(out.name)}.*.tmp"))
    except OSError:
        return removed
    for path in candidates:
        pid = path.name[len(out.name) + 2:].split(".", 1)[0]
        if not pid.isdigit() or process_alive(int(pid)):
            continue
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        removed.append(path)
    return removed


def _normal_tree_modes(root: Path) -> None:
    """Files some writers create private (safetensors: 0600) get what a plain open() gives."""
    mask = _umask()
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        if path.is_dir():
            os.chmod(path, 0o777 & ~mask)
        elif not os.stat(path).st_mode & 0o111:
            os.chmod(path, 0o666 & ~mask)


@contextlib.contextmanager
def _writer_lock(out: Path, wait: bool = False) -> Iterator[None]:
    """One writer per output at a time: a second process writing the same path is refused (``wait``:
    it waits its turn, for small files that several processes of a sweep update in place)."""
    lock = FileLock(out.with_name(f".{out.name}.lock"))
    try:
        if wait:
            lock.wait(timeout=120, poll=0.05)
        taken = lock.held or lock.acquire()
    except OSError as exc:  # the folder is read-only, full, or gone
        raise os_error_sentence(out, exc) from None
    if not taken:
        holder = lock.holder() or {}
        raise SparseCSEError(f"{out} is being written by another process (pid {holder.get('pid', '?')}); wait for it "
                             "to finish or choose another --out.")
    try:
        yield
    finally:
        lock.release()


_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG, errno.EIO,
                 errno.ENOTDIR, errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST, errno.EINVAL, errno.EXDEV}


def os_error_sentence(out: Path, exc: OSError) -> SparseCSEError:
    """A late OSError (full disk, read-only or pseudo file system) as one sentence."""
    reason = exc.strerror or str(exc)
    return SparseCSEError(f"Cannot write {out} ({reason}); nothing was written.")


def _ready_parent(out: Path, overwrite: bool) -> None:
    """Refuse an existing ``out`` (unless ``overwrite``) and create its folder, an OSError as one sentence."""
    refuse_existing(out, overwrite)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise os_error_sentence(out, exc) from None


@contextlib.contextmanager
def atomic_dir(out: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary directory beside ``out``; rename it to ``out`` only if the block succeeds.

    A lock beside ``out`` refuses a second concurrent writer; stale temporaries of killed runs are
    removed first; an OSError on the way (e.g. ENOSPC) becomes one sentence with nothing left."""
    out = Path(out)
    _ready_parent(out, overwrite)
    with _writer_lock(out):
        refuse_existing(out, overwrite)  # again, under the lock: another writer may have finished meanwhile
        clean_stale_temporaries(out)
        tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(out), suffix=".tmp", dir=out.parent))
        try:
            yield tmp
            _normal_tree_modes(tmp)
            if out.exists() or out.is_symlink():
                old = out.with_name(f".{out.name}.{os.getpid()}.old.tmp")
                shutil.rmtree(old, ignore_errors=True)
                os.replace(out, old) if out.is_dir() and not out.is_symlink() else out.unlink()
                os.replace(tmp, out)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, out)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if exc.errno not in _WRITE_ERRNOS:
                raise
            raise os_error_sentence(out, exc) from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


@contextlib.contextmanager
def atomic_file(out: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary file path beside ``out``; move it into place only if the block succeeds
    (locked, cleaned and with OSErrors as one sentence, like :func:`atomic_dir`; with ``overwrite`` a
    concurrent writer waits for the other one's rename instead of being refused)."""
    out = Path(out)
    _ready_parent(out, overwrite)
    if out.is_dir():
        raise SparseCSEError(f"{out} is a directory; a file is written there. Choose another path.")
    with _writer_lock(out, wait=overwrite):
        refuse_existing(out, overwrite)
        clean_stale_temporaries(out)
        fd, name = tempfile.mkstemp(prefix=temp_prefix(out), suffix=".tmp", dir=out.parent)
        os.close(fd)
        tmp = Path(name)
        try:
            yield tmp
            _normal_mode(tmp, directory=False)  # mkstemp's 0600, or a writer that recreated the file
            os.replace(tmp, out)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if exc.errno not in _WRITE_ERRNOS:
                raise
            raise os_error_sentence(out, exc) from None
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def json_safe(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by None, so the JSON is valid for strict parsers."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "item") and getattr(obj, "ndim", None) == 0:  # numpy / torch scalars
        return json_safe(obj.item())
    return obj


def dumps_json(obj: Any, **kwargs: Any) -> str:
    """json.dumps that writes null for NaN and infinities (never the invalid bare NaN)."""
    return json.dumps(json_safe(obj), allow_nan=False, default=str, **kwargs)


def write_json(path: str | os.PathLike, obj: Any, overwrite: bool = True) -> None:
    """Write ``obj`` as indented JSON to ``path``, atomically.

    Args:
        path: the file.
        obj: JSON-ready data.
        overwrite: whether an existing file may be replaced.
    """
    with atomic_file(path, overwrite=overwrite) as tmp:
        tmp.write_text(dumps_json(obj, indent=2, sort_keys=False) + "\n")


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
    check_destination(path, overwrite, sidecar=True)
    for target in (path, side):
        if target.is_dir():
            raise SparseCSEError(f"{target} is a directory, but a tensor file and its JSON manifest are written "
                                 "there; choose another path.")
    payload = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    with atomic_file(path, overwrite=overwrite) as tmp:
        save_file(payload, str(tmp), metadata={MANIFEST_KEY: dumps_json(manifest)})
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
