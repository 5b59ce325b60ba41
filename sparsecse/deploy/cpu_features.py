"""The CPU features that decide how fast int8 and bf16 inference can be, from /proc/cpuinfo flags.

Printed beside every speed figure so that figures from different machines are never mixed up.

    >>> cpu_features("flags : fpu avx2 avx512f avx512_vnni\\n")["avx512_vnni"]
    True
"""

from __future__ import annotations

from pathlib import Path

# x86 flag names as Linux lists them; "bf16" is ARM's (Features line)
FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16", "bf16")


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            flags.update(value.split())
    return flags


def cpu_features(cpuinfo: str | None = None) -> dict[str, bool]:
    """{feature: present} for ``FEATURES``."""
    flags = cpu_flags(cpuinfo)
    return {name: name in flags for name in FEATURES}


def cpu_model_name(cpuinfo: str | None = None) -> str:
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return "unknown CPU"
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return "unknown CPU"


def describe_cpu(cpuinfo: str | None = None) -> str:
    """One line: model name, then each feature as +name or -name."""
    features = cpu_features(cpuinfo)
    return f"{cpu_model_name(cpuinfo)}: " + " ".join(("+" if on else "-") + name for name, on in features.items())

