"""Cluster resources of a sweep: a launcher config file (TOML, YAML or JSON) plus command-line options,
mapped to submitit's executor parameters.

A lab keeps its cluster's settings in one file; the ``[rewind]`` and ``[evaluate]`` tables override the
top-level values for the rewinding array and for the evaluation array (rewinds need GPUs and hours,
evaluations minutes)::

    # cluster.toml
    partition = "gpu"
    gpus_per_task = 1
    cpus_per_task = 8
    mem = "32G"
    time = "1:00:00"           # minutes, or [D-]HH:MM:SS
    array_parallelism = 16     # tasks running at once
    setup = ["module load cuda/12.1", "source ~/venvs/sparsecse/bin/activate"]
    [sbatch]                   # any other sbatch option, without its dashes
    account = "mylab"
    qos = "normal"
    [rewind]
    time = "8:00:00"

Example::

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "cluster.toml"
    >>> _ = path.write_text('partition = "gpu"\\ntime = "1:00:00"\\n[rewind]\\ntime = "8:00:00"\\n')
    >>> resources = load_resources(path, {"partition": "debug"})
    >>> resources.for_array("rewind")["time"], resources.for_array("evaluate")["time"]
    (480, 60)
    >>> resources.for_array("rewind")["partition"]
    'debug'
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparsecse.errors import SparseCSEError

# config keys -> submitit SlurmExecutor parameter names (the same, except sbatch -> additional_parameters)
KEYS = ("partition", "gpus_per_task", "cpus_per_task", "mem", "time", "array_parallelism", "setup", "account",
        "qos", "constraint", "exclude", "nodes", "signal_delay_s", "sbatch")
ARRAYS = ("evaluate", "rewind")


def parse_time(value: Any) -> int:
    """Minutes from an int (minutes) or SLURM's ``MM``, ``HH:MM:SS``, ``D-HH:MM[:SS]``."""
    if isinstance(value, bool) or isinstance(value, float) and not math.isfinite(value):
        raise SparseCSEError(f"A time limit is a finite number of minutes or [D-]HH:MM:SS, not {value!r}.")
    if isinstance(value, (int, float)) and value > 0:
        return max(1, int(value))
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", str(value).strip())
    if not match:
        raise SparseCSEError(f"A time limit is minutes or [D-]HH:MM:SS, not {value!r}.")
    days, a, b, c = match.groups()
    if b is None and days is None:
        minutes = int(a)
    elif c is None and days is None:  # MM:SS
        minutes = int(a) + int(b) / 60
    else:  # HH:MM[:SS]
        minutes = int(a) * 60 + int(b or 0) + int(c or 0) / 60
    minutes += int(days or 0) * 1440
    if minutes <= 0:
        raise SparseCSEError(f"A time limit must be positive, not {value!r}.")
    return max(1, round(minutes))


def _check(table: dict[str, Any], where: str) -> dict[str, Any]:
    unknown = [k for k in table if k not in KEYS and k not in ARRAYS]
    if unknown:
        raise SparseCSEError(f"{where}: unknown launcher setting {unknown[0]!r}; known: {', '.join(KEYS)} and the "
                             f"tables {', '.join(ARRAYS)}.")
    out = {k: v for k, v in table.items() if k in KEYS and v is not None}
    if "time" in out:
        out["time"] = parse_time(out["time"])
    for key in ("gpus_per_task", "cpus_per_task", "array_parallelism", "nodes", "signal_delay_s"):
        if key in out and (not isinstance(out[key], int) or isinstance(out[key], bool) or out[key] < 0):
            raise SparseCSEError(f"{where}: {key} must be a non-negative integer, not {out[key]!r}.")
    if "setup" in out and isinstance(out["setup"], str):
        out["setup"] = [out["setup"]]
    if "sbatch" in out and not isinstance(out["sbatch"], dict):
        raise SparseCSEError(f"{where}: sbatch must be a table of sbatch options, e.g. {{account = \"lab\"}}.")
    return out


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """The launcher settings in a .toml, .yaml/.yml or .json file."""
    path = Path(path)
    if not path.is_file():
        raise SparseCSEError(f"The launcher config {path} does not exist.")
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except OSError as exc:
        raise SparseCSEError(f"Cannot read the launcher config {path} ({exc.strerror or exc}).") from None
    except UnicodeDecodeError as exc:
        raise SparseCSEError(f"The launcher config {path} is not UTF-8 text (byte {exc.start}).") from None
    if "\0" in text:
        raise SparseCSEError(f"The launcher config {path} holds a NUL byte (byte {text.index(chr(0))}); it is not "
                             "a text file.")
    try:
        if path.suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        elif path.suffix == ".json":
            data = json.loads(text)
        else:
            raise SparseCSEError(f"The launcher config {path} must end in .toml, .yaml, .yml or .json.")
    except SparseCSEError:
        raise
    except Exception as exc:  # tomllib, yaml and json each raise their own error type
        raise SparseCSEError(f"The launcher config {path} is not valid {path.suffix[1:].upper()}: "
                             f"{str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise SparseCSEError(f"The launcher config {path} must hold a table of settings.")
    return data


@dataclass
class Resources:
    """Settings for every array, and per array (``evaluate``, ``rewind``) overrides."""

    common: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, dict[str, Any]] = field(default_factory=dict)

    def for_array(self, array: str) -> dict[str, Any]:
        """The settings of one array: common, then its table; ``sbatch`` tables merge."""
        table = self.arrays.get(array, {})
        merged = {**self.common, **table}
        if "sbatch" in self.common or "sbatch" in table:
            merged["sbatch"] = {**self.common.get("sbatch", {}), **table.get("sbatch", {})}
        return merged

    def slurm_parameters(self, array: str) -> dict[str, Any]:
        """submitit SlurmExecutor parameters of one array."""
        values = self.for_array(array)
        params = {k: v for k, v in values.items() if k != "sbatch"}
        if values.get("sbatch"):
            params["additional_parameters"] = {k.replace("-", "_"): v for k, v in values["sbatch"].items()}
        return params


def load_resources(path: str | os.PathLike | None, overrides: dict[str, Any] | None = None) -> Resources:
    """The config file's settings (if any) with the command line's ``overrides`` (None values ignored) on
    top of every array's."""
    data = read_config_file(path) if path else {}
    where = str(path) if path else "launcher options"
    common = _check(data, where)
    arrays = {}
    for array in ARRAYS:
        if array in data:
            if not isinstance(data[array], dict):
                raise SparseCSEError(f"{where}: [{array}] must be a table of settings.")
            arrays[array] = _check(data[array], f"{where} [{array}]")
    cli = _check({k: v for k, v in (overrides or {}).items() if v is not None}, "launcher options")
    if cli.get("sbatch"):
        cli["sbatch"] = {**common.get("sbatch", {}), **cli["sbatch"]}
    common.update(cli)
    for table in arrays.values():  # the command line wins over the file's per-array tables too
        for key, value in cli.items():
            table[key] = {**table.get(key, {}), **value} if key == "sbatch" else value
    return Resources(common, arrays)


def parse_sbatch_args(items: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``("account=lab", "qos=high")`` -> ``{"account": "lab", "qos": "high"}`` (from ``--sbatch K=V``)."""
    out = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not key:
            raise SparseCSEError(f"--sbatch takes KEY=VALUE (an sbatch option without its dashes), not {item!r}.")
        out[key] = value.strip()
    return out
