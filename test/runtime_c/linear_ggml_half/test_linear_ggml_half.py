"""Provider linear_ggml_half: f16 / bf16 linear and logits with llama.cpp's CPU mul_mat arithmetic.

Contracts of llama.cpp's AVX-512 build, linear_f16_ggml_mul_mat, logits_f16_ggml_mul_mat,
linear_bf16_ggml_mul_mat_dpbf16 and logits_bf16_ggml_mul_mat_dpbf16, and of its AVX2 build,
linear_f16_ggml_8_lane_mul_mat, logits_f16_ggml_8_lane_mul_mat, linear_bf16_ggml_8_lane_mul_mat
and logits_bf16_ggml_8_lane_mul_mat (header runtime_c/linear_ggml_half/v8_linear_ggml_half.h
spells them out; kernel maps linear_ggml_f16 and linear_ggml_bf16). Each test runs per kind
(weight type x ggml build):

- the scalar oracle against an independent numpy model (both routes, tails, subnormals,
  underflowing bf16 products), and the two builds' models differ on those cases,
- production against the oracle for every ISA variant (AVX-512 with and without AVX512-BF16,
  AVX2, scalar via the CPU mask), also from a build with -march=native -ffp-contract=fast,
- threadpool dispatch against the oracle at 1, 2, 3, 4, 8 workers,
- ggml's own mul_mat (llama.cpp's libggml-cpu through GgmlOps, f16 / bf16 weights) against the
  oracle, bit for bit, at threads 1 and 2 over decode and prefill batch sizes and model shapes
  (skipped for the contracts of the build that libggml is not),
- argument checks that leave the output untouched.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from v8dialect.data.c_abi import constants
from v8dialect.data.paths import runtime_c_dir
from v8dialect.evidence.record import Outcome, Rung
from v8dialect.runtime.cbuild import BASE_CFLAGS, RUNTIME_CORE_SOURCES, CBuild, build, runtime_cdef

PROVIDERS = {"f16": "linear_ggml_f16", "bf16": "linear_ggml_bf16"}
# kind -> (weight type, the llama.cpp x86 build whose arithmetic its contracts reproduce)
KINDS = {"f16": ("f16", "avx512"), "bf16": ("bf16", "avx512"),
         "f16_avx2": ("f16", "avx2"), "bf16_avx2": ("bf16", "avx2")}
CONTRACTS = {"f16": ("linear_f16_ggml_mul_mat", "logits_f16_ggml_mul_mat"),
             "bf16": ("linear_bf16_ggml_mul_mat_dpbf16", "logits_bf16_ggml_mul_mat_dpbf16"),
             "f16_avx2": ("linear_f16_ggml_8_lane_mul_mat", "logits_f16_ggml_8_lane_mul_mat"),
             "bf16_avx2": ("linear_bf16_ggml_8_lane_mul_mat", "logits_bf16_ggml_8_lane_mul_mat")}
SELECTORS = {"f16": ("V8_LINEAR_F16_GGML_MUL_MAT", "V8_LOGITS_F16_GGML_MUL_MAT"),
             "bf16": ("V8_LINEAR_BF16_GGML_MUL_MAT_DPBF16", "V8_LOGITS_BF16_GGML_MUL_MAT_DPBF16"),
             "f16_avx2": ("V8_LINEAR_F16_GGML_8_LANE_MUL_MAT", "V8_LOGITS_F16_GGML_8_LANE_MUL_MAT"),
             "bf16_avx2": ("V8_LINEAR_BF16_GGML_8_LANE_MUL_MAT",
                           "V8_LOGITS_BF16_GGML_8_LANE_MUL_MAT")}
DTYPES = ("f16", "bf16")
WORKERS = (1, 2, 3, 4, 8)
F32 = np.float32

# V8_CPU_* bits: AVX2 | FMA | F16C is an AVX2-only host; bit 8 is AVX512-BF16
_V8 = constants(["v8_runtime.h"])
V8_OK = _V8["V8_OK"]
# a selector of the fp32 ggml linear provider, not of this one
LINEAR_GGML_SELECTOR = constants(["linear_ggml/v8_linear_ggml.h"])["V8_LINEAR_FP32_GGML_16_LANE_MUL_MAT"]
AVX2_ONLY = _V8["V8_CPU_AVX2"] | _V8["V8_CPU_FMA"] | _V8["V8_CPU_F16C"]
ALL = 0xFFFFFFFF
VARIANTS = {"avx512": ALL, "avx512_no_bf16": ALL & ~_V8["V8_CPU_AVX512BF16"], "avx2": AVX2_ONLY, "scalar": 0}

# (m, n, k): both routes (AVX-512 build: f16 lanes at k % 16, bf16 lanes at k % 32; AVX2
# build: lanes at k % 8), the lane route's conditions one at a time, vec-route tails of every
# length class (k % 64, k % 32), k below one vec block
ORACLE_CASES = [
    (1, 36, 256), (2, 36, 256), (5, 40, 128), (3, 36, 48), (2, 36, 96), (4, 36, 32),
    (4, 38, 128), (3, 36, 100), (1, 20, 64), (2, 12, 57), (1, 12, 77), (3, 8, 95),
    (2, 8, 200), (1, 8, 7), (2, 9, 1), (1, 4, 136), (6, 20, 16),
    (2, 36, 40), (3, 20, 8), (2, 36, 44), (1, 12, 31), (1, 12, 33), (2, 12, 63), (4, 40, 24),
    (7, 8, 72), (2, 38, 40), (1, 16, 8),
]

HEADER = "linear_ggml_half/v8_linear_ggml_half.h"
SOURCE = "linear_ggml_half/linear_ggml_half.c"
def make_build(name: str, cflags: tuple[str, ...]) -> ModuleType:
    return build(CBuild(
        name=name,
        cdef=runtime_cdef(HEADER),
        source=f'#include "v8_runtime.h"\n#include "{HEADER}"\n',
        runtime_sources=tuple(RUNTIME_CORE_SOURCES) + (SOURCE,),
        cflags=cflags,
    ))


@pytest.fixture(scope="module")
def lh() -> ModuleType:
    return make_build("v8_linear_ggml_half_test", BASE_CFLAGS)


@pytest.fixture(scope="module")
def pools(lh: ModuleType) -> Iterator[dict[int, Any]]:
    made = {w: lh.lib.v8_threadpool_create(w) for w in WORKERS}
    assert all(p != lh.ffi.NULL for p in made.values())
    yield made
    for p in made.values():
        lh.lib.v8_threadpool_destroy(p)


@contextmanager
def restricted(mod: ModuleType, mask: int) -> Iterator[None]:
    mod.lib.v8_cpu_restrict(mask)
    try:
        yield
    finally:
        mod.lib.v8_cpu_restrict(ALL)


def call(mod: ModuleType, fn: str, sel: str, w: np.ndarray, x: np.ndarray,
         bias: np.ndarray | None, pool: Any = None) -> np.ndarray:
    m, k = x.shape
    n = w.shape[0]
    y = np.zeros((m, n), F32)
    f = mod.ffi
    args = [getattr(mod.lib, sel), f.cast("float *", y.ctypes.data),
            f.cast("const uint16_t *", w.ctypes.data), f.cast("const float *", x.ctypes.data),
            f.NULL if bias is None else f.cast("const float *", bias.ctypes.data), m, n, k]
    if pool is not None:
        args.insert(0, pool)
    st = getattr(mod.lib, fn)(*args)
    assert st == V8_OK, mod.ffi.string(mod.lib.v8_status_name(st))
    return y


# ---- independent numpy model ------------------------------------------------------------

def to_bf16(v: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 bits, round to nearest even, NaN quieted (ggml_compute_fp32_to_bf16)."""
    u = np.asarray(v, F32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), r)


