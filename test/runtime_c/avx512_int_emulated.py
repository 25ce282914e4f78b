"""Builds of runtime_c integer kernels whose AVX-512 variants (plain and VNNI) run on an AVX2
host: a harness .c next to its tests includes avx512_int_emulation.h (each _mm512 intrinsic
emulated lane by lane) and then the kernel's .c file, and exposes entry points that call those
variants directly."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from cffi_module import ProviderModule

from v8dialect.data.paths import runtime_c_dir
from v8dialect.runtime.cbuild import BASE_CFLAGS, RUNTIME_CORE_SOURCES, CBuild, build, runtime_cdef

HERE = Path(__file__).resolve().parent


def emulated_module(name: str, harness: Path, kernel: str, declarations: str) -> ProviderModule:
    """The harness compiled with -mavx2 -mfma -mf16c (ISO C: no fp contraction) against the
    runtime core; `kernel` is the runtime_c source it includes, `declarations` its entry
    points.  Skips on a host without AVX2 (the native 128/256-bit intrinsics)."""
    # the object cache keys runtime sources by their content and the include dirs' headers,
    # not by .c files a source includes: the digests of the kernel and the harness are
    # spelled into the source text
    digest = {path: hashlib.sha256(path.read_bytes()).hexdigest()
              for path in (runtime_c_dir() / kernel, harness)}
    source = "".join(f"/* {path.name} {d} */\n" for path, d in digest.items())
    mod = ProviderModule(build(CBuild(
        name=name, cdef=runtime_cdef() + declarations,
        source=f'{source}#include "{harness.name}"\n',
        runtime_sources=RUNTIME_CORE_SOURCES + ("quant/q_formats.c",),
        include_dirs=(harness.parent, HERE),
        cflags=(*BASE_CFLAGS, "-mavx2", "-mfma", "-mf16c"))))
    if mod.lib.v8_cpu_best_isa() < 1:
        pytest.skip("the emulation build needs AVX2")
    return mod

