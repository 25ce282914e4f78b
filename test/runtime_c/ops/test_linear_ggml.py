"""Provider linear_ggml_fp32: fp32 linear / logits with llama.cpp's CPU mul_mat arithmetic.

Two contract pairs, one per x86 build of ggml (header runtime_c/linear_ggml/v8_linear_ggml.h
spells them out; each pair has one arithmetic):
  linear/logits_fp32_ggml_16_lane_mul_mat  the AVX-512 build (16 fp32 lanes), the tests
                                           without a suffix;
  linear/logits_fp32_ggml_8_lane_mul_mat   the AVX2 build (8 lanes), the tests `*_8_lane`.
For each pair:

- the scalar oracle against an independent numpy model of the order (both routes, tails),
- production against the oracle for every ISA variant (AVX-512, AVX2, scalar via the CPU mask),
  also from a build with -march=native -ffp-contract=fast,
- threadpool dispatch against the oracle at 1, 2, 3, 4, 8 workers,
- ggml's own mul_mat (llama.cpp's libggml-cpu through GgmlOps) against the oracle, bit for bit,
  at threads 1 and 2 over the decode and prefill batch sizes and model-like shapes; skipped
  when that libggml is the other build (GgmlOps().build),
- argument checks that leave the output untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from cffi_module import cpu_restricted

from v8dialect.data.c_abi import constants
from v8dialect.data.paths import runtime_c_dir
from v8dialect.evidence.record import Outcome, Rung
from v8dialect.runtime.cbuild import BASE_CFLAGS, RUNTIME_CORE_SOURCES, CBuild, build, runtime_cdef
from v8dialect.runtime.host import native_loop_vectors

PROVIDER = "linear_ggml_fp32"


@dataclass(frozen=True)
class Family:
    """One contract pair: the arithmetic of one x86 build of ggml."""

    lanes: int
    build: str  # the GgmlOps().build whose libggml computes these bits
    contracts: tuple[str, str]
    selectors: tuple[str, str]
    tail_block: int  # the block route's tail rounds products down to its last < tail_block
    loop_vectors: str  # manifest ggml_loop_vectors: the smallest vector of GCC's leftover loop

    @property
    def both(self) -> str:
        return "+".join(self.contracts)

    def lane_route(self, m: int, n: int, k: int) -> bool:
        return m >= 2 and k % self.lanes == 0 and n % 4 == 0


LANES16 = Family(16, "avx512",
                 ("linear_fp32_ggml_16_lane_mul_mat", "logits_fp32_ggml_16_lane_mul_mat"),
                 ("V8_LINEAR_FP32_GGML_16_LANE_MUL_MAT", "V8_LOGITS_FP32_GGML_16_LANE_MUL_MAT"),
                 8, "min_8_lanes")
LANES8 = Family(8, "avx2",
                ("linear_fp32_ggml_8_lane_mul_mat", "logits_fp32_ggml_8_lane_mul_mat"),
                ("V8_LINEAR_FP32_GGML_8_LANE_MUL_MAT", "V8_LOGITS_FP32_GGML_8_LANE_MUL_MAT"),
                4, "min_4_lanes")
# the AVX-512 build whose compiler also vectorizes the leftover loop in 4 lanes
LANES16_T4 = Family(16, "avx512",
                    ("linear_fp32_ggml_16_lane_mul_mat_4_lane_tail",
                     "logits_fp32_ggml_16_lane_mul_mat_4_lane_tail"),
                    ("V8_LINEAR_FP32_GGML_16_LANE_MUL_MAT_4_LANE_TAIL",
                     "V8_LOGITS_FP32_GGML_16_LANE_MUL_MAT_4_LANE_TAIL"), 4, "min_4_lanes")
FAMILIES = (LANES16, LANES8, LANES16_T4)
CONTRACTS = LANES16.contracts + LANES8.contracts + LANES16_T4.contracts
SELECTORS = LANES16.selectors + LANES8.selectors + LANES16_T4.selectors
WORKERS = (1, 2, 3, 4, 8)
F32 = np.float32

# V8_CPU_* bits: AVX2 | FMA | F16C is an AVX2-only host
_V8 = constants(["v8_runtime.h"])
V8_OK = _V8["V8_OK"]
AVX2_ONLY = _V8["V8_CPU_AVX2"] | _V8["V8_CPU_FMA"] | _V8["V8_CPU_F16C"]
LINE_PREFETCH = _V8["V8_CPU_LINE_PREFETCH"]
# the block route prefetches its stream where the CPU has V8_CPU_LINE_PREFETCH (every CPU but
# AMD's): each vector build runs with and without it
VARIANTS = {"avx512": 0xFFFFFFFF, "avx512_no_line_prefetch": 0xFFFFFFFF & ~LINE_PREFETCH,
            "avx2": AVX2_ONLY, "avx2_line_prefetch": AVX2_ONLY | LINE_PREFETCH, "scalar": 0}

# (m, n, k): both routes, the lane route's conditions one at a time, block-route tails
# of every kind (r % 64 in [1, 7], [8, 15], [16, 63]), k < 64
ORACLE_CASES = [
    (1, 36, 256), (2, 36, 256), (5, 40, 128), (3, 36, 48),      # lane route
    (4, 38, 128), (3, 36, 100), (1, 20, 64),                      # block route, n % 4, k % 16
    (2, 12, 57), (1, 12, 77), (3, 8, 95), (2, 8, 200), (1, 8, 7), (2, 9, 1), (1, 4, 136),
    (6, 20, 16),
    # the lane route's token blocks (as many tokens as fit 384 KiB of x): two blocks
    # of 24 and a 5-token rest at k = 4096; one block of 50 at k = 256
    (53, 8, 4096), (50, 12, 256),
]
# the 8-lane build: lane route at k % 16 == 8, block-route tails r % 32 with every r % 4
ORACLE_CASES_8 = ORACLE_CASES + [
    (2, 36, 24), (3, 36, 40), (2, 36, 36), (1, 12, 35), (2, 12, 31), (1, 8, 3), (1, 8, 4),
    (2, 9, 12), (3, 10, 29), (1, 8, 62),
]

HEADER = "linear_ggml/v8_linear_ggml.h"
def make_build(name: str, cflags: tuple[str, ...]) -> ModuleType:
    return build(CBuild(
        name=name,
        cdef=runtime_cdef(HEADER),
        source=f'#include "v8_runtime.h"\n#include "{HEADER}"\n',
        runtime_sources=tuple(RUNTIME_CORE_SOURCES) + ("linear_ggml/linear_ggml.c",),
        cflags=cflags,
    ))


@pytest.fixture(scope="module")
def lg() -> ModuleType:
    return make_build("v8_linear_ggml_test", BASE_CFLAGS)


@pytest.fixture(scope="module")
def pools(lg: ModuleType) -> Iterator[dict[int, Any]]:
    made = {w: lg.lib.v8_threadpool_create(w) for w in WORKERS}
    assert all(p != lg.ffi.NULL for p in made.values())
    yield made
    for p in made.values():
        lg.lib.v8_threadpool_destroy(p)


def call(mod: ModuleType, fn: str, sel: str, w: np.ndarray, x: np.ndarray,
         bias: np.ndarray | None, pool: Any = None) -> np.ndarray:
    m, k = x.shape
    n = w.shape[0]
    y = np.zeros((m, n), F32)
    f = mod.ffi
    args = [getattr(mod.lib, sel), f.cast("float *", y.ctypes.data),
            f.cast("const float *", w.ctypes.data), f.cast("const float *", x.ctypes.data),
            f.NULL if bias is None else f.cast("const float *", bias.ctypes.data), m, n, k]
    if pool is not None:
        args.insert(0, pool)
    st = getattr(mod.lib, fn)(*args)
    assert st == V8_OK, mod.ffi.string(mod.lib.v8_status_name(st))
    return y


def data(rng: np.random.Generator, m: int, n: int, k: int,
         bias: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    w = rng.standard_normal((n, k)).astype(F32)
    x = rng.standard_normal((m, k)).astype(F32)
    return w, x, (rng.standard_normal(n).astype(F32) if bias else None)


def same_bits(a: np.ndarray, b: np.ndarray) -> int:
    """Number of outputs whose bit patterns differ."""
    return int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))


# ---- independent numpy model of the order ------------------------------------------------

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


def hadd_tree8(v: np.ndarray) -> np.ndarray:
    """The AVX2 build's block-route fold of 8 lanes: halves added, then adjacent pairs."""
    t = (v[..., :4] + v[..., 4:]).astype(F32)
    return ((t[..., 0] + t[..., 1]).astype(F32) + (t[..., 2] + t[..., 3]).astype(F32)).astype(F32)