def from_bf16(h: np.ndarray) -> np.ndarray:
    return (np.asarray(h, np.uint16).astype(np.uint32) << 16).view(F32)


def from_f16(h: np.ndarray) -> np.ndarray:
    return np.asarray(h, np.uint16).view(np.float16).astype(F32)


def weights(rng: np.random.Generator, dtype: str, n: int, k: int) -> np.ndarray:
    wf = rng.standard_normal((n, k)).astype(F32)
    return wf.astype(np.float16).view(np.uint16) if dtype == "f16" else to_bf16(wf)


def data(rng: np.random.Generator, dtype: str, m: int, n: int, k: int, bias: bool = False
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    x = rng.standard_normal((m, k)).astype(F32)
    return weights(rng, dtype, n, k), x, (rng.standard_normal(n).astype(F32) if bias else None)


def same_bits(a: np.ndarray, b: np.ndarray) -> int:
    """Number of outputs whose bit patterns differ."""
    return int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))


def fma32(a: Any, b: Any, c: Any) -> np.ndarray:
    """Correctly rounded fp32 fused multiply-add, elementwise: the product is exact in fp64,
    TwoSum gives the exact sum as s + e, and e decides the one case where rounding s to fp32
    is not the rounding of s + e (s exactly halfway between two fp32 values)."""
    a64 = np.asarray(a, F32).astype(np.float64)
    b64 = np.asarray(b, F32).astype(np.float64)
    c64 = np.asarray(c, F32).astype(np.float64)
    p = a64 * b64
    s = p + c64
    bb = s - p
    e = (p - (s - bb)) + (c64 - bb)
    f = s.astype(F32)
    lo = np.where(f.astype(np.float64) <= s, f, np.nextafter(f, F32(-np.inf)))
    hi = np.nextafter(lo, F32(np.inf))
    mid = (lo.astype(np.float64) + hi.astype(np.float64)) * 0.5
    tie = (s == mid) & (e != 0) & np.isfinite(s)
    return np.where(tie, np.where(e > 0, hi, lo), f).astype(F32)


