"""Fetch a public archive over HTTP(S) and unpack it into a directory, checked and atomically.

:func:`install_archive` is the whole path: the archive is downloaded to a hidden ``.part`` file beside
the destination (an interrupted download resumes there with an HTTP Range request), its SHA-256 is
compared with the expected one, its member list is checked for the files the destination must hold,
and it is extracted (tarfile's ``data`` filter: no absolute paths, no ``..``, no links out, no device
files) into a temporary sibling that is renamed into place (:func:`~sparsecse.artifacts.files.atomic_dir`),
so a failure at any step leaves no half-extracted directory. Only the standard library is used.
"""

from __future__ import annotations

import datetime as _dt
import http.client
import json
import os
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable, Iterable

from sparsecse.artifacts.files import atomic_dir, sha256_file

from sparsecse.artifacts.destinations import check_destination
from sparsecse.artifacts.locks import FileLock
from sparsecse.errors import SparseCSEError
from sparsecse import __version__

RECORD = "sparsecse_download.json"  # written into the destination: what was fetched, from where, its hash
TIMEOUT_S = 60
BLOCK = 1 << 20


def part_path(dest: Path, name: str) -> Path:
    """The hidden file an archive is downloaded into, beside the destination (kept to resume)."""
    return dest.parent / f".{dest.name}.{name}.part"


def fetch(url: str, part: Path, progress: bool = True) -> int:
    """Download ``url`` into ``part``, continuing after the bytes ``part`` already holds.

    Returns the number of bytes received in this call (0 if ``part`` was already complete). A server
    that ignores the Range request sends the whole file, which then replaces ``part``. Raises
    :class:`~sparsecse.errors.SparseCSEError` with one sentence if the URL cannot be reached or the transfer stops
    (``part`` is kept, so the next call resumes).

    Example::

        fetch("https://example.org/data.tar", Path(".data.tar.part"))
    """
    from tqdm.auto import tqdm


    have = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": f"sparsecse/{__version__}"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # the range starts at the end: part already holds the whole file
            return 0
        raise SparseCSEError(f"Cannot download {url}: the server answered HTTP {exc.code} ({exc.reason}).") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise SparseCSEError(f"Cannot reach {url} ({reason}).") from None
    with response:
        resumed = have > 0 and response.status == http.client.PARTIAL_CONTENT
        start = have if resumed else 0
        length = response.headers.get("Content-Length")
        total = start + int(length) if length and length.isdigit() else None
        received = 0
        label = urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1] or "download"
        try:
            with open(part, "ab" if resumed else "wb") as sink, tqdm(
                total=total, initial=start, unit="B", unit_scale=True, unit_divisor=1024,
                desc=label, disable=not progress, leave=False,
            ) as bar:
                for block in iter(lambda: response.read(BLOCK), b""):
                    _write(sink, block, part)
                    received += len(block)
                    bar.update(len(block))
        except (OSError, http.client.HTTPException) as exc:  # the connection, not the disk (see _write)
            raise SparseCSEError(f"The download of {url} stopped after {start + received} bytes ({exc}); run the "
                                 "command again to resume it.") from None
    if total is not None and start + received < total:
        raise SparseCSEError(f"The download of {url} stopped after {start + received} of {total} bytes; run the "
                             "command again to resume it.")
    return received


def _write(sink, block: bytes, part: Path) -> None:
    try:
        sink.write(block)
    except OSError as exc:  # full disk, quota: what was written stays and a later run resumes after it
        raise SparseCSEError(f"Cannot write {part} ({exc.strerror or exc}); run the command again to resume once "
                             "there is room.") from None


def archive_root(names: Iterable[str], required: tuple[str, ...]) -> str:
    """The folder inside the archive that holds ``required`` ('' for the archive's top level).

    Mirrors pack the same layout at the top level or under one folder (``downstream/STS/...``).

    >>> archive_root(["data/STS/a.csv", "data/STS/b.csv"], ("STS/a.csv", "STS/b.csv"))
    'data/'
    """
    names = set(names)
    first = required[0]
    for name in sorted(names, key=len):
        if name == first or name.endswith("/" + first):
            return name[: len(name) - len(first)]
    raise SparseCSEError(f"The archive does not hold the expected layout (no {first} in it); nothing was unpacked.")


def _members_under(tar: tarfile.TarFile, root: str, required: tuple[str, ...]) -> list[tarfile.TarInfo]:
    """The members below ``root``, renamed relative to it, after checking every required file is there."""
    members = tar.getmembers()  # reads every header: a truncated or damaged tar fails here, before extracting
    files = {m.name.removeprefix("./") for m in members if m.isfile()}
    missing = [name for name in required if root + name not in files]
    if missing:
        raise SparseCSEError(f"The archive lacks {len(missing)} of the files the data directory needs "
                             f"(e.g. {missing[0]}); nothing was unpacked.")
    selected = []
    for member in members:
        name = member.name.removeprefix("./")
        if not name.startswith(root) or name == root.rstrip("/"):
            continue
        changes = {"name": name[len(root):]}
        if member.islnk():  # a hard link names another member, which moves with it
            changes["linkname"] = member.linkname.removeprefix("./").removeprefix(root)
        selected.append(member.replace(**changes, deep=False))
    return selected


