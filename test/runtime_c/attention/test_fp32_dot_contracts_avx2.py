"""llama.cpp's AVX2 build of its flash-attention prefill: the tiled contract
f16_kv_tiled64_fp32_softmax_fp64_sum_update_8_lane_vexp (provider attn_tiled64_f16kv) and the
composite f16_flash_auto_qtile64_fp32_dot_8_lane (provider attn_auto_qtile64_f16kv; below 64
query rows f16_online_single_range_fp32_dot, from 64 the 8-lane tiled contract).

The AVX2 build's tiled path differs from the AVX-512 build's (the twins in attention.json) in
ggml_vec_soft_max_f32 only: its exp is the __m256 ggml_v_expf (no 1 inside the polynomial,
2^n from exponent bits, k + k*j) and the tile sum adds the fp64 values of eight 8-key groups,
each reduced (a0 + a2) + (a1 + a3) with a_i = p[i+4] + p[i].  Scores (simd_gemm fma chains),
the running max, libm's rescale and the P.V fma chains are the same in both builds.

Rungs: oracle vs the independent numpy model (tiled_model.tiled_attention(lanes=8) and
online_model's single range) on both routes and on tails of both tile sizes and odd head
dims; production vs oracle under the scalar, AVX2 and native CPU masks; threadpool at 1, 2,
3, 4, 8 workers; llama.cpp's libggml (GgmlOps) bit for bit at 1 and 2 threads over the twin's
shape set, and ggml-python's libggml for the tiled contract alone over the twin's tiled
matrix, each only when that library is the AVX2 build (skipped otherwise), with the negative
control that the AVX-512 twin differs from it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import online_model
import pytest
from tiled_model import (
    F32,
    SELECTORS,
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

TILED = "f16_kv_tiled64_fp32_softmax_fp64_sum_update_8_lane_vexp"
AUTO = "f16_flash_auto_qtile64_fp32_dot_8_lane"
TILED_TWIN = "f16_kv_tiled64_fp32_softmax_fp64_sum_update"
AUTO_TWIN = "f16_flash_auto_qtile64_fp32_dot"
TILED_PROVIDER = "attn_tiled64_f16kv"
AUTO_PROVIDER = "attn_auto_qtile64_f16kv"
BUILD = "avx2"
_V8 = constants(["v8_runtime.h"])
V8_OK = _V8["V8_OK"]
V8_ERR_UNKNOWN_SELECTOR = _V8["V8_ERR_UNKNOWN_SELECTOR"]
V8_CPU_AVX2_FMA_F16C = _V8["V8_CPU_AVX2"] | _V8["V8_CPU_FMA"] | _V8["V8_CPU_F16C"]
V8_CPU_ALL = 0xFFFFFFFF
MASKS = {"scalar": 0x0, "avx2": V8_CPU_AVX2_FMA_F16C, "native": V8_CPU_ALL}

# the twin composite's shape set (test_fp32_dot_contracts.py)
PREFILL = [(n_q, past, d) for d in (64, 128) for n_q in (2, 5, 14, 63, 64, 65)
           for past in (0, 5, 300)]
DECODE = [(1, kv - 1, d) for d in (64, 128) for kv in (1, 255, 256)]
# (n_q, past, H, Hkv, D, causal): GQA, head dims 64/72/80/128, tails of both tile sizes
TILED_SHAPES = [
    (64, 0, 4, 2, 64, True),
    (65, 5, 2, 1, 128, True),
    (70, 0, 2, 2, 80, False),
    (130, 40, 2, 1, 72, True),
    (100, 0, 4, 4, 72, False),
    (64, 1013, 2, 1, 64, True),
]
# the twin tiled contract's external matrix (test_tiled_prefill.py)
TILED_EXTERNAL = [(n_q, past, causal) for causal in (True, False)
                  for n_q in (64, 65, 1008) for past in (0, 5, 1013)
                  if not (n_q == 1008 and past == 1013 and not causal)]


@functools.cache
def lib() -> Any:
    return build_lib(with_online=True)


def case(n_q: int, past: int, d: int, kv_len: int | None = None) -> Any:
    """The twin's cases: caches cover llama.cpp's padded extent (as test_fp32_dot_contracts)."""
    kv = kv_len if kv_len is not None else past + n_q
    room = -(-kv // 256) * 256 - kv + 7
    return make_case(7 * n_q + past + d + kv, n_q, kv - n_q if kv_len else past, 4, 2, d,
                     extra_cap=room, kv_len=kv)


@functools.cache
def tiled_case(shape: tuple[int, int, int, int, int, bool], seed: int = 11,
               q_gain: float = 1.0) -> Any:
    n_q, past, h, hkv, d, causal = shape
    c = make_case(seed + 7 * n_q + past + d, n_q, past, h, hkv, d, causal=causal)
    if q_gain != 1.0:
        c.q = (c.q * F32(q_gain)).astype(F32)
    return c


def wide_exp_arguments(c: Any) -> int:
    """How many s - M of the case fall where ggml's AVX2 exp splits its scale (126 < |n| <=
    192, about -133 < s - M < -87.3): the model comparison covers that branch when > 0."""
    kv = c.k16.astype(F32)
    group = c.n_head // c.n_head_kv
    count = 0
    for h in range(c.n_head):
        s = c.q[:, h, :] @ kv[h // group, :c.kv_len].T * c.scale
        rows = np.arange(c.n_q)
        end = c.q_pos0 + rows + 1 if c.causal else np.full(c.n_q, c.kv_len)
        s = np.where(np.arange(c.kv_len)[None, :] < end[:, None], s, -np.inf)
        x = s - s.max(axis=1, keepdims=True)
        count += int(np.sum((x < -87.5) & (x > -130.0)))  # visible keys only (-inf excluded)
    return count


def ggml_or_unresolved(evidence: Callable[..., Any]) -> Any:
    try:
        from v8dialect.parity.ggml_ops import GgmlOps

        return GgmlOps(1 << 30)
    except Exception as exc:  # noqa: BLE001 - llama.cpp's ggml not loadable
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=AUTO, provider=AUTO_PROVIDER,
                 backend="llama-cpp-python libggml", reason=str(exc))
        pytest.fail(f"llama.cpp's ggml is not loadable: {exc} (recorded as unresolved)")


def reference(g: Any, c: Any, threads: int) -> np.ndarray:
    return g.flash_attn_ext(c.q, c.k16, c.v16, c.kv_len, c.q_pos0, c.causal, c.scale, threads)


# ---- oracle vs the independent models -------------------------------------------------------

def test_exp_model_covers_both_forms() -> None:
    """The numpy model's AVX2 exp is not the AVX-512 one (else the oracle comparison below
    could not tell the builds apart), and both agree with exp to ~1 ulp on ordinary inputs."""
    from tiled_model import expf_ggml256, expf_ggml512
    x = np.linspace(-100, 0, 200001, dtype=F32)
    a, b = expf_ggml256(x), expf_ggml512(x)
    assert int(np.sum(a.view(np.uint32) != b.view(np.uint32))) > 1000
    ok = np.abs(a.astype(np.float64) / np.exp(x.astype(np.float64)) - 1)[x > -87] < 1e-6
    assert ok.all()
    assert expf_ggml256(np.array([0.0], F32))[0] == 1.0
    assert expf_ggml256(np.array([-np.inf], F32))[0] == 0.0
    tiny = expf_ggml256(np.array([-95.0, -103.0], F32))   # subnormal results, split scale
    assert np.all(tiny > 0) and np.all(tiny < np.finfo(F32).tiny)


@pytest.mark.parametrize("shape,q_gain", [(s, 1.0) for s in TILED_SHAPES]
                         + [(TILED_SHAPES[1], 24.0), (TILED_SHAPES[3], 24.0)], ids=str)
def test_tiled_oracle_matches_numpy_model(shape: Any, q_gain: float,
                                          evidence: Callable[..., Any]) -> None:
    c = tiled_case(shape, q_gain=q_gain)
    if q_gain != 1.0:
        assert wide_exp_arguments(c) > 0  # the split-scale / saturating exp branches are hit
    model = tiled_attention(c.q, c.k16, c.v16, c.kv_len, c.q_pos0, c.causal, c.scale,
                            c.n_head_kv, lanes=8)
    st, ours = Runner(lib(), "v8_attn_tiled", TILED).run("ref", c)
    assert st == V8_OK
    n_diff, err = mismatch(ours, model)
    twin = tiled_attention(c.q, c.k16, c.v16, c.kv_len, c.q_pos0, c.causal, c.scale,
                           c.n_head_kv, lanes=16)
    ok = bits_equal(ours, model)
    n_q, past, h, hkv, d, causal = shape
    evidence(Rung.ORACLE, ok, contract=TILED, provider=TILED_PROVIDER, against="numpy model",
             elements=int(ours.size), bitexact=int(ours.size) - n_diff, max_abs_err=err,
             n_q=n_q, past=past, n_head=h, n_head_kv=hkv, head_dim=d, q_gain=q_gain,
             mode="causal" if causal else "full",
             differs_from_16_lane_model=mismatch(model, twin)[0])
    assert ok, f"{n_diff} elements differ, max abs err {err}"
    assert mismatch(model, twin)[0] > 0  # the two builds' arithmetic is told apart here


@pytest.mark.parametrize("n_q,past,d", [(5, 300, 128), (63, 0, 64), (64, 5, 128), (65, 300, 64),
                                        (130, 40, 72), (64, 0, 80)], ids=str)
def test_composite_oracle_matches_numpy_model(n_q: int, past: int, d: int,
                                              evidence: Callable[..., Any]) -> None:
    c = case(n_q, past, d)
    st, ours = Runner(lib(), "v8_attn_auto", AUTO).run("ref", c)
    assert st == V8_OK
    if n_q >= 64:  # any head dim, 72 and 80 included (ggml's x86 builds have no lane rule)
        route = "tiled_8_lane"
        model = tiled_attention(c.q, c.k16, c.v16, c.kv_len, c.q_pos0, c.causal, c.scale,
                                c.n_head_kv, lanes=8)
    else:
        route = "single_range_fp32_dot"
        tree = online_model.tree_of_id()[int(lib().lib.v8_attn_online_fp32_dot_tree())]
        model = online_model.f16_single_range(c.q, c.k16.view(np.uint16), c.v16.view(np.uint16),
                                              c.n_head, c.n_head_kv, c.kv_len, c.q_pos0,
                                              c.causal, c.scale, tree)
    n_diff, err = mismatch(ours, model)
    ok = n_diff == 0
    evidence(Rung.ORACLE, ok, contract=AUTO, provider=AUTO_PROVIDER, against="numpy model",
             route=route, n_q=n_q, past=past, head_dim=d, elements=int(ours.size),
             bitexact=int(ours.size) - n_diff, max_abs_err=err)
    assert ok, (n_diff, err)


# ---- production and threadpool vs the oracle --------------------------------------------------

@pytest.mark.parametrize("mask", list(MASKS.values()), ids=list(MASKS))
def test_production_equals_oracle_per_isa(mask: int, evidence: Callable[..., Any]) -> None:
    lb = lib().lib
    lb.v8_cpu_restrict(mask)
    try:
        isa = int(lb.v8_cpu_best_isa())
        tiled = Runner(lib(), "v8_attn_tiled", TILED)
        bad_tiled = [str(s) for s in TILED_SHAPES + [(1008, 5, 2, 1, 128, True)]
                     if mismatch(tiled.run("prod", tiled_case(s))[1],
                                 tiled.run("ref", tiled_case(s))[1])[0]]
        wide = tiled_case(TILED_SHAPES[1], q_gain=24.0)
        if mismatch(tiled.run("prod", wide)[1], tiled.run("ref", wide)[1])[0]:
            bad_tiled.append("wide exp arguments")
        auto = Runner(lib(), "v8_attn_auto", AUTO)
        bad_auto = [f"q{n_q}/past{past}/d{d}" for n_q, past, d in PREFILL[::3] + [(130, 40, 72)]
                    if mismatch(auto.run("prod", case(n_q, past, d))[1],
                                auto.run("ref", case(n_q, past, d))[1])[0]]
    finally:
        lb.v8_cpu_restrict(V8_CPU_ALL)
    isa_name = {0: "scalar", 1: "avx2", 2: "avx512"}[isa]
    evidence(Rung.PRODUCTION, not bad_tiled, contract=TILED, provider=TILED_PROVIDER,
             isa=isa_name, failures=bad_tiled)
    evidence(Rung.PRODUCTION, not bad_auto, contract=AUTO, provider=AUTO_PROVIDER, isa=isa_name,
             failures=bad_auto)
    assert not bad_tiled and not bad_auto, (bad_tiled, bad_auto)


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 8])
def test_threadpool_equals_oracle(workers: int, evidence: Callable[..., Any]) -> None:
    lb = lib().lib
    pool = lb.v8_threadpool_create(workers)
    bad_tiled: list[str] = []
    bad_auto: list[str] = []
    try:
        tiled = Runner(lib(), "v8_attn_tiled", TILED)
        for s in TILED_SHAPES + [(1008, 5, 2, 1, 128, True)]:
            c = tiled_case(s)
            if mismatch(tiled.run("pool", c, workers, pool)[1], tiled.run("ref", c)[1])[0]:
                bad_tiled.append(str(s))
        auto = Runner(lib(), "v8_attn_auto", AUTO)
        for n_q, past, d in ((5, 300, 128), (63, 0, 64), (64, 5, 128), (65, 300, 64),
                             (130, 40, 72)):
            c = case(n_q, past, d)
            if mismatch(auto.run("pool", c, workers, pool)[1], auto.run("ref", c)[1])[0]:
                bad_auto.append(f"q{n_q}/past{past}/d{d}")
    finally:
        lb.v8_threadpool_destroy(pool)
    evidence(Rung.THREADPOOL, not bad_tiled, contract=TILED, provider=TILED_PROVIDER,
             workers=workers, partition="independent_heads x independent_query_blocks",
             failures=bad_tiled)
    evidence(Rung.THREADPOOL, not bad_auto, contract=AUTO, provider=AUTO_PROVIDER,
             workers=workers, failures=bad_auto)
    assert not bad_tiled and not bad_auto, (bad_tiled, bad_auto)


def test_selectors(evidence: Callable[..., Any]) -> None:
    """Each function takes its own contracts only; the output stays untouched otherwise."""
    c = tiled_case(TILED_SHAPES[0])
    tiled = Runner(lib(), "v8_attn_tiled", TILED)
    auto = Runner(lib(), "v8_attn_auto", AUTO)
    checks = {}
    for kind in ("ref", "prod"):
        # the composite is not the tiled provider's
        st, out = tiled.run(kind, c, selector=SELECTORS["f16_flash_auto_qtile64_fp32_dot_8_lane"])
        checks[f"tiled_{kind}_rejects_composite"] = st == V8_ERR_UNKNOWN_SELECTOR and bool(np.isnan(out).all())
        # nor is the tiled contract the composite's
        st, out = auto.run(kind, c,
                           selector=SELECTORS["f16_kv_tiled64_fp32_softmax_fp64_sum_update_8_lane_vexp"])
        checks[f"auto_{kind}_rejects_tiled"] = st == V8_ERR_UNKNOWN_SELECTOR and bool(np.isnan(out).all())
        st, out = tiled.run(kind, c)
        checks[f"tiled_{kind}_accepts"] = st == V8_OK and bool(np.isfinite(out).all())
    ok = all(checks.values())
    evidence(Rung.PRODUCTION, ok, contract=TILED, provider=TILED_PROVIDER, check="selectors",
             **checks)
    assert ok, checks


# ---- external: llama.cpp's own libggml (AVX2 build) -------------------------------------------

def test_prefill_and_decode_vs_llamacpp(evidence: Callable[..., Any]) -> None:
    g = ggml_or_unresolved(evidence)
    if g.build != BUILD:
        pytest.skip(f"{AUTO} is llama.cpp's AVX2 build; this libggml is the {g.build} build "
                    "(test_fp32_dot_contracts.py compares the AVX-512 twin)")
    run = Runner(lib(), "v8_attn_auto", AUTO)
    twin = Runner(lib(), "v8_attn_auto", AUTO_TWIN)
    figures: dict[str, int] = {}
    twin_differs = 0
    for n_q, past, d in PREFILL + DECODE:
        c = case(n_q, past, d)
        st, ours = run.run("ref", c)
        assert st == V8_OK
        st, prod = run.run("prod", c)
        assert st == V8_OK and mismatch(prod, ours)[0] == 0
        for threads in (1, 2):
            ref = reference(g, c, threads)
            figures[f"q{n_q}/past{past}/d{d}/t{threads}"] = mismatch(ours, ref)[0]
            if n_q >= 64:
                twin_differs += mismatch(twin.run("ref", c)[1], ref)[0]
    ok = not any(figures.values())
    tiled_figures = {k: v for k, v in figures.items() if int(k.split("/")[0][1:]) >= 64}
    backend = "ggml_flash_attn_ext of llama-cpp-python 0.3.36 (ggml 0.25.3), native AVX2 build"
    bad = {k: v for k, v in figures.items() if v}
    evidence(Rung.EXTERNAL, ok, contract=AUTO, provider=AUTO_PROVIDER, backend=backend,
             differing_elements=bad, cases=len(figures),
             avx512_twin_differing_elements=twin_differs)
    evidence(Rung.EXTERNAL, not any(tiled_figures.values()), contract=TILED,
             provider=TILED_PROVIDER, backend=backend, via=AUTO,
             cases=len(tiled_figures),
             differing_elements={k: v for k, v in tiled_figures.items() if v})
    assert ok, bad
    # negative control: the AVX-512 build's tiled arithmetic is not this build's
    assert twin_differs > 0


@pytest.mark.parametrize("n_q,past,causal", TILED_EXTERNAL, ids=str)
def test_tiled_vs_ggml_python(n_q: int, past: int, causal: bool,
                              evidence: Callable[..., Any]) -> None:
    try:
        build = ggml_python_build()
    except ImportError as exc:
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=TILED, provider=TILED_PROVIDER,
                 backend="ggml", reason=str(exc), n_q=n_q, past=past)
        pytest.fail(f"ggml backend missing: {exc}")
    if build != BUILD:
        pytest.skip(f"{TILED} is ggml's AVX2 build; ggml-python's libggml here is the {build} "
                    "build (test_tiled_prefill.py compares the AVX-512 twin)")
    d = 128 if n_q < 1008 else 64
    shape = (n_q, past, 4, 2, d, causal) if n_q < 1008 else (n_q, past, 2, 1, d, causal)
    c = tiled_case(shape, seed=3)
    st, ours = Runner(lib(), "v8_attn_tiled", TILED).run("prod", c)
    assert st == V8_OK
    st, orc = Runner(lib(), "v8_attn_tiled", TILED).run("ref", c)
    assert st == V8_OK
    runs = []
    for threads in (1, 2):
        n_diff, err = mismatch(ours, ggml_flash_attn(c, threads))
        runs.append(dict(threads=threads, bitexact=int(ours.size) - n_diff,
                         elements=int(ours.size), max_abs_err=err))
    twin_diff = mismatch(Runner(lib(), "v8_attn_tiled", TILED_TWIN).run("ref", c)[1],
                         ggml_flash_attn(c, 1))[0]
    same_as_oracle = bits_equal(orc, ours)
    ok = same_as_oracle and all(r["bitexact"] == r["elements"] for r in runs)
    evidence(Rung.EXTERNAL, ok, contract=TILED, provider=TILED_PROVIDER,
             backend="ggml_flash_attn_ext",
             ggml="ggml-python's libggml (AVX2 build), F16 K/V padded to 256, f16 mask, "
                  "GGML_PREC_F32",
             oracle_equals_production=same_as_oracle, runs=runs, n_q=n_q, past=past,
             head_dim=d, mode="causal" if causal else "full",
             avx512_twin_differing_elements=twin_diff)
    assert ok, runs
    assert twin_diff > 0  # negative control