def halving_tree(v: np.ndarray) -> np.ndarray:
    while v.shape[-1] > 1:
        h = v.shape[-1] // 2
        v = (v[..., :h] + v[..., h:]).astype(F32)
    return v[..., 0]


def flush(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, F32)
    return np.where(np.abs(v) < np.finfo(F32).tiny, np.copysign(F32(0), v), v).astype(F32)


def dpbf16(c: np.ndarray, w: np.ndarray, x: np.ndarray, e: int) -> np.ndarray:
    """One VDPBF16PS step on 16 lanes over the 32 elements from e: lane p takes the pair
    (e+2p, e+2p+1), the odd element first, subnormals flushed."""
    w1, x1 = w[..., e + 1:e + 32:2], x[..., e + 1:e + 32:2]
    w0, x0 = w[..., e:e + 32:2], x[..., e:e + 32:2]
    c = flush(fma32(flush(w1), flush(x1), flush(c)))
    return flush(fma32(flush(w0), flush(x0), c))


def tail_f64(s: np.ndarray, W: np.ndarray, X: np.ndarray, start: int, k: int) -> np.ndarray:  # noqa: N803
    s = np.asarray(s, np.float64)
    for i in range(start, k):
        s = s + (W[..., i] * X[..., i]).astype(F32).astype(np.float64)
    return s.astype(F32)


def hadd_tree8(v: np.ndarray) -> np.ndarray:
    """The AVX2 build's ggml_vec_dot_f16 fold: halves added, then adjacent pairs (two HADDPS)."""
    u = (v[..., :4] + v[..., 4:]).astype(F32)
    return ((u[..., 0] + u[..., 1]).astype(F32) + (u[..., 2] + u[..., 3]).astype(F32)).astype(F32)


def model_8_lane(dtype: str, W: np.ndarray, X: np.ndarray) -> np.ndarray:  # noqa: N803
    """The AVX2 build: tinyBLAS<8> fma lanes at m >= 2, k % 8 == 0, n % 4 == 0, else four 8-lane
    fma accumulators over blocks of 32, the f16 hadd fold or the bf16 halving tree, the k % 32
    tail in double."""
    m, n, k = W.shape
    if m >= 2 and k % 8 == 0 and n % 4 == 0:
        acc = np.zeros((m, n, 8), F32)
        for l0 in range(0, k, 8):
            acc = fma32(W[..., l0:l0 + 8], X[..., l0:l0 + 8], acc)
        return halving_tree(acc)
    k0 = k - k % 32
    acc4 = np.zeros((4, m, n, 8), F32)
    for i in range(0, k0, 32):
        for j in range(4):
            sl = slice(i + 8 * j, i + 8 * j + 8)
            acc4[j] = fma32(W[..., sl], X[..., sl], acc4[j])
    a0 = ((acc4[0] + acc4[2]).astype(F32) + (acc4[1] + acc4[3]).astype(F32)).astype(F32)
    if dtype == "f16":
        s = hadd_tree8(a0).astype(np.float64)
    else:  # a double 0.0 plus the tree: a -0.0 tree gives +0.0
        s = np.float64(0.0) + halving_tree(a0).astype(np.float64)
    return tail_f64(s, W, X, k0, k)


