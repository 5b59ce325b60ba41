"""Whether a model directory may run its own Python code (``auto_map`` + ``*.py``): only with consent.

transformers runs a directory's ``modeling_*.py``/``configuration_*.py`` when its config names them in
``auto_map`` and the caller passes ``trust_remote_code=True``. sparsecse never does that on its own:

- its own shrunk directories (model type ``sparsecse-*``) load with the classes installed with
  sparsecse (registered with the transformers Auto classes by the package that defines them), never with
  the copy of that code in the directory;
- any other directory whose config or tokenizer config has an ``auto_map`` is refused in one sentence
  unless the user passes ``--trust-remote-code`` (Python: ``trust_remote_code=True``).

The consent is a context value, so one flag reaches every load a command makes (teachers, masks'
recorded models, ...) and every manifest records it (:func:`sparsecse.artifacts.files.make_manifest`).

Example::

    with trusting_remote_code(True):
        encoder = SentenceEncoder.load("some/dir")   # may run some/dir/modeling_x.py
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import os
from pathlib import Path
from typing import Iterator

from sparsecse.errors import SparseCSEError

_TRUST: contextvars.ContextVar[bool] = contextvars.ContextVar("sparsecse_trust_remote_code", default=False)
OWN_MODEL_TYPE_PREFIX = "sparsecse-"
_CODE_CONFIGS = ("config.json", "tokenizer_config.json", "preprocessor_config.json", "processor_config.json")


def remote_code_trusted() -> bool:
    """True while the user has allowed model directories to run their own code."""
    return _TRUST.get()


def set_remote_code_trust(on: bool) -> None:
    """Set the consent for the rest of this context (the CLI's ``--trust-remote-code`` callback)."""
    _TRUST.set(bool(on))


@contextlib.contextmanager
def trusting_remote_code(on: bool | None) -> Iterator[None]:
    """Within the block, loads may run directory code iff ``on`` (None: keep the current setting)."""
    if on is None:
        yield
        return
    token = _TRUST.set(bool(on))
    try:
        yield
    finally:
        _TRUST.reset(token)


def with_trust_option(func):
    """Give an API function a ``trust_remote_code=None`` keyword that holds for everything it loads."""
    @functools.wraps(func)
    def wrapper(*args, trust_remote_code: bool | None = None, **kwargs):
        with trusting_remote_code(trust_remote_code):
            return func(*args, **kwargs)
    return wrapper


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def is_own_model_dir(path: str | os.PathLike) -> bool:
    """A directory written by ``sparsecse shrink`` (its config's model type is one of sparsecse's)."""
    return str(_json(Path(path) / "config.json").get("model_type", "")).startswith(OWN_MODEL_TYPE_PREFIX)


def custom_code(path: str | os.PathLike) -> list[str]:
    """The code a directory would make transformers run: its ``*.py`` files when any of its configs has
    an ``auto_map`` (the configs themselves when it points elsewhere); [] when there is none."""
    root = Path(path)
    mapped = [name for name in _CODE_CONFIGS if _json(root / name).get("auto_map")]
    if not mapped:
        return []
    return sorted(p.name for p in root.glob("*.py")) or mapped


def allow_code(path: str | os.PathLike, what: str = "model directory") -> bool:
    """The ``trust_remote_code`` value to hand transformers for ``path``, or a one-sentence refusal.

    sparsecse's own directories always get False (the installed classes load them); other directories
    with custom code need the user's consent."""
    if not os.path.isdir(path):  # a hub name: transformers itself refuses custom code unless trusted
        return remote_code_trusted()
    if is_own_model_dir(path):
        return False
    files = custom_code(path)
    if files and not remote_code_trusted():
        raise SparseCSEError(f"The {what} {path} ships its own Python code ({', '.join(files)}), which sparsecse "
                             "runs only if you pass --trust-remote-code (Python: trust_remote_code=True).")
    return remote_code_trusted()
