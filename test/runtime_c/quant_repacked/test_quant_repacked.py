"""Evidence ladder for the repacked Q4_K x Q8_K contracts
(contracts/quantized_linear_repacked.json): llama.cpp's q4_K_8x8 repacked GEMV/GEMM.

oracle      independent numpy model (repacked_model.py) vs the scalar C oracle, bit for bit
external    llama.cpp's mul_mat on a weight in its CPU_REPACK buffer (GgmlOps.mul_mat_repacked,
            ggml 0.25.3's ggml_gemv/ggml_gemm_q4_K_8x8_q8_K) vs the oracle and production,
            threads 1 and 2, M in {1,2,3,4,5,7,8,16,63,64,65}, bit for bit
production  AVX-512 (with and without VNNI), AVX2 and scalar dispatch vs oracle, bit for bit
threadpool  1, 2, 3, 4, 8 workers vs oracle, bit for bit
routing     which weight types llama.cpp repacks on this CPU; the repacked result differs
            from the plain mul_mat and from the 4-row form / super-block form where it should
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from avx512_int_emulated import check_emulated_gemm, emulated_module
from qr_support import (
    ALL_FEATURES,
    CONTRACT_GEMM,
    CONTRACT_GEMV,
    ISA_NAMES,
    PROVIDER_GEMM,
    PROVIDER_GEMV,
    QK_K,
    QR,
    bitexact,
    make_activation,
    make_weights,
    random_blocks,
)
from quant_bounds import bound_activation, bound_blocks
from repacked_model import repacked_gemm

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Outcome, Rung

_V8 = constants(["v8_runtime.h"])
V8_OK = _V8["V8_OK"]
V8_ERR_BAD_DIMENSION = _V8["V8_ERR_BAD_DIMENSION"]
V8_ERR_UNKNOWN_SELECTOR = _V8["V8_ERR_UNKNOWN_SELECTOR"]
BACKEND = "llama.cpp ggml 0.25.3 mul_mat, weight in CPU_REPACK (q4_K_8x8_q8_K)"


def sid(s: tuple[int, int]) -> str:
    return f"{s[0]}x{s[1]}"


def who(m: int, shape: str = "gemm") -> dict[str, str]:
    """Contract and provider an m-row case is evidence for."""
    if shape == "gemv":
        return dict(contract=CONTRACT_GEMV, provider=PROVIDER_GEMV)
    return dict(contract=CONTRACT_GEMM, provider=PROVIDER_GEMM)


# ---- oracle vs the independent numpy model ------------------------------------------

MODEL_CASES = [((256, 256), 1), ((256, 512), 3), ((256, 512), 5), ((512, 256), 8),
               ((1024, 1024), 7), ((1024, 1024), 65)]


@pytest.mark.parametrize("case", MODEL_CASES, ids=[f"{sid(s)}-m{m}" for s, m in MODEL_CASES])
def test_oracle_vs_numpy_model(qr: QR, weights: Any, evidence: Any,
                               case: tuple[tuple[int, int], int]) -> None:
    (n, k), m = case
    w = weights.get(n, k)
    x = make_activation(m, k, 31 + m)
    x[0, :QK_K] = 0.0                        # an all-zero Q8_K block (d = 0)
    bias = make_activation(1, n, 7)[0]
    y_np = repacked_gemm(w, x, bias=bias)
    figures: dict[str, str] = {}
    ok = True
    shapes = ("gemv", "gemm") if m == 1 else ("gemm",)
    for shape in shapes:
        st, y_ref = qr.run(shape, "ref", w, x, bias=bias)
        same, total = bitexact(y_ref, y_np)
        figures[f"{shape}_bitexact"] = f"{same}/{total}"
        ok = ok and st == V8_OK and same == total
        evidence(Rung.ORACLE, st == V8_OK and same == total, **who(m, shape), shape=f"{m}x{n}x{k}",
                 bias=True, bitexact=f"{same}/{total}",
                 model="numpy: own block decoding, exact int sums, exact fp32 fma (round-to-odd)")
    assert ok, figures


# ---- external: llama.cpp's repacked kernels ------------------------------------------------

EXT_SHAPES = [(256, 256), (512, 256), (1024, 1024), (3072, 1024)]
EXT_TOKENS = [1, 2, 3, 4, 5, 7, 8, 16, 63, 64, 65]


@pytest.mark.parametrize("m", EXT_TOKENS)
@pytest.mark.parametrize("shape", EXT_SHAPES, ids=sid)
def test_external_vs_llamacpp_repacked(qr: QR, weights: Any, ggml_ops: Any, evidence: Any,
                                       shape: tuple[int, int], m: int) -> None:
    n, k = shape
    kinds = ("gemv", "gemm") if m == 1 else ("gemm",)
    if ggml_ops is None:
        for kind in kinds:
            evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, reason="llama-cpp-python not importable",
                     shape=f"{m}x{n}x{k}", **who(m, kind))
        pytest.fail("llama.cpp's ggml is not importable: external rung unresolved")
    w = weights.get(n, k)
    x = make_activation(m, k, 1000 * m + n + k)
    results = {}
    for kind in kinds:
        for variant in ("ref", "prod"):
            st, y = qr.run(kind, variant, w, x)
            assert st == V8_OK
            results[(kind, variant)] = y
    ok_all = True
    for kind in kinds:
        figures: dict[str, str] = {}
        ok = True
        for threads in (1, 2):
            y_g, repacked = ggml_ops.mul_mat_repacked(w, "q4_k", x, k, threads=threads)
            same, total = bitexact(results[(kind, "ref")], y_g)
            same_p, _ = bitexact(results[(kind, "prod")], y_g)
            figures[f"oracle_bitexact_{threads}thread"] = f"{same}/{total}"
            figures[f"production_bitexact_{threads}thread"] = f"{same_p}/{total}"
            figures[f"repacked_{threads}thread"] = str(repacked)
            ok = ok and repacked and same == total and same_p == total
        evidence(Rung.EXTERNAL, ok, backend=BACKEND, weights="ggml_quantize_chunk",
                 shape=f"{m}x{n}x{k}", gemm_rows=4 * (m // 4), gemv_rows=m % 4 if m > 3 else m,
                 **figures, **who(m, kind))
        ok_all = ok_all and ok
    assert ok_all


# ---- production: every dispatch path -------------------------------------------------------

PROD_CASES = [((256, 256), 1), ((264, 512), 3), ((256, 512), 5), ((1024, 1024), 8),
              ((1024, 1024), 17), ((520, 256), 65), ((1024, 1024), 64),
              ((264, 512), 100)]


@pytest.mark.parametrize("case", PROD_CASES, ids=[f"{sid(s)}-m{m}" for s, m in PROD_CASES])
def test_production_vs_oracle(qr: QR, weights: Any, evidence: Any,
                              case: tuple[tuple[int, int], int]) -> None:
    (n, k), m = case
    w = weights.get(n, k)
    x = make_activation(m, k, 77 + m)
    bias = make_activation(1, n, 8)[0]
    shapes = ("gemv", "gemm") if m == 1 else ("gemm",)
    try:
        for shape in shapes:
            st, y_ref = qr.run(shape, "ref", w, x, bias=bias)
            assert st == V8_OK
            for isa, mask in qr.isas():
                qr.lib.v8_cpu_restrict(mask)
                assert ISA_NAMES[qr.lib.v8_cpu_best_isa()] == isa
                st, y = qr.run(shape, "prod", w, x, bias=bias)
                same, total = bitexact(y_ref, y)
                evidence(Rung.PRODUCTION, st == V8_OK and same == total, **who(m, shape),
                         shape=f"{m}x{n}x{k}", isa=isa, cpu_mask=hex(mask), bias=True,
                         bitexact=f"{same}/{total}")
                assert st == V8_OK and same == total, (shape, isa, hex(mask), same, total)
    finally:
        qr.lib.v8_cpu_restrict(ALL_FEATURES)


# ---- threadpool ------------------------------------------------------------------------------

POOL_CASES = [((1024, 1024), 1), ((1024, 1024), 65), ((520, 512), 7), ((256, 512), 16)]


@pytest.mark.parametrize("case", POOL_CASES, ids=[f"{sid(s)}-m{m}" for s, m in POOL_CASES])
def test_threadpool_vs_oracle(qr: QR, weights: Any, evidence: Any,
                              case: tuple[tuple[int, int], int]) -> None:
    (n, k), m = case
    w = weights.get(n, k)
    x = make_activation(m, k, 5 + m)
    bias = make_activation(1, n, 9)[0]
    shapes = ("gemv", "gemm") if m == 1 else ("gemm",)
    for shape in shapes:
        st, y_ref = qr.run(shape, "ref", w, x, bias=bias)
        assert st == V8_OK
        for workers in (1, 2, 3, 4, 8):
            st, y = qr.run(shape, "pool", w, x, workers=workers, bias=bias)
            same, total = bitexact(y_ref, y)
            evidence(Rung.THREADPOOL, st == V8_OK and same == total, **who(m, shape),
                     shape=f"{m}x{n}x{k}", partition="independent_rows", workers=workers,
                     bitexact=f"{same}/{total}")
            assert st == V8_OK and same == total, (shape, workers, same, total)


# ---- routing: what llama.cpp repacks, and that the two forms are both needed -----------------

def test_which_weights_llamacpp_repacks(ggml_ops: Any, evidence: Any) -> None:
    """On this CPU (AVX2/AVX-512) llama.cpp repacks Q4_K and Q4_0 weights whose row count is
    a multiple of 8, and none of the other types v8's circuits meet."""
    if ggml_ops is None:
        evidence(Rung.OBSERVATION, Outcome.UNRESOLVED, contract=CONTRACT_GEMM,
                 reason="llama-cpp-python not importable")
        pytest.fail("llama.cpp's ggml is not importable")
    k = 256
    x = make_activation(2, k, 4)
    seen: dict[str, bool] = {}
    for dtype in ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k", "q6_k"):
        for n in (256, 260):
            w = ggml_ops.quantize(dtype, make_weights(n, k, 11))
            _, repacked = ggml_ops.mul_mat_repacked(w, dtype, x, k, threads=1)
            seen[f"{dtype}_n{n}"] = repacked
    want = {key: key in ("q4_0_n256", "q4_k_n256") for key in seen}
    ok = seen == want
    evidence(Rung.OBSERVATION, ok, contract=CONTRACT_GEMM, backend=BACKEND,
             what="weight types and row counts the CPU_REPACK buffer repacks",
             repacked={key: v for key, v in seen.items()})
    assert ok, seen