def model(dtype: str, w: np.ndarray, x: np.ndarray, bias: np.ndarray | None,
          build: str = "avx512") -> np.ndarray:
    n, k = w.shape
    m = x.shape[0]
    if dtype == "f16":
        wf, xr = from_f16(w), x.astype(np.float16).astype(F32)
    else:
        wf, xr = from_bf16(w), from_bf16(to_bf16(x))
    W = np.broadcast_to(wf[None, :, :], (m, n, k))  # noqa: N806
    X = np.broadcast_to(xr[:, None, :], (m, n, k))  # noqa: N806
    if build == "avx2":
        dot = model_8_lane(dtype, W, X)
        return dot if bias is None else (dot + bias[None, :]).astype(F32)
    lanes = 16 if dtype == "f16" else 32
    if m >= 2 and k % lanes == 0 and n % 4 == 0:
        acc = np.zeros((m, n, 16), F32)
        for l0 in range(0, k, lanes):
            acc = (fma32(W[..., l0:l0 + 16], X[..., l0:l0 + 16], acc) if dtype == "f16"
                   else dpbf16(acc, W, X, l0))
        dot = halving_tree(acc)
    elif dtype == "f16":
        k0 = k - k % 64
        acc4 = np.zeros((4, m, n, 16), F32)
        for i in range(0, k0, 64):
            for j in range(4):
                sl = slice(i + 16 * j, i + 16 * j + 16)
                acc4[j] = fma32(W[..., sl], X[..., sl], acc4[j])
        a0 = ((acc4[0] + acc4[2]).astype(F32) + (acc4[1] + acc4[3]).astype(F32)).astype(F32)
        dot = tail_f64(halving_tree(a0).astype(np.float64), W, X, k0, k)
    else:
        c1 = np.zeros((m, n, 16), F32)
        c2 = np.zeros((m, n, 16), F32)
        i = 0
        while i + 64 <= k:
            c1 = dpbf16(c1, W, X, i)
            c2 = dpbf16(c2, W, X, i + 32)
            i += 64
        s = np.zeros((m, n), np.float64)
        s = s + halving_tree(c1).astype(np.float64)
        s = s + halving_tree(c2).astype(np.float64)
        dot = tail_f64(s, W, X, i, k)
    return dot if bias is None else (dot + bias[None, :]).astype(F32)


def edge_data(rng: np.random.Generator, dtype: str, m: int, n: int, k: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """Activations and weights with subnormals of the storage type and values that round to
    them: the flush and rounding corners."""
    w, x, _ = data(rng, dtype, m, n, k)
    tiny = F32(6e-8) if dtype == "f16" else np.finfo(F32).tiny
    pick = rng.random((m, k)) < 0.3
    x = np.where(pick, x * tiny * F32(0.7), x).astype(F32)
    wpick = rng.random((n, k)) < 0.2
    if dtype == "bf16":
        small = to_bf16(rng.standard_normal((n, k)).astype(F32) * np.finfo(F32).tiny)
    else:
        small = (rng.standard_normal((n, k)) * 3e-6).astype(np.float16).view(np.uint16)
    return np.where(wpick, small, w).astype(np.uint16), x


def underflow_data(rng: np.random.Generator, m: int, n: int, k: int, tail_only: bool = False
                   ) -> tuple[np.ndarray, np.ndarray]:
    """bf16 weights and activations whose products fall below FLT_MIN: the one place where a
    fused multiply-add and a multiply then add differ for bf16, and where the tail's fp32
    product rounds. With tail_only the whole vec blocks are zero."""
    w = to_bf16((rng.standard_normal((n, k)) * 2.0 ** -70).astype(F32))
    x = (rng.standard_normal((m, k)) * 2.0 ** -75).astype(F32)
    if tail_only:
        w[:, :k - k % 32] = 0
    return w, x


def signed_zero_data(rng: np.random.Generator, m: int, n: int, k: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """bf16 products so small and negative that every fma rounds to -0.0: the lane route's
    tree keeps -0.0, the AVX2 build's vec route adds it to a double +0.0."""
    w = to_bf16((-(1 + rng.random((n, k))) * 2.0 ** -80).astype(F32))
    x = ((1 + rng.random((m, k))) * 2.0 ** -81).astype(F32)
    return w, x


def test_numpy_fma_model_is_correctly_rounded() -> None:
    import ctypes
    import ctypes.util
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    libm.fmaf.restype = ctypes.c_float
    libm.fmaf.argtypes = [ctypes.c_float] * 3
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 20000)).astype(F32)
    c = (rng.standard_normal(20000) * 1e-7).astype(F32)
    want = np.array([libm.fmaf(float(p), float(q), float(r))
                     for p, q, r in zip(a, b, c, strict=True)], F32)
    assert same_bits(fma32(a, b, c), want) == 0


# ---- oracle vs model ------------------------------------------------------------------------

