"""Shared support for the tiled-prefill quantized-linear evidence: builds the
runtime_c/quant_tiled provider through cffi and wraps its entry points
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
FORMATS = ("q4_k", "q6_k", "q5_k")
BLOCK_BYTES = {"q4_k": 144, "q5_k": 176, "q6_k": 210}

CONTRACT = {f: f"{f}_x_q8_k_fp32_super_block_fma_chain" for f in FORMATS}
PROVIDER = {f: f"{f}_x_q8_k_tiled_gemm" for f in FORMATS}
SELECTOR = {f: f"V8_QL_{f.upper()}_X_Q8_K_FP32_SUPER_BLOCK_FMA_CHAIN" for f in FORMATS}

_V8 = constants(["v8_runtime.h"])
V8_CPU_AVX2 = _V8["V8_CPU_AVX2"]
V8_CPU_FMA = _V8["V8_CPU_FMA"]
V8_CPU_F16C = _V8["V8_CPU_F16C"]
V8_CPU_AVX512VNNI = _V8["V8_CPU_AVX512VNNI"]
AVX2_ONLY = V8_CPU_AVX2 | V8_CPU_FMA | V8_CPU_F16C
ALL_FEATURES = 0xFFFFFFFF
NO_VNNI = ALL_FEATURES & ~V8_CPU_AVX512VNNI
ISA_NAMES = {_V8[f"V8_ISA_{isa.upper()}"]: isa for isa in ("scalar", "avx2", "avx512")}

SOURCES = ("quant/q_formats.c", "quant_tiled/qt_linear.c")

CDEF = runtime_cdef("quant_tiled/v8_quant_tiled.h", functions=[
    *declared_in("quant_tiled/v8_quant_tiled.h"), "v8_quantize_q4_k_ref", "v8_quantize_q6_k_ref"])


class QT(ProviderModule):
    """Thin typed wrapper over the compiled provider."""

    def __init__(self) -> None:
        mod = build(CBuild(name="v8_quant_tiled", cdef=CDEF,
                           source='#include "quant_tiled/v8_quant_tiled.h"\n',
                           runtime_sources=RUNTIME_CORE_SOURCES + SOURCES))
        super().__init__(mod)


    def gemm(self, fmt: str, variant: str, w: np.ndarray, x: np.ndarray, *, workers: int = 0,
             bias: np.ndarray | None = None, contract: int | None = None,
             scratch_shrink: int = 0) -> tuple[int, np.ndarray]:
        """Y[m, n] = X[m, k] . W[n, k]^T; variant: ref | prod | pool."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        m, k = x.shape
        n = w.shape[0]
        y = np.full((m, n), np.nan, dtype=np.float32)
        size = self.lib.v8_qlt_gemm_scratch_bytes(m, k)
        scratch = np.zeros(max(size, 4) // 4 + 1, dtype=np.float32)
        nbytes = max(size, 4) - scratch_shrink
        sel = contract if contract is not None else getattr(self.lib, SELECTOR[fmt])
        suffix = {"ref": "_ref", "prod": "", "pool": "_parallel_dispatch"}[variant]
        fn = getattr(self.lib, f"v8_{fmt}_tiled_gemm{suffix}")
        args: list[Any] = [sel, self.ptr(y, "float *"), self.ptr(w, "void *"),
                           self.ptr(x, "float *"), self.ptr(bias, "float *"), m, n, k,
                           self.ptr(scratch, "void *"), nbytes]
        if variant == "pool":
            args.insert(0, self.pool(workers))
        return fn(*args), y

    def isas(self) -> list[tuple[str, int]]:
        """(variant, cpu mask) for every dispatch path this host can take; the avx512
        variant appears twice when the CPU has VNNI (with and without it)."""
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
    ~4 decades along K (Q8_K block scales and the fp32 chain span many binades)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k), dtype=np.float32)
    x *= (10.0 ** rng.uniform(-0.5, 0.5, size=(m, 1))).astype(np.float32)
    x *= (10.0 ** rng.uniform(-2.0, 2.0, size=(m, k))).astype(np.float32)
    return x


def random_blocks(fmt: str, n: int, k: int, seed: int) -> np.ndarray:
    """Random weight blocks whose fp16 scales are finite and positive."""
    rng = np.random.default_rng(seed)
    nb, size = k // QK_K, BLOCK_BYTES[fmt]
    raw = rng.integers(0, 256, size=(n, nb, size), dtype=np.uint8)
    scales = rng.uniform(1e-4, 1e-2, size=(n, nb, 2)).astype(np.float16).view(np.uint8)
    if fmt == "q6_k":
        raw[..., 208:210] = scales[..., 0:2]
    else:
        raw[..., 0:4] = scales
    return raw.reshape(n, nb * size)


def bitexact(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    ai = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    bi = np.ascontiguousarray(b, dtype=np.float32).view(np.uint32)
    return int(np.count_nonzero(ai == bi)), int(ai.size)