def test_repacked_forms_differ_from_each_other_and_from_plain(qr: QR, weights: Any,
                                                              ggml_ops: Any, evidence: Any) -> None:
    """llama.cpp's plain mul_mat and the other repacked form both disagree with llama.cpp's
    repacked result somewhere: neither form alone, and not the plain contracts, describe it."""
    if ggml_ops is None:
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=CONTRACT_GEMM,
                 reason="llama-cpp-python not importable")
        pytest.fail("llama.cpp's ggml is not importable")
    n, k, m = 1024, 1024, 7
    w = weights.get(n, k)
    x = make_activation(m, k, 99)
    y_rep, repacked = ggml_ops.mul_mat_repacked(w, "q4_k", x, k, threads=2)
    y_plain = ggml_ops.mul_mat(w, "q4_k", x, k, threads=2)
    st, y_4row = qr.run("gemm", "ref", w, x)
    assert st == V8_OK
    y_chain = np.concatenate([qr.run("gemv", "ref", w, x[t:t + 1])[1] for t in range(m)])
    rows4, rest = slice(0, 4), slice(4, m)
    figures = {
        "contract_vs_repacked": bitexact(y_4row, y_rep),
        "plain_vs_repacked": bitexact(y_plain, y_rep),
        "super_block_form_rows0_3": bitexact(y_chain[rows4], y_rep[rows4]),
        "super_block_form_rows4_6": bitexact(y_chain[rest], y_rep[rest]),
    }
    ok = (repacked and figures["contract_vs_repacked"][0] == figures["contract_vs_repacked"][1]
          and figures["plain_vs_repacked"][0] < figures["plain_vs_repacked"][1]
          and figures["super_block_form_rows0_3"][0] < figures["super_block_form_rows0_3"][1]
          and figures["super_block_form_rows4_6"][0] == figures["super_block_form_rows4_6"][1])
    evidence(Rung.EXTERNAL, ok, contract=CONTRACT_GEMM, backend=BACKEND, shape=f"{m}x{n}x{k}",
             **{key: f"{a}/{b}" for key, (a, b) in figures.items()})
    assert ok, figures


