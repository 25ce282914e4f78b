"""Evidence for f16_flash_auto_qtile64 (provider attn_auto_qtile64_f16kv).

The composite runs f16_online_single_range below 64 query rows and the tiled
contract at 64 or more (when head_dim is a multiple of 16, ggml's AVX-512
condition).  Rungs: oracle vs the numpy model of the chosen branch; production
(AVX-512, AVX2) vs oracle; threadpool 1/2/3/4/8 vs oracle; ggml_flash_attn_ext
bit-exact at Q 1, 5, 14, 63, 64, 65 x past 0, 5, 1013.
"""

from __future__ import annotations

import functools

import numpy as np
import online_model
import pytest
from tiled_model import (
    Runner,
    bits_equal,
    build_lib,
    ggml_flash_attn,
    ggml_python_build,
    make_case,
    mismatch,
    tiled_attention,
)

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Outcome, Rung

CONTRACT = "f16_flash_auto_qtile64"
PROVIDER = "attn_auto_qtile64_f16kv"
V8_CPU_ALL = 0xFFFFFFFF
_V8 = constants(["v8_runtime.h"])
V8_OK = _V8["V8_OK"]
V8_ERR_UNKNOWN_SELECTOR = _V8["V8_ERR_UNKNOWN_SELECTOR"]
V8_CPU_AVX2_FMA_F16C = _V8["V8_CPU_AVX2"] | _V8["V8_CPU_FMA"] | _V8["V8_CPU_F16C"]


@functools.cache
def lib():
    return build_lib(with_online=True)


def runner() -> Runner:
    return Runner(lib(), "v8_attn_auto", CONTRACT)


SHAPES = [(n_q, past) for n_q in (1, 5, 14, 63, 64, 65) for past in (0, 5, 1013)]


@functools.cache
def case(n_q, past, d=128, causal=True):
    return make_case(101 + 3 * n_q + past + d, n_q, past, 4, 2, d, causal=causal)


def test_threshold_rule(evidence):
    lb = lib().lib
    grid = [(n, d) for n in (1, 63, 64, 1008) for d in (64, 72, 80, 128)]
    got = {(n, d): bool(lb.v8_attn_auto_uses_tiled(n, d)) for n, d in grid}
    ok = all(got[(n, d)] == (n >= 64 and d % 16 == 0) for n, d in grid)
    rule = {f"n_q={n} D={d}": v for (n, d), v in got.items()}
    evidence(Rung.ORACLE, ok, contract=CONTRACT, provider=PROVIDER, check="composite_rule",
             threshold=64, head_dim_multiple=16, rule=rule)
    assert ok, rule


@pytest.mark.parametrize("n_q,past", [(1, 5), (14, 1013), (63, 5), (64, 0), (65, 5)], ids=str)
def test_oracle_matches_numpy_model(n_q, past, evidence):
    c = case(n_q, past)
    st, ours = runner().run("ref", c)
    assert st == V8_OK
    if n_q >= 64:
        branch = "tiled"
        model = tiled_attention(c.q, c.k16, c.v16, c.kv_len, c.q_pos0, c.causal, c.scale, c.n_head_kv)
    else:
        branch = "single_range"
        tree = online_model.tree_of_id()[lib().lib.v8_attn_online_dot_tree()]
        model = online_model.f16_single_range(c.q, c.k16.view(np.uint16), c.v16.view(np.uint16),
                                              c.n_head, c.n_head_kv, c.kv_len, c.q_pos0, c.causal,
                                              c.scale, tree)
    n_diff, err = mismatch(ours, model)
    ok = n_diff == 0
    evidence(Rung.ORACLE, ok, contract=CONTRACT, provider=PROVIDER, against="numpy model",
             branch=branch, n_q=n_q, past=past, elements=int(ours.size),
             bitexact=int(ours.size) - n_diff, max_abs_err=err)
    assert ok, (n_diff, err)


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
def test_production_matches_oracle(isa, evidence):
    lb = lib().lib
    want = 2 if isa == "avx512" else 1
    if lb.v8_cpu_best_isa() < want:
        # as everywhere in runtime_c: the CPU mask can only take away what the host has
        pytest.skip(f"CPU lacks {isa}; its production variant is compared on hosts that have it")
    lb.v8_cpu_restrict(V8_CPU_ALL if isa == "avx512" else V8_CPU_AVX2_FMA_F16C)
    results = []
    try:
        for n_q, past in SHAPES:
            c = case(n_q, past)
            _, ref = runner().run("ref", c)   # the oracle under the same ISA (single-range tree)
            st, out = runner().run("prod", c)
            assert st == V8_OK
            n_diff, err = mismatch(out, ref)
            results.append(dict(n_q=n_q, past=past, bitexact=int(out.size) - n_diff,
                                elements=int(out.size), max_abs_err=err))
    finally:
        lb.v8_cpu_restrict(V8_CPU_ALL)
    ok = all(r["bitexact"] == r["elements"] for r in results)
    evidence(Rung.PRODUCTION, ok, contract=CONTRACT, provider=PROVIDER, isa=isa, cases=results)
    assert ok, results


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 8])
def test_threadpool_matches_oracle(workers, evidence):
    lb = lib().lib
    pool = lb.v8_threadpool_create(workers)
    results = []
    try:
        for n_q, past in [(1, 1013), (5, 5), (63, 0), (64, 5), (65, 1013)]:
            c = case(n_q, past)
            _, ref = runner().run("ref", c)
            st, out = runner().run("pool", c, workers=workers, pool=pool)
            assert st == V8_OK
            n_diff, err = mismatch(out, ref)
            results.append(dict(n_q=n_q, past=past, bitexact=int(out.size) - n_diff,
                                elements=int(out.size), max_abs_err=err))
    finally:
        lb.v8_threadpool_destroy(pool)
    ok = all(r["bitexact"] == r["elements"] for r in results)
    evidence(Rung.THREADPOOL, ok, contract=CONTRACT, provider=PROVIDER, workers=workers,
             cases=results)
    assert ok, results


