"""Builds of runtime_c integer kernels whose AVX-512 variants (plain and VNNI) run on an AVX2
host: a harness .c next to its tests includes avx512_int_emulation.h (each _mm512 intrinsic
emulated lane by lane) and then the kernel's .c file, and exposes entry points that call those
variants directly."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cffi_module import ProviderModule

from v8dialect.data.c_abi import constants
from v8dialect.data.paths import runtime_c_dir
from v8dialect.evidence.record import Rung
from v8dialect.runtime.cbuild import BASE_CFLAGS, RUNTIME_CORE_SOURCES, CBuild, build, runtime_cdef

HERE = Path(__file__).resolve().parent
EMULATION = "test/runtime_c/avx512_int_emulation.h"
V8_OK = constants(["v8_runtime.h"])["V8_OK"]
# the isa an emulated variant's evidence names, by its vnni flag
EMULATED_ISA = {0: "avx512-emulated", 1: "avx512vnni-emulated"}


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


def check_emulated_gemm(emu: ProviderModule, entry: str, lead: tuple[int, ...], y_ref: np.ndarray,
                        w: np.ndarray, x: np.ndarray, bias: np.ndarray | None, scratch_bytes: int,
                        evidence: Callable[..., None], **detail: Any) -> None:
    """entry(vnni, *lead, y, w, x, bias, m, n, k, scratch, scratch_bytes) of both emulated
    variants vs the oracle's y_ref [m, n], bit for bit: one production evidence entry each
    (isa avx512-emulated / avx512vnni-emulated, `detail` with contract and provider), then
    one assertion naming every variant that differed."""
    m, k = x.shape
    n = w.shape[0]
    failed = {}
    for vnni, isa in EMULATED_ISA.items():
        y = np.full((m, n), np.nan, np.float32)
        scratch = np.zeros(scratch_bytes // 4 + 1, np.float32)
        st = getattr(emu.lib, entry)(vnni, *lead, emu.ptr(y, "float *"), emu.ptr(w, "void *"),
                                     emu.ptr(x, "float *"), emu.ptr(bias, "float *"), m, n, k,
                                     emu.ptr(scratch, "void *"), scratch_bytes)
        same = int(np.count_nonzero(y_ref.view(np.uint32) == y.view(np.uint32)))
        ok = st == V8_OK and same == y.size
        evidence(Rung.PRODUCTION, ok, shape=f"{m}x{n}x{k}", isa=isa, emulation=EMULATION,
                 bias=bias is not None, bitexact=f"{same}/{y.size}", **detail)
        if not ok:
            failed[isa] = (st, f"{same}/{y.size}")
    assert not failed, failed