def model(w: np.ndarray, x: np.ndarray, bias: np.ndarray | None, lanes: int = 16,
          tail_block: int = 8) -> np.ndarray:
    n, k = w.shape
    m = x.shape[0]
    L = lanes  # noqa: N806
    W, X = w[None, :, :], x[:, None, :]
    if m >= 2 and k % L == 0 and n % 4 == 0:
        acc = np.zeros((m, n, L), F32)
        for l0 in range(0, k, L):
            acc = fma32(W[..., l0:l0 + L], X[..., l0:l0 + L], acc)
        dot = halving_tree(acc)
    else:
        k0 = k - k % (4 * L)
        acc4 = np.zeros((4, m, n, L), F32)
        for i in range(0, k0, 4 * L):
            for j in range(4):
                sl = slice(i + L * j, i + L * j + L)
                acc4[j] = fma32(W[..., sl], X[..., sl], acc4[j])
        a0 = ((acc4[0] + acc4[2]).astype(F32) + (acc4[1] + acc4[3]).astype(F32)).astype(F32)
        dot = halving_tree(a0) if L == 16 else hadd_tree8(a0)
        r = k - k0
        # GCC's vectorized tail: products of whole vectors (L, L/2, ... down to tail_block
        # wide), rounded and added in order; the rest fused
        plain = r - r % tail_block
        for t in range(r):
            i = k0 + t
            if t < plain:
                dot = (dot + (W[..., i] * X[..., i]).astype(F32)).astype(F32)
            else:
                dot = fma32(W[..., i], X[..., i], dot)
    return dot if bias is None else (dot + bias[None, :]).astype(F32)


