"""Evidence ladder for the repacked Q4_0 x Q8_0 contract
(contracts/quantized_linear_repacked_q4_0.json): llama.cpp's q4_0_8x8 repacked GEMV/GEMM.

oracle      independent numpy model (repacked_q4_0_model.py) vs the scalar C oracle, bit for bit
external    llama.cpp's mul_mat on a weight in its CPU_REPACK buffer (GgmlOps.mul_mat_repacked,
            ggml 0.25.3's ggml_gemv/ggml_gemm_q4_0_8x8_q8_0) vs the oracle and production,
            threads 1 and 2, N x K in {896x896, 1024x3072, 3072x1024, 4864x896, 904x512},
            M in {1, 2, 3, 5, 7, 8, 32, 64, 128}, bit for bit
production  AVX-512 (with and without VNNI), AVX2 and scalar dispatch vs oracle, bit for bit
threadpool  1, 2, 3 workers vs oracle, bit for bit
contrast    the plain contract (q4_0_x_q8_0_fp32_block_order) and llama.cpp's plain mul_mat
            differ from llama.cpp's repacked result: the repacked arithmetic is its own
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from qr0_support import CONTRACT, PROVIDER, QK, QR0, SELECTOR, random_q4_0
from qr_support import ALL_FEATURES, ISA_NAMES, bitexact, make_activation, make_weights
from repacked_q4_0_model import repacked_q4_0_gemm

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Outcome, Rung

_V8 = constants(["v8_runtime.h"])
V8_OK = _V8["V8_OK"]
V8_ERR_BAD_DIMENSION = _V8["V8_ERR_BAD_DIMENSION"]
V8_ERR_UNKNOWN_SELECTOR = _V8["V8_ERR_UNKNOWN_SELECTOR"]
BACKEND = "llama.cpp ggml 0.25.3 mul_mat, weight in CPU_REPACK (q4_0_8x8_q8_0)"


@pytest.fixture(scope="module")
def qr0() -> Iterator[QR0]:
    lib = QR0()
    yield lib
    lib.lib.v8_cpu_restrict(ALL_FEATURES)
    lib.close()


class Weights:
    """Q4_0 rows per shape: llama.cpp's own quantizer when its ggml loads, else v8's
    reference quantizer (byte-identical to ggml_quantize_chunk for Q4_0)."""

    def __init__(self, ggml: Any | None, qr0: QR0) -> None:
        self.ggml, self.qr0 = ggml, qr0
        self.cache: dict[tuple[int, int], np.ndarray] = {}

    def get(self, n: int, k: int) -> np.ndarray:
        if (n, k) not in self.cache:
            seed = zlib.crc32(f"repacked:q4_0:{n}:{k}".encode()) & 0xFFFF
            w = make_weights(n, k, seed)
            self.cache[(n, k)] = (self.ggml.quantize("q4_0", w) if self.ggml is not None
                                  else self.qr0.quantize_ref(w))
        return self.cache[(n, k)]


@pytest.fixture(scope="module")
def weights(ggml_ops: Any | None, qr0: QR0) -> Weights:
    return Weights(ggml_ops, qr0)


def sid(s: tuple[int, int]) -> str:
    return f"{s[0]}x{s[1]}"


def kinds(m: int) -> tuple[str, ...]:
    return ("gemv", "gemm") if m == 1 else ("gemm",)


def who(kind: str) -> dict[str, str]:
    return dict(contract=CONTRACT, provider=PROVIDER[kind])


def special_activation(m: int, k: int, seed: int) -> np.ndarray:
    """make_activation with an all-zero block, a block whose largest magnitude is negative
    and a block of exact halves (x * 127/amax lands on .5: round half to even shows)."""
    x = make_activation(m, k, seed)
    x[0, :QK] = 0.0
    if k >= 3 * QK:
        x[-1, QK:2 * QK] *= np.float32(0.25)
        x[-1, QK + 3] = np.float32(-40.0)
        x[0, 2 * QK:3 * QK] = np.float32(0.5) * np.arange(-16, 16, dtype=np.float32)
        x[0, 2 * QK] = np.float32(-127.0)
    return x


# ---- oracle vs the independent numpy model ------------------------------------------

MODEL_CASES = [((896, 896), 1), ((896, 896), 5), ((1024, 3072), 8), ((4864, 896), 3),
               ((904, 512), 32), ((256, 256), 64), ((512, 1024), 128)]


@pytest.mark.parametrize("case", MODEL_CASES, ids=[f"{sid(s)}-m{m}" for s, m in MODEL_CASES])
def test_oracle_vs_numpy_model(qr0: QR0, weights: Weights, evidence: Any,
                               case: tuple[tuple[int, int], int]) -> None:
    (n, k), m = case
    w = weights.get(n, k)
    x = special_activation(m, k, 31 + m)
    bias = make_activation(1, n, 7)[0]
    y_np = repacked_q4_0_gemm(w, x, bias=bias)
    figures: dict[str, str] = {}
    ok = True
    for kind in kinds(m):
        st, y_ref = qr0.run(kind, "ref", w, x, bias=bias)
        same, total = bitexact(y_ref, y_np)
        figures[f"{kind}_bitexact"] = f"{same}/{total}"
        good = st == V8_OK and same == total
        ok = ok and good
        evidence(Rung.ORACLE, good, **who(kind), shape=f"{m}x{n}x{k}", bias=True,
                 bitexact=f"{same}/{total}",
                 model="numpy: own block decoding and Q8_0 quantizer, exact int dots, exact "
                       "fp32 fma (round-to-odd)")
    assert ok, figures


def test_oracle_vs_numpy_model_random_blocks(qr0: QR0, evidence: Any) -> None:
    """Random Q4_0 bytes (every nibble value, negative scales), no ggml involved."""
    n, k, m = 264, 768, 6
    w = random_q4_0(n, k, 5)
    x = special_activation(m, k, 6)
    y_np = repacked_q4_0_gemm(w, x)
    st, y_ref = qr0.run("gemm", "ref", w, x)
    same, total = bitexact(y_ref, y_np)
    evidence(Rung.ORACLE, st == V8_OK and same == total, **who("gemm"), shape=f"{m}x{n}x{k}",
             weights="random blocks", bitexact=f"{same}/{total}")
    assert st == V8_OK and same == total, (same, total)


# ---- external: llama.cpp's repacked kernels ------------------------------------------------

EXT_SHAPES = [(896, 896), (1024, 3072), (3072, 1024), (4864, 896), (904, 512)]
EXT_TOKENS = [1, 2, 3, 5, 7, 8, 32, 64, 128]


@pytest.mark.parametrize("m", EXT_TOKENS)
@pytest.mark.parametrize("shape", EXT_SHAPES, ids=sid)
def test_external_vs_llamacpp_repacked(qr0: QR0, weights: Weights, ggml_ops: Any,
                                       evidence: Any, shape: tuple[int, int], m: int) -> None:
    n, k = shape
    if ggml_ops is None:
        for kind in kinds(m):
            evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, reason="llama-cpp-python not importable",
                     shape=f"{m}x{n}x{k}", **who(kind))
        pytest.fail("llama.cpp's ggml is not importable: external rung unresolved")
    w = weights.get(n, k)
    x = make_activation(m, k, 1000 * m + n + k)
    results: dict[tuple[str, str], np.ndarray] = {}
    for kind in kinds(m):
        for variant in ("ref", "prod"):
            st, y = qr0.run(kind, variant, w, x)
            assert st == V8_OK
            results[(kind, variant)] = y
    ok_all = True
    for kind in kinds(m):
        figures: dict[str, str] = {}
        ok = True
        for threads in (1, 2):
            y_g, repacked = ggml_ops.mul_mat_repacked(w, "q4_0", x, k, threads=threads)
            same, total = bitexact(results[(kind, "ref")], y_g)
            same_p, _ = bitexact(results[(kind, "prod")], y_g)
            figures[f"oracle_bitexact_{threads}thread"] = f"{same}/{total}"
            figures[f"production_bitexact_{threads}thread"] = f"{same_p}/{total}"
            figures[f"repacked_{threads}thread"] = str(repacked)
            ok = ok and repacked and same == total and same_p == total
        evidence(Rung.EXTERNAL, ok, backend=BACKEND, weights="ggml_quantize_chunk",
                 shape=f"{m}x{n}x{k}", gemm_rows=4 * (m // 4) if m > 3 else 0,
                 gemv_rows=m % 4 if m > 3 else m, **figures, **who(kind))
        ok_all = ok_all and ok
    assert ok_all


def test_repacked_differs_from_plain(qr0: QR0, weights: Weights, ggml_ops: Any,
                                     evidence: Any) -> None:
    """llama.cpp's plain mul_mat and v8's plain Q4_0 contract both disagree with llama.cpp's
    repacked result somewhere, while the repacked contract agrees everywhere."""
    if ggml_ops is None:
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, **who("gemm"),
                 reason="llama-cpp-python not importable")
        pytest.fail("llama.cpp's ggml is not importable")
    n, k, m = 896, 896, 7
    w = weights.get(n, k)
    x = make_activation(m, k, 99)
    y_rep, repacked = ggml_ops.mul_mat_repacked(w, "q4_0", x, k, threads=2)
    y_plain_ggml = ggml_ops.mul_mat(w, "q4_0", x, k, threads=2)
    st, y_contract = qr0.run("gemm", "ref", w, x)
    assert st == V8_OK
    y_plain_v8 = qr0.plain_gemm(w, x)
    figures = {
        "contract_vs_repacked": bitexact(y_contract, y_rep),
        "ggml_plain_vs_repacked": bitexact(y_plain_ggml, y_rep),
        "v8_plain_contract_vs_repacked": bitexact(y_plain_v8, y_rep),
        "v8_plain_contract_vs_ggml_plain": bitexact(y_plain_v8, y_plain_ggml),
    }
    ok = (repacked and figures["contract_vs_repacked"][0] == figures["contract_vs_repacked"][1]
          and figures["ggml_plain_vs_repacked"][0] < figures["ggml_plain_vs_repacked"][1]
          and figures["v8_plain_contract_vs_repacked"][0]
          < figures["v8_plain_contract_vs_repacked"][1]
          and figures["v8_plain_contract_vs_ggml_plain"][0]
          == figures["v8_plain_contract_vs_ggml_plain"][1])
    evidence(Rung.EXTERNAL, ok, **who("gemm"), backend=BACKEND, shape=f"{m}x{n}x{k}",
             **{key: f"{a}/{b}" for key, (a, b) in figures.items()})
    assert ok, figures


def test_llamacpp_repacks_q4_0_only_at_8_row_multiples(ggml_ops: Any, evidence: Any) -> None:
    """The contract's domain: llama.cpp repacks a Q4_0 weight iff its row count is a multiple
    of 8 (at K a multiple of 32 that is not one of 256 too)."""
    if ggml_ops is None:
        evidence(Rung.OBSERVATION, Outcome.UNRESOLVED, contract=CONTRACT,
                 reason="llama-cpp-python not importable")
        pytest.fail("llama.cpp's ggml is not importable")
    seen: dict[str, bool] = {}
    for n in (8, 12, 896, 900, 904):
        for k in (96, 896):
            w = ggml_ops.quantize("q4_0", make_weights(n, k, 11))
            _, repacked = ggml_ops.mul_mat_repacked(w, "q4_0", make_activation(2, k, 4), k)
            seen[f"n{n}_k{k}"] = repacked
    want = {key: int(key[1:].split("_")[0]) % 8 == 0 for key in seen}
    ok = seen == want
    evidence(Rung.OBSERVATION, ok, contract=CONTRACT, backend=BACKEND,
             what="Q4_0 row counts the CPU_REPACK buffer repacks", repacked=seen)
    assert ok, seen


# ---- production: every dispatch path -------------------------------------------------------

PROD_CASES = [((896, 896), 1), ((904, 512), 3), ((1024, 3072), 5), ((4864, 896), 8),
              ((264, 96), 17), ((520, 256), 65), ((896, 896), 128)]


@pytest.mark.parametrize("case", PROD_CASES, ids=[f"{sid(s)}-m{m}" for s, m in PROD_CASES])
def test_production_vs_oracle(qr0: QR0, weights: Weights, evidence: Any,
                              case: tuple[tuple[int, int], int]) -> None:
    (n, k), m = case
    w = weights.get(n, k)
    x = special_activation(m, k, 77 + m)
    bias = make_activation(1, n, 8)[0]
    try:
        for kind in kinds(m):
            st, y_ref = qr0.run(kind, "ref", w, x, bias=bias)
            assert st == V8_OK
            for isa, mask in qr0.isas():       # the CPU masks this host can take
                qr0.lib.v8_cpu_restrict(mask)
                assert ISA_NAMES[qr0.lib.v8_cpu_best_isa()] == isa
                st, y = qr0.run(kind, "prod", w, x, bias=bias)
                same, total = bitexact(y_ref, y)
                evidence(Rung.PRODUCTION, st == V8_OK and same == total, **who(kind),
                         shape=f"{m}x{n}x{k}", isa=isa, cpu_mask=hex(mask), bias=True,
                         bitexact=f"{same}/{total}")
                assert st == V8_OK and same == total, (kind, isa, hex(mask), same, total)
    finally:
        qr0.lib.v8_cpu_restrict(ALL_FEATURES)


# ---- threadpool ------------------------------------------------------------------------------

POOL_CASES = [((896, 896), 1), ((4864, 896), 64), ((904, 512), 7), ((1024, 3072), 32)]


@pytest.mark.parametrize("case", POOL_CASES, ids=[f"{sid(s)}-m{m}" for s, m in POOL_CASES])
def test_threadpool_vs_oracle(qr0: QR0, weights: Weights, evidence: Any,
                              case: tuple[tuple[int, int], int]) -> None:
    (n, k), m = case
    w = weights.get(n, k)
    x = make_activation(m, k, 5 + m)
    bias = make_activation(1, n, 9)[0]
    for kind in kinds(m):
        st, y_ref = qr0.run(kind, "ref", w, x, bias=bias)
        assert st == V8_OK
        for workers in (1, 2, 3):
            st, y = qr0.run(kind, "pool", w, x, workers=workers, bias=bias)
            same, total = bitexact(y_ref, y)
            evidence(Rung.THREADPOOL, st == V8_OK and same == total, **who(kind),
                     shape=f"{m}x{n}x{k}", partition="independent_rows", workers=workers,
                     bitexact=f"{same}/{total}")
            assert st == V8_OK and same == total, (kind, workers, same, total)


# ---- C API discipline ---------------------------------------------------------------------------

def test_api_rejects_bad_input_without_writing(qr0: QR0, weights: Weights, evidence: Any) -> None:
    n, k = 256, 512
    w = weights.get(n, k)
    w12 = random_q4_0(12, k, 3)
    checks: dict[str, tuple[int, bool, int]] = {}
    for kind, m in (("gemv", 1), ("gemm", 9)):
        x = make_activation(m, k, 3)
        for variant in ("ref", "prod", "pool"):
            cases: dict[str, dict[str, Any]] = {
                "k100": dict(x=make_activation(m, 100, 3), expect=V8_ERR_BAD_DIMENSION),
                "n12": dict(w=w12, expect=V8_ERR_BAD_DIMENSION),
                "n250": dict(n=250, expect=V8_ERR_BAD_DIMENSION),
                "selector": dict(contract=99, expect=V8_ERR_UNKNOWN_SELECTOR),
                "plain_selector": dict(contract=int(qr0.lib.V8_QL_Q4_0_X_Q8_0_FP32_BLOCK_ORDER),
                                       expect=V8_ERR_UNKNOWN_SELECTOR),
                "short_scratch": dict(scratch_shrink=1, expect=V8_ERR_BAD_DIMENSION),
            }
            for name, case in cases.items():
                expect = case.pop("expect")
                xx = case.pop("x", x)
                ww = case.pop("w", w)
                st, y = qr0.run(kind, variant, ww, xx, workers=2, **case)
                checks[f"{kind}_{variant}_{name}"] = (st, bool(np.all(np.isnan(y))), expect)
    x = make_activation(9, k, 3)
    y = np.full((9, n), np.nan, np.float32)
    size = qr0.lib.v8_qlr0_gemm_scratch_bytes(9, k)
    scratch = np.zeros(size // 4 + 1, np.float32)
    sel = getattr(qr0.lib, SELECTOR)
    yp, xp, sp, wp = (qr0.ptr(y, "float *"), qr0.ptr(x, "float *"), qr0.ptr(scratch, "void *"),
                      qr0.ptr(w, "void *"))
    null = qr0.ffi.NULL
    checks["null_weight"] = (qr0.lib.v8_q4_0_repacked_gemm(sel, yp, null, xp, null, 9, n, k, sp,
                                                           size), bool(np.all(np.isnan(y))), 1)
    checks["null_scratch"] = (qr0.lib.v8_q4_0_repacked_gemm(sel, yp, wp, xp, null, 9, n, k, null,
                                                            size), bool(np.all(np.isnan(y))), 1)
    checks["m0"] = (qr0.lib.v8_q4_0_repacked_gemm(sel, yp, wp, xp, null, 0, n, k, sp, size),
                    bool(np.all(np.isnan(y))), 2)
    checks["n0"] = (qr0.lib.v8_q4_0_repacked_gemm(sel, yp, wp, xp, null, 9, 0, k, sp, size),
                    bool(np.all(np.isnan(y))), 2)
    checks["null_pool"] = (qr0.lib.v8_q4_0_repacked_gemm_parallel_dispatch(
        null, sel, yp, wp, xp, null, 9, n, k, sp, size), bool(np.all(np.isnan(y))), 4)
    checks["gemv_null_pool"] = (qr0.lib.v8_q4_0_repacked_gemv_parallel_dispatch(
        null, sel, yp, wp, xp, null, n, k, sp, size), bool(np.all(np.isnan(y))), 4)
    sizes_ok = (qr0.lib.v8_qlr0_gemm_scratch_bytes(9, 100) == 0
                and qr0.lib.v8_qlr0_gemm_scratch_bytes(0, 512) == 0
                and qr0.lib.v8_qlr0_gemv_scratch_bytes(100) == 0
                and qr0.lib.v8_qlr0_gemm_scratch_bytes(3, 96) == 3 * 3 * 34)
    ok = sizes_ok and all(st == expect and untouched for st, untouched, expect in checks.values())
    for kind in ("gemv", "gemm"):
        evidence(Rung.PRODUCTION, ok, **who(kind), what="argument checks before any write",
                 sizes_ok=sizes_ok,
                 checks={name: f"status {st} (want {e}), untouched={u}"
                         for name, (st, u, e) in checks.items()})
    assert ok, (sizes_ok, {key: v for key, v in checks.items() if v[0] != v[2] or not v[1]})
