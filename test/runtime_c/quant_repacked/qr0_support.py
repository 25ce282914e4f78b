"""Shared support for the repacked Q4_0 evidence: builds the runtime_c/quant_repacked Q4_0
provider through cffi and wraps its entry points (numpy in, numpy out; every call's status is
returned to the caller)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test/runtime_c: shared support
from cffi_module import ProviderModule  # noqa: E402
from qr_support import ALL_FEATURES, AVX2_ONLY, NO_VNNI, V8_CPU_AVX512VNNI

from v8dialect.data.c_abi import constants, declared_in
from v8dialect.runtime.cbuild import RUNTIME_CORE_SOURCES, CBuild, build, runtime_cdef

V8_OK = constants(["v8_runtime.h"])["V8_OK"]
QK = 32
Q40_BYTES = 18

CONTRACT = "q4_0_x_q8_0_fp32_repacked_block_chain"
PROVIDER = {"gemv": "q4_0_x_q8_0_repacked_gemv", "gemm": "q4_0_x_q8_0_repacked_gemm"}
SELECTOR = "V8_QL_Q4_0_X_Q8_0_FP32_REPACKED_BLOCK_CHAIN"
PLAIN_SELECTOR = "V8_QL_Q4_0_X_Q8_0_FP32_BLOCK_ORDER"

SOURCES = ("quant/q0_formats.c", "quant_repacked/qr_q4_0.c")
# the plain Q4_0 provider, built alongside only to show the two contracts differ
PLAIN_SOURCES = ("quant/q_dot_ref.c", "quant/q0_linear.c")

CDEF = runtime_cdef("quant_repacked/v8_quant_repacked_q4_0.h", functions=[
    *declared_in("quant_repacked/v8_quant_repacked_q4_0.h"),
    "v8_ql0_gemm_scratch_bytes", "v8_q4_0_gemm_ref", "v8_quantize_q4_0_ref"])


class QR0(ProviderModule):
    """Thin typed wrapper over the compiled provider."""

    def __init__(self) -> None:
        mod = build(CBuild(name="v8_quant_repacked_q4_0", cdef=CDEF,
                           source='#include "quant_repacked/v8_quant_repacked_q4_0.h"\n',
                           runtime_sources=RUNTIME_CORE_SOURCES + SOURCES + PLAIN_SOURCES))
        super().__init__(mod)


    def run(self, shape: str, variant: str, w: np.ndarray, x: np.ndarray, *, workers: int = 0,
            bias: np.ndarray | None = None, contract: int | None = None,
            scratch_shrink: int = 0, y: np.ndarray | None = None,
            n: int | None = None) -> tuple[int, np.ndarray]:
        """shape gemv (x one row) | gemm; variant ref | prod | pool.  Y[m, n]."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        m, k = x.shape
        n = w.shape[0] if n is None else n
        if y is None:
            y = np.full((m, n), np.nan, dtype=np.float32)
        if shape == "gemv":
            assert m == 1
            size = self.lib.v8_qlr0_gemv_scratch_bytes(k)
        else:
            size = self.lib.v8_qlr0_gemm_scratch_bytes(m, k)
        scratch = np.zeros(max(size, 4) // 4 + 1, dtype=np.float32)
        nbytes = max(size, 4) - scratch_shrink
        sel = contract if contract is not None else getattr(self.lib, SELECTOR)
        suffix = {"ref": "_ref", "prod": "", "pool": "_parallel_dispatch"}[variant]
        fn = getattr(self.lib, f"v8_q4_0_repacked_{shape}{suffix}")
        args: list[Any] = [sel, self.ptr(y, "float *"), self.ptr(w, "void *"),
                           self.ptr(x, "float *"), self.ptr(bias, "float *")]
        if shape == "gemm":
            args.append(m)
        args += [n, k, self.ptr(scratch, "void *"), nbytes]
        if variant == "pool":
            args.insert(0, self.pool(workers))
        return fn(*args), y

    def isas(self) -> list[tuple[str, int]]:
        """(variant, cpu mask) for every dispatch path this host can take; avx512 appears
        twice when the CPU has VNNI (with and without it)."""
        self.lib.v8_cpu_restrict(ALL_FEATURES)
        best = self.lib.v8_cpu_best_isa()
        has_vnni = bool(self.lib.v8_cpu_features() & V8_CPU_AVX512VNNI)
        out: list[tuple[str, int]] = []
        if best == 2:
            out.append(("avx512", ALL_FEATURES))
            if has_vnni:
                out.append(("avx512", NO_VNNI))
        if best >= 1:
            out.append(("avx2", AVX2_ONLY))
        out.append(("scalar", 0))
        return out

    def plain_gemm(self, w: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The plain contract q4_0_x_q8_0_fp32_block_order (its scalar oracle)."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        m, k = x.shape
        n = w.shape[0]
        y = np.full((m, n), np.nan, dtype=np.float32)
        size = self.lib.v8_ql0_gemm_scratch_bytes(m, k)
        scratch = np.zeros(size // 4 + 1, dtype=np.float32)
        st = self.lib.v8_q4_0_gemm_ref(self.lib.V8_QL_Q4_0_X_Q8_0_FP32_BLOCK_ORDER,
                                       self.ptr(y, "float *"), self.ptr(w, "void *"),
                                       self.ptr(x, "float *"), self.ffi.NULL, m, n, k,
                                       self.ptr(scratch, "void *"), size)
        assert st == V8_OK
        return y

    def quantize_ref(self, w: np.ndarray) -> np.ndarray:
        """Q4_0 rows by v8's reference weight quantizer (byte-identical to ggml's)."""
        w = np.ascontiguousarray(w, dtype=np.float32)
        n, k = w.shape
        out = np.zeros((n, k // QK * Q40_BYTES), dtype=np.uint8)
        assert self.lib.v8_quantize_q4_0_ref(self.ptr(w, "float *"), self.ptr(out, "void *"),
                                             n, k) == 0
        return out


def random_q4_0(n: int, k: int, seed: int) -> np.ndarray:
    """Random Q4_0 blocks whose fp16 scales are finite, of both signs."""
    rng = np.random.default_rng(seed)
    nb = k // QK
    raw = rng.integers(0, 256, size=(n, nb, Q40_BYTES), dtype=np.uint8)
    d = rng.uniform(1e-4, 1e-1, size=(n, nb)) * rng.choice([-1.0, 1.0], size=(n, nb))
    raw[..., 0:2] = d.astype(np.float16).reshape(n, nb, 1).view(np.uint8)
    return raw.reshape(n, nb * Q40_BYTES)
