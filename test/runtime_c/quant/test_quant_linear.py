"""Evidence ladder for the quantized linear contracts (Q4_K / Q6_K x Q8_K).

external   ggml mul_mat (ggml-quantized weights, via GGUF) vs our scalar oracle, bit for bit
oracle     numpy dequantization (gguf.quants) x numpy Q8_K model vs oracle, stated tolerance;
           our reference quantizers vs ggml_quantize_chunk bytes; Q8_K quantizer vs numpy model
production AVX-512 and AVX2 variants vs oracle, bit for bit
threadpool 1, 2, 3, 4, 8 workers vs oracle, bit for bit; split-K vs its own oracle
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from ql_support import (
    ALL_FEATURES,
    AVX2_ONLY,
    CONTRACT_Q4,
    CONTRACT_Q6,
    CONTRACT_SPLIT,
    ISA_NAMES,
    MAP_Q4_GEMM,
    MAP_Q4_GEMV,
    MAP_Q4_SPLIT,
    MAP_Q6_GEMM,
    MAP_Q6_GEMV,
    NO_VNNI,
    QK_K,
    QL,
    bitexact,
    cpu_restricted,
    make_activation,
    make_weights,
)

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Outcome, Rung

V8_OK = constants(["v8_runtime.h"])["V8_OK"]
GEMV_SHAPES = [(1024, 1024), (3072, 1024), (1024, 3072), (896, 4864), (4096, 4096), (151936, 1024)]
GEMM_SHAPES = [(1024, 1024), (896, 4864), (1024, 3072)]
GEMM_TOKENS = [8, 32, 128]
WORKERS = [1, 2, 3, 4, 8]
FMTS = ["q4_k", "q6_k"]
CONTRACT = {"q4_k": CONTRACT_Q4, "q6_k": CONTRACT_Q6}
GEMV_MAP = {"q4_k": MAP_Q4_GEMV, "q6_k": MAP_Q6_GEMV}
GEMM_MAP = {"q4_k": MAP_Q4_GEMM, "q6_k": MAP_Q6_GEMM}


def shape_id(s: tuple[int, int]) -> str:
    return f"{s[0]}x{s[1]}"


# ---- independent numpy models ---------------------------------------------

def numpy_q8_k(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q8_K of rows of x: (d [rows, nb] fp32, q [rows, k] int8, bsums [rows, nb*16])."""
    rows = x.reshape(-1, QK_K).astype(np.float32)
    amax_idx = np.argmax(np.abs(rows), axis=1)        # first maximal magnitude
    mx = rows[np.arange(rows.shape[0]), amax_idx]
    zero = mx == 0
    with np.errstate(divide="ignore"):
        iscale = np.where(zero, np.float32(0), np.float32(-127.0) / np.where(zero, 1, mx))
    iscale = iscale.astype(np.float32)
    q = np.rint(iscale[:, None] * rows).astype(np.int32)  # rint: round half to even
    q = np.minimum(q, 127).astype(np.int8)
    with np.errstate(divide="ignore"):
        d = np.where(zero, np.float32(0), np.float32(1) / np.where(zero, 1, iscale)).astype(np.float32)
    bsums = q.reshape(-1, 16, 16).astype(np.int32).sum(axis=2).astype(np.int16)
    k = x.shape[-1]
    return d.reshape(-1, k // QK_K), q.reshape(-1, k), bsums.reshape(-1, k // 16)


def q8_k_bytes(d: np.ndarray, q: np.ndarray, bsums: np.ndarray) -> np.ndarray:
    nb = d.size
    blk = np.zeros((nb, 292), dtype=np.uint8)
    blk[:, 0:4] = d.reshape(nb, 1).view(np.uint8)
    blk[:, 4:260] = q.reshape(nb, QK_K).view(np.uint8)
    blk[:, 260:292] = bsums.reshape(nb, 16).astype("<i2").view(np.uint8)
    return blk.reshape(d.shape[0], -1)


def gguf_dequant(fmt: str, wq: np.ndarray) -> np.ndarray:
    import gguf
    from gguf.quants import dequantize

    qtype = gguf.GGMLQuantizationType.Q4_K if fmt == "q4_k" else gguf.GGMLQuantizationType.Q6_K
    return dequantize(np.ascontiguousarray(wq), qtype).astype(np.float32)


# ---- formats -------------------------------------------------------------

@pytest.mark.parametrize("fmt", FMTS)
def test_reference_quantizer_matches_ggml_bytes(ql: QL, ggml_mod: Any, evidence: Any,
                                                fmt: str) -> None:
    from ql_support import GgmlLinear

    n, k = 1024, 1024
    w = make_weights(n, k, 11)
    ours = ql.quantize(fmt, w)
    if ggml_mod is None:
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=CONTRACT[fmt], provider=GEMV_MAP[fmt],
                 what=f"{fmt} reference quantizer vs ggml_quantize_chunk", reason="ggml not importable")
        pytest.fail("ggml-python is not importable: external rung unresolved")
    runner = GgmlLinear(ggml_mod, fmt, n, k, 1)
    theirs = runner.quantize(w)
    runner.close()
    same_bytes = int(np.count_nonzero(ours == theirs))
    equal = bool(np.array_equal(ours, theirs))
    evidence(Rung.EXTERNAL, equal, contract=CONTRACT[fmt], provider=GEMV_MAP[fmt],
             what=f"{fmt} reference quantizer vs ggml_quantize_chunk", shape=f"{n}x{k}",
             bytes_equal=f"{same_bytes}/{ours.size}")
    assert equal


