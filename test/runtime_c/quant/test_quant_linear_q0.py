"""Evidence ladder for the 32-element block contracts (Q8_0 / Q5_0 / Q4_0 x Q8_0,
Q4_1 / Q5_1 x Q8_1).

external   ggml mul_mat (ggml_quantize_chunk weights via GGUF; ggml quantizes the activation
           itself) vs our scalar oracle, bit for bit, at 1 and 2 threads; our reference weight
           quantizers vs ggml_quantize_chunk bytes
oracle     an independent numpy model (own block decoder checked against gguf.quants, numpy
           Q8_0 / Q8_1 activation model, int lane sums, exactly rounded fp32 FMA emulation, the
           m*s sum of the _1 formats, the tree) vs oracle, bit for bit; numpy activation
           quantizer vs ours, byte for byte
production AVX-512 (with and without VNNI) and AVX2 variants vs oracle, bit for bit
threadpool 1, 2, 3, 4, 8 workers vs oracle, bit for bit
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from ql_support import (
    ALL_FEATURES,
    ISA_NAMES,
    Q0_ACTIVATION,
    Q0_BLOCK_BYTES,
    QK8_0,
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

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Outcome, Rung

V8_OK = constants(["v8_runtime.h"])["V8_OK"]
FMTS = ["q8_0", "q5_0", "q4_0", "q4_1", "q5_1"]
GEMV_SHAPES = [(896, 896), (1152, 1152), (1024, 3072), (4864, 896)]
GEMM_TOKENS = [1, 8, 32, 128]
WORKERS = [1, 2, 3, 4, 8]


def contract(fmt: str) -> str:
    return f"{fmt}_x_{Q0_ACTIVATION[fmt]}_fp32_block_order"


def gemv_map(fmt: str) -> str:
    return f"{fmt}_x_{Q0_ACTIVATION[fmt]}_gemv"


def gemm_map(fmt: str) -> str:
    return f"{fmt}_x_{Q0_ACTIVATION[fmt]}_gemm"


def has_min(fmt: str) -> bool:
    return Q0_ACTIVATION[fmt] == "q8_1"


def shape_id(s: tuple[int, int]) -> str:
    return f"{s[0]}x{s[1]}"


# ---- independent numpy models ---------------------------------------------------

def numpy_q8x(x: np.ndarray, *, ties: str = "even") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q8_0 / Q8_1 of rows of x as ggml's x86 quantizers: (d fp16 [rows, nb], q int8
    [rows, k], s fp16 [rows, nb] = fp16(d32 * sum q), which only Q8_1 stores).
    ties="away" models the portable reference quantizer's roundf and id = 1/d instead."""
    k = x.shape[-1]
    b = x.reshape(-1, QK8_0).astype(np.float32)
    amax = np.max(np.abs(b), axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        if ties == "even":
            ident = np.where(amax != 0, np.float32(127) / np.where(amax != 0, amax, 1), 0)
        else:
            ident = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0)
    v = (b * ident.astype(np.float32)[:, None]).astype(np.float32)
    r = np.rint(v) if ties == "even" else np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))
    q = np.clip(r, -128, 127).astype(np.int8)
    sums = r.astype(np.int32).sum(axis=1).astype(np.float32)
    s = (d * sums).astype(np.float32).astype(np.float16)
    nb = k // QK8_0
    return d.astype(np.float16).reshape(-1, nb), q.reshape(-1, k), s.reshape(-1, nb)


def q8x_bytes(d: np.ndarray, q: np.ndarray, s: np.ndarray, act: str) -> np.ndarray:
    nb, head = d.size, 4 if act == "q8_1" else 2
    blk = np.zeros((nb, head + QK8_0), dtype=np.uint8)
    blk[:, 0:2] = d.reshape(nb, 1).astype("<f2").view(np.uint8)
    if act == "q8_1":
        blk[:, 2:4] = s.reshape(nb, 1).astype("<f2").view(np.uint8)
    blk[:, head:] = q.reshape(nb, QK8_0).view(np.uint8)
    return blk.reshape(d.shape[0], -1)