# ---- C API discipline ---------------------------------------------------------------------------

def test_api_rejects_bad_input_without_writing(qr: QR, weights: Any, evidence: Any) -> None:
    n, k = 256, 512
    w = weights.get(n, k)
    checks: dict[str, tuple[int, bool, int]] = {}
    for shape, m, other in (("gemv", 1, "gemm"), ("gemm", 9, "gemv")):
        x = make_activation(m, k, 3)
        other_sel = getattr(qr.lib, {"gemv": "V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN",
                                     "gemm": "V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_4_ROW_GROUPS"}[other])
        for variant in ("ref", "prod", "pool"):
            cases = {
                "k896": dict(x=make_activation(m, 896, 3), expect=V8_ERR_BAD_DIMENSION),
                "selector": dict(contract=99, expect=V8_ERR_UNKNOWN_SELECTOR),
                "other_form": dict(contract=other_sel, expect=V8_ERR_UNKNOWN_SELECTOR),
                "short_scratch": dict(scratch_shrink=4, expect=V8_ERR_BAD_DIMENSION),
            }
            for name, case in cases.items():
                expect = case.pop("expect")
                xx = case.pop("x", x)
                st, y = qr.run(shape, variant, w, xx, workers=2, **case)
                checks[f"{shape}_{variant}_{name}"] = (st, bool(np.all(np.isnan(y))), expect)
    # NULL weight, m = 0, n = 0 and a NULL pool through the raw entry points
    x = make_activation(9, k, 3)
    y = np.full((9, n), np.nan, np.float32)
    size = qr.lib.v8_qlr_gemm_scratch_bytes(9, k)
    scratch = np.zeros(size // 4 + 1, np.float32)
    sel = qr.lib.V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_4_ROW_GROUPS
    yp, xp, sp, wp = (qr.ptr(y, "float *"), qr.ptr(x, "float *"), qr.ptr(scratch, "void *"),
                      qr.ptr(w, "void *"))
    st = qr.lib.v8_q4_k_repacked_gemm(sel, yp, qr.ffi.NULL, xp, qr.ffi.NULL, 9, n, k, sp, size)
    checks["null_weight"] = (st, bool(np.all(np.isnan(y))), 1)
    st = qr.lib.v8_q4_k_repacked_gemm(sel, yp, wp, xp, qr.ffi.NULL, 0, n, k, sp, size)
    checks["m0"] = (st, bool(np.all(np.isnan(y))), 2)
    st = qr.lib.v8_q4_k_repacked_gemm(sel, yp, wp, xp, qr.ffi.NULL, 9, 0, k, sp, size)
    checks["n0"] = (st, bool(np.all(np.isnan(y))), 2)
    st = qr.lib.v8_q4_k_repacked_gemm_parallel_dispatch(qr.ffi.NULL, sel, yp, wp, xp, qr.ffi.NULL,
                                                       9, n, k, sp, size)
    checks["null_pool"] = (st, bool(np.all(np.isnan(y))), 4)
    gsel = qr.lib.V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN
    st = qr.lib.v8_q4_k_repacked_gemv_parallel_dispatch(qr.ffi.NULL, gsel, yp, wp, xp,
                                                       qr.ffi.NULL, n, k, sp, size)
    checks["gemv_null_pool"] = (st, bool(np.all(np.isnan(y))), 4)
    assert qr.lib.v8_qlr_gemm_scratch_bytes(9, 896) == 0
    assert qr.lib.v8_qlr_gemm_scratch_bytes(0, 512) == 0
    assert qr.lib.v8_qlr_gemv_scratch_bytes(896) == 0
    ok = all(st == expect and untouched for st, untouched, expect in checks.values())
    for shape in ("gemv", "gemm"):
        evidence(Rung.PRODUCTION, ok, **who(1, shape), what="argument checks before any write",
                 checks={name: f"status {st} (want {e}), untouched={u}"
                         for name, (st, u, e) in checks.items()})
    assert ok, checks


# ---- integer bounds ---------------------------------------------------------------------------

@pytest.mark.parametrize("m", [1, 33])
def test_production_at_the_integer_bounds(qr: QR, evidence: Any, m: int) -> None:
    """Maximal codes, scales and mins against activations of magnitude 127 everywhere: the
    vector GEMM keeps group dots in int16 pair sums, which this input takes to their
    largest values (and the GEMV's int32 sums to theirs)."""
    n, k = 64, 512
    w = bound_blocks("q4_k", n, k, 0)
    x = bound_activation(m, k)
    shapes = ("gemv", "gemm") if m == 1 else ("gemm",)
    try:
        for shape in shapes:
            st, y_ref = qr.run(shape, "ref", w, x)
            assert st == V8_OK and np.all(np.isfinite(y_ref)) and np.all(y_ref != 0)
            for isa, mask in qr.isas():
                qr.lib.v8_cpu_restrict(mask)
                st, y = qr.run(shape, "prod", w, x)
                same, total = bitexact(y_ref, y)
                evidence(Rung.PRODUCTION, st == V8_OK and same == total, **who(m, shape),
                         shape=f"{m}x{n}x{k}", isa=isa, cpu_mask=hex(mask),
                         inputs="integer_bounds", bitexact=f"{same}/{total}")
                assert st == V8_OK and same == total, (shape, isa, hex(mask), same, total)
    finally:
        qr.lib.v8_cpu_restrict(ALL_FEATURES)


# ---- AVX-512 variants, emulated (hosts without AVX-512) ----------------------------------------

# tokens: m < 4 (super-block tiles only), m % 4 == 3 (a 3-token super-block tail), m % 4 == 1
# (a one-token tail: the paired-row GEMV), 64 + 1; rows not a multiple of the 16-row tile
EMU_CASES = [((264, 512), 3), ((40, 512), 7), ((100, 768), 33), ((520, 256), 65)]


@pytest.fixture(scope="module")
def qr_emulated() -> Any:
    """qr_linear.c built with its AVX-512 variants on portable intrinsic emulations."""
    return emulated_module("v8_qr_avx512_emulated", Path(__file__).parent / "qr_avx512_emulated.c",
                           "quant_repacked/qr_linear.c", """
        int qr_emulated_avx512_gemm(int vnni, float *y, const void *w, const float *x,
                                    const float *bias, int64_t m, int64_t n, int64_t k,
                                    void *scratch, size_t scratch_bytes);""")


def emulated_vs_oracle(qr: QR, emu: Any, evidence: Any, w: np.ndarray, x: np.ndarray,
                       bias: np.ndarray | None, **detail: Any) -> None:
    st, y_ref = qr.run("gemm", "ref", w, x, bias=bias)
    assert st == V8_OK
    check_emulated_gemm(emu, "qr_emulated_avx512_gemm", (), y_ref, w, x, bias,
                        qr.lib.v8_qlr_gemm_scratch_bytes(*x.shape), evidence, **who(x.shape[0]),
                        **detail)


@pytest.mark.parametrize("case", EMU_CASES, ids=[f"{sid(s)}-m{m}" for s, m in EMU_CASES])
def test_emulated_avx512_gemm_vs_oracle(qr: QR, qr_emulated: Any, weights: Any, evidence: Any,
                                        case: tuple[tuple[int, int], int]) -> None:
    """Both AVX-512 variants of the GEMM (token-lane tile: int16 group dots, or dpbusd with
    VNNI; super-block tile for the m mod 4 tail) on ggml-quantized weights and on random
    bytes in every field, with a bias."""
    (n, k), m = case
    x = make_activation(m, k, 41 + m)
    bias = make_activation(1, n, 6)[0]
    for weights_kind, w in (("ggml_quantized", weights.get(n, k)),
                            ("random_blocks", random_blocks(n, k, 13 + n))):
        emulated_vs_oracle(qr, qr_emulated, evidence, w, x, bias, inputs=weights_kind)


@pytest.mark.parametrize("m", [1, 7, 33])
def test_emulated_avx512_gemm_at_the_integer_bounds(qr: QR, qr_emulated: Any, evidence: Any,
                                                    m: int) -> None:
    n, k = 40, 512
    emulated_vs_oracle(qr, qr_emulated, evidence, bound_blocks("q4_k", n, k, 0), bound_activation(m, k),
                       None, inputs="integer_bounds")
