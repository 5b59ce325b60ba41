"""The CPU features that decide how fast int8 and bf16 inference can be, from /proc/cpuinfo (the one place it
is read): the encoder's ``precision="auto"`` asks :func:`~sparsecse.modeling.cpu_features.has_native_bf16`, and the speed benchmarks print
:func:`~sparsecse.modeling.cpu_features.describe_cpu` beside every figure so that figures from different machines are never mixed up.

    >>> cpu_features("flags : fpu avx2 avx512f avx512_vnni\\n")["avx512_vnni"]
    True
"""

from __future__ import annotations

from pathlib import Path

# x86 flag names as Linux lists them; "bf16" is ARM's (Features line)
FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16", "bf16")
BF16_FLAGS = {"avx512_bf16", "amx_bf16", "bf16"}  # x86 AVX512-BF16 / AMX, ARM (Graviton3+, Apple M2+)


def read_cpuinfo(cpuinfo: str | None = None) -> str:
    """``cpuinfo`` if given (tests pass one), else this machine's /proc/cpuinfo ("" where there is none)."""
    if cpuinfo is not None:
        return cpuinfo
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """Every flag of the cpuinfo's ``flags`` (x86) or ``Features`` (ARM) lines."""
    flags: set[str] = set()
    for line in read_cpuinfo(cpuinfo).splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            flags.update(value.split())
    return flags


def cpu_features(cpuinfo: str | None = None) -> dict[str, bool]:
    """{feature: present} for ``FEATURES``."""
    flags = cpu_flags(cpuinfo)
    return {name: name in flags for name in FEATURES}


def has_native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware; without it bf16 autocast is emulated and slower
    than fp32."""
    return bool(cpu_flags(cpuinfo) & BF16_FLAGS)


def cpu_model_name(cpuinfo: str | None = None) -> str:
    """The cpuinfo's ``model name`` ("unknown CPU" when it has none)."""
    for line in read_cpuinfo(cpuinfo).splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return "unknown CPU"


def describe_cpu(cpuinfo: str | None = None) -> str:
    """One line: model name, then each feature as +name or -name."""
    features = cpu_features(cpuinfo)
    return f"{cpu_model_name(cpuinfo)}: " + " ".join(("+" if on else "-") + name for name, on in features.items())