def test_numpy_fma_model_is_correctly_rounded() -> None:
    import ctypes
    import ctypes.util
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    libm.fmaf.restype = ctypes.c_float
    libm.fmaf.argtypes = [ctypes.c_float] * 3
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 20000)).astype(F32)
    c = (rng.standard_normal(20000) * 1e-7).astype(F32)
    want = np.array([libm.fmaf(float(p), float(q), float(r)) for p, q, r in zip(a, b, c, strict=True)], F32)
    assert same_bits(fma32(a, b, c), want) == 0


# ---- oracle vs model ------------------------------------------------------------------------

def check_oracle(lg: ModuleType, evidence: Callable[..., Any], fam: Family,
                 cases: list[tuple[int, int, int]]) -> None:
    rng = np.random.default_rng(11)
    figures = []
    for ci, (m, n, k) in enumerate(cases):
        w, x, b = data(rng, m, n, k, bias=ci % 3 == 0)
        want = model(w, x, b, fam.lanes, fam.tail_block)
        for sel in fam.selectors:
            got = call(lg, "v8_linear_f32_ggml_ref", sel, w, x, b)
            figures.append({"m": m, "n": n, "k": k, "bias": b is not None, "selector": sel,
                            "differing": same_bits(got, want)})
    ok = all(f["differing"] == 0 for f in figures)
    evidence(Rung.ORACLE, ok, contract=fam.both, provider=PROVIDER,
             oracle="v8_linear_f32_ggml_ref", lanes=fam.lanes,
             model="test/runtime_c/ops/test_linear_ggml.py::model", cases=figures)
    assert ok, [f for f in figures if f["differing"]]