@pytest.mark.parametrize("kind", list(KINDS))
def test_oracle_matches_numpy_model(lh: ModuleType, kind: str,
                                    evidence: Callable[..., Any]) -> None:
    dtype, build = KINDS[kind]
    other = "avx2" if build == "avx512" else "avx512"
    rng = np.random.default_rng(11)
    figures = []
    builds_differ = 0  # outputs where the other build's model gives other bits
    for ci, (m, n, k) in enumerate(ORACLE_CASES):
        w, x, b = data(rng, dtype, m, n, k, bias=ci % 3 == 0)
        cases = [("normal", w, x, b)]
        if ci % 2 == 0:
            we, xe = edge_data(rng, dtype, m, n, k)
            cases.append(("subnormal", we, xe, None))
        if dtype == "bf16" and ci % 2 == 1:
            cases.append(("underflow", *underflow_data(rng, m, n, k, tail_only=ci % 4 == 1), None))
        if dtype == "bf16" and ci % 5 == 0:
            cases.append(("signed_zero", *signed_zero_data(rng, m, n, k), None))
        for data_kind, ww, xx, bb in cases:
            want = model(dtype, ww, xx, bb, build)
            builds_differ += same_bits(model(dtype, ww, xx, bb, other), want)
            for sel in SELECTORS[kind]:
                got = call(lh, "v8_linear_half_ggml_ref", sel, ww, xx, bb)
                figures.append({"m": m, "n": n, "k": k, "data": data_kind,
                                "bias": bb is not None, "selector": sel,
                                "differing": same_bits(got, want)})
    ok = all(f["differing"] == 0 for f in figures) and builds_differ > 0
    evidence(Rung.ORACLE, ok, contract="+".join(CONTRACTS[kind]), provider=PROVIDERS[dtype],
             oracle="v8_linear_half_ggml_ref", ggml_build=build,
             model="test/runtime_c/linear_ggml_half/test_linear_ggml_half.py::model", cases=figures,
             outputs_where_the_other_builds_model_differs=builds_differ)
    assert builds_differ > 0, "the two builds' models agree everywhere: the cases cannot tell them"
    assert ok, [f for f in figures if f["differing"]]


# ---- production and threadpool vs oracle ------------------------------------------------------

PRODUCTION_CASES = ORACLE_CASES + [(1, 896, 896), (7, 512, 256), (17, 300, 1024),
                                   (3, 1000, 64), (2, 998, 320), (1, 4099, 131), (13, 64, 96),
                                   (50, 64, 200), (4, 100, 1000)]


@pytest.mark.parametrize("kind", list(KINDS))
def test_production_matches_oracle(lh: ModuleType, kind: str,
                                   evidence: Callable[..., Any]) -> None:
    dtype, build = KINDS[kind]
    native = make_build("v8_linear_ggml_half_native",
                        BASE_CFLAGS + ("-std=gnu11", "-march=native", "-ffp-contract=fast", "-O3"))
    rng = np.random.default_rng(12)
    figures: dict[str, int] = {}
    for ci, (m, n, k) in enumerate(PRODUCTION_CASES):
        w, x, b = data(rng, dtype, m, n, k, bias=ci % 2 == 0)
        if ci % 3 == 0:
            w, x = edge_data(rng, dtype, m, n, k)
        elif ci % 3 == 1 and dtype == "bf16" and m * n * k < 1 << 20:
            w, x = underflow_data(rng, m, n, k)
        sel = SELECTORS[kind][ci % 2]
        want = call(lh, "v8_linear_half_ggml_ref", sel, w, x, b)
        for build_name, mod in (("base", lh), ("native_fp_contract_fast", native)):
            if build_name != "base":
                got = call(mod, "v8_linear_half_ggml_ref", sel, w, x, b)
                key = f"{build_name}/oracle"
                figures[key] = figures.get(key, 0) + same_bits(got, want)
            for isa, mask in VARIANTS.items():
                with restricted(mod, mask):
                    got = call(mod, "v8_linear_half_ggml", sel, w, x, b)
                key = f"{build_name}/{isa}"
                figures[key] = figures.get(key, 0) + same_bits(got, want)
    ok = all(v == 0 for v in figures.values())
    evidence(Rung.PRODUCTION, ok, contract="+".join(CONTRACTS[kind]), provider=PROVIDERS[dtype],
             production="v8_linear_half_ggml", ggml_build=build,
             best_isa=int(lh.lib.v8_cpu_best_isa()),
             cpu_features=int(lh.lib.v8_cpu_features()),
             differing_outputs=figures, cases=len(PRODUCTION_CASES))
    assert ok, figures