def test_q8_k_quantizer_matches_numpy_model(ql: QL, evidence: Any) -> None:
    x = make_activation(4096, 5, m=4)
    x[1, 256:512] = 0.0                      # an all-zero block: d = 0
    x[2, 7] = -5e3                          # ties: first value of largest magnitude wins
    x[2, 9] = 5e3
    x[3, :256] = np.float32(0.5) / np.float32(127) * np.arange(-128, 128, dtype=np.float32)
    model = q8_k_bytes(*numpy_q8_k(x))
    # the full CPU takes its vector block (AVX-512 or AVX2), mask 0 the scalar one
    for mask in (ALL_FEATURES, 0):
        with cpu_restricted(ql, mask):
            ours = ql.quantize("q8_k", x)
        equal = bool(np.array_equal(ours, model))
        evidence(Rung.ORACLE, equal, contract=CONTRACT_Q4, provider=MAP_Q4_GEMV, cpu_mask=hex(mask),
                 what="Q8_K activation quantizer vs numpy model (round half even, d=1/iscale, bsums)",
                 bytes_equal=f"{int(np.count_nonzero(ours == model))}/{ours.size}")
        assert equal, hex(mask)


def test_q8_k_quantizer_vector_and_scalar_blocks_agree(ql: QL) -> None:
    """Non-finite blocks (which the vector block hands to the scalar one) and ties of equal
    magnitude and opposite sign give the same bytes on every path."""
    x = make_activation(1024, 6, m=6)
    x[0, 3] = np.inf
    x[1, 300] = np.nan
    x[2, 600] = -np.inf
    x[3, 10], x[3, 11] = -1e4, 1e4           # (the data's magnitudes stay below 1e3)
    x[4, 20], x[4, 21] = 1e4, -1e4
    x[5, :256] = np.float32(1e-38)            # subnormal-range iscale products
    runs = []
    for mask in (ALL_FEATURES, 0):
        with cpu_restricted(ql, mask):
            runs.append(ql.quantize("q8_k", x))
    assert np.array_equal(runs[0], runs[1])


# ---- external: ggml mul_mat vs oracle, GEMV --------------------------------

@pytest.mark.parametrize("shape", GEMV_SHAPES, ids=shape_id)
@pytest.mark.parametrize("fmt", FMTS)
def test_gemv_oracle_vs_ggml(ql: QL, models: Any, evidence: Any, fmt: str,
                             shape: tuple[int, int]) -> None:
    n, k = shape
    model = models.get(fmt, n, k)
    st, y_ref = ql.linear(fmt, "ref", model.wq, model.x)
    assert st == V8_OK
    runner = models.runner(model, 1)
    if runner is None:
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=CONTRACT[fmt], provider=GEMV_MAP[fmt],
                 shape=f"{n}x{k}", reason="ggml not importable")
        pytest.fail("ggml-python is not importable: external rung unresolved")
    results = {}
    for threads in (1, 2):
        y_g = runner.run(model.x, threads)[0]
        results[threads] = bitexact(y_ref, y_g)
    ok = all(same == total for same, total in results.values())
    evidence(Rung.EXTERNAL, ok, contract=CONTRACT[fmt], provider=GEMV_MAP[fmt], shape=f"{n}x{k}",
             backend="ggml_mul_mat (ggml-python 0.0.45)", weights="ggml_quantize_chunk via GGUF",
             bitexact_1thread="%d/%d" % results[1], bitexact_2threads="%d/%d" % results[2])
    assert ok, results