def test_oracle_matches_numpy_model(lg: ModuleType, evidence: Callable[..., Any]) -> None:
    check_oracle(lg, evidence, LANES16, ORACLE_CASES)


def test_oracle_matches_numpy_model_8_lane(lg: ModuleType, evidence: Callable[..., Any]) -> None:
    check_oracle(lg, evidence, LANES8, ORACLE_CASES_8)


def test_oracle_matches_numpy_model_4_lane_tail(lg: ModuleType,
                                                evidence: Callable[..., Any]) -> None:
    check_oracle(lg, evidence, LANES16_T4, ORACLE_CASES)


def test_the_tail_block_is_part_of_the_contract(lg: ModuleType) -> None:
    """The two 16-lane contracts differ exactly where the block route's tail has 4-7 elements
    left after its 8-blocks, and agree where it has none."""
    rng = np.random.default_rng(17)
    differing = {}
    for k in (12, 77, 95, 100, 64, 72, 256):
        w, x, _ = data(rng, 1, 36, k)
        a = call(lg, "v8_linear_f32_ggml_ref", LANES16.selectors[0], w, x, None)
        b = call(lg, "v8_linear_f32_ggml_ref", LANES16_T4.selectors[0], w, x, None)
        differing[k] = same_bits(a, b)
    assert all(differing[k] > 0 for k in (12, 77, 95, 100)), differing
    assert all(differing[k] == 0 for k in (64, 72, 256)), differing


def test_the_builds_differ_on_both_routes(lg: ModuleType) -> None:
    """The selector is not decoration: the 16- and 8-lane oracles disagree somewhere on the lane
    route, the block route's fold and its tail (and each such case is checked against the
    model and llama.cpp above), so a provider ignoring the selector fails."""
    rng = np.random.default_rng(16)
    cases = {"lane_route": (2, 36, 256), "block_fold": (1, 36, 256), "block_tail": (1, 36, 12),
             "lane_8_only": (2, 36, 24)}
    differing = {}
    for name, (m, n, k) in cases.items():
        w, x, _ = data(rng, m, n, k)
        a = call(lg, "v8_linear_f32_ggml_ref", LANES16.selectors[0], w, x, None)
        b = call(lg, "v8_linear_f32_ggml_ref", LANES8.selectors[0], w, x, None)
        differing[name] = same_bits(a, b)
    assert all(v > 0 for v in differing.values()), differing


# ---- production and threadpool vs oracle ------------------------------------------------------

PRODUCTION_CASES = ORACLE_CASES + [(1, 896, 896), (7, 512, 256), (17, 300, 1024),
                                   (3, 1000, 64), (2, 998, 320), (1, 4099, 131)]


PRODUCTION_CASES_8 = ORACLE_CASES_8 + [(1, 896, 896), (7, 512, 256), (17, 300, 1024),
                                       (3, 1000, 64), (2, 998, 320), (1, 4099, 131),
                                       (5, 1000, 72), (50, 64, 40)]


@pytest.fixture(scope="module")
def native() -> ModuleType:
    return make_build("v8_linear_ggml_native",
                      BASE_CFLAGS + ("-std=gnu11", "-march=native", "-ffp-contract=fast", "-O3"))