@pytest.mark.parametrize("kind", list(KINDS))
def test_threadpool_matches_oracle(lh: ModuleType, pools: dict[int, Any], kind: str,
                                   evidence: Callable[..., Any]) -> None:
    dtype, build = KINDS[kind]
    rng = np.random.default_rng(13)
    figures: dict[str, int] = {}
    for ci, (m, n, k) in enumerate(PRODUCTION_CASES):
        w, x, b = data(rng, dtype, m, n, k, bias=ci % 2 == 1)
        sel = SELECTORS[kind][ci % 2]
        want = call(lh, "v8_linear_half_ggml_ref", sel, w, x, b)
        for workers, pool in pools.items():
            for isa in ("avx512", "avx2"):
                with restricted(lh, VARIANTS[isa]):
                    got = call(lh, "v8_linear_half_ggml_parallel_dispatch", sel, w, x, b, pool=pool)
                key = f"{workers}/{isa}"
                figures[key] = figures.get(key, 0) + same_bits(got, want)
    ok = all(v == 0 for v in figures.values())
    evidence(Rung.THREADPOOL, ok, contract="+".join(CONTRACTS[kind]), provider=PROVIDERS[dtype],
             threadpool="v8_linear_half_ggml_parallel_dispatch", partition="independent_rows",
             ggml_build=build,
             differing_outputs=figures)
    assert ok, figures


# ---- external: llama.cpp's ggml --------------------------------------------------------------

GGML_M = (1, 2, 7, 8, 16, 64, 65)
GGML_SHAPES = ((256, 256), (512, 256), (1024, 1024), (896, 896))
# off the lane route or with vec-route tails (k % 32 != 0 sends bf16 to the vec route)
GGML_EXTRA = ((2, 64, 100), (5, 64, 48), (1, 96, 95), (4, 62, 128), (3, 60, 128), (1, 40, 8),
              (2, 96, 57), (1, 96, 200), (3, 64, 80))
# the AVX2 build's lane route at k % 8 and its k % 32 vec tails, also with the rounding corners:
# (m, n, k, data) with data normal, subnormal (edge_data), underflow (bf16 products < FLT_MIN)
# or signed_zero (bf16 fmas that round to -0.0); the last two only for bf16
GGML_EXTRA_8_LANE = ((2, 64, 40, "normal"), (3, 64, 44, "normal"), (1, 64, 31, "normal"),
                     (2, 64, 24, "normal"), (1, 64, 33, "normal"), (2, 62, 40, "normal"),
                     (1, 64, 256, "subnormal"), (2, 64, 256, "subnormal"),
                     (3, 64, 100, "subnormal"), (1, 64, 256, "underflow"),
                     (2, 64, 256, "underflow"), (1, 64, 100, "underflow"),
                     (3, 62, 96, "underflow"), (1, 64, 61, "underflow_tail"),
                     (1, 64, 64, "signed_zero"), (2, 64, 64, "signed_zero"),
                     (3, 62, 64, "signed_zero"))
ORACLE_MACS = 2e7  # above this many multiply-adds per case the validated threadpool run stands in


def ggml_ops_or_unresolved(evidence: Callable[..., Any], kind: str) -> Any:
    try:
        from v8dialect.parity.ggml_ops import GgmlOps
        return GgmlOps(mem_bytes=1 << 28)
    except Exception as exc:  # llama-cpp-python (the 'oracle' extra) missing or unloadable
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract="+".join(CONTRACTS[kind]),
                 provider=PROVIDERS[KINDS[kind][0]], backend="llama.cpp ggml (GgmlOps)",
                 reason=str(exc))
        pytest.fail(f"llama.cpp's ggml is not loadable: {exc} (recorded as unresolved)")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def external_data(rng: np.random.Generator, dtype: str, m: int, n: int, k: int, kind: str
                  ) -> tuple[np.ndarray, np.ndarray]:
    if kind == "subnormal":
        return edge_data(rng, dtype, m, n, k)
    if kind.startswith("underflow"):
        return underflow_data(rng, m, n, k, tail_only=kind == "underflow_tail")
    if kind == "signed_zero":
        return signed_zero_data(rng, m, n, k)
    w, x, _ = data(rng, dtype, m, n, k)
    return w, x