# ---- oracle: numpy dequantization ------------------------------------------

@pytest.mark.parametrize("shape", GEMV_SHAPES, ids=shape_id)
@pytest.mark.parametrize("fmt", FMTS)
def test_gemv_oracle_vs_numpy_dequant(ql: QL, models: Any, evidence: Any, fmt: str,
                                      shape: tuple[int, int]) -> None:
    n, k = shape
    model = models.get(fmt, n, k)
    rows = min(n, 4096)                    # the vocabulary shape is checked on its first rows
    st, y_ref = ql.linear(fmt, "ref", model.wq[:rows], model.x)
    assert st == V8_OK
    w_deq = gguf_dequant(fmt, model.wq[:rows]).reshape(rows, k).astype(np.float64)
    d, q, _ = numpy_q8_k(model.x)
    x_deq = (np.repeat(d.reshape(-1), QK_K) * q.reshape(-1).astype(np.float32)).astype(np.float64)
    y_np = w_deq @ x_deq
    scale = np.abs(w_deq) @ np.abs(x_deq)  # condition of each dot
    err = np.abs(y_ref.astype(np.float64) - y_np)
    rel = float(np.max(err / np.maximum(scale, 1e-30)))
    tol = 2e-5                             # fp16 scale products and fp32 lane sums
    same, total = bitexact(y_ref, y_np.astype(np.float32))
    ok = rel <= tol
    evidence(Rung.ORACLE, ok, contract=CONTRACT[fmt], provider=GEMV_MAP[fmt], shape=f"{rows}x{k}",
             model="gguf.quants.dequantize x numpy Q8_K, float64 matmul",
             max_abs_err=float(np.max(err)), max_err_rel_to_sum_abs=rel, tolerance_rel=tol,
             fp32_bits_equal_to_float64_model=f"{same}/{total}")
    assert ok, rel
    # the fp64 model differs from the fp32 lane tree in the last bits somewhere:
    # evidence that bit-exact comparisons here can see a different order
    assert same < total


# ---- production vs oracle (both ISA variants) -------------------------------

def _isas(ql: QL) -> list[tuple[str, int]]:
    """(variant, mask) for every dispatch path this host can take; the avx512
    variant appears twice when the CPU has VNNI (with and without it)."""
    ql.lib.v8_cpu_restrict(ALL_FEATURES)
    best = ql.lib.v8_cpu_best_isa()
    has_vnni = bool(ql.lib.v8_cpu_features() & ~NO_VNNI)
    out = []
    if best == 2:
        out.append(("avx512", ALL_FEATURES))
        if has_vnni:
            out.append(("avx512", NO_VNNI))
    if best >= 1:
        out.append(("avx2", AVX2_ONLY))
    out.append(("scalar", 0))
    return out


@pytest.mark.parametrize("shape", GEMV_SHAPES, ids=shape_id)
@pytest.mark.parametrize("fmt", FMTS)
def test_gemv_production_vs_oracle(ql: QL, models: Any, evidence: Any, fmt: str,
                                   shape: tuple[int, int]) -> None:
    n, k = shape
    model = models.get(fmt, n, k)
    bias = make_activation(n, 99)
    st, y_ref = ql.linear(fmt, "ref", model.wq, model.x, bias=bias)
    assert st == V8_OK
    try:
        for isa, mask in _isas(ql):
            ql.lib.v8_cpu_restrict(mask)
            assert ISA_NAMES[ql.lib.v8_cpu_best_isa()] == isa
            st, y = ql.linear(fmt, "prod", model.wq, model.x, bias=bias)
            same, total = bitexact(y_ref, y)
            evidence(Rung.PRODUCTION, st == V8_OK and same == total, contract=CONTRACT[fmt],
                     provider=GEMV_MAP[fmt], shape=f"{n}x{k}", isa=isa, bias=True,
                     cpu_mask=hex(mask), bitexact=f"{same}/{total}")
            assert st == V8_OK and same == total, (isa, hex(mask), same, total)
    finally:
        ql.lib.v8_cpu_restrict(ALL_FEATURES)