@pytest.mark.parametrize("n_q,past", SHAPES, ids=str)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_ggml_flash_attn_ext(n_q, past, causal, evidence):
    try:
        import ggml  # noqa: F401
    except ImportError as exc:
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=CONTRACT, provider=PROVIDER,
                 backend="ggml", reason=str(exc))
        pytest.fail(f"ggml backend missing: {exc}")
    if n_q >= 64 and (build := ggml_python_build()) != "avx512":
        pytest.skip(f"from 64 rows {CONTRACT} runs ggml's AVX-512 build's tiled arithmetic; "
                    f"ggml-python's libggml here is the {build} build")
    c = case(n_q, past, causal=causal)
    st, ours = runner().run("prod", c)
    assert st == V8_OK
    # ggml decodes a single query over >= 512 (padded) keys with its split-KV path,
    # whose chunks follow the thread count (contract f16_online_fp32_merge); at one
    # thread that is one chunk and equals the single range, so only one thread
    # is compared there.
    split = n_q == 1 and -(-c.kv_len // 256) * 256 >= 512
    runs = []
    for threads in ((1,) if split else (1, 2)):
        ref = ggml_flash_attn(c, threads)
        n_diff, err = mismatch(ours, ref)
        runs.append(dict(threads=threads, bitexact=int(ours.size) - n_diff,
                         elements=int(ours.size), max_abs_err=err))
    _, orc = runner().run("ref", c)
    ok = bits_equal(orc, ours) and all(r["bitexact"] == r["elements"] for r in runs)
    evidence(Rung.EXTERNAL, ok, contract=CONTRACT, provider=PROVIDER, backend="ggml_flash_attn_ext",
             branch="tiled" if n_q >= 64 else "single_range", n_q=n_q, past=past,
             mode="causal" if causal else "full", head_dim=128, runs=runs,
             note="split-KV decode compared at 1 thread only" if split else "")
    assert ok, runs


def test_ggml_head_dim_72_stays_single_range(evidence):
    """At D = 72 the AVX-512 ggml keeps 64+ query rows on its one-chunk path; so does the composite."""
    if (build := ggml_python_build()) != "avx512":
        pytest.skip(f"the D % 16 rule of {CONTRACT} is ggml's AVX-512 build's; ggml-python's "
                    f"libggml here is the {build} build")
    c = make_case(7, 65, 5, 4, 2, 72)
    st, ours = runner().run("prod", c)
    ref = ggml_flash_attn(c, 1)
    n_diff, err = mismatch(ours, ref)
    ok = st == V8_OK and n_diff == 0
    evidence(Rung.EXTERNAL, ok, contract=CONTRACT, provider=PROVIDER, backend="ggml_flash_attn_ext",
             branch="single_range", n_q=65, past=5, head_dim=72, bitexact=int(ours.size) - n_diff,
             elements=int(ours.size), max_abs_err=err)
    assert ok, (n_diff, err)


def test_unknown_selector_untouched(evidence):
    c = case(5, 5)
    checks = {}
    for kind in ("ref", "prod"):
        for sel in (4, 7, 99):
            st, out = runner().run(kind, c, selector=sel)
            checks[f"{kind}_{sel}"] = st == V8_ERR_UNKNOWN_SELECTOR and bool(np.isnan(out).all())
    ok = all(checks.values())
    evidence(Rung.PRODUCTION, ok, contract=CONTRACT, provider=PROVIDER, check="unknown_selector",
             **checks)
    assert ok, checks
