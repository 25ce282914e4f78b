"""Facts about the running CPU that a build may default to.

llama.cpp's CPU backend is compiled for one x86 feature set (`GGML_NATIVE` picks the build
machine's), and several of its kernels compute different bits per feature set: its fp32,
fp16 and bf16 mul_mat accumulate in as many lanes as one vector register holds, its vector
exp and dot products fold a register's lanes in that register's tree. A circuit asking for
llama.cpp's arithmetic therefore names the build it reproduces (the `ggml_build` manifest
value); `native` means the build llama.cpp gets on this machine.
"""

from __future__ import annotations

import platform
from pathlib import Path

GGML_BUILDS = ("avx512", "avx2")
NATIVE = "native"


class HostError(Exception):
    """The running CPU has no ggml build v8 reproduces; the message says what to pass."""


def cpu_flags() -> frozenset[str]:
    """The feature flags of the first CPU in /proc/cpuinfo (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def native_ggml_build(flags: frozenset[str] | None = None) -> str:
    """The ggml build class a native llama.cpp compile gets on this CPU."""
    have = cpu_flags() if flags is None else flags
    if "avx512f" in have:
        return "avx512"
    if {"avx2", "fma", "f16c"} <= have:
        return "avx2"
    raise HostError(
        "ggml_build = native: this CPU has neither AVX-512 nor AVX2 with FMA and F16C, "
        f"so no llama.cpp build v8 reproduces is native here; set ggml_build to one of "
        f"{', '.join(GGML_BUILDS)}"
    )


def ggml_build_of_system_info(system_info: str) -> str:
    """The build class of a libggml from its system-info line (`AVX512 = 1 | ...`)."""
    fields = dict(
        (part.split("=")[0].strip(), part.split("=")[1].strip())
        for part in system_info.split("|")
        if part.count("=") == 1
    )
    if fields.get("AVX512") == "1":
        return "avx512"
    if fields.get("AVX2") == "1":
        return "avx2"
    raise HostError(f"llama.cpp's CPU backend reports neither AVX512 nor AVX2: {system_info!r}")