# ---- threadpool vs oracle ---------------------------------------------------

@pytest.mark.parametrize("shape", GEMV_SHAPES, ids=shape_id)
@pytest.mark.parametrize("fmt", FMTS)
def test_gemv_threadpool_vs_oracle(ql: QL, models: Any, evidence: Any, fmt: str,
                                   shape: tuple[int, int]) -> None:
    n, k = shape
    model = models.get(fmt, n, k)
    st, y_ref = ql.linear(fmt, "ref", model.wq, model.x)
    assert st == V8_OK
    for workers in WORKERS:
        st, y = ql.linear(fmt, "pool", model.wq, model.x, workers=workers)
        same, total = bitexact(y_ref, y)
        evidence(Rung.THREADPOOL, st == V8_OK and same == total, contract=CONTRACT[fmt],
                 provider=GEMV_MAP[fmt], shape=f"{n}x{k}", partition="independent_rows",
                 workers=workers, bitexact=f"{same}/{total}")
        assert st == V8_OK and same == total, (workers, same, total)


# ---- GEMM ---------------------------------------------------------------------

@pytest.mark.parametrize("m", GEMM_TOKENS)
@pytest.mark.parametrize("shape", GEMM_SHAPES, ids=shape_id)
@pytest.mark.parametrize("fmt", FMTS)
def test_gemm_ladder(ql: QL, models: Any, evidence: Any, fmt: str, shape: tuple[int, int],
                     m: int) -> None:
    n, k = shape
    model = models.get(fmt, n, k)
    x = make_activation(k, 1000 + m, m=m)
    st, y_ref = ql.linear(fmt, "ref", model.wq, x)
    assert st == V8_OK and y_ref.shape == (m, n)
    common = dict(contract=CONTRACT[fmt], provider=GEMM_MAP[fmt], shape=f"{m}x{n}x{k}")
    runner = models.runner(model, m)
    if runner is None:
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, reason="ggml not importable", **common)
        pytest.fail("ggml-python is not importable: external rung unresolved")
    same, total = bitexact(y_ref, runner.run(x, 2))
    evidence(Rung.EXTERNAL, same == total, backend="ggml_mul_mat", bitexact=f"{same}/{total}",
             **common)
    assert same == total
    try:
        for isa, mask in _isas(ql)[:-1]:
            ql.lib.v8_cpu_restrict(mask)
            st, y = ql.linear(fmt, "prod", model.wq, x)
            same, total = bitexact(y_ref, y)
            evidence(Rung.PRODUCTION, st == V8_OK and same == total, isa=isa, cpu_mask=hex(mask),
                     bitexact=f"{same}/{total}", **common)
            assert st == V8_OK and same == total, (isa, hex(mask))
    finally:
        ql.lib.v8_cpu_restrict(ALL_FEATURES)
    for workers in WORKERS:
        st, y = ql.linear(fmt, "pool", model.wq, x, workers=workers)
        same, total = bitexact(y_ref, y)
        evidence(Rung.THREADPOOL, st == V8_OK and same == total, partition="output_tiles",
                 workers=workers, bitexact=f"{same}/{total}", **common)
        assert st == V8_OK and same == total, workers


