"""Shared support for the repacked quantized-linear evidence: builds the
runtime_c/quant_repacked provider through cffi and wraps its entry points
(numpy in, numpy out; every call's status is returned to the caller)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test/runtime_c: shared support
from cffi_module import ProviderModule  # noqa: E402

from v8dialect.data.c_abi import constants, declared_in
from v8dialect.runtime.cbuild import RUNTIME_CORE_SOURCES, CBuild, build, runtime_cdef

QK_K = 256
Q4K_BYTES = 144

CONTRACT_GEMV = "q4_k_x_q8_k_fp32_repacked_super_block_chain"
CONTRACT_GEMM = "q4_k_x_q8_k_fp32_repacked_4_row_groups"
PROVIDER_GEMV = "q4_k_x_q8_k_repacked_gemv"
PROVIDER_GEMM = "q4_k_x_q8_k_repacked_gemm"
SELECTOR = {"gemv": "V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN",
            "gemm": "V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_4_ROW_GROUPS"}

_V8 = constants(["v8_runtime.h"])
V8_CPU_AVX2 = _V8["V8_CPU_AVX2"]
V8_CPU_FMA = _V8["V8_CPU_FMA"]
V8_CPU_F16C = _V8["V8_CPU_F16C"]
V8_CPU_AVX512VNNI = _V8["V8_CPU_AVX512VNNI"]
AVX2_ONLY = V8_CPU_AVX2 | V8_CPU_FMA | V8_CPU_F16C
ALL_FEATURES = 0xFFFFFFFF
NO_VNNI = ALL_FEATURES & ~V8_CPU_AVX512VNNI
ISA_NAMES = {_V8[f"V8_ISA_{isa.upper()}"]: isa for isa in ("scalar", "avx2", "avx512")}

SOURCES = ("quant/q_formats.c", "quant_repacked/qr_linear.c")

CDEF = runtime_cdef("quant_repacked/v8_quant_repacked.h",
                    functions=declared_in("quant_repacked/v8_quant_repacked.h"))


class QR(ProviderModule):
    """Thin typed wrapper over the compiled provider."""

    def __init__(self) -> None:
        mod = build(CBuild(name="v8_quant_repacked", cdef=CDEF,
                           source='#include "quant_repacked/v8_quant_repacked.h"\n',
                           runtime_sources=RUNTIME_CORE_SOURCES + SOURCES))
        super().__init__(mod)


    def run(self, shape: str, variant: str, w: np.ndarray, x: np.ndarray, *, workers: int = 0,
            bias: np.ndarray | None = None, contract: int | None = None,
            scratch_shrink: int = 0, y: np.ndarray | None = None) -> tuple[int, np.ndarray]:
        """shape gemv (x one row) | gemm; variant ref | prod | pool.  Y[m, n]."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        m, k = x.shape
        n = w.shape[0]
        if y is None:
            y = np.full((m, n), np.nan, dtype=np.float32)
        if shape == "gemv":
            assert m == 1
            size = self.lib.v8_qlr_gemv_scratch_bytes(k)
        else:
            size = self.lib.v8_qlr_gemm_scratch_bytes(m, k)
        scratch = np.zeros(max(size, 4) // 4 + 1, dtype=np.float32)
        nbytes = max(size, 4) - scratch_shrink
        sel = contract if contract is not None else getattr(self.lib, SELECTOR[shape])
        suffix = {"ref": "_ref", "prod": "", "pool": "_parallel_dispatch"}[variant]
        fn = getattr(self.lib, f"v8_q4_k_repacked_{shape}{suffix}")
        args: list[Any] = [sel, self.ptr(y, "float *"), self.ptr(w, "void *"),
                           self.ptr(x, "float *"), self.ptr(bias, "float *")]
        if shape == "gemm":
            args.append(m)
        args += [n, k, self.ptr(scratch, "void *"), nbytes]
        if variant == "pool":
            args.insert(0, self.pool(workers))
        return fn(*args), y

    def isas(self) -> list[tuple[str, int]]:
        """(variant, cpu mask) for every dispatch path this host can take; avx512
        appears twice when the CPU has VNNI (with and without it)."""
        self.lib.v8_cpu_restrict(ALL_FEATURES)
        best = self.lib.v8_cpu_best_isa()
        has_vnni = bool(self.lib.v8_cpu_features() & V8_CPU_AVX512VNNI)
        out = []
        if best == 2:
            out.append(("avx512", ALL_FEATURES))
            if has_vnni:
                out.append(("avx512", NO_VNNI))
        if best >= 1:
            out.append(("avx2", AVX2_ONLY))
        out.append(("scalar", 0))
        return out


# ---- inputs that expose order -------------------------------------------------

def make_weights(n: int, k: int, seed: int) -> np.ndarray:
    """Normals with per-row magnitudes over ~3 decades and a few 10x outliers."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k), dtype=np.float32)
    w *= (10.0 ** rng.uniform(-2.0, 1.0, size=(n, 1))).astype(np.float32)
    w[rng.random((n, k)) < 1e-3] *= 10.0
    return w


def make_activation(m: int, k: int, seed: int) -> np.ndarray:
    """Normals with per-row magnitudes over a decade and per-element magnitudes over
    ~4 decades along K (Q8_K block scales and the fp32 chains span many binades)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k), dtype=np.float32)
    x *= (10.0 ** rng.uniform(-0.5, 0.5, size=(m, 1))).astype(np.float32)
    x *= (10.0 ** rng.uniform(-2.0, 2.0, size=(m, k))).astype(np.float32)
    return x


def random_blocks(n: int, k: int, seed: int) -> np.ndarray:
    """Random Q4_K blocks whose fp16 scales are finite and positive."""
    rng = np.random.default_rng(seed)
    nb = k // QK_K
    raw = rng.integers(0, 256, size=(n, nb, Q4K_BYTES), dtype=np.uint8)
    raw[..., 0:4] = rng.uniform(1e-4, 1e-2, size=(n, nb, 2)).astype(np.float16).view(np.uint8)
    return raw.reshape(n, nb * Q4K_BYTES)


def bitexact(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    ai = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    bi = np.ascontiguousarray(b, dtype=np.float32).view(np.uint32)
    return int(np.count_nonzero(ai == bi)), int(ai.size)