def check_production(lg: ModuleType, native: ModuleType, evidence: Callable[..., Any],
                     fam: Family, cases: list[tuple[int, int, int]]) -> None:
    rng = np.random.default_rng(12)
    figures: dict[str, int] = {}
    for ci, (m, n, k) in enumerate(cases):
        w, x, b = data(rng, m, n, k, bias=ci % 2 == 0)
        for sel in fam.selectors[: 1 + (ci == 0)]:
            want = call(lg, "v8_linear_f32_ggml_ref", sel, w, x, b)
            for build_name, mod in (("base", lg), ("native_fp_contract_fast", native)):
                if build_name != "base":
                    got = call(mod, "v8_linear_f32_ggml_ref", sel, w, x, b)
                    key = f"{build_name}/oracle"
                    figures[key] = figures.get(key, 0) + same_bits(got, want)
                for isa, mask in VARIANTS.items():
                    with cpu_restricted(mod, mask):
                        got = call(mod, "v8_linear_f32_ggml", sel, w, x, b)
                    key = f"{build_name}/{isa}"
                    figures[key] = figures.get(key, 0) + same_bits(got, want)
    ok = all(v == 0 for v in figures.values())
    evidence(Rung.PRODUCTION, ok, contract=fam.both, provider=PROVIDER,
             production="v8_linear_f32_ggml", best_isa=int(lg.lib.v8_cpu_best_isa()),
             lanes=fam.lanes, differing_outputs=figures, cases=len(cases))
    assert ok, figures


def test_production_matches_oracle(lg: ModuleType, native: ModuleType,
                                   evidence: Callable[..., Any]) -> None:
    check_production(lg, native, evidence, LANES16, PRODUCTION_CASES)


def test_production_matches_oracle_4_lane_tail(lg: ModuleType, native: ModuleType,
                                               evidence: Callable[..., Any]) -> None:
    check_production(lg, native, evidence, LANES16_T4, PRODUCTION_CASES)


def test_production_matches_oracle_8_lane(lg: ModuleType, native: ModuleType,
                                          evidence: Callable[..., Any]) -> None:
    check_production(lg, native, evidence, LANES8, PRODUCTION_CASES_8)


def check_threadpool(lg: ModuleType, pools: dict[int, Any], evidence: Callable[..., Any],
                     fam: Family, cases: list[tuple[int, int, int]]) -> None:
    rng = np.random.default_rng(13)
    figures: dict[str, int] = {}
    for ci, (m, n, k) in enumerate(cases):
        w, x, b = data(rng, m, n, k, bias=ci % 2 == 1)
        sel = fam.selectors[ci % 2]
        want = call(lg, "v8_linear_f32_ggml_ref", sel, w, x, b)
        for workers, pool in pools.items():
            for isa in ("avx512", "avx2"):
                with cpu_restricted(lg, VARIANTS[isa]):
                    got = call(lg, "v8_linear_f32_ggml_parallel_dispatch", sel, w, x, b,
                               pool=pool)
                key = f"{workers}/{isa}"
                figures[key] = figures.get(key, 0) + same_bits(got, want)
    ok = all(v == 0 for v in figures.values())
    evidence(Rung.THREADPOOL, ok, contract=fam.both, provider=PROVIDER,
             threadpool="v8_linear_f32_ggml_parallel_dispatch", partition="independent_rows",
             lanes=fam.lanes, differing_outputs=figures)
    assert ok, figures


# tasks are capped at about 1 MiB of weight rows: a head-sized matrix splits into many more
# tasks than 4 per worker, the last one short
CAPPED_CASES = [(1, 8200, 1024), (2, 4100, 2048)]


def test_threadpool_matches_oracle(lg: ModuleType, pools: dict[int, Any],
                                   evidence: Callable[..., Any]) -> None:
    check_threadpool(lg, pools, evidence, LANES16, PRODUCTION_CASES + CAPPED_CASES)


def test_threadpool_matches_oracle_4_lane_tail(lg: ModuleType, pools: dict[int, Any],
                                               evidence: Callable[..., Any]) -> None:
    check_threadpool(lg, pools, evidence, LANES16_T4, PRODUCTION_CASES)


def test_threadpool_matches_oracle_8_lane(lg: ModuleType, pools: dict[int, Any],
                                          evidence: Callable[..., Any]) -> None:
    check_threadpool(lg, pools, evidence, LANES8, PRODUCTION_CASES_8)


# ---- external: llama.cpp's ggml --------------------------------------------------------------