# GEMM tiles decode a weight super-block once per group of tokens: token
# counts that leave a partial group, on every dispatch path and pool size.
@pytest.mark.parametrize("m", [2, 3, 5, 7, 33])
@pytest.mark.parametrize("fmt", FMTS)
def test_gemm_token_groups(ql: QL, models: Any, evidence: Any, fmt: str, m: int) -> None:
    n, k = 1024, 1024
    model = models.get(fmt, n, k)
    x = make_activation(k, 2000 + m, m=m)
    bias = make_activation(n, 98)
    st, y_ref = ql.linear(fmt, "ref", model.wq, x, bias=bias)
    assert st == V8_OK
    common = dict(contract=CONTRACT[fmt], provider=GEMM_MAP[fmt], shape=f"{m}x{n}x{k}")
    try:
        for isa, mask in _isas(ql)[:-1]:
            ql.lib.v8_cpu_restrict(mask)
            runs = [("prod", 0)] + [("pool", w) for w in (2, 3)]
            for variant, workers in runs:
                st, y = ql.linear(fmt, variant, model.wq, x, workers=workers, bias=bias)
                same, total = bitexact(y_ref, y)
                evidence(Rung.PRODUCTION if variant == "prod" else Rung.THREADPOOL,
                         st == V8_OK and same == total, isa=isa, cpu_mask=hex(mask),
                         workers=workers, bitexact=f"{same}/{total}", **common)
                assert st == V8_OK and same == total, (isa, hex(mask), variant, workers)
    finally:
        ql.lib.v8_cpu_restrict(ALL_FEATURES)


# ---- split-K --------------------------------------------------------------------

SPLIT_SHAPES = [(1024, 1024), (896, 4864), (4096, 4096)]


@pytest.mark.parametrize("shape", SPLIT_SHAPES, ids=shape_id)
def test_split_k_ladder(ql: QL, models: Any, evidence: Any, shape: tuple[int, int]) -> None:
    n, k = shape
    model = models.get("q4_k", n, k)
    bias = make_activation(n, 77)
    st, y_block = ql.linear("q4_k", "ref", model.wq, model.x, bias=bias)
    assert st == V8_OK
    common = dict(contract=CONTRACT_SPLIT, provider=MAP_Q4_SPLIT, shape=f"{n}x{k}")
    for parts in WORKERS:
        st, y_ref = ql.split_k("ref", model.wq, model.x, parts, bias=bias)
        assert st == V8_OK
        if parts == 1:                         # one chunk is the block-order dot itself
            assert bitexact(y_ref, y_block)[0] == n
        st_p, y_p = ql.split_k("prod", model.wq, model.x, parts, bias=bias)
        st_t, y_t = ql.split_k("pool", model.wq, model.x, parts, workers=parts, bias=bias)
        sp, tot = bitexact(y_ref, y_p)
        stp, _ = bitexact(y_ref, y_t)
        try:                                   # the other dispatch paths, production only
            for isa, mask in _isas(ql)[1:-1]:
                ql.lib.v8_cpu_restrict(mask)
                st_i, y_i = ql.split_k("prod", model.wq, model.x, parts, bias=bias)
                si, _ = bitexact(y_ref, y_i)
                evidence(Rung.PRODUCTION, st_i == V8_OK and si == tot, parts=parts, isa=isa,
                         cpu_mask=hex(mask), bitexact=f"{si}/{tot}", **common)
                assert st_i == V8_OK and si == tot, (isa, hex(mask), parts)
        finally:
            ql.lib.v8_cpu_restrict(ALL_FEATURES)
        evidence(Rung.PRODUCTION, st_p == V8_OK and sp == tot, parts=parts,
                 bitexact=f"{sp}/{tot}", **common)
        evidence(Rung.THREADPOOL, st_t == V8_OK and stp == tot, partition="split_k", parts=parts,
                 workers=parts, bitexact=f"{stp}/{tot}", **common)
        err = np.abs(y_ref.astype(np.float64) - y_block.astype(np.float64))
        # norm-wise: outputs near zero by cancellation carry the error of the large terms
        rel = float(np.max(err) / np.max(np.abs(y_block.astype(np.float64))))
        tol = 1e-5
        differ = n - bitexact(y_ref, y_block)[0]
        evidence(Rung.ORACLE, rel <= tol, parts=parts,
                 against="q4_k_x_q8_k_fp32_block_order oracle", max_abs_err=float(np.max(err)),
                 max_rel_err=rel, tolerance_rel=tol, outputs_differing=f"{differ}/{n}", **common)
        assert st_p == V8_OK and sp == tot
        assert st_t == V8_OK and stp == tot
        assert rel <= tol
        if parts > 1:
            assert differ > 0                  # the partition is visible in the bits