@pytest.mark.parametrize("kind", list(KINDS))
def test_matches_llama_cpp_ggml(lh: ModuleType, pools: dict[int, Any], kind: str,
                                evidence: Callable[..., Any]) -> None:
    dtype, build = KINDS[kind]
    g = ggml_ops_or_unresolved(evidence, kind)
    if g.build != build:
        pytest.skip(f"llama.cpp's libggml-cpu here is its {g.build} build; contracts "
                    f"{', '.join(CONTRACTS[kind])} reproduce its {build} build")
    rng = np.random.default_rng(14)
    cases = [(m, n, k, "normal") for n, k in GGML_SHAPES for m in GGML_M]
    cases += [(m, n, k, "normal") for m, n, k in GGML_EXTRA]
    if build == "avx2":
        cases += [c for c in GGML_EXTRA_8_LANE
                  if dtype == "bf16" or c[3] in ("normal", "subnormal")]
    lanes = 8 if build == "avx2" else 16 if dtype == "f16" else 32
    figures = []
    for m, n, k, data_kind in cases:
        w, x = external_data(rng, dtype, m, n, k, data_kind)
        if m * n * k <= ORACLE_MACS:
            ours, by = call(lh, "v8_linear_half_ggml_ref", SELECTORS[kind][0], w, x, None), "oracle"
        else:
            ours = call(lh, "v8_linear_half_ggml_parallel_dispatch", SELECTORS[kind][0], w, x,
                        None, pool=pools[2])
            by = "threadpool_2"
        for threads in (1, 2):
            theirs = g.mul_mat(w, dtype, x, k, threads=threads)
            route = "lane" if m >= 2 and k % lanes == 0 and n % 4 == 0 else "vec"
            figures.append({"m": m, "n": n, "k": k, "threads": threads, "route": route,
                            "data": data_kind, "ours": by, "differing": same_bits(ours, theirs)})
    ok = all(f["differing"] == 0 for f in figures)
    evidence(Rung.EXTERNAL, ok, contract="+".join(CONTRACTS[kind]), provider=PROVIDERS[dtype],
             backend=f"llama.cpp ggml mul_mat {dtype} x f32 (llama-cpp-python libggml-cpu, "
                     f"{g.build} build)",
             ggml_build=build, cpu=cpu_model(), cases=figures)
    assert ok, [f for f in figures if f["differing"]]


# ---- argument checks -------------------------------------------------------------------------

def test_argument_checks_leave_output_untouched(lh: ModuleType, pools: dict[int, Any],
                                                evidence: Callable[..., Any]) -> None:
    f, lib = lh.ffi, lh.lib
    w = np.ones((8, 32), np.uint16)
    x = np.ones((2, 32), F32)
    y = np.full((2, 8), 7.0, F32)
    yp = f.cast("float *", y.ctypes.data)
    wp = f.cast("const uint16_t *", w.ctypes.data)
    xp = f.cast("const float *", x.ctypes.data)
    seen = {}
    for kind in KINDS:
        sel = getattr(lib, SELECTORS[kind][0])
        bad = {
            "unknown_selector": ((LINEAR_GGML_SELECTOR, yp, wp, xp, f.NULL, 2, 8, 32),
                                 lib.V8_ERR_UNKNOWN_SELECTOR),
            "null_y": ((sel, f.NULL, wp, xp, f.NULL, 2, 8, 32), lib.V8_ERR_NULL_ARGUMENT),
            "null_w": ((sel, yp, f.NULL, xp, f.NULL, 2, 8, 32), lib.V8_ERR_NULL_ARGUMENT),
            "null_x": ((sel, yp, wp, f.NULL, f.NULL, 2, 8, 32), lib.V8_ERR_NULL_ARGUMENT),
            "m_zero": ((sel, yp, wp, xp, f.NULL, 0, 8, 32), lib.V8_ERR_BAD_DIMENSION),
            "n_negative": ((sel, yp, wp, xp, f.NULL, 2, -8, 32), lib.V8_ERR_BAD_DIMENSION),
            "k_zero": ((sel, yp, wp, xp, f.NULL, 2, 8, 0), lib.V8_ERR_BAD_DIMENSION),
            "k_over_int": ((sel, yp, wp, xp, f.NULL, 1, 1, 1 << 31), lib.V8_ERR_BAD_DIMENSION),
            "overflow": ((sel, yp, wp, xp, f.NULL, 1 << 40, 1 << 40, 16), lib.V8_ERR_BAD_DIMENSION),
        }
        for name, (args, want) in bad.items():
            for fn in ("v8_linear_half_ggml_ref", "v8_linear_half_ggml"):
                seen[f"{kind}/{fn}/{name}"] = (int(getattr(lib, fn)(*args)) == want
                                               and bool(np.all(y == 7)))
            st = lib.v8_linear_half_ggml_parallel_dispatch(pools[2], *args)
            seen[f"{kind}/parallel/{name}"] = int(st) == want and bool(np.all(y == 7))
        st = lib.v8_linear_half_ggml_parallel_dispatch(f.NULL, sel, yp, wp, xp, f.NULL, 2, 8, 32)
        seen[f"{kind}/parallel/null_pool"] = int(st) == 1 and bool(np.all(y == 7))
    ok = all(seen.values())
    for kind, (dtype, _) in KINDS.items():
        evidence(Rung.PRODUCTION, ok, contract="+".join(CONTRACTS[kind]), provider=PROVIDERS[dtype],
                 what="argument checks leave the output untouched",
                 checks={k: v for k, v in seen.items() if k.split("/")[0] == kind})
    assert ok, {k: v for k, v in seen.items() if not v}


