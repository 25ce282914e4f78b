"""Evidence ladder for the tiled-prefill quantized linear contracts
(K-quant x Q8_K, fp32 super-block FMA chain; contracts/quantized_linear_tiled.json).

oracle      independent numpy model (qt_model.py) vs the scalar C oracle, bit for bit
external    llama.cpp's ggml mul_mat (GgmlOps, ggml 0.25.3's tiled CPU GEMM for >= 8 rows)
            vs the oracle and vs production, threads 1 and 2, bit for bit
production  AVX-512 (with and without VNNI), AVX2 and scalar dispatch vs oracle, bit for bit
threadpool  1, 2, 3, 4, 8 workers vs oracle, bit for bit
routing     the block-order GEMM equals llama.cpp below 8 rows and differs from 8 rows on,
            where this contract takes over
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from avx512_int_emulated import check_emulated_gemm, emulated_module
from qt_model import tiled_gemm
from qt_support import (
    ALL_FEATURES,
    CONTRACT,
    FORMATS,
    ISA_NAMES,
    PROVIDER,
    QK_K,
    QT,
    bitexact,
    make_activation,
    random_blocks,
)
from quant_bounds import bound_activation, bound_blocks

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Outcome, Rung

# every format has a kernel map
_V8 = constants(["v8_runtime.h"])
V8_OK = _V8["V8_OK"]
V8_ERR_BAD_DIMENSION = _V8["V8_ERR_BAD_DIMENSION"]
V8_ERR_UNKNOWN_SELECTOR = _V8["V8_ERR_UNKNOWN_SELECTOR"]
MAPPED = {"q4_k", "q6_k", "q5_k"}


def provider(fmt: str) -> str | None:
    return PROVIDER[fmt] if fmt in MAPPED else None


def sid(s: tuple[int, int]) -> str:
    return f"{s[0]}x{s[1]}"


# ---- oracle vs the independent numpy model ------------------------------------------

MODEL_CASES = [((256, 512), 8), ((256, 512), 16), ((256, 512), 63), ((1024, 1024), 65),
               ((256, 512), 300)]


@pytest.mark.parametrize("case", MODEL_CASES, ids=[f"{sid(s)}-m{m}" for s, m in MODEL_CASES])
@pytest.mark.parametrize("fmt", FORMATS)
def test_oracle_vs_numpy_model(qt: QT, weights: Any, evidence: Any, fmt: str,
                               case: tuple[tuple[int, int], int]) -> None:
    (n, k), m = case
    w = weights.get(fmt, n, k)
    x = make_activation(m, k, 31 + m)
    x[0, :QK_K] = 0.0                        # an all-zero Q8_K block (d = 0)
    bias = make_activation(1, n, 7)[0]
    st, y_ref = qt.gemm(fmt, "ref", w, x, bias=bias)
    y_np = tiled_gemm(fmt, w, x, bias=bias)
    same, total = bitexact(y_ref, y_np)
    evidence(Rung.ORACLE, st == V8_OK and same == total, contract=CONTRACT[fmt], provider=provider(fmt),
             shape=f"{m}x{n}x{k}", bias=True,
             model="numpy: own block decoding, exact int sums, exact fp32 fma (round-to-odd)",
             bitexact=f"{same}/{total}")
    assert st == V8_OK and same == total, (same, total)


# ---- external: llama.cpp's ggml ----------------------------------------------------------

EXT_SHAPES = [(1024, 1024), (256, 512), (3072, 1024), (1024, 3072), (896, 4864)]
EXT_TOKENS = [8, 16, 63, 64, 65, 300]


@pytest.mark.parametrize("m", EXT_TOKENS)
@pytest.mark.parametrize("shape", EXT_SHAPES, ids=sid)
@pytest.mark.parametrize("fmt", FORMATS)
def test_external_vs_llamacpp(qt: QT, weights: Any, ggml_ops: Any, evidence: Any, fmt: str,
                              shape: tuple[int, int], m: int) -> None:
    n, k = shape
    common = dict(contract=CONTRACT[fmt], provider=provider(fmt), shape=f"{m}x{n}x{k}")
    if ggml_ops is None:
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, reason="llama-cpp-python not importable",
                 **common)
        pytest.fail("llama.cpp's ggml is not importable: external rung unresolved")
    w = weights.get(fmt, n, k)
    x = make_activation(m, k, 1000 * m + n + k)
    st, y_ref = qt.gemm(fmt, "ref", w, x)
    assert st == V8_OK
    st, y_prod = qt.gemm(fmt, "prod", w, x)
    assert st == V8_OK
    figures: dict[str, str] = {}
    ok = True
    for threads in (1, 2):
        y_g = ggml_ops.mul_mat(w, fmt, x, k, threads=threads)
        same, total = bitexact(y_ref, y_g)
        same_p, _ = bitexact(y_prod, y_g)
        figures[f"oracle_bitexact_{threads}thread"] = f"{same}/{total}"
        figures[f"production_bitexact_{threads}thread"] = f"{same_p}/{total}"
        ok = ok and same == total and same_p == total
    evidence(Rung.EXTERNAL, ok, backend="llama.cpp ggml 0.25.3 mul_mat (tiled CPU GEMM)",
             weights="ggml_quantize_chunk", **figures, **common)
    assert ok, figures


# ---- production: every dispatch path -------------------------------------------------------

PROD_CASES = [((256, 512), 1), ((256, 512), 7), ((256, 512), 8), ((1024, 1024), 17),
              ((1024, 1024), 64), ((256, 512), 65), ((1024, 1024), 300)]


@pytest.mark.parametrize("case", PROD_CASES, ids=[f"{sid(s)}-m{m}" for s, m in PROD_CASES])
@pytest.mark.parametrize("fmt", FORMATS)
def test_production_vs_oracle(qt: QT, weights: Any, evidence: Any, fmt: str,
                              case: tuple[tuple[int, int], int]) -> None:
    (n, k), m = case
    w = weights.get(fmt, n, k)
    x = make_activation(m, k, 77 + m)
    bias = make_activation(1, n, 8)[0]
    st, y_ref = qt.gemm(fmt, "ref", w, x, bias=bias)
    assert st == V8_OK
    try:
        for isa, mask in qt.isas():
            qt.lib.v8_cpu_restrict(mask)
            assert ISA_NAMES[qt.lib.v8_cpu_best_isa()] == isa
            st, y = qt.gemm(fmt, "prod", w, x, bias=bias)
            same, total = bitexact(y_ref, y)
            evidence(Rung.PRODUCTION, st == V8_OK and same == total, contract=CONTRACT[fmt],
                     provider=provider(fmt), shape=f"{m}x{n}x{k}", isa=isa, cpu_mask=hex(mask),
                     bias=True, bitexact=f"{same}/{total}")
            assert st == V8_OK and same == total, (isa, hex(mask), same, total)
    finally:
        qt.lib.v8_cpu_restrict(ALL_FEATURES)


# ---- threadpool ------------------------------------------------------------------------------

POOL_CASES = [((1024, 1024), 65), ((256, 512), 300), ((256, 512), 8)]


@pytest.mark.parametrize("case", POOL_CASES, ids=[f"{sid(s)}-m{m}" for s, m in POOL_CASES])
@pytest.mark.parametrize("fmt", FORMATS)
def test_threadpool_vs_oracle(qt: QT, weights: Any, evidence: Any, fmt: str,
                              case: tuple[tuple[int, int], int]) -> None:
    (n, k), m = case
    w = weights.get(fmt, n, k)
    x = make_activation(m, k, 5 + m)
    bias = make_activation(1, n, 9)[0]
    st, y_ref = qt.gemm(fmt, "ref", w, x, bias=bias)
    assert st == V8_OK
    for workers in (1, 2, 3, 4, 8):
        st, y = qt.gemm(fmt, "pool", w, x, workers=workers, bias=bias)
        same, total = bitexact(y_ref, y)
        evidence(Rung.THREADPOOL, st == V8_OK and same == total, contract=CONTRACT[fmt],
                 provider=provider(fmt), shape=f"{m}x{n}x{k}", partition="output_tiles",
                 workers=workers, bitexact=f"{same}/{total}")
        assert st == V8_OK and same == total, (workers, same, total)


# ---- routing: where llama.cpp leaves the block-order vec_dot for this contract -----------------

def _block_order_lib() -> Any:
    from v8dialect.runtime.cbuild import RUNTIME_CORE_SOURCES, CBuild, build, runtime_cdef

    cdef = runtime_cdef("quant/v8_quant.h",
                        functions=["v8_ql_gemm_scratch_bytes", "v8_q4_k_gemm_ref", "v8_q6_k_gemm_ref"])
    return build(CBuild(name="v8_quant_block_order_for_routing", cdef=cdef,
                        source='#include "quant/v8_quant.h"\n',
                        runtime_sources=RUNTIME_CORE_SOURCES + (
                            "quant/q_formats.c", "quant/q_dot_ref.c", "quant/q_linear.c")))


BLOCK_ORDER = {"q4_k": "q4_k_x_q8_k_fp32_block_order", "q6_k": "q6_k_x_q8_k_fp32_block_order"}


@pytest.mark.parametrize("fmt", ["q4_k", "q6_k"])
def test_routing_block_order_below_8_rows_tiled_from_8(qt: QT, weights: Any, ggml_ops: Any,
                                                        evidence: Any, fmt: str) -> None:
    n, k = 1024, 1024
    if ggml_ops is None:
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=CONTRACT[fmt],
                 reason="llama-cpp-python not importable")
        pytest.fail("llama.cpp's ggml is not importable: external rung unresolved")
    mod = _block_order_lib()
    w = weights.get(fmt, n, k)
    sel = getattr(mod.lib, f"V8_QL_{fmt.upper()}_X_Q8_K_FP32_BLOCK_ORDER")
    figures: dict[int, tuple[tuple[int, int], tuple[int, int]]] = {}
    for m in (1, 4, 7, 8, 16, 64):
        x = make_activation(m, k, 500 + m)
        y_blk = np.full((m, n), np.nan, np.float32)
        scratch = np.zeros(mod.lib.v8_ql_gemm_scratch_bytes(m, k) // 4 + 1, np.float32)
        fn = getattr(mod.lib, f"v8_{fmt}_gemm_ref")
        st = fn(sel, mod.ffi.cast("float *", y_blk.ctypes.data),
                mod.ffi.cast("void *", w.ctypes.data), mod.ffi.cast("float *", x.ctypes.data),
                mod.ffi.NULL, m, n, k, mod.ffi.cast("void *", scratch.ctypes.data), scratch.nbytes)
        assert st == V8_OK
        st, y_tiled = qt.gemm(fmt, "ref", w, x)
        assert st == V8_OK
        y_g = ggml_ops.mul_mat(w, fmt, x, k, threads=2)
        figures[m] = (bitexact(y_blk, y_g), bitexact(y_tiled, y_g))
    below_ok = all(b[0] == b[1] and t[0] < t[1] for m, (b, t) in figures.items() if m < 8)
    above_ok = all(t[0] == t[1] and b[0] < b[1] for m, (b, t) in figures.items() if m >= 8)
    detail = {f"m{m}": f"block_order {b[0]}/{b[1]}, tiled {t[0]}/{t[1]}"
              for m, (b, t) in figures.items()}
    # below 8 rows llama.cpp runs the block-order vec_dot: evidence for that contract
    evidence(Rung.EXTERNAL, below_ok, contract=BLOCK_ORDER[fmt], shape=f"{n}x{k}",
             backend="llama.cpp ggml 0.25.3 mul_mat, fewer than 8 rows", **detail)
    # from 8 rows on it runs the tiled GEMM, and the two contracts differ in the bits
    evidence(Rung.EXTERNAL, above_ok, contract=CONTRACT[fmt], shape=f"{n}x{k}",
             backend="llama.cpp ggml 0.25.3 mul_mat, 8 rows or more", **detail)
    assert below_ok and above_ok, detail


# ---- C API discipline ---------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_api_rejects_bad_input_without_writing(qt: QT, weights: Any, evidence: Any,
                                               fmt: str) -> None:
    n, k = 256, 512
    w = weights.get(fmt, n, k)
    x = make_activation(9, k, 3)
    other = [f for f in FORMATS if f != fmt][0]
    checks: dict[str, tuple[int, bool, int]] = {}
    for variant in ("ref", "prod", "pool"):
        cases = {
            "k896": dict(x=make_activation(9, 896, 3), expect=V8_ERR_BAD_DIMENSION),
            "selector": dict(contract=99, expect=V8_ERR_UNKNOWN_SELECTOR),
            "other_format": dict(contract=getattr(qt.lib, f"V8_QL_{other.upper()}_X_Q8_K_"
                                                  "FP32_SUPER_BLOCK_FMA_CHAIN"),
                                 expect=V8_ERR_UNKNOWN_SELECTOR),
            "short_scratch": dict(scratch_shrink=4, expect=V8_ERR_BAD_DIMENSION),
        }
        for name, case in cases.items():
            expect = case.pop("expect")
            xx = case.pop("x", x)
            st, y = qt.gemm(fmt, variant, w, xx, workers=2, **case)
            checks[f"{variant}_{name}"] = (st, bool(np.all(np.isnan(y))), expect)
    # NULL weight, m = 0 and a NULL pool through the raw entry points
    y = np.full((9, n), np.nan, np.float32)
    size = qt.lib.v8_qlt_gemm_scratch_bytes(9, k)
    scratch = np.zeros(size // 4 + 1, np.float32)
    sel = getattr(qt.lib, f"V8_QL_{fmt.upper()}_X_Q8_K_FP32_SUPER_BLOCK_FMA_CHAIN")
    fn = getattr(qt.lib, f"v8_{fmt}_tiled_gemm")
    yp, xp, sp = qt.ptr(y, "float *"), qt.ptr(x, "float *"), qt.ptr(scratch, "void *")
    st = fn(sel, yp, qt.ffi.NULL, xp, qt.ffi.NULL, 9, n, k, sp, size)
    checks["null_weight"] = (st, bool(np.all(np.isnan(y))), 1)
    st = fn(sel, yp, qt.ptr(w, "void *"), xp, qt.ffi.NULL, 0, n, k, sp, size)
    checks["m0"] = (st, bool(np.all(np.isnan(y))), 2)
    pfn = getattr(qt.lib, f"v8_{fmt}_tiled_gemm_parallel_dispatch")
    st = pfn(qt.ffi.NULL, sel, yp, qt.ptr(w, "void *"), xp, qt.ffi.NULL, 9, n, k, sp, size)
    checks["null_pool"] = (st, bool(np.all(np.isnan(y))), 4)
    assert qt.lib.v8_qlt_gemm_scratch_bytes(9, 896) == 0
    assert qt.lib.v8_qlt_gemm_scratch_bytes(0, 512) == 0
    ok = all(st == expect and untouched for st, untouched, expect in checks.values())
    evidence(Rung.PRODUCTION, ok, contract=CONTRACT[fmt], provider=provider(fmt),
             what="argument checks before any write",
             checks={name: f"status {st} (want {e}), untouched={u}" for name, (st, u, e) in checks.items()})
    assert ok, checks


# ---- integer bounds ---------------------------------------------------------------------------

# (format, Q6_K's int8 scale byte: its largest and its most negative)
BOUND_CASES = [("q4_k", 0x7F), ("q5_k", 0x7F), ("q6_k", 0x7F), ("q6_k", 0x80)]


@pytest.mark.parametrize("fmt,scale_byte", BOUND_CASES, ids=[f"{f}-{b:#x}" for f, b in BOUND_CASES])
def test_production_at_the_integer_bounds(qt: QT, evidence: Any, fmt: str, scale_byte: int) -> None:
    """Maximal codes against activations of magnitude 127 everywhere: the vector variants
    keep group dots in int16 pair sums, which this input takes to their largest values."""
    n, k, m = 64, 512, 33
    w = bound_blocks(fmt, n, k, scale_byte)
    x = bound_activation(m, k)
    st, y_ref = qt.gemm(fmt, "ref", w, x)
    assert st == V8_OK and np.all(np.isfinite(y_ref)) and np.all(y_ref != 0)
    try:
        for isa, mask in qt.isas():
            qt.lib.v8_cpu_restrict(mask)
            st, y = qt.gemm(fmt, "prod", w, x)
            same, total = bitexact(y_ref, y)
            evidence(Rung.PRODUCTION, st == V8_OK and same == total, contract=CONTRACT[fmt],
                     provider=provider(fmt), shape=f"{m}x{n}x{k}", isa=isa, cpu_mask=hex(mask),
                     inputs="integer_bounds", bitexact=f"{same}/{total}")
            assert st == V8_OK and same == total, (isa, hex(mask), same, total)
    finally:
        qt.lib.v8_cpu_restrict(ALL_FEATURES)


# ---- AVX-512 tile variants, emulated (hosts without AVX-512) ----------------------------------

FORMAT_INDEX = {"q4_k": 0, "q5_k": 1, "q6_k": 2}  # qt_linear.c's qt_format
# rows not a multiple of the 16-row tile, tokens not a multiple of the 16-token group
EMU_CASES = [((40, 512), 33), ((256, 512), 7), ((100, 768), 65)]


@pytest.fixture(scope="module")
def qt_emulated() -> Any:
    """qt_linear.c built with its AVX-512 tile variants on portable intrinsic emulations."""
    return emulated_module("v8_qt_avx512_emulated", Path(__file__).parent / "qt_avx512_emulated.c",
                           "quant_tiled/qt_linear.c", """
        int qt_emulated_avx512_gemm(int vnni, int fmt, float *y, const void *w, const float *x,
                                    const float *bias, int64_t m, int64_t n, int64_t k,
                                    void *scratch, size_t scratch_bytes);""")


def emulated_vs_oracle(qt: QT, emu: Any, evidence: Any, fmt: str, w: np.ndarray, x: np.ndarray,
                       bias: np.ndarray | None, **detail: Any) -> None:
    st, y_ref = qt.gemm(fmt, "ref", w, x, bias=bias)
    assert st == V8_OK
    check_emulated_gemm(emu, "qt_emulated_avx512_gemm", (FORMAT_INDEX[fmt],), y_ref, w, x, bias,
                        qt.lib.v8_qlt_gemm_scratch_bytes(*x.shape), evidence,
                        contract=CONTRACT[fmt], provider=provider(fmt), **detail)


@pytest.mark.parametrize("case", EMU_CASES, ids=[f"{sid(s)}-m{m}" for s, m in EMU_CASES])
@pytest.mark.parametrize("fmt", FORMATS)
def test_emulated_avx512_vs_oracle(qt: QT, qt_emulated: Any, weights: Any, evidence: Any, fmt: str,
                                   case: tuple[tuple[int, int], int]) -> None:
    """Both AVX-512 tile variants (plain: int16 group dots; VNNI: dpbusd) on ggml-quantized
    weights and on random bytes in every field, with a bias."""
    (n, k), m = case
    x = make_activation(m, k, 41 + m)
    bias = make_activation(1, n, 6)[0]
    for weights_kind, w in (("ggml_quantized", weights.get(fmt, n, k)),
                            ("random_blocks", random_blocks(fmt, n, k, 13 + n))):
        emulated_vs_oracle(qt, qt_emulated, evidence, fmt, w, x, bias, inputs=weights_kind)


@pytest.mark.parametrize("fmt,scale_byte", BOUND_CASES, ids=[f"{f}-{b:#x}" for f, b in BOUND_CASES])
def test_emulated_avx512_at_the_integer_bounds(qt: QT, qt_emulated: Any, evidence: Any, fmt: str,
                                               scale_byte: int) -> None:
    n, k, m = 40, 512, 33
    x = bound_activation(m, k)
    emulated_vs_oracle(qt, qt_emulated, evidence, fmt, bound_blocks(fmt, n, k, scale_byte), x, None,
                       inputs="integer_bounds")
