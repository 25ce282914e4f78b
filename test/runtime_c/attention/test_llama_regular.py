"""Evidence for fp32_llama_regular (provider attn_llama_regular_f16kv).

Oracle vs the independent numpy model: bit-exact.  Production (AVX-512,
AVX2, scalar) and threadpool (1, 2, 3, 4, 8 workers) vs oracle: bit-exact.  External: ggml's regular graph (mul_mat + soft_max_ext + mul_mat)
within a stated tolerance - the contract's dot orders are sequential fp32 fma
chains, while ggml's mul_mat uses ggml_vec_dot_f16's lane tree, which on an
AVX512-FP16 host even accumulates in fp16; the observed error is recorded.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from tiled_model import Runner, build_llama_regular, ggml_regular, llama_regular, make_case, mismatch

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Outcome, Rung

_V8 = constants(["v8_runtime.h"])
V8_OK = _V8["V8_OK"]
V8_ERR_UNKNOWN_SELECTOR = _V8["V8_ERR_UNKNOWN_SELECTOR"]
CONTRACT = "fp32_llama_regular"
PROVIDER = "attn_llama_regular_f16kv"
GGML_TOLERANCE = 2e-2  # absolute, on outputs of magnitude <= ~4 (fp16-accumulated reference)

SHAPES = [(5, 5, 4, 2, 64, True), (64, 0, 2, 1, 128, True), (14, 1013, 2, 1, 72, True),
          (70, 0, 2, 2, 80, False), (1, 300, 4, 1, 128, True)]
LARGE = [(130, 200, 4, 2, 72, True), (256, 0, 2, 2, 72, False)]


@functools.cache
def runner():
    return Runner(build_llama_regular(), "v8_attn_llama_regular", CONTRACT)


@functools.cache
def case(shape):
    n_q, past, h, hkv, d, causal = shape
    return make_case(41 + n_q + past + d, n_q, past, h, hkv, d, causal=causal)


@functools.cache
def oracle(shape):
    st, out = runner().run("ref", case(shape))
    assert st == V8_OK
    return out


def describe(shape):
    n_q, past, h, hkv, d, causal = shape
    return dict(n_q=n_q, past=past, n_head=h, n_head_kv=hkv, head_dim=d,
                mode="causal" if causal else "full")


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_oracle_matches_numpy_model(shape, evidence):
    c = case(shape)
    model = llama_regular(c.q, c.k16, c.v16, c.kv_len, c.q_pos0, c.causal, c.scale, c.n_head_kv)
    n_diff, err = mismatch(oracle(shape), model)
    evidence(Rung.ORACLE, n_diff == 0, contract=CONTRACT, provider=PROVIDER, against="numpy model",
             elements=int(model.size), bitexact=int(model.size) - n_diff, max_abs_err=err,
             **describe(shape))
    assert n_diff == 0, err


ISA = {"avx512": (2, 0xFFFFFFFF), "avx2": (1, 0x7), "scalar": (0, 0)}


@pytest.mark.parametrize("isa", list(ISA))
def test_production_matches_oracle(isa, evidence):
    lb = runner().lib
    level, mask = ISA[isa]
    if lb.v8_cpu_best_isa() < level:
        # as everywhere in runtime_c: the CPU mask can only take away what the host has
        pytest.skip(f"CPU lacks {isa}; its production variant is compared on hosts that have it")
    lb.v8_cpu_restrict(mask)
    results = []
    try:
        assert lb.v8_cpu_best_isa() == level
        for shape in SHAPES + LARGE:
            st, out = runner().run("prod", case(shape))
            n_diff, err = mismatch(out, oracle(shape))
            results.append(dict(describe(shape), status=st, bitexact=int(out.size) - n_diff,
                                elements=int(out.size), max_abs_err=err))
    finally:
        lb.v8_cpu_restrict(0xFFFFFFFF)
    ok = all(r["status"] == 0 and r["bitexact"] == r["elements"] for r in results)
    evidence(Rung.PRODUCTION, ok, contract=CONTRACT, provider=PROVIDER, isa=isa, cases=results)
    assert ok, results


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 8])
def test_threadpool_matches_oracle(workers, evidence):
    lb = runner().lib
    pool = lb.v8_threadpool_create(workers)
    results = []
    try:
        for shape in SHAPES + LARGE[:1]:
            st, out = runner().run("pool", case(shape), workers=workers, pool=pool)
            n_diff, err = mismatch(out, oracle(shape))
            results.append(dict(describe(shape), status=st, bitexact=int(out.size) - n_diff,
                                elements=int(out.size), max_abs_err=err))
    finally:
        lb.v8_threadpool_destroy(pool)
    ok = all(r["status"] == 0 and r["bitexact"] == r["elements"] for r in results)
    evidence(Rung.THREADPOOL, ok, contract=CONTRACT, provider=PROVIDER, workers=workers,
             partition="independent_heads x query rows", cases=results)
    assert ok, results


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_ggml_regular_path(shape, evidence):
    try:
        import ggml  # noqa: F401
    except ImportError as exc:
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=CONTRACT, provider=PROVIDER,
                 backend="ggml", reason=str(exc))
        pytest.fail(f"ggml backend missing: {exc}")
    c = case(shape)
    ours = oracle(shape)
    runs = []
    for threads in (1, 2):
        ref = ggml_regular(c, threads)
        n_diff, err = mismatch(ours, ref)
        runs.append(dict(threads=threads, bitexact=int(ours.size) - n_diff,
                         elements=int(ours.size), max_abs_err=err))
    ok = all(r["max_abs_err"] <= GGML_TOLERANCE for r in runs)
    evidence(Rung.EXTERNAL, ok, contract=CONTRACT, provider=PROVIDER,
             backend="ggml mul_mat + soft_max_ext + mul_mat", tolerance=GGML_TOLERANCE,
             reason_not_bitexact="ggml_vec_dot_f16 lane tree (fp16 lanes on AVX512-FP16) vs "
                                 "the contract's sequential fp32 fma chains",
             runs=runs, **describe(shape))
    assert ok, runs


def test_unknown_selector_untouched(evidence):
    c = case(SHAPES[0])
    checks = {}
    for kind in ("ref", "prod"):
        for sel in (4, 7, 8):
            st, out = runner().run(kind, c, selector=sel)
            checks[f"{kind}_{sel}"] = st == V8_ERR_UNKNOWN_SELECTOR and bool(np.isnan(out).all())
    ok = all(checks.values())
    evidence(Rung.PRODUCTION, ok, contract=CONTRACT, provider=PROVIDER, check="unknown_selector",
             **checks)
    assert ok, checks
