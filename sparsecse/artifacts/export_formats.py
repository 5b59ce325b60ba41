"""The export formats, each declared once: the one list that ``sparsecse export``, recipes, the
exported-model reader and ``load_encoder`` read.

An :class:`ExportFormat` says everything the rest of the package needs to know about an engine: its name
(the ``--format`` value and the key of its entry in ``sparsecse_config.json``), its file layout (one path per
kind of graph it writes), the quantizations it accepts, the packages it needs, the function that writes its
graph files and the one that loads an exported directory. This module names no module above it: a built-in
format is declared here without those two, and the module that writes it and the one that loads it hand
theirs over (:meth:`ExportFormat.provide`) when they are imported (by the export entry point and by the
one loader). A format defined outside sparsecse passes the functions themselves (or ``"module:attribute"``
strings, as packaging entry points name them), and is registered by :func:`register_format` or, from an
installed package, by an entry point of the group ``sparsecse.export_formats`` naming its declaration
(``toy = "my_package.formats:TOY"`` in the package's ``[project.entry-points."sparsecse.export_formats"]``),
which every command then offers.

    >>> get_format("openvino").files["int8_static"]
    'openvino/openvino_model_qint8_quantized.xml'
    >>> format_names()
    ('onnx', 'openvino')
    >>> get_format("onnx").quantization("int8").calibration
    'optional'
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from sparsecse.errors import SparseCSEError

CALIBRATION = ("optional", "required")
KINDS = ("fp32", "int8", "int8_static")  # what ExportResult.kinds and the exported config record per file
# sparsecse_config.json keys that a format's name (also its key there) must not take
RESERVED_NAMES = frozenset({"pooling", "max_length", "lineage", "manifest", "shape", "training"})


@dataclass(frozen=True)
class Quantization:
    """A quantization a format accepts (``--quantize NAME``).

    Args:
        name: the ``--quantize`` value (``int8``).
        calibration: ``optional`` (the format quantizes without a corpus, and calibrates on one when given)
            or ``required`` (``--calibration CORPUS`` must be given).
        summary: what it does, for ``sparsecse export --help``.
        packages: modules it needs beyond the format's own (``nncf``).
    """

    name: str
    calibration: str
    summary: str
    packages: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExportFormat:
    """One export engine, declared once and registered with :func:`register_format`.

    Args:
        name: the ``--format`` value, and the key of the format's settings in the exported directory's
            ``sparsecse_config.json``.
        title: how messages name it (``OpenVINO``).
        summary: its line of ``sparsecse export --help``.
        files: the file layout: the path, relative to the exported directory, of each kind of graph it can
            write (``fp32``, ``int8``: dynamic int8, ``int8_static``: calibrated int8).
        writer: the function that writes the graph files (or its ``"module:function"``; None: the module that
            writes the format provides it, :meth:`provide`): called as
            ``writer(encoder, directory, normalize, config, calibration)`` with the loaded sentence encoder,
            the directory being assembled, whether the embedding is L2-normalised, the export settings and the
            calibration sentences (or None); returns the graphs it wrote (the export entry point's record of
            them).
            Everything else (tokenizer, configs, the check against torch, the manifest) is shared.
        loader: the callable (or its ``"module:Class.load"``; None: provided as the writer) that loads an exported
            directory as an encoder of the serving layer: ``loader(path, pooling=, max_length=, device=, file=,
            threads=)``; subclassing that layer's runtime encoder base gives all but the graph's own loading and
            running.
        quantizations: the ``--quantize`` values it accepts.
        packages: the modules its loader needs; ``export_packages``: those its writer needs on top.
        extra: the ``pip install 'sparsecse[EXTRA]'`` extra that installs them.
        companions: suffixes of files that belong to each graph file (OpenVINO's ``.bin`` beside its
            ``.xml``), counted in the graph's size.
    """

    name: str
    title: str
    summary: str
    files: Mapping[str, str]
    writer: str | Callable | None = None
    loader: str | Callable | None = None
    quantizations: tuple[Quantization, ...] = ()
    packages: tuple[str, ...] = ()
    export_packages: tuple[str, ...] = ()
    extra: str | None = None
    companions: tuple[str, ...] = ()
    _resolved: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def check(self) -> "ExportFormat":
        """The declaration itself, once it is complete (one sentence otherwise)."""
        if not isinstance(self.name, str) or not re.fullmatch(r"[a-z][a-z0-9_-]*", self.name):
            raise SparseCSEError(f"An export format's name is lower-case letters, digits, '-' and '_', "
                                 f"not {self.name!r}.")
        if self.name in RESERVED_NAMES:
            raise SparseCSEError(f"{self.name!r} is a key of sparsecse_config.json and cannot name an export format.")
        if "fp32" not in self.files or not set(self.files) <= set(KINDS):
            raise SparseCSEError(f"The export format {self.name} must give the fp32 graph's file and only kinds of "
                                 f"{', '.join(KINDS)}, not {sorted(self.files)}.")
        bad = [q.name for q in self.quantizations if q.calibration not in CALIBRATION]
        if bad:
            raise SparseCSEError(f"The quantization {bad[0]} of {self.name} must say whether calibration is "
                                 f"{' or '.join(CALIBRATION)}.")
        return self

    def quantization(self, name: str) -> Quantization:
        """The declared quantization ``name`` (one sentence naming the accepted ones otherwise)."""
        for quantization in self.quantizations:
            if quantization.name == name:
                return quantization
        accepted = " or ".join([*(q.name for q in self.quantizations), "none"])
        raise SparseCSEError(f"Unknown quantization {name!r} for {self.name} export; choose {accepted}.")

    def missing_packages(self) -> str:
        """The sentence that names the packages the format needs and the extra that installs them."""
        needed = [*self.export_packages, *self.packages, *(p for q in self.quantizations for p in q.packages)]
        names = list(dict.fromkeys(p.split(".")[0] for p in needed))
        install = f": pip install 'sparsecse[{self.extra}]'" if self.extra else ""
        return f"{self.title} export and inference need the {' and '.join(names)} packages{install}."

    def require(self, export: bool = False, quantize: str | None = None) -> None:
        """Import what loading (``export``: and writing; ``quantize``: and that quantization) needs; one
        sentence (:meth:`missing_packages`) when a package is missing."""
        needed = [*(self.export_packages if export else ()), *self.packages,
                  *(self.quantization(quantize).packages if quantize else ())]
        try:
            for module in needed:
                importlib.import_module(module)
        except ImportError:
            raise SparseCSEError(self.missing_packages()) from None

    def versions(self, quantize: str | None = None) -> dict[str, str]:
        """The versions of the packages an export used, for its manifest."""
        needed = [*self.export_packages, *self.packages, *(self.quantization(quantize).packages if quantize else ())]
        tops = dict.fromkeys(p.split(".")[0] for p in needed)
        return {top: str(getattr(importlib.import_module(top), "__version__", "unknown")) for top in tops}

    def file_size(self, directory: str | Path, file: str) -> int:
        """Bytes of one graph file of an exported ``directory``, with its companion files."""
        path = Path(directory) / file
        return path.stat().st_size + sum(path.with_suffix(s).stat().st_size for s in self.companions)

    def write(self, encoder, directory: Path, normalize: bool, config, calibration: list[str] | None):
        """Run the format's writer (see the class's ``writer``); returns what it wrote."""
        return self._resolve("writer")(encoder, directory, normalize, config, calibration)

    def load(self, path: str | Path, **options: Any):
        """Run the format's loader on an exported directory (see the class's ``loader``)."""
        return self._resolve("loader")(path, **options)

    def provide(self, writer: Callable | None = None, loader: Callable | None = None) -> "ExportFormat":
        """Hand the declared format its writer or its loader, from the module that implements it.

        Args:
            writer: the function that writes the format's graph files (see the class's ``writer``).
            loader: the callable that loads an exported directory (see the class's ``loader``).

        Returns:
            The format itself.
        """
        for role, function in (("writer", writer), ("loader", loader)):
            if function is not None:
                self._resolved[role] = function
        return self

    def _resolve(self, role: str) -> Callable:
        if role not in self._resolved:
            ref = getattr(self, role)
            if ref is None:
                raise SparseCSEError(f"The {self.title} format has no {role}: the module that provides it "
                                     "(ExportFormat.provide) has not been imported.")
            if isinstance(ref, str):
                module, _, attribute = ref.partition(":")
                target = importlib.import_module(module)
                for part in attribute.split("."):
                    target = getattr(target, part)
                ref = target
            self._resolved[role] = ref
        return self._resolved[role]


_FORMATS: dict[str, ExportFormat] = {}
ENTRY_POINT_GROUP = "sparsecse.export_formats"
_plugins_loaded = False


def _load_plugins() -> None:
    """Register the formats installed packages declare as entry points (once, on the first look-up); one
    sentence naming a plugin that cannot be loaded or is not an :class:`ExportFormat`."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    from importlib.metadata import entry_points

    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            fmt = entry.load()
        except Exception as exc:
            raise SparseCSEError(f"The export format {entry.name} of an installed package ({entry.value}) cannot be "
                                 f"loaded ({type(exc).__name__}: {exc}).") from None
        if not isinstance(fmt, ExportFormat):
            raise SparseCSEError(f"The entry point {entry.name} ({entry.value}) of the group {ENTRY_POINT_GROUP} names "
                                 f"a {type(fmt).__name__}, not an ExportFormat.")
        if fmt.name not in _FORMATS:
            register_format(fmt)


def register_format(fmt: ExportFormat, replace: bool = False) -> ExportFormat:
    """Add ``fmt`` to the formats every command offers; returns it.

    Args:
        fmt: the declaration.
        replace: allow a format of the same name to be replaced (else that is refused).

    Returns:
        ``fmt``, checked.
    """
    fmt.check()
    if fmt.name in _FORMATS and not replace:
        raise SparseCSEError(f"An export format named {fmt.name} is already registered.")
    _FORMATS[fmt.name] = fmt
    return fmt


def unregister_format(name: str) -> None:
    """Remove a registered format (a test's toy format, say); built-in ones too, so use with care."""
    _FORMATS.pop(name, None)


def format_names() -> tuple[str, ...]:
    """The registered formats' names, in registration order (built-in ones first)."""
    _load_plugins()
    return tuple(_FORMATS)


def registered_formats() -> tuple[ExportFormat, ...]:
    """The registered formats, in registration order."""
    _load_plugins()
    return tuple(_FORMATS.values())


def quantization_names() -> tuple[str, ...]:
    """Every ``--quantize`` value some registered format accepts."""
    _load_plugins()
    return tuple(dict.fromkeys(q.name for f in _FORMATS.values() for q in f.quantizations))


def get_format(name: str) -> ExportFormat:
    """The registered format ``name`` (one sentence naming the registered ones otherwise)."""
    if name not in _FORMATS:
        _load_plugins()
    if name not in _FORMATS:
        raise SparseCSEError(f"Unknown export format {name!r}; choose one of {', '.join(_FORMATS)}.")
    return _FORMATS[name]


# the built-in formats; their writers and loaders come from sparsecse's exporting and serving packages
register_format(ExportFormat(
    name="onnx", title="ONNX", summary="ONNX graph run by onnxruntime",
    files={"fp32": "onnx/model.onnx", "int8": "onnx/model_qint8.onnx",  # sentence-transformers' names
           "int8_static": "onnx/model_qint8_static.onnx"},
    quantizations=(Quantization("int8", "optional", "dynamic quantization, or static (QDQ) with --calibration",
                                ("onnxruntime.quantization",)),),
    packages=("onnxruntime",), export_packages=("onnx",), extra="onnx"))

register_format(ExportFormat(
    name="openvino", title="OpenVINO", summary="OpenVINO IR run by the OpenVINO CPU plugin",
    files={"fp32": "openvino/openvino_model.xml", "int8_static": "openvino/openvino_model_qint8_quantized.xml"},
    quantizations=(Quantization("int8", "required", "NNCF static quantization, which needs --calibration",
                                ("nncf",)),),
    packages=("openvino",), extra="openvino", companions=(".bin",)))