def numpy_levels(fmt: str, wq: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Decode raw weight blocks: (levels int8 [n, nb, 32], d fp16 [n, nb], m fp16 [n, nb]
    for the formats with a min, else None)."""
    n = wq.shape[0]
    nb = k // QK8_0
    per = Q0_BLOCK_BYTES[fmt]
    blk = np.ascontiguousarray(wq).reshape(n, nb, per)
    d = blk[:, :, 0:2].copy().view("<f2").reshape(n, nb)
    m = blk[:, :, 2:4].copy().view("<f2").reshape(n, nb) if has_min(fmt) else None
    if fmt == "q8_0":
        return blk[:, :, 2:34].copy().view(np.int8), d, m
    qs = blk[:, :, per - 16:].astype(np.int16)
    nib = np.concatenate([qs & 15, qs >> 4], axis=2)
    if fmt in ("q4_0", "q4_1"):
        return (nib - (8 if fmt == "q4_0" else 0)).astype(np.int8), d, m
    at = 4 if fmt == "q5_1" else 2
    qh = blk[:, :, at:at + 4].copy().view("<u4").reshape(n, nb, 1)
    bit = ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int16)
    return ((nib | (bit << 4)) - (16 if fmt == "q5_0" else 0)).astype(np.int8), d, m


def numpy_lane_dot(levels: np.ndarray, wd: np.ndarray, wm: np.ndarray | None, ad: np.ndarray,
                   aq: np.ndarray, as_: np.ndarray) -> np.ndarray:
    """The contract for one activation row: [n] fp32."""
    n, nb, _ = levels.shape
    acc = np.zeros((n, 8), dtype=np.float32)
    mins = np.zeros(n, dtype=np.float32)
    a = aq.reshape(nb, QK8_0).astype(np.int32)
    for i in range(nb):
        lanes = (levels[:, i, :].astype(np.int32) * a[i]).reshape(n, 8, 4).sum(axis=2)
        d = wd[:, i].astype(np.float32) * np.float32(ad.reshape(-1)[i])  # one fp32 product
        acc = fma32(np.repeat(d[:, None], 8, axis=1), lanes.astype(np.float32), acc)
        if wm is not None:                      # m * s, one fp32 FMA per block
            mins = fma32(wm[:, i].astype(np.float32), np.full(n, as_.reshape(-1)[i], np.float32), mins)
    return tree8(acc) + mins if wm is not None else tree8(acc)


def gguf_dequant(fmt: str, wq: np.ndarray) -> np.ndarray:
    import gguf
    from gguf.quants import dequantize

    return dequantize(np.ascontiguousarray(wq), getattr(gguf.GGMLQuantizationType, fmt.upper()))


def _unresolved(evidence: Any, fmt: str, **what: Any) -> None:
    evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=contract(fmt), provider=gemv_map(fmt),
             reason="ggml not importable", **what)
    pytest.fail("ggml-python is not importable: external rung unresolved")


# ---- formats ----------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FMTS)
def test_q0_reference_quantizer_matches_ggml_bytes(ql: QL, ggml_mod: Any, evidence: Any,
                                                   fmt: str) -> None:
    n, k = 1024, 1152
    w = make_weights(n, k, 12)
    w[3, 64:96] = 0.0                                 # an all-zero block: d = 0
    ours = ql.quantize(fmt, w)
    if ggml_mod is None:
        _unresolved(evidence, fmt, what=f"{fmt} reference quantizer vs ggml_quantize_chunk")
    runner = GgmlLinear(ggml_mod, fmt, n, k, 1)
    theirs = runner.quantize(w)
    runner.close()
    equal = bool(np.array_equal(ours, theirs))
    evidence(Rung.EXTERNAL, equal, contract=contract(fmt), provider=gemv_map(fmt),
             what=f"{fmt} reference quantizer vs ggml_quantize_chunk", shape=f"{n}x{k}",
             bytes_equal=f"{int(np.count_nonzero(ours == theirs))}/{ours.size}")
    assert equal


def _tie_activation(k: int) -> np.ndarray:
    """Blocks whose scaled values land exactly on .5 (amax 127 gives id = 1), plus
    an all-zero block, on top of order-exposing normals."""
    x = make_activation(k, 31)
    x[0:6] = [127.0, 2.5, -3.5, 0.5, -0.5, 1.5]
    x[32:64] = 0.0
    x[64:70] = [-127.0, 4.5, -6.5, 126.5, -126.5, 7.5]
    return x


@pytest.mark.parametrize("fmt", FMTS)
def test_q8_0_activation_rounding_vs_numpy_and_ggml(ql: QL, ggml_mod: Any, evidence: Any,
                                                    fmt: str) -> None:
    """The activation quantizer is the x86 one (ties to even, id = 127/amax): our bytes
    equal the numpy model of it, and ggml's mul_mat on tie-laden activations matches
    the lane model with it but not with the reference quantizer's roundf."""
    k = 1024
    x = np.stack([_tie_activation(k), make_activation(k, 32)])
    act = Q0_ACTIVATION[fmt]
    ours = ql.quantize(f"{act}_act", x)
    model = q8x_bytes(*numpy_q8x(x), act)
    away = q8x_bytes(*numpy_q8x(x, ties="away"), act)
    same = bool(np.array_equal(ours, model))
    evidence(Rung.ORACLE, same, contract=contract(fmt), provider=gemv_map(fmt),
             what=f"{act} activation quantizer vs numpy model (ties to even, id = 127/amax)",
             bytes_equal=f"{int(np.count_nonzero(ours == model))}/{ours.size}",
             bytes_differing_from_roundf_model=int(np.count_nonzero(ours != away)))
    assert same
    assert not np.array_equal(ours, away)         # the inputs tell the two roundings apart
    if ggml_mod is None:
        _unresolved(evidence, fmt, what="activation rounding vs ggml mul_mat")
    n = 64
    runner = GgmlLinear(ggml_mod, fmt, n, k, 1)
    wq = runner.quantize(make_weights(n, k, 33))
    st, y_ref = ql.linear(fmt, "ref", wq, x[0])
    assert st == V8_OK
    levels, wd, wm = numpy_levels(fmt, wq, k)
    y_even = numpy_lane_dot(levels, wd, wm, *numpy_q8x(x[0]))
    y_away = numpy_lane_dot(levels, wd, wm, *numpy_q8x(x[0], ties="away"))
    results = {}
    for threads in (1, 2):
        y_g = runner.run(x[0], threads)[0]
        results[threads] = (bitexact(y_ref, y_g), bitexact(y_even, y_g), bitexact(y_away, y_g))
    runner.close()
    ok = all(a[0] == a[1] and b[0] == b[1] and c[0] < c[1] for a, b, c in results.values())
    evidence(Rung.EXTERNAL, ok, contract=contract(fmt), provider=gemv_map(fmt), shape=f"{n}x{k}",
             what="tie-laden activation: oracle and ties-to-even model vs ggml mul_mat",
             backend="ggml_mul_mat (ggml-python 0.0.45)",
             oracle_bitexact_1thread=frac(results[1][0]),
             oracle_bitexact_2threads=frac(results[2][0]),
             roundf_model_bitexact_1thread=frac(results[1][2]))
    assert ok, results


# ---- external: ggml mul_mat vs oracle, GEMV -------------------------------------------

@pytest.mark.parametrize("shape", GEMV_SHAPES, ids=shape_id)
@pytest.mark.parametrize("fmt", FMTS)
def test_q0_gemv_oracle_vs_ggml(ql: QL, models: Any, evidence: Any, fmt: str,
                                shape: tuple[int, int]) -> None:
    n, k = shape
    model = models.get(fmt, n, k)
    st, y_ref = ql.linear(fmt, "ref", model.wq, model.x)
    assert st == V8_OK
    runner = models.runner(model, 1)
    if runner is None:
        _unresolved(evidence, fmt, shape=f"{n}x{k}")
    results = {t: bitexact(y_ref, runner.run(model.x, t)[0]) for t in (1, 2)}
    ok = all(same == total for same, total in results.values())
    evidence(Rung.EXTERNAL, ok, contract=contract(fmt), provider=gemv_map(fmt), shape=f"{n}x{k}",
             backend="ggml_mul_mat (ggml-python 0.0.45)", weights="ggml_quantize_chunk via GGUF",
             bitexact_1thread=frac(results[1]), bitexact_2threads=frac(results[2]))
    assert ok, results


# ---- oracle: independent numpy model ----------------------------------------------------

@pytest.mark.parametrize("shape", GEMV_SHAPES, ids=shape_id)
@pytest.mark.parametrize("fmt", FMTS)
def test_q0_gemv_oracle_vs_numpy_model(ql: QL, models: Any, evidence: Any, fmt: str,
                                       shape: tuple[int, int]) -> None:
    n, k = shape
    model = models.get(fmt, n, k)
    st, y_ref = ql.linear(fmt, "ref", model.wq, model.x)
    assert st == V8_OK
    levels, wd, wm = numpy_levels(fmt, model.wq, k)
    # the numpy decoder against gguf's own dequantization, value for value
    deq = levels.astype(np.float32) * wd.astype(np.float32)[:, :, None]
    if wm is not None:
        deq = deq + wm.astype(np.float32)[:, :, None]
    deq = deq.reshape(n, k)
    decoder_ok = bool(np.array_equal(deq.view(np.uint32), gguf_dequant(fmt, model.wq).view(np.uint32)))
    ad, aq, as_ = numpy_q8x(model.x)
    y_np = numpy_lane_dot(levels, wd, wm, ad, aq, as_)
    same, total = bitexact(y_ref, y_np)
    # and the float64 value of the same quantized operands, as a sanity bound
    x_deq = (np.repeat(ad.astype(np.float32).reshape(-1), QK8_0) * aq.reshape(-1)).astype(np.float64)
    y64 = deq.astype(np.float64) @ x_deq
    rel = float(np.max(np.abs(y_ref - y64) / np.maximum(np.abs(deq) @ np.abs(x_deq), 1e-30)))
    differ64 = total - bitexact(y_ref, y64.astype(np.float32))[0]
    # the _1 formats take the activation sum from the block's fp16 s: looser bound
    tol = 2e-3 if has_min(fmt) else 2e-6
    ok = decoder_ok and same == total and rel <= tol
    evidence(Rung.ORACLE, ok, contract=contract(fmt), provider=gemv_map(fmt), shape=f"{n}x{k}",
             model=f"numpy decoder (= gguf.quants.dequantize) x numpy {Q0_ACTIVATION[fmt]}, int lanes, "
                   "exact fp32 FMA emulation, lane tree",
             bitexact=f"{same}/{total}", decoder_equals_gguf=decoder_ok,
             max_err_rel_to_sum_abs_vs_float64=rel, tolerance_rel=tol,
             outputs_differing_from_float64=differ64)
    assert ok, (decoder_ok, same, total, rel)
    assert differ64 > 0        # a different summation order is visible in the bits


# ---- production vs oracle (every ISA path) -----------------------------------------------

@pytest.mark.parametrize("shape", GEMV_SHAPES, ids=shape_id)
@pytest.mark.parametrize("fmt", FMTS)
def test_q0_gemv_production_vs_oracle(ql: QL, models: Any, evidence: Any, fmt: str,
                                      shape: tuple[int, int]) -> None:
    n, k = shape
    model = models.get(fmt, n, k)
    bias = make_activation(n, 99)
    st, y_ref = ql.linear(fmt, "ref", model.wq, model.x, bias=bias)
    assert st == V8_OK
    try:
        for isa, mask in isa_paths(ql):
            ql.lib.v8_cpu_restrict(mask)
            assert ISA_NAMES[ql.lib.v8_cpu_best_isa()] == isa
            st, y = ql.linear(fmt, "prod", model.wq, model.x, bias=bias)
            same, total = bitexact(y_ref, y)
            evidence(Rung.PRODUCTION, st == V8_OK and same == total, contract=contract(fmt),
                     provider=gemv_map(fmt), shape=f"{n}x{k}", isa=isa, bias=True,
                     cpu_mask=hex(mask), bitexact=f"{same}/{total}")
            assert st == V8_OK and same == total, (isa, hex(mask), same, total)
    finally:
        ql.lib.v8_cpu_restrict(ALL_FEATURES)


@pytest.mark.parametrize("shape", GEMV_SHAPES, ids=shape_id)
@pytest.mark.parametrize("fmt", FMTS)
def test_q0_gemv_threadpool_vs_oracle(ql: QL, models: Any, evidence: Any, fmt: str,
                                      shape: tuple[int, int]) -> None:
    n, k = shape
    model = models.get(fmt, n, k)
    st, y_ref = ql.linear(fmt, "ref", model.wq, model.x)
    assert st == V8_OK
    for workers in WORKERS:
        st, y = ql.linear(fmt, "pool", model.wq, model.x, workers=workers)
        same, total = bitexact(y_ref, y)
        evidence(Rung.THREADPOOL, st == V8_OK and same == total, contract=contract(fmt),
                 provider=gemv_map(fmt), shape=f"{n}x{k}", partition="independent_rows",
                 workers=workers, bitexact=f"{same}/{total}")
        assert st == V8_OK and same == total, (workers, same, total)


# ---- GEMM --------------------------------------------------------------------------------

@pytest.mark.parametrize("m", GEMM_TOKENS)
@pytest.mark.parametrize("shape", GEMV_SHAPES, ids=shape_id)
@pytest.mark.parametrize("fmt", FMTS)
def test_q0_gemm_ladder(ql: QL, models: Any, evidence: Any, fmt: str, shape: tuple[int, int],
                        m: int) -> None:
    n, k = shape
    model = models.get(fmt, n, k)
    x = make_activation(k, 1000 + m, m=m)
    st, y_ref = ql.linear(fmt, "ref", model.wq, x)
    assert st == V8_OK and y_ref.shape == (m, n)
    common = dict(contract=contract(fmt), provider=gemm_map(fmt), shape=f"{m}x{n}x{k}")
    runner = models.runner(model, m)
    if runner is None:
        _unresolved(evidence, fmt, shape=f"{m}x{n}x{k}")
    ext = {t: bitexact(y_ref, runner.run(x, t)) for t in (1, 2)}
    ok = all(s == tot for s, tot in ext.values())
    evidence(Rung.EXTERNAL, ok, backend="ggml_mul_mat (ggml-python 0.0.45)",
             bitexact_1thread=frac(ext[1]), bitexact_2threads=frac(ext[2]), **common)
    assert ok, ext
    try:
        for isa, mask in isa_paths(ql)[:-1]:
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


# Token counts that leave a partial token group, and an odd row count (the last
# row of a pair alone), on every dispatch path, with bias.
@pytest.mark.parametrize("m", [2, 3, 5, 7, 33])
@pytest.mark.parametrize("fmt", FMTS)
def test_q0_gemm_token_groups(ql: QL, evidence: Any, fmt: str, m: int) -> None:
    n, k = 97, 896
    wq = ql.quantize(fmt, make_weights(n, k, 40 + m))
    x = make_activation(k, 2000 + m, m=m)
    bias = make_activation(n, 98)
    st, y_ref = ql.linear(fmt, "ref", wq, x, bias=bias)
    assert st == V8_OK
    common = dict(contract=contract(fmt), provider=gemm_map(fmt), shape=f"{m}x{n}x{k}")
    try:
        for isa, mask in isa_paths(ql)[:-1]:
            ql.lib.v8_cpu_restrict(mask)
            for variant, workers in [("prod", 0), ("pool", 2), ("pool", 3)]:
                st, y = ql.linear(fmt, variant, wq, x, workers=workers, bias=bias)
                same, total = bitexact(y_ref, y)
                evidence(Rung.PRODUCTION if variant == "prod" else Rung.THREADPOOL,
                         st == V8_OK and same == total, isa=isa, cpu_mask=hex(mask),
                         workers=workers, bitexact=f"{same}/{total}", **common)
                assert st == V8_OK and same == total, (isa, hex(mask), variant, workers)
    finally:
        ql.lib.v8_cpu_restrict(ALL_FEATURES)


# ---- C API discipline -----------------------------------------------------------------

@pytest.mark.parametrize("fmt", FMTS)
def test_q0_api_rejects_bad_input_without_writing(ql: QL, evidence: Any, fmt: str) -> None:
    n = 64
    per = Q0_BLOCK_BYTES[fmt]
    checks: dict[str, tuple[int, bool]] = {}
    for k_bad in (48, 900):                       # not a multiple of 32: refused
        w_bad = np.zeros((n, (k_bad // QK8_0 + 1) * per), dtype=np.uint8)
        x_bad = make_activation(k_bad, 3)
        for variant in ("ref", "prod", "pool"):
            st, y = ql.linear(fmt, variant, w_bad, x_bad, workers=2)
            checks[f"{variant}_k{k_bad}"] = (st, bool(np.all(np.isnan(y))))
            st, y = ql.linear(fmt, variant, w_bad, np.repeat(x_bad[None], 4, 0), workers=2)
            checks[f"{variant}_gemm_k{k_bad}"] = (st, bool(np.all(np.isnan(y))))
    k = 896
    w = ql.quantize(fmt, make_weights(n, k, 4))
    x = make_activation(k, 4)
    for variant in ("ref", "prod", "pool"):
        for name, sel in (("selector", 99), ("kquant_contract", ql.lib.V8_QL_Q4_K_X_Q8_K_FP32_BLOCK_ORDER),
                          ("other_format", 5 if fmt == "q8_0" else 4)):
            st, y = ql.linear(fmt, variant, w, x, workers=2, contract=sel)
            checks[f"{variant}_{name}"] = (st, bool(np.all(np.isnan(y))))
    sel = getattr(ql.lib, "V8_QL_" + contract(fmt).upper())
    scratch_fn = ql.lib.v8_ql1_gemv_scratch_bytes if has_min(fmt) else ql.lib.v8_ql0_gemv_scratch_bytes
    fn = getattr(ql.lib, f"v8_{fmt}_gemv")
    y = np.full(n, np.nan, dtype=np.float32)
    scratch = np.zeros(scratch_fn(k) // 4 + 1, dtype=np.float32)
    st = fn(sel, ql.ptr(y, "float *"), ql.ffi.NULL, ql.ptr(x, "float *"), ql.ffi.NULL, n, k,
            ql.ptr(scratch, "void *"), scratch.nbytes)
    checks["null_weight"] = (st, bool(np.all(np.isnan(y))))
    st = fn(sel, ql.ptr(y, "float *"), ql.ptr(w, "void *"), ql.ptr(x, "float *"), ql.ffi.NULL, n,
            k, ql.ptr(scratch, "void *"), scratch_fn(k) - 1)
    checks["short_scratch"] = (st, bool(np.all(np.isnan(y))))
    st = getattr(ql.lib, f"v8_{fmt}_gemv_parallel_dispatch")(
        ql.ffi.NULL, sel, ql.ptr(y, "float *"), ql.ptr(w, "void *"), ql.ptr(x, "float *"),
        ql.ffi.NULL, n, k, ql.ptr(scratch, "void *"), scratch.nbytes)
    checks["null_pool"] = (st, bool(np.all(np.isnan(y))))
    want = {"null_weight": 1, "short_scratch": 2, "null_pool": 4}
    ok = True
    for name, (st, untouched) in checks.items():
        expected = want.get(name, 2 if "_k" in name and "kquant" not in name else 3)
        ok &= st == expected and untouched
    sizes_refused = (scratch_fn(48) == 0
                     and ql.lib.v8_ql0_gemm_scratch_bytes(0, 896) == 0)
    evidence(Rung.PRODUCTION, ok and sizes_refused, contract=contract(fmt), provider=gemv_map(fmt),
             what="bad input: status and output untouched; K % 32 != 0 refused",
             checks={k: v[0] for k, v in checks.items()})
    assert ok and sizes_refused, checks


# ---- through the compiler: resolve, lower, emit C, run -------------------------------

def _contract_ir(contract_id: str) -> str:
    from v8dialect.data.contracts import load_registry
    from v8dialect.ir.contract_ir import to_attr

    registry = load_registry()
    return str(to_attr(registry.contracts[contract_id], registry))


@pytest.mark.parametrize("fmt", FMTS)
def test_q0_program_runs_resolved_providers(ql: QL, fmt: str) -> None:
    check_program(ql, fmt, contract(fmt), 1152)


def check_program(ql: QL, fmt: str, contract_id: str, k: int) -> None:
    """A GraphIR module with a decode GEMV and a prefill GEMM over one weight builds to
    C, binds this format's providers and reproduces the oracle bit for bit."""
    import v8dialect

    n, m = 160, 7
    c = _contract_ir(contract_id)
    w_t = f"tensor<{n}x{k}x!v8.{fmt}>"
    rows = "execution #v8.exec_requirement<runtime = threadpool, partition = independent_rows>"
    tiles = "execution #v8.exec_requirement<runtime = threadpool, partition = output_tiles>"
    x_t, xp_t, y_t, z_t = (f"tensor<1x{k}xf32>", f"tensor<{m}x{k}xf32>", f"tensor<1x{n}xf32>",
                           f"tensor<{m}x{n}xf32>")
    text = (
        f"func.func @f(%x: {x_t}, %w: {w_t}, %xp: {xp_t}) -> ({y_t}, {z_t}) {{\n"
        f"  %y = v8.linear \"up\" decode %x, %w contract {c} {rows} : ({x_t}, {w_t}) -> {y_t}\n"
        f"  %z = v8.linear \"down\" prefill %xp, %w contract {c} {tiles} : ({xp_t}, {w_t}) -> {z_t}\n"
        f"  func.return %y, %z : {y_t}, {z_t}\n}}\n"
    )
    prog = v8dialect.build(text)
    try:
        assert f"v8_{fmt}_gemv_parallel_dispatch" in prog.c_source
        assert f"v8_{fmt}_gemm_parallel_dispatch" in prog.c_source
        wq = ql.quantize(fmt, make_weights(n, k, 50))
        x, xp = make_activation(k, 51, m=1), make_activation(k, 52, m=m)
        for workers in (1, 3):
            y, z = prog.run("f", workers=workers, x=x, w=wq, xp=xp)
            assert bitexact(y[0], ql.linear(fmt, "ref", wq, x[0])[1]) == (n, n)
            assert bitexact(z, ql.linear(fmt, "ref", wq, xp)[1]) == (m * n, m * n)
    finally:
        prog.close()