# ---- C API discipline -----------------------------------------------------------

@pytest.mark.parametrize("fmt", FMTS)
def test_api_rejects_bad_input_without_writing(ql: QL, evidence: Any, fmt: str) -> None:
    k_bad, n = 896, 64
    w_bad = np.zeros((n, k_bad // QK_K * 200 + 200), dtype=np.uint8)
    x_bad = make_activation(k_bad, 3)
    checks = {}
    for variant in ("ref", "prod", "pool"):
        st, y = ql.linear(fmt, variant, w_bad, x_bad, workers=2)
        checks[f"{variant}_k896"] = (st, bool(np.all(np.isnan(y))))
        st, y = ql.linear(fmt, variant, w_bad, x_bad.reshape(1, -1).repeat(4, 0), workers=2)
        checks[f"{variant}_gemm_k896"] = (st, bool(np.all(np.isnan(y))))
        w = ql.quantize(fmt, make_weights(n, 1024, 4))
        x = make_activation(1024, 4)
        st, y = ql.linear(fmt, variant, w, x, workers=2, contract=99)
        checks[f"{variant}_selector"] = (st, bool(np.all(np.isnan(y))))
        st, y = ql.linear(fmt, variant, w, x, workers=2,
                          contract=ql.lib.V8_QL_Q4_K_X_Q8_K_FP32_SPLIT_K_ASCENDING_MERGE)
        checks[f"{variant}_other_contract"] = (st, bool(np.all(np.isnan(y))))
    # NULL weight and short scratch through the raw entry point
    y = np.full(n, np.nan, dtype=np.float32)
    x = make_activation(1024, 4)
    scratch = np.zeros(1024 // QK_K * 292 // 4, dtype=np.float32)
    fn = getattr(ql.lib, f"v8_{fmt}_gemv")
    sel = ql.lib.V8_QL_Q4_K_X_Q8_K_FP32_BLOCK_ORDER if fmt == "q4_k" else ql.lib.V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER
    st = fn(sel, ql.ptr(y, "float *"), ql.ffi.NULL, ql.ptr(x, "float *"), ql.ffi.NULL, n, 1024,
            ql.ptr(scratch, "void *"), scratch.nbytes)
    checks["null_weight"] = (st, bool(np.all(np.isnan(y))))
    w = ql.quantize(fmt, make_weights(n, 1024, 4))
    st = fn(sel, ql.ptr(y, "float *"), ql.ptr(w, "void *"), ql.ptr(x, "float *"), ql.ffi.NULL, n,
            1024, ql.ptr(scratch, "void *"), scratch.nbytes - 4)
    checks["short_scratch"] = (st, bool(np.all(np.isnan(y))))
    expected = {"k896": 2, "gemm_k896": 2, "selector": 3, "other_contract": 3}
    ok = True
    for name, (st, untouched) in checks.items():
        want = 1 if name == "null_weight" else 2 if name == "short_scratch" else expected[name.split("_", 1)[1]]
        ok &= st == want and untouched
    evidence(Rung.PRODUCTION, ok, contract=CONTRACT[fmt], provider=GEMV_MAP[fmt],
             what="bad input: status and output untouched",
             checks={k: v[0] for k, v in checks.items()})
    assert ok, checks


def test_split_k_rejects_bad_input(ql: QL, evidence: Any) -> None:
    w = ql.quantize("q4_k", make_weights(32, 1024, 4))
    x = make_activation(1024, 4)
    out = {}
    for variant in ("ref", "prod", "pool"):
        st, y = ql.split_k(variant, w, x, 0, workers=2)
        out[f"{variant}_parts0"] = (st, bool(np.all(np.isnan(y))))
        st, y = ql.split_k(variant, w, make_activation(896, 1), 2, workers=2)
        out[f"{variant}_k896"] = (st, bool(np.all(np.isnan(y))))
    ok = all(u for _, u in out.values()) and all(
        st == (4 if "parts0" in name else 2) for name, (st, _) in out.items())
    evidence(Rung.PRODUCTION, ok, contract=CONTRACT_SPLIT, provider=MAP_Q4_SPLIT,
             what="bad input: status and output untouched", checks={k: v[0] for k, v in out.items()})
    assert ok, out