def extract(archive: Path, dest: Path, required: tuple[str, ...], record: dict) -> None:
    """Unpack ``archive`` (a tar, compressed or not) into ``dest`` atomically, with ``record`` (which
    names the archive and its URL) as ``RECORD``; ``dest`` is replaced if it exists (the caller
    decides whether it may be). A damaged tar fails while its headers are read, before any extraction."""
    label = f"{record['archive']} from {record['url']}"
    try:
        with tarfile.open(archive) as tar:
            root = archive_root((m.name.removeprefix("./") for m in tar.getmembers()), required)
            members = _members_under(tar, root, required)
            with atomic_dir(dest, overwrite=True) as tmp:
                tar.extractall(tmp, members=members, filter="data")
                (tmp / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    except tarfile.FilterError as exc:
        raise SparseCSEError(f"The archive {label} holds a member that may not be unpacked ({exc}); nothing "
                             "was unpacked.") from None
    except (tarfile.TarError, EOFError) as exc:
        raise SparseCSEError(f"The archive {label} is not a readable tar file ({exc}).") from None


def install_archive(
    name: str,
    urls: Iterable[str],
    dest: str | os.PathLike,
    sha256: str | None,
    required: tuple[str, ...],
    force: bool = False,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Download the archive ``name`` from the first of ``urls`` that answers and unpack it into ``dest``.

    ``dest`` already holding every ``required`` file: nothing is downloaded (unless ``force``). A
    ``dest`` that exists, is not empty and lacks some of them is refused unless ``force`` (which
    replaces it). ``sha256`` None: the archive's hash is reported, and only its layout is checked.
    Returns a record: path, url, sha256, bytes downloaded, whether the data was already there.

    Example::

        install_archive("senteval.tar", [URL], Path.home() / ".cache/sparsecse/senteval", None,
                        ("STS/STSBenchmark/sts-dev.csv",))
    """
    dest = Path(dest).expanduser()
    say = log or (lambda msg: None)
    missing = [f for f in required if not (dest / f).is_file()]
    if not missing and not force:
        return {"path": str(dest), "already_there": True, "downloaded_bytes": 0, **_previous_record(dest)}
    if dest.exists() and not dest.is_dir():
        raise SparseCSEError(f"{dest} is a file; the data is unpacked into a directory. Choose another --to.")
    if dest.is_dir() and any(dest.iterdir()) and not force:
        raise SparseCSEError(f"{dest} exists but lacks {len(missing)} of the {len(required)} data files (e.g. "
                             f"{missing[0]}); pass --force to replace it with the downloaded data.")
    check_destination(dest, overwrite=True, option="--to")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SparseCSEError(f"Cannot create {dest.parent} ({exc.strerror or exc}).") from None
    part = part_path(dest, name)
    lock = FileLock(part.with_name(part.name + ".lock"))
    if not lock.acquire():
        raise SparseCSEError(f"{name} is being downloaded into {part.parent} by another process (pid "
                             f"{(lock.holder() or {}).get('pid', '?')}); wait for it to finish.")
    try:
        url, received = _fetch_first(list(urls), part, progress, say)
        digest = sha256_file(part)
        if sha256 and digest != sha256.lower():
            part.unlink(missing_ok=True)  # a wrong file is not resumed: the next run starts again
            raise SparseCSEError(f"The archive from {url} has SHA-256 {digest}, not the expected {sha256}; it was "
                                 "deleted and nothing was unpacked.")
        if not sha256:
            say(f"no published SHA-256 is recorded for {name}; it has {digest} (checking its layout only)")
        say(f"unpacking into {dest} ...")
        record = {"archive": name, "url": url, "sha256": digest, "sha256_verified": bool(sha256),
                  "downloaded": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        try:
            extract(part, dest, required, record)
        except SparseCSEError:
            if not sha256:  # unverified and unusable: start afresh next time rather than resume it
                part.unlink(missing_ok=True)
            raise
        part.unlink(missing_ok=True)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the bytes so far are kept on purpose
        kept = part.stat().st_size if part.exists() else 0
        raise type(exc)(f"Interrupted; the {kept} bytes downloaded so far are kept in {part}, and running the "
                        f"same command again resumes there (nothing was unpacked into {dest}).") from None
    finally:
        lock.release()
    return {"path": str(dest), "already_there": False, "downloaded_bytes": received, **record}


def _fetch_first(urls: list[str], part: Path, progress: bool, say: Callable[[str], None]) -> tuple[str, int]:
    """Fetch from each URL in turn until one succeeds; one sentence naming every failure otherwise."""
    if not urls:
        raise SparseCSEError("No source URL to download from.")
    failures = []
    for url in urls:
        say(f"downloading {url}" + (f" (resuming after {part.stat().st_size} bytes)" if part.exists() else ""))
        try:
            return url, fetch(url, part, progress=progress)
        except SparseCSEError as exc:
            failures.append(str(exc))
    if len(failures) == 1:
        raise SparseCSEError(failures[0])
    raise SparseCSEError("No source could be downloaded: " + " ".join(failures))


def _previous_record(dest: Path) -> dict:
    try:
        return json.loads((dest / RECORD).read_text())
    except (OSError, ValueError):
        return {}
