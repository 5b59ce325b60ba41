"""The results store: one JSON file per measured result, each holding its figures and where they came from (the
command, the commit, the CPU model and features or the GPU, threads, batch size, engine and date), so that every
figure a document quotes is read from the run that measured it (``make figures`` writes them into the docs).

A speed figure is true on one machine only, so every entry names its machine; :func:`machine_label` turns the
CPU line of :func:`~sparsecse.modeling.cpu_features.describe_cpu` into the short name the docs print.

    >>> machine_label("AMD EPYC: +avx2 -avx512f -avx512_vnni -amx_tile", None)
    'AMD EPYC (AVX2 only)'
    >>> machine_label("Intel(R) Xeon(R) Processor: +avx2 +avx512f +avx512_vnni +amx_tile", None)
    'Intel Xeon (AVX-512 VNNI + AMX)'
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparsecse.artifacts.files import write_json
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.cpu_features import cpu_features, cpu_model_name, describe_cpu

SCHEMA = 1
# what every entry says of the run behind it; a value may be null where it does not apply (no GPU, no batch)
PROVENANCE = ("command", "commit", "cpu", "cpu_features", "gpu", "threads", "batch_size", "engine", "date")
_ID = re.compile(r"^[a-z0-9][a-z0-9.-]*$")


@dataclass(frozen=True)
class Entry:
    """One measured result: its ``figures`` (numbers, lists and nested mappings of them) and ``provenance``
    (every key of ``PROVENANCE``, plus optional ``source``: the output file the run wrote, and ``note``)."""

    id: str
    title: str
    figures: dict
    provenance: dict
    path: Path | None = field(default=None, compare=False)

    @property
    def machine(self) -> str:
        """The machine that measured it, as the docs name it (:func:`machine_label`)."""
        return machine_label(self.provenance.get("cpu"), self.provenance.get("gpu"), self.provenance.get("cpu_features"))

    def get(self, path: str) -> Any:
        """The figure at ``path`` (keys joined by ``/``, e.g. ``rows/frontier-2x/speedup``).

        Raises:
            SparseCSEError: the entry has no such figure.
        """
        value: Any = self.figures
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                raise SparseCSEError(f"The results store entry {self.id} has no figure {path}.")
            value = value[key]
        return value

    def to_dict(self) -> dict:
        """The entry as its JSON file holds it."""
        return {"schema": SCHEMA, "id": self.id, "title": self.title, "figures": self.figures,
                "provenance": self.provenance}


def machine_label(cpu: str | None, gpu: str | None = None, features: list[str] | None = None) -> str:
    """A short name for the machine: the GPU where one measured, else the CPU's model and the features that
    decide its speed (AMX, AVX-512 VNNI, AVX-512, AVX2).

    Args:
        cpu: a :func:`~sparsecse.modeling.cpu_features.describe_cpu` line (model name, then +feature/-feature).
        gpu: the GPU's name, or None.
        features: the CPU's features present; read off ``cpu`` where not given.

    Returns:
        str: e.g. ``AMD EPYC (AVX2 only)``, ``Intel Xeon (AVX-512 VNNI + AMX)``, ``NVIDIA H100``.
    """
    if gpu:
        return gpu
    if not cpu:
        return "unknown machine"
    name, _, flags = cpu.partition(":")
    have = set(features) if features is not None else {f[1:] for f in flags.split() if f.startswith("+")}
    name = " ".join(w for w in re.sub(r"\(R\)|\(TM\)", "", name).split() if w not in ("Processor", "CPU"))
    name = " ".join(name.split()[:2]) or "CPU"
    if "amx_tile" in have:
        level = "AVX-512 VNNI + AMX" if "avx512_vnni" in have else "AMX"
    elif "avx512_vnni" in have:
        level = "AVX-512 VNNI"
    elif "avx512f" in have:
        level = "AVX-512"
    elif "avx2" in have:
        level = "AVX2 only"
    else:
        return name
    return f"{name} ({level})"


def provenance(command: str, *, threads: int | None, batch_size: int | None, engine: str | None,
               gpu: str | None = None, source: str | None = None, cwd: str | os.PathLike | None = None) -> dict:
    """The provenance of a result measured now, on this machine: the commit of the checkout at ``cwd`` (None
    outside a git checkout), the CPU and its features, today's date.

    Args:
        command: the command line that measured it, as a user would type it (no machine paths).
        threads: the threads the timing used.
        batch_size: the batch the timing used.
        engine: the engine timed (``torch-fp32``, ``openvino-int8``, ...) or None where nothing was timed.
        gpu: the GPU that ran it, or None.
        source: the output file the run wrote, relative to the repository.
        cwd: where to ask git for the commit (default: the current directory).

    Returns:
        dict: every key of ``PROVENANCE`` (and ``source`` where given).
    """
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=cwd, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    present = [name for name, on in cpu_features().items() if on]
    record = {"command": command, "commit": commit, "cpu": cpu_model_name(), "cpu_features": present, "gpu": gpu,
              "threads": threads, "batch_size": batch_size, "engine": engine,
              "date": datetime.date.today().isoformat()}
    return {**record, **({"source": source} if source else {})}


def check_entry(data: Any, where: str) -> Entry:
    """``data`` (a parsed entry file) as an :class:`Entry`, or one sentence saying what it lacks.

    Args:
        data: the parsed JSON.
        where: the file's name, for the message.

    Returns:
        Entry: the checked entry.
    """
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise SparseCSEError(f"{where} is not a results store entry of schema {SCHEMA}.")
    ident, figures, prov = data.get("id"), data.get("figures"), data.get("provenance")
    if not isinstance(ident, str) or not _ID.match(ident):
        raise SparseCSEError(f"{where}: the id must be lower-case letters, digits, dots and dashes.")
    if not isinstance(figures, dict) or not figures:
        raise SparseCSEError(f"{where}: figures must be a non-empty mapping.")
    if not isinstance(prov, dict):
        raise SparseCSEError(f"{where}: provenance must be a mapping.")
    missing = [key for key in PROVENANCE if key not in prov]
    if missing:
        raise SparseCSEError(f"{where}: the provenance lacks {', '.join(missing)}.")
    if not (prov.get("cpu") or prov.get("gpu")):
        raise SparseCSEError(f"{where}: the provenance names neither a CPU nor a GPU.")
    return Entry(ident, str(data.get("title") or ident), figures, prov)


def write_entry(store: str | os.PathLike, entry: Entry, overwrite: bool = True) -> Path:
    """Write ``entry`` to ``store/ID.json`` (checked first; nothing is written for a bad entry).

    Args:
        store: the store's folder.
        entry: what to write.
        overwrite: replace an entry of the same id.

    Returns:
        Path: the file written.
    """
    checked = check_entry(entry.to_dict(), f"entry {entry.id!r}")
    path = Path(store) / f"{checked.id}.json"
    write_json(path, checked.to_dict(), overwrite=overwrite)
    return path


def load_store(store: str | os.PathLike) -> dict[str, Entry]:
    """Every entry of the store's folder, by id (a file's name must be its id)."""
    entries = {}
    for path in sorted(Path(store).glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise SparseCSEError(f"{path} cannot be read as JSON ({error}).") from None
        entry = check_entry(data, str(path))
        if entry.id != path.stem:
            raise SparseCSEError(f"{path}: its id is {entry.id}, its file name must be {entry.id}.json.")
        entries[entry.id] = Entry(entry.id, entry.title, entry.figures, entry.provenance, path)
    return entries


def figure(store: dict[str, Entry], ref: str) -> Any:
    """The figure ``ref`` names, ``ID:PATH`` (e.g. ``frontier-engines.amd-epyc-avx2:rows/f2x/torch-fp32/speedup``).

    Args:
        store: the entries, as :func:`load_store` gives them.
        ref: the entry's id and the figure's path in it.

    Returns:
        The figure.
    """
    ident, _, path = ref.partition(":")
    if ident not in store:
        raise SparseCSEError(f"The results store has no entry {ident}.")
    return store[ident].get(path) if path else store[ident].figures


def machine_slug(gpu: str | None = None) -> str:
    """This machine's :func:`machine_label` as an id part (``amd-epyc-avx2-only``), for an entry's default id."""
    return re.sub(r"[^a-z0-9]+", "-", machine_label(describe_cpu(), gpu).lower()).strip("-")


def command_line(script: str, argv: list[str] | None = None) -> str:
    """The command as typed: ``python SCRIPT`` and its arguments (``sys.argv[1:]`` where ``argv`` is None).

    Args:
        script: the script, relative to the repository (``benchmarks/deploy_speed.py``).
        argv: its arguments.

    Returns:
        str: a shell-quoted command line.
    """
    return shlex.join(["python", script, *(sys.argv[1:] if argv is None else argv)])


def run_entry(ident: str, manifest: dict, command: str) -> Entry:
    """A recipe or target run's final measurement (the ``manifest.json`` beside its model) as an entry measured on
    this machine: STS average and interval, STS-B dev, transfer average, the paired comparison, the speed-up over
    the input model (the card's throughput line; a target run has none, its target's measurement stands for it),
    the target's measurement where there is one, and the minutes per stage.

    Args:
        ident: the entry's id.
        manifest: the model's manifest (its ``figures`` and ``seconds``).
        command: the command that ran it, as typed.

    Returns:
        Entry: the entry (write it with :func:`write_entry`).
    """
    figures = manifest.get("figures") or {}
    speed, target = figures.get("speed") or {}, figures.get("target") or {}
    seconds = {k: v for k, v in (manifest.get("seconds") or {}).items() if isinstance(v, (int, float))}
    kept = {"sts_avg": figures.get("sts_avg"), "ci": figures.get("sts_avg_ci"), "stsb_dev": figures.get("stsb_dev"),
            "transfer_avg": figures.get("transfer_avg"), "versus": figures.get("versus"),
            "speedup": speed.get("speedup", target.get("speedup")),
            "speedup_over": manifest.get("input_name") if speed else None,
            "reference_speedup": speed.get("reference_speedup"),
            "minutes": round(sum(seconds.values()) / 60, 1) if seconds else None,
            "seconds": {k: round(v) for k, v in seconds.items()} or None}
    if target:
        kept["target"] = {k: target.get(k) for k in ("engine", "batch_size", "speedup", "speedup_target", "max_drop",
                                                      "margin", "dev_score", "reference_dev", "drop", "met",
                                                      "throughput", "reference_throughput", "latency_ms")}
        if target.get("interval"):
            kept["target"]["interval"] = {k: target["interval"][k] for k in ("low", "high", "confidence")}
        if target.get("speedup_of"):  # the named model's figure beside the final model's, and what the search aimed at
            kept["target"]["speedup_of"] = {k: target["speedup_of"][k] for k in ("model", "speedup", "aimed")}
        budget = next((s for s in manifest.get("stages") or [] if s.get("type") == "budget"), None)
        if budget is not None:  # what the search chose: whole layers removed, and the kept FLOPs of the rest
            kept["target"]["choice"] = {"layers_removed": len(budget.get("layers_removed") or []),
                                        "keep_flops": budget.get("keep_flops")}
            confirmed = (budget.get("chosen") or {}).get("confirmed")
            if confirmed is not None:  # the search's own fresh timing of its choice, to set beside the final figure
                kept["target"]["choice"]["confirmed"] = confirmed
            stepped = (budget.get("chosen") or {}).get("stepped_up_from")
            if stepped is not None:  # a confirmation over the aim widened the choice from this budget
                kept["target"]["choice"]["stepped_up_from"] = stepped
        if target.get("time_limit"):  # a time limit: where the last training stage ended
            kept["target"]["time_limit"] = target["time_limit"]
        if target.get("repair"):  # a near miss repaired: the first figure, and which model the repair kept
            kept["target"]["repair"] = {k: target["repair"][k] for k in ("keep", "before", "after", "met",
                                                                         "recovery_kept", "before_training")
                                        if k in target["repair"]}
    kept = {k: v for k, v in kept.items() if v is not None}
    if not kept:
        raise SparseCSEError("The run's manifest holds no figures to store.")
    prov = provenance(command, threads=speed.get("threads", (target.get("shape") or {}).get("threads")),
                      batch_size=target.get("batch_size", speed.get("batch_size")),
                      engine=(target.get("engine") or "torch-fp32").lower().replace(" ", "-"))
    return Entry(ident, f"the final measurement of {command}", kept, prov)