# ---- build and kernel maps -------------------------------------------------------------------

COMPILE_CONFIGS = {
    "baseline": ["-march=x86-64"],
    "avx2": ["-mavx2", "-mfma", "-mf16c"],
    "gnu_native_contract_fast": ["-std=gnu11", "-march=native", "-ffp-contract=fast", "-O3"],
}


@pytest.mark.parametrize("config", list(COMPILE_CONFIGS))
def test_source_compiles_warning_free(tmp_path: Any, config: str) -> None:
    import shutil
    import subprocess

    from v8dialect.data.paths import runtime_include_dir
    compiler = shutil.which("gcc") or shutil.which("cc")
    assert compiler, "no C compiler"
    cmd = [compiler, "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-c",
           *COMPILE_CONFIGS[config], f"-I{runtime_include_dir()}", f"-I{runtime_c_dir()}",
           str(runtime_c_dir() / SOURCE), "-o", str(tmp_path / "lh.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, (" ".join(cmd), proc.stderr)


@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_map_agrees_with_header_and_registry(dtype: str) -> None:
    from v8dialect.data.contracts import load_registry
    from v8dialect.data.kernel_maps import load_kernel_maps
    path = runtime_c_dir() / "linear_ggml_half" / f"linear_ggml_{dtype}.kmap.json"
    raw = json.loads(path.read_text())
    assert raw["dtypes"]["weight"] == dtype
    # the prototypes and selectors are checked against the header when the maps load
    loaded = {m.id: m for m in load_kernel_maps(load_registry()).maps}
    kinds = [kind for kind, (d, _) in KINDS.items() if d == dtype]
    assert loaded[PROVIDERS[dtype]].selectors == {
        c: s for kind in kinds for c, s in zip(CONTRACTS[kind], SELECTORS[kind], strict=True)}


# ---- through the compiler ----------------------------------------------------------------------

@pytest.mark.parametrize("kind", list(KINDS))
def test_emitted_program_resolves_to_this_provider_and_gives_the_model_bits(kind: str) -> None:
    from v8dialect.data.contracts import load_registry
    from v8dialect.ir.contract_ir import to_attr
    from v8dialect.runtime.program import build as build_program

    registry = load_registry()

    def attr(cid: str) -> str:
        found = registry.get(cid)
        assert found is not None
        return str(to_attr(found, registry))

    def t(*dims: int, e: str = "f32") -> str:
        return "tensor<" + "x".join(map(str, dims)) + f"x{e}>"

    dtype, build = KINDS[kind]
    # lane route at prefill, vec route (with a tail) at decode
    T, N, K = (5, 36, 96) if build == "avx512" else (5, 36, 104)  # noqa: N806
    tw = t(N, K, e=dtype)
    text = f"""
func.func @prefill(%x: {t(T, K)}, %w: {tw}) -> {t(T, N)} {{
  %y = v8.linear "proj" prefill %x, %w contract {attr(CONTRACTS[kind][0])} : ({t(T, K)}, {tw}) -> {t(T, N)}
  func.return %y : {t(T, N)}
}}
func.func @decode(%x: {t(1, K)}, %w: {tw}) -> {t(1, N)} {{
  %y = v8.logits "head" decode %x, %w contract {attr(CONTRACTS[kind][1])} : ({t(1, K)}, {tw}) -> {t(1, N)}
  func.return %y : {t(1, N)}
}}
"""
    program = build_program(text)
    assert "v8_linear_half_ggml_parallel_dispatch(" in program.c_source
    rng = np.random.default_rng(15)
    w, x, _ = data(rng, dtype, T, N, K)
    for workers in (1, 2, 3):
        (y,) = program.run("prefill", workers=workers, x=x, w=w)
        assert same_bits(y, model(dtype, w, x, None, build)) == 0
        (y,) = program.run("decode", n_past=0, workers=workers, x=x[:1], w=w)
        assert same_bits(y, model(dtype, w, x[:1], None, build)) == 0