GGML_M = (1, 2, 7, 8, 16, 63, 64, 65, 300)
GGML_SHAPES = ((512, 256), (256, 256), (1024, 1024), (896, 896), (151936, 64))
# shapes off the lane route or with block-route tails (not in a test model, but in the contract)
GGML_EXTRA = ((2, 64, 100), (5, 64, 77), (1, 96, 95), (4, 62, 128), (3, 60, 128), (1, 40, 8),
              (2, 96, 57), (1, 96, 200))
# the 8-lane build's own boundaries: lane route at k % 16 == 8, block-route tails of every r % 4
# below and above 8 (r = k % 32)
GGML_EXTRA_8 = ((2, 64, 40), (3, 36, 24), (7, 896, 72), (1, 40, 35), (2, 40, 31), (1, 12, 3),
                (2, 12, 44), (1, 64, 62), (3, 62, 136), (1, 36, 4))
ORACLE_MACS = 3e8  # above this many multiply-adds per case the validated threadpool run stands in


def ggml_ops_or_unresolved(evidence: Callable[..., Any], fam: Family) -> Any:
    try:
        from v8dialect.parity.ggml_ops import GgmlOps
        g = GgmlOps(mem_bytes=1 << 29)
        build = g.build
    except Exception as exc:  # llama-cpp-python (the 'oracle' extra) missing or unloadable
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=fam.both, provider=PROVIDER,
                 backend="llama.cpp ggml (GgmlOps)", reason=str(exc))
        pytest.fail(f"llama.cpp's ggml is not loadable: {exc} (recorded as unresolved)")
    if build != fam.build:
        pytest.skip(f"llama.cpp's libggml here is its {build} build; {fam.both} reproduce the "
                    f"{fam.build} build ({fam.lanes} fp32 lanes), so only that libggml can "
                    f"confirm them")
    # llama.cpp was compiled on this machine: its leftover loops are what this compiler makes
    # of them (the builder's ggml_loop_vectors = native)
    if fam.lanes == 16 and native_loop_vectors() != fam.loop_vectors:
        pytest.skip(f"this machine's compiler vectorizes ggml's small loops as "
                    f"{native_loop_vectors()}; {fam.both} reproduce builds with "
                    f"{fam.loop_vectors}")
    return g


def check_llama_cpp(lg: ModuleType, pools: dict[int, Any], evidence: Callable[..., Any],
                    fam: Family, extra: tuple[tuple[int, int, int], ...]) -> None:
    g = ggml_ops_or_unresolved(evidence, fam)
    rng = np.random.default_rng(14)
    cases = [(m, n, k) for n, k in GGML_SHAPES for m in GGML_M] + list(extra)
    figures = []
    for m, n, k in cases:
        w, x, _ = data(rng, m, n, k)
        if m * n * k <= ORACLE_MACS:
            ours = call(lg, "v8_linear_f32_ggml_ref", fam.selectors[0], w, x, None)
            by = "oracle"
        else:
            ours = call(lg, "v8_linear_f32_ggml_parallel_dispatch", fam.selectors[0], w, x, None,
                        pool=pools[2])
            by = "threadpool_2"
        for threads in (1, 2):
            theirs = g.mul_mat(w, "f32", x, k, threads=threads)
            route = "lane" if fam.lane_route(m, n, k) else "block"
            figures.append({"m": m, "n": n, "k": k, "threads": threads, "route": route,
                            "ours": by, "differing": same_bits(ours, theirs)})
        del theirs, ours
    ok = all(f["differing"] == 0 for f in figures)
    evidence(Rung.EXTERNAL, ok, contract=fam.both, provider=PROVIDER,
             backend=f"llama.cpp ggml mul_mat f32 x f32 (llama-cpp-python libggml-cpu, "
                     f"{g.build} build)",
             cases=figures)
    assert ok, [f for f in figures if f["differing"]]


def test_matches_llama_cpp_ggml(lg: ModuleType, pools: dict[int, Any],
                                evidence: Callable[..., Any]) -> None:
    check_llama_cpp(lg, pools, evidence, LANES16, GGML_EXTRA)


