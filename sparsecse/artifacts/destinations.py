"""Where a command may write: the one output guard (never over an input, nothing left half-written by a refusal)."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from sparsecse.errors import SparseCSEError


def temp_prefix(out: Path) -> str:
    """The prefix of the hidden temporaries written on the way to ``out`` (``.NAME.PID.``)."""
    return f".{out.name}.{os.getpid()}."  # the pid lets a later run tell a dead run's leftovers


def sidecar_path(path: str | os.PathLike) -> Path:
    """The human-readable JSON manifest that travels beside a tensor file."""
    p = Path(path)
    return p.with_suffix(".json") if p.suffix == ".safetensors" else p.with_name(p.name + ".json")


def refuse_existing(out: str | os.PathLike, overwrite: bool) -> None:
    """Refuse (one sentence) an output path that exists, unless ``overwrite``; a dangling link is refused too.

    Args:
        out: the output path.
        overwrite: whether an existing output may be replaced.
    """
    out = Path(out)
    check_not_dangling(out)
    if out.exists() and not overwrite:
        raise SparseCSEError(f"{out} already exists; choose another --out or pass --overwrite.")


def check_not_dangling(out: Path, option: str = "--out") -> None:
    """A symlink ``out`` must lead somewhere: one whose target is missing or that loops is refused."""
    if out.is_symlink() and not out.exists():
        loops = False
        try:
            out.resolve(strict=True)
        except RuntimeError:  # Python < 3.13: "Symlink loop"
            loops = True
        except OSError as exc:
            loops = exc.errno == errno.ELOOP
        what = "a symbolic link that loops" if loops else f"a symbolic link to {os.readlink(out)}, which does not exist"
        raise SparseCSEError(f"{option} {out} is {what}; remove it or choose another {option}.")


def real_path(path: str | os.PathLike) -> Path:
    """``path`` with every symlink resolved (a loop is left as it is, never an exception)."""
    return Path(os.path.realpath(os.fspath(path)))


def _same_or_inside(path: Path, container: Path) -> bool:
    try:
        return path == container or path.is_relative_to(container)
    except ValueError:
        return False


NEW_FILES_ALLOWED_INSIDE = ("data directory", "model store")  # inputs a new output may be written into (never over a file)
ANYTHING_ALLOWED_INSIDE = ("model folder",)  # folders of many models: only the folder itself (and what holds it) is kept


def _input_paths(inputs: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for name, value in (inputs or {}).items():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if item is not None and str(item) != "" and os.path.lexists(item):
                yield name, os.fspath(item)


def _over_input(name: str, source: Path, target: Path) -> bool:
    """Whether writing ``target`` would replace or write into the input ``source`` (a ``name`` input)."""
    if _same_or_inside(source, target):  # the input itself, or a directory holding it
        return True
    inside = source.is_dir() and _same_or_inside(target, source)
    if not inside or name in ANYTHING_ALLOWED_INSIDE:
        return False
    return not (name in NEW_FILES_ALLOWED_INSIDE and target != source and not os.path.lexists(target))


def check_destination(
    out: str | os.PathLike,
    overwrite: bool = False,
    inputs: Mapping[str, Any] | None = None,
    option: str = "--out",
    sidecar: bool = False,
    also: Iterable[str | os.PathLike] = (),
) -> Path:
    """Everything about an output that can be checked before the work starts (every command calls
    this first): it does not exist unless ``overwrite``, it is none of the ``inputs`` (nor a directory
    holding one, nor inside an input directory) once symlinks are resolved, and its nearest existing
    ancestor is a writable directory, so the result can be written when the work is done.

    Args:
        out: the output path (``--out``).
        overwrite: whether an existing output may be replaced.
        inputs: {what it is: a path or a list of paths};
            :func:`sparsecse.artifacts.inputs.read_inputs` spells out everything a command reads (the
            default model, a mask's model, teachers, dev and test files, local task directories, the
            model store, ...).
        option: the option's name, for the message.
        sidecar: a tensor file's JSON manifest is written beside ``out`` too.
        also: every other path the command writes that derives from ``out`` (e.g. ``eval --mteb``'s
            ``OUT_mteb`` directory), checked exactly as ``out`` is.

    Returns:
        ``out`` as a :class:`~pathlib.Path`.
    """
    out = Path(out)
    written = [(out, option), *[(Path(p), f"{option}'s {Path(p).name}") for p in also]]
    if sidecar:
        written.append((sidecar_path(out), f"{option}'s manifest {sidecar_path(out).name}"))
    for path, _ in written:
        check_not_dangling(path, option)
    for name, value in _input_paths(inputs or {}):
        source = real_path(value)
        for path, what in written:
            if _over_input(name, source, real_path(path)):
                raise SparseCSEError(f"{what} {path} would overwrite the {name} it reads ({value}); choose "
                                     f"another {option}.")
    refuse_existing(out, overwrite)
    for path, _ in written[1:]:
        if os.path.lexists(path) and not overwrite:
            raise SparseCSEError(f"{path} (written beside {out.name}) already exists; choose another {option} or "
                                 "pass --overwrite.")
    for path, what in written:
        _check_writable(path, what)
    return out


def _check_writable(path: Path, option: str) -> None:
    """The nearest existing ancestor of ``path`` is a directory where files can be created."""
    ancestor = real_path(path).parent
    while not ancestor.exists() and not ancestor.is_symlink():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise SparseCSEError(f"Cannot write {option} {path}: {ancestor} is a file, not a directory.")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise SparseCSEError(f"Cannot write {option} {path}: the directory {ancestor} is not writable.")
    try:  # os.access says yes to root and on read-only or pseudo file systems; a real create does not
        fd, probe = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".probe", dir=ancestor)
        os.close(fd)
        Path(probe).unlink(missing_ok=True)
    except OSError as exc:
        raise SparseCSEError(f"Cannot write {option} {path}: files cannot be created in {ancestor} "
                             f"({exc.strerror or exc}).") from None
