"""Evidence ladder for q5_k_x_q8_k_fp32_block_order (Q5_K weights x Q8_K activations).

external   ggml mul_mat (ggml_quantize_chunk weights via GGUF) vs our scalar oracle, bit for
           bit, at 1 and 2 threads; our reference quantizer vs ggml_quantize_chunk bytes
oracle     an independent numpy model (own Q5_K decoder checked against gguf.quants, numpy
           Q8_K model, int lanes, exactly rounded fp32 FMAs, the min sum, the tree) vs the
           oracle, bit for bit; the same model with an unfused min update differs
production AVX-512 (with and without VNNI) and AVX2 variants vs oracle, bit for bit
threadpool 1, 2, 3, 4, 8 workers vs oracle, bit for bit
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from ql_support import (
    ALL_FEATURES,
    CONTRACT_Q5,
    ISA_NAMES,
    MAP_Q5_GEMM,
    MAP_Q5_GEMV,
    Q5_K_BYTES,
    QK_K,
    QL,
    GgmlLinear,
    bitexact,
    fma32,
    frac,
    isa_paths,
    make_activation,
    make_weights,
    tree8,
)
from test_quant_linear import numpy_q8_k
from test_quant_linear_q0 import check_program

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Outcome, Rung

V8_OK = constants(["v8_runtime.h"])["V8_OK"]
FMT = "q5_k"
GEMV_SHAPES = [(1024, 1024), (3072, 1024), (1024, 3072), (896, 4864), (4096, 4096)]
GEMM_SHAPES = [(1024, 1024), (896, 4864), (1024, 3072)]
GEMM_TOKENS = [1, 8, 32, 128]
WORKERS = [1, 2, 3, 4, 8]


def shape_id(s: tuple[int, int]) -> str:
    return f"{s[0]}x{s[1]}"


def _unresolved(evidence: Any, **what: Any) -> None:
    evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=CONTRACT_Q5, provider=MAP_Q5_GEMV,
             reason="ggml not importable", **what)
    pytest.fail("ggml-python is not importable: external rung unresolved")


# ---- independent numpy model ------------------------------------------------------------

def numpy_q5_k(wq: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """Decode raw Q5_K rows: levels [n, nb, 256] (0..31), sc / mn [n, nb, 8], d / dmin fp16."""
    n, nb = wq.shape[0], k // QK_K
    b = np.ascontiguousarray(wq).reshape(n, nb, Q5_K_BYTES)
    d = b[:, :, 0:2].copy().view("<f2")[..., 0]
    dmin = b[:, :, 2:4].copy().view("<f2")[..., 0]
    s = b[:, :, 4:16].astype(np.int32)
    sc = np.concatenate([s[..., 0:4] & 63, (s[..., 8:12] & 15) | ((s[..., 0:4] >> 6) << 4)], axis=2)
    mn = np.concatenate([s[..., 4:8] & 63, (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)], axis=2)
    qh = b[:, :, 16:48].astype(np.int32)
    qs = b[:, :, 48:176].astype(np.int32).reshape(n, nb, 4, 32)
    levels = np.zeros((n, nb, 4, 2, 32), dtype=np.int32)
    for h in range(4):
        levels[:, :, h, 0] = (qs[:, :, h] & 15) | (((qh >> (2 * h)) & 1) << 4)
        levels[:, :, h, 1] = (qs[:, :, h] >> 4) | (((qh >> (2 * h + 1)) & 1) << 4)
    return {"levels": levels.reshape(n, nb, QK_K), "sc": sc, "mn": mn, "d": d, "dmin": dmin}


def numpy_q5_k_dot(w: dict[str, np.ndarray], x: np.ndarray, *, fused_mins: bool = True) -> np.ndarray:
    """The contract for one activation row: [n] fp32."""
    ad, aq, bsums = numpy_q8_k(x)
    ad, aq, bsums = ad.reshape(-1), aq.reshape(-1, QK_K).astype(np.int32), bsums.reshape(-1, 16)
    n, nb, _ = w["levels"].shape
    acc = np.zeros((n, 8), dtype=np.float32)
    mins = np.zeros(n, dtype=np.float32)
    for i in range(nb):
        prod = (w["levels"][:, i, :] * aq[i]).reshape(n, 8, 8, 4).sum(axis=3)   # [n, sub, lane]
        lanes = (prod * w["sc"][:, i, :, None]).sum(axis=1)
        d = np.float32(ad[i]) * w["d"][:, i].astype(np.float32)
        acc = fma32(np.repeat(d[:, None], 8, axis=1), lanes.astype(np.float32), acc)
        s32 = bsums[i].astype(np.int32).reshape(8, 2).sum(axis=1)
        msum = (w["mn"][:, i, :] * s32).sum(axis=1).astype(np.float32)
        dmin = np.float32(-ad[i]) * w["dmin"][:, i].astype(np.float32)
        mins = fma32(dmin, msum, mins) if fused_mins else (mins + dmin * msum).astype(np.float32)
    return tree8(acc) + mins


# ---- formats -------------------------------------------------------------------------------

def test_q5_k_reference_quantizer_matches_ggml_bytes(ql: QL, ggml_mod: Any, evidence: Any) -> None:
    n, k = 1024, 1024
    w = make_weights(n, k, 13)
    w[5, 256:512] = 0.0                           # an all-zero super-block
    ours = ql.quantize(FMT, w)
    if ggml_mod is None:
        _unresolved(evidence, what="q5_k reference quantizer vs ggml_quantize_chunk")
    runner = GgmlLinear(ggml_mod, FMT, n, k, 1)
    theirs = runner.quantize(w)
    runner.close()
    equal = bool(np.array_equal(ours, theirs))
    evidence(Rung.EXTERNAL, equal, contract=CONTRACT_Q5, provider=MAP_Q5_GEMV,
             what="q5_k reference quantizer vs ggml_quantize_chunk", shape=f"{n}x{k}",
             bytes_equal=f"{int(np.count_nonzero(ours == theirs))}/{ours.size}")
    assert equal


# ---- external: ggml mul_mat vs oracle, GEMV -----------------------------------------------

@pytest.mark.parametrize("shape", GEMV_SHAPES, ids=shape_id)
def test_q5_k_gemv_oracle_vs_ggml(ql: QL, models: Any, evidence: Any, shape: tuple[int, int]) -> None:
    n, k = shape
    model = models.get(FMT, n, k)
    st, y_ref = ql.linear(FMT, "ref", model.wq, model.x)
    assert st == V8_OK
    runner = models.runner(model, 1)
    if runner is None:
        _unresolved(evidence, shape=f"{n}x{k}")
    results = {t: bitexact(y_ref, runner.run(model.x, t)[0]) for t in (1, 2)}
    ok = all(same == total for same, total in results.values())
    evidence(Rung.EXTERNAL, ok, contract=CONTRACT_Q5, provider=MAP_Q5_GEMV, shape=f"{n}x{k}",
             backend="ggml_mul_mat (ggml-python 0.0.45)", weights="ggml_quantize_chunk via GGUF",
             bitexact_1thread=frac(results[1]), bitexact_2threads=frac(results[2]))
    assert ok, results


# ---- oracle: independent numpy model --------------------------------------------------------

@pytest.mark.parametrize("shape", GEMV_SHAPES, ids=shape_id)
def test_q5_k_gemv_oracle_vs_numpy_model(ql: QL, models: Any, evidence: Any,
                                         shape: tuple[int, int]) -> None:
    import gguf
    from gguf.quants import dequantize

    n, k = shape
    model = models.get(FMT, n, k)
    st, y_ref = ql.linear(FMT, "ref", model.wq, model.x)
    assert st == V8_OK
    w = numpy_q5_k(model.wq, k)
    # the decoder against gguf's dequantization: (d*sc)*level - dmin*mn, value for value
    scale = w["d"].astype(np.float32)[..., None] * w["sc"].astype(np.float32)
    mins = w["dmin"].astype(np.float32)[..., None] * w["mn"].astype(np.float32)
    deq = (np.repeat(scale, 32, axis=2) * w["levels"].astype(np.float32)
           - np.repeat(mins, 32, axis=2)).reshape(n, k)
    theirs = dequantize(np.ascontiguousarray(model.wq), gguf.GGMLQuantizationType.Q5_K)
    decoder_ok = bool(np.array_equal(deq.view(np.uint32), theirs.reshape(n, k).view(np.uint32)))
    y_np = numpy_q5_k_dot(w, model.x)
    same, total = bitexact(y_ref, y_np)
    unfused_differ = total - bitexact(y_ref, numpy_q5_k_dot(w, model.x, fused_mins=False))[0]
    ok = decoder_ok and same == total
    evidence(Rung.ORACLE, ok, contract=CONTRACT_Q5, provider=MAP_Q5_GEMV, shape=f"{n}x{k}",
             model="numpy Q5_K decoder (= gguf.quants.dequantize) x numpy Q8_K, int lanes, exact "
                   "fp32 FMA emulation, fused min sum, lane tree",
             bitexact=f"{same}/{total}", decoder_equals_gguf=decoder_ok,
             outputs_differing_with_unfused_min_update=unfused_differ)
    assert ok, (decoder_ok, same, total)
    assert unfused_differ > 0      # the fused min update is visible in the bits


# ---- production and threadpool vs oracle -------------------------------------------------------

@pytest.mark.parametrize("shape", GEMV_SHAPES, ids=shape_id)
def test_q5_k_gemv_production_and_threadpool(ql: QL, models: Any, evidence: Any,
                                             shape: tuple[int, int]) -> None:
    n, k = shape
    model = models.get(FMT, n, k)
    bias = make_activation(n, 99)
    st, y_ref = ql.linear(FMT, "ref", model.wq, model.x, bias=bias)
    assert st == V8_OK
    try:
        for isa, mask in isa_paths(ql):
            ql.lib.v8_cpu_restrict(mask)
            assert ISA_NAMES[ql.lib.v8_cpu_best_isa()] == isa
            st, y = ql.linear(FMT, "prod", model.wq, model.x, bias=bias)
            same, total = bitexact(y_ref, y)
            evidence(Rung.PRODUCTION, st == V8_OK and same == total, contract=CONTRACT_Q5,
                     provider=MAP_Q5_GEMV, shape=f"{n}x{k}", isa=isa, bias=True,
                     cpu_mask=hex(mask), bitexact=f"{same}/{total}")
            assert st == V8_OK and same == total, (isa, hex(mask), same, total)
    finally:
        ql.lib.v8_cpu_restrict(ALL_FEATURES)
    for workers in WORKERS:
        st, y = ql.linear(FMT, "pool", model.wq, model.x, workers=workers, bias=bias)
        same, total = bitexact(y_ref, y)
        evidence(Rung.THREADPOOL, st == V8_OK and same == total, contract=CONTRACT_Q5,
                 provider=MAP_Q5_GEMV, shape=f"{n}x{k}", partition="independent_rows",
                 workers=workers, bitexact=f"{same}/{total}")
        assert st == V8_OK and same == total, (workers, same, total)


# ---- GEMM ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("m", GEMM_TOKENS)
@pytest.mark.parametrize("shape", GEMM_SHAPES, ids=shape_id)
def test_q5_k_gemm_ladder(ql: QL, models: Any, evidence: Any, shape: tuple[int, int], m: int) -> None:
    n, k = shape
    model = models.get(FMT, n, k)
    x = make_activation(k, 1000 + m, m=m)
    st, y_ref = ql.linear(FMT, "ref", model.wq, x)
    assert st == V8_OK and y_ref.shape == (m, n)
    common = dict(contract=CONTRACT_Q5, provider=MAP_Q5_GEMM, shape=f"{m}x{n}x{k}")
    runner = models.runner(model, m)
    if runner is None:
        _unresolved(evidence, shape=f"{m}x{n}x{k}")
    ext = {t: bitexact(y_ref, runner.run(x, t)) for t in (1, 2)}
    ok = all(s == tot for s, tot in ext.values())
    evidence(Rung.EXTERNAL, ok, backend="ggml_mul_mat (ggml-python 0.0.45)",
             bitexact_1thread=frac(ext[1]), bitexact_2threads=frac(ext[2]), **common)
    assert ok, ext
    try:
        for isa, mask in isa_paths(ql)[:-1]:
            ql.lib.v8_cpu_restrict(mask)
            st, y = ql.linear(FMT, "prod", model.wq, x)
            same, total = bitexact(y_ref, y)
            evidence(Rung.PRODUCTION, st == V8_OK and same == total, isa=isa, cpu_mask=hex(mask),
                     bitexact=f"{same}/{total}", **common)
            assert st == V8_OK and same == total, (isa, hex(mask))
    finally:
        ql.lib.v8_cpu_restrict(ALL_FEATURES)
    for workers in WORKERS:
        st, y = ql.linear(FMT, "pool", model.wq, x, workers=workers)
        same, total = bitexact(y_ref, y)
        evidence(Rung.THREADPOOL, st == V8_OK and same == total, partition="output_tiles",
                 workers=workers, bitexact=f"{same}/{total}", **common)
        assert st == V8_OK and same == total, workers


# Token counts that leave a partial token group and an odd row count, every path, with bias.
@pytest.mark.parametrize("m", [2, 3, 5, 7, 33])
def test_q5_k_gemm_token_groups(ql: QL, evidence: Any, m: int) -> None:
    n, k = 97, 1024
    wq = ql.quantize(FMT, make_weights(n, k, 60 + m))
    x = make_activation(k, 2000 + m, m=m)
    bias = make_activation(n, 98)
    st, y_ref = ql.linear(FMT, "ref", wq, x, bias=bias)
    assert st == V8_OK
    common = dict(contract=CONTRACT_Q5, provider=MAP_Q5_GEMM, shape=f"{m}x{n}x{k}")
    try:
        for isa, mask in isa_paths(ql)[:-1]:
            ql.lib.v8_cpu_restrict(mask)
            for variant, workers in [("prod", 0), ("pool", 2), ("pool", 3)]:
                st, y = ql.linear(FMT, variant, wq, x, workers=workers, bias=bias)
                same, total = bitexact(y_ref, y)
                evidence(Rung.PRODUCTION if variant == "prod" else Rung.THREADPOOL,
                         st == V8_OK and same == total, isa=isa, cpu_mask=hex(mask),
                         workers=workers, bitexact=f"{same}/{total}", **common)
                assert st == V8_OK and same == total, (isa, hex(mask), variant, workers)
    finally:
        ql.lib.v8_cpu_restrict(ALL_FEATURES)


# ---- C API discipline ---------------------------------------------------------------------------

def test_q5_k_api_rejects_bad_input_without_writing(ql: QL, evidence: Any) -> None:
    n = 64
    checks: dict[str, tuple[int, bool]] = {}
    w_bad = np.zeros((n, 4 * Q5_K_BYTES), dtype=np.uint8)
    x_bad = make_activation(896, 3)              # not a multiple of 256: refused
    for variant in ("ref", "prod", "pool"):
        st, y = ql.linear(FMT, variant, w_bad, x_bad, workers=2)
        checks[f"{variant}_k896"] = (st, bool(np.all(np.isnan(y))))
        st, y = ql.linear(FMT, variant, w_bad, np.repeat(x_bad[None], 4, 0), workers=2)
        checks[f"{variant}_gemm_k896"] = (st, bool(np.all(np.isnan(y))))
    w = ql.quantize(FMT, make_weights(n, 1024, 4))
    x = make_activation(1024, 4)
    for variant in ("ref", "prod", "pool"):
        for name, sel in (("selector", 99), ("q4_k_contract", ql.lib.V8_QL_Q4_K_X_Q8_K_FP32_BLOCK_ORDER)):
            st, y = ql.linear(FMT, variant, w, x, workers=2, contract=sel)
            checks[f"{variant}_{name}"] = (st, bool(np.all(np.isnan(y))))
    y = np.full(n, np.nan, dtype=np.float32)
    scratch = np.zeros(ql.lib.v8_ql_gemv_scratch_bytes(1024) // 4 + 1, dtype=np.float32)
    sel = ql.lib.V8_QL_Q5_K_X_Q8_K_FP32_BLOCK_ORDER
    st = ql.lib.v8_q5_k_gemv(sel, ql.ptr(y, "float *"), ql.ffi.NULL, ql.ptr(x, "float *"),
                             ql.ffi.NULL, n, 1024, ql.ptr(scratch, "void *"), scratch.nbytes)
    checks["null_weight"] = (st, bool(np.all(np.isnan(y))))
    st = ql.lib.v8_q5_k_gemv(sel, ql.ptr(y, "float *"), ql.ptr(w, "void *"), ql.ptr(x, "float *"),
                             ql.ffi.NULL, n, 1024, ql.ptr(scratch, "void *"),
                             ql.lib.v8_ql_gemv_scratch_bytes(1024) - 4)
    checks["short_scratch"] = (st, bool(np.all(np.isnan(y))))
    want = {"null_weight": 1, "short_scratch": 2}
    ok = all(st == want.get(name, 2 if "k896" in name else 3) and untouched
             for name, (st, untouched) in checks.items())
    evidence(Rung.PRODUCTION, ok, contract=CONTRACT_Q5, provider=MAP_Q5_GEMV,
             what="bad input: status and output untouched; K % 256 != 0 refused",
             checks={k: v[0] for k, v in checks.items()})
    assert ok, checks


def test_q5_k_program_runs_resolved_providers(ql: QL) -> None:
    check_program(ql, FMT, CONTRACT_Q5, 1024)