def test_libggml_loop_vectors_is_the_host_compilers(evidence: Callable[..., Any]) -> None:
    """llama.cpp was compiled on this machine, so the form v8-parity reads off its libggml
    (GgmlOps.loop_vectors) and the form the builder's native probe reads off this machine's
    compiler (host.native_loop_vectors) must be the same."""
    g = ggml_ops_or_unresolved(evidence, LANES16 if native_loop_vectors() == "min_8_lanes"
                               else LANES16_T4)
    assert g.loop_vectors() == native_loop_vectors()


def test_matches_llama_cpp_ggml_4_lane_tail(lg: ModuleType, pools: dict[int, Any],
                                            evidence: Callable[..., Any]) -> None:
    check_llama_cpp(lg, pools, evidence, LANES16_T4, GGML_EXTRA + GGML_EXTRA_8)


def test_matches_llama_cpp_ggml_8_lane(lg: ModuleType, pools: dict[int, Any],
                                       evidence: Callable[..., Any]) -> None:
    check_llama_cpp(lg, pools, evidence, LANES8, GGML_EXTRA + GGML_EXTRA_8)


# ---- argument checks -------------------------------------------------------------------------

def test_argument_checks_leave_output_untouched(lg: ModuleType, pools: dict[int, Any],
                                                evidence: Callable[..., Any]) -> None:
    f, lib = lg.ffi, lg.lib
    w = np.ones((8, 16), F32)
    x = np.ones((2, 16), F32)
    y = np.full((2, 8), 7.0, F32)
    yp = f.cast("float *", y.ctypes.data)
    wp = f.cast("const float *", w.ctypes.data)
    xp = f.cast("const float *", x.ctypes.data)
    sel = lib.V8_LINEAR_FP32_GGML_16_LANE_MUL_MAT
    other = constants(["ops/v8_ops.h"])["V8_LINEAR_FP32_ASCENDING_FP32_ACCUMULATE"]  # ops/linear.c's
    bad = {
        "unknown_selector": ((other, yp, wp, xp, f.NULL, 2, 8, 16), lib.V8_ERR_UNKNOWN_SELECTOR),
        "unknown_selector_after_the_last": ((max(getattr(lib, s) for s in SELECTORS) + 1, yp, wp,
                                             xp, f.NULL, 2, 8, 16), lib.V8_ERR_UNKNOWN_SELECTOR),
        "null_y_8_lane": ((lib.V8_LOGITS_FP32_GGML_8_LANE_MUL_MAT, f.NULL, wp, xp, f.NULL,
                           2, 8, 16), lib.V8_ERR_NULL_ARGUMENT),
        "null_y": ((sel, f.NULL, wp, xp, f.NULL, 2, 8, 16), lib.V8_ERR_NULL_ARGUMENT),
        "null_w": ((sel, yp, f.NULL, xp, f.NULL, 2, 8, 16), lib.V8_ERR_NULL_ARGUMENT),
        "null_x": ((sel, yp, wp, f.NULL, f.NULL, 2, 8, 16), lib.V8_ERR_NULL_ARGUMENT),
        "m_zero": ((sel, yp, wp, xp, f.NULL, 0, 8, 16), lib.V8_ERR_BAD_DIMENSION),
        "n_negative": ((sel, yp, wp, xp, f.NULL, 2, -8, 16), lib.V8_ERR_BAD_DIMENSION),
        "k_zero": ((sel, yp, wp, xp, f.NULL, 2, 8, 0), lib.V8_ERR_BAD_DIMENSION),
        "overflow": ((sel, yp, wp, xp, f.NULL, 1 << 40, 1 << 40, 16), lib.V8_ERR_BAD_DIMENSION),
    }
    seen = {}
    for name, (args, want) in bad.items():
        for fn in ("v8_linear_f32_ggml_ref", "v8_linear_f32_ggml"):
            seen[f"{fn}/{name}"] = int(getattr(lib, fn)(*args)) == want and bool(np.all(y == 7))
        st = lib.v8_linear_f32_ggml_parallel_dispatch(pools[2], *args)
        seen[f"parallel/{name}"] = int(st) == want and bool(np.all(y == 7))
    st = lib.v8_linear_f32_ggml_parallel_dispatch(f.NULL, sel, yp, wp, xp, f.NULL, 2, 8, 16)
    seen["parallel/null_pool"] = int(st) == 1 and bool(np.all(y == 7))
    for name in SELECTORS:  # each selector is accepted and writes
        yy = np.zeros((2, 8), F32)
        st = lib.v8_linear_f32_ggml(getattr(lib, name), f.cast("float *", yy.ctypes.data), wp,
                                    xp, f.NULL, 2, 8, 16)
        seen[f"accepted/{name}"] = int(st) == 0 and bool(np.all(yy == 16))
    ok = all(seen.values())
    evidence(Rung.PRODUCTION, ok, contract="+".join(CONTRACTS), provider=PROVIDER,
             what="argument checks leave the output untouched", checks=seen)
    assert ok, {k: v for k, v in seen.items() if not v}


# ---- build and kernel map ----------------------------------------------------------------------

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
           str(runtime_c_dir() / "linear_ggml" / "linear_ggml.c"), "-o", str(tmp_path / "lg.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, (" ".join(cmd), proc.stderr)


def test_kernel_map_agrees_with_header_and_registry() -> None:
    from v8dialect.data.contracts import load_registry
    from v8dialect.data.kernel_maps import load_kernel_maps
    # the prototypes and selectors are checked against the header when the maps load
    loaded = {m.id: m for m in load_kernel_maps(load_registry()).maps}
    assert loaded[PROVIDER].selectors == dict(zip(CONTRACTS, SELECTORS, strict=True))
    registry = load_registry()
    for fam in FAMILIES:
        for cid in fam.contracts:
            found = registry.get(cid)
            assert found is not None, cid
            assert f"{fam.lanes} fp32 lanes" in found.description, cid


# ---- through the compiler ----------------------------------------------------------------------

@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f"{f.lanes}_lane")
def test_emitted_program_resolves_to_this_provider_and_gives_the_model_bits(fam: Family) -> None:
    from v8dialect.data.contracts import load_registry
    from v8dialect.ir.contract_ir import to_attr
    from v8dialect.runtime.program import build as build_program

    registry = load_registry()

    def attr(cid: str) -> str:
        found = registry.get(cid)
        assert found is not None
        return str(to_attr(found, registry))

    def t(*dims: int) -> str:
        return "tensor<" + "x".join(map(str, dims)) + "xf32>"

    # lane route at prefill, block route (with a tail) at decode
    T, N, K = 5, 36, {16: 96, 8: 104}[fam.lanes]  # noqa: N806
    text = f"""
func.func @prefill(%x: {t(T, K)}, %w: {t(N, K)}) -> {t(T, N)} {{
  %y = v8.linear "proj" prefill %x, %w contract {attr(fam.contracts[0])} : ({t(T, K)}, {t(N, K)}) -> {t(T, N)}
  func.return %y : {t(T, N)}
}}
func.func @decode(%x: {t(1, K)}, %w: {t(N, K)}) -> {t(1, N)} {{
  %y = v8.logits "head" decode %x, %w contract {attr(fam.contracts[1])} : ({t(1, K)}, {t(N, K)}) -> {t(1, N)}
  func.return %y : {t(1, N)}
}}
"""
    program = build_program(text)
    assert "v8_linear_f32_ggml_parallel_dispatch(" in program.c_source
    rng = np.random.default_rng(15)
    w, x, _ = data(rng, T, N, K)
    for workers in (1, 2, 3):
        (y,) = program.run("prefill", workers=workers, x=x, w=w)
        assert same_bits(y, model(w, x, None, fam.lanes)) == 0
        (y,) = program.run("decode", n_past=0, workers=workers, x=x[:1], w=w)
        assert same_bits(y, model(w, x[:1], None, fam.lanes)) == 0
