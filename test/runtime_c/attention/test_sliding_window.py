"""Sliding-window attention: llama.cpp's standard SWA mask (the query at position p hides the
key at p0 when p - p0 >= window) on every attention provider.

Rungs, each with the window as the only new input:
- oracle vs the independent numpy models, which walk every key and hide the masked ones as
  ggml's -INFINITY mask entries do (the C providers start at the window instead);
- production vs oracle on each ISA variant (CPU mask), threadpool vs oracle;
- bit-exact vs ggml_flash_attn_ext of llama.cpp's libggml given its SWA mask: prefill below
  and from 64 query rows (the one-chunk and tiled paths), and split-KV decode where whole
  chunks fall before the window;
- argument checks: a negative window, or a window without the causal mask, is refused and
  nothing is written.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Outcome, Rung

sys.path.insert(0, str(Path(__file__).parent))
import online_model as M  # noqa: E402
from tiled_model import (  # noqa: E402
    Runner,
    build_lib,
    build_llama_regular,
    llama_regular,
    make_case,
    mismatch,
    tiled_attention,
)

AUTO = {"avx512": "f16_flash_auto_qtile64_fp32_dot", "avx2": "f16_flash_auto_qtile64_fp32_dot_8_lane"}
SPLIT = "f16_online_fp32_merge_fp32_dot"
TILED = "f16_kv_tiled64_fp32_softmax_fp64_sum_update"
REGULAR = "fp32_llama_regular"
_V8 = constants(["v8_runtime.h"])
_ATTN = constants(["attention/v8_attention.h"])
V8_OK = _V8["V8_OK"]
V8_ERR_BAD_DIMENSION = _V8["V8_ERR_BAD_DIMENSION"]
AVX2_MASK, ALL = _V8["V8_CPU_AVX2"] | _V8["V8_CPU_FMA"] | _V8["V8_CPU_F16C"], 0xFFFFFFFF

# (n_q, past, head dim, window): windows shorter than, equal to and longer than a 64-key tile,
# one that masks nothing, prompts from one token to past a 64-row query tile
PREFILL = [(n_q, past, d, w) for d in (64, 128) for n_q, past in ((5, 0), (5, 300), (63, 40),
                                                                    (64, 0), (100, 300), (130, 40))
           for w in (1, 7, 64, 100, 1000)]
# (kv_len, window): split-KV decode (extent >= 512) with chunks before, across and inside it
DECODE = [(kv, w) for kv in (300, 511, 1058, 1609) for w in (1, 100, 256, 700, 1500)]


@functools.cache
def lib() -> Any:
    return build_lib(with_online=True)


def case(n_q: int, past: int, d: int, window: int, kv_len: int | None = None) -> Any:
    kv = kv_len if kv_len is not None else past + n_q
    room = -(-kv // 256) * 256 - kv + 7  # llama.cpp's cache always covers the padded extent
    return make_case(11 * n_q + past + d + kv + window, n_q, kv - n_q, 4, 2, d, extra_cap=room,
                     kv_len=kv, window=window)


def llama_cpp_ggml(evidence: Callable[..., Any], contract: str, provider: str) -> Any:
    try:
        from v8dialect.parity.ggml_ops import GgmlOps

        return GgmlOps(1 << 30)
    except Exception as exc:  # noqa: BLE001 - llama.cpp's ggml not loadable
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=contract, provider=provider,
                 backend="llama-cpp-python libggml", reason=str(exc))
        pytest.fail(f"llama.cpp's ggml is not loadable: {exc} (recorded as unresolved)")


def ggml_swa(g: Any, c: Any, threads: int) -> np.ndarray:
    return g.flash_attn_ext(c.q, c.k16, c.v16, c.kv_len, c.q_pos0, c.causal, c.scale, threads,
                            window=c.window)


def run_pool(run: Runner, c: Any, workers: int) -> tuple[int, np.ndarray]:
    pool = lib().lib.v8_threadpool_create(workers)
    try:
        return run.run("pool", c, workers=workers, pool=pool)
    finally:
        lib().lib.v8_threadpool_destroy(pool)


# ---- external: llama.cpp's ggml with its SWA mask -------------------------------------------

def test_prefill_window_vs_llamacpp(evidence: Callable[..., Any]) -> None:
    g = llama_cpp_ggml(evidence, AUTO["avx512"], "attn_auto_qtile64_f16kv")
    contract = AUTO.get(g.build)
    if contract is None:
        pytest.skip(f"no auto composite names llama.cpp's {g.build} build")
    run = Runner(lib(), "v8_attn_auto", contract)
    figures: dict[str, int] = {}
    for n_q, past, d, w in PREFILL:
        c = case(n_q, past, d, w)
        st, ours = run.run("ref", c)
        assert st == V8_OK
        st, prod = run.run("prod", c)
        assert st == V8_OK and mismatch(prod, ours)[0] == 0, (n_q, past, d, w)
        for threads in (1, 2):
            figures[f"q{n_q}/past{past}/d{d}/w{w}/t{threads}"] = mismatch(ours, ggml_swa(g, c, threads))[0]
    ok = not any(figures.values())
    evidence(Rung.EXTERNAL, ok, contract=contract, provider="attn_auto_qtile64_f16kv",
             backend=f"ggml_flash_attn_ext with llama.cpp's SWA mask, llama-cpp-python 0.3.36 ({g.build} build)",
             window=True, differing_elements={k: v for k, v in figures.items() if v},
             cases=len(figures))
    assert ok, {k: v for k, v in figures.items() if v}


def test_split_kv_decode_window_vs_llamacpp(evidence: Callable[..., Any]) -> None:
    g = llama_cpp_ggml(evidence, SPLIT, "attn_online_split_f16kv")
    run = Runner(lib(), "v8_attn_online_split", SPLIT)
    figures: dict[str, int] = {}
    for d in (64, 128):
        for kv, w in DECODE:
            c = case(1, 0, d, w, kv_len=kv)
            for workers in (1, 2):
                st, ours = run_pool(run, c, workers)
                assert st == V8_OK
                figures[f"kv{kv}/w{w}/d{d}/t{workers}"] = mismatch(ours, ggml_swa(g, c, workers))[0]
    ok = not any(figures.values())
    evidence(Rung.EXTERNAL, ok, contract=SPLIT, provider="attn_online_split_f16kv",
             backend="ggml_flash_attn_ext split-KV decode with llama.cpp's SWA mask, threads = workers",
             window=True, differing_elements={k: v for k, v in figures.items() if v},
             cases=len(figures))
    assert ok, {k: v for k, v in figures.items() if v}


# ---- oracle vs the numpy models -------------------------------------------------------------

@pytest.mark.parametrize("tree", [M.TREE_AVX2, M.TREE_AVX512, M.TREE_AVX512FP16])
def test_single_range_oracle_matches_numpy_model(tree: str, evidence: Callable[..., Any]) -> None:
    on = M.Online()
    tree_id = {t: i for i, t in M.tree_of_id().items()}[tree]
    bad = []
    for n_q, past, d, w in ((1, 299, 64, 1), (1, 299, 128, 100), (6, 40, 64, 7), (20, 0, 128, 9)):
        c = case(n_q, past, d, w)
        k, v = c.k16.view(np.uint16), c.v16.view(np.uint16)
        st, ref = on.call("v8_attn_online_f16kv_ref_tree", _ATTN["V8_ATTN_F16_ONLINE_SINGLE_RANGE"], c.q,
                          k, v, 2, c.kv_len, c.q_pos0, 1,
                          c.scale, tree_id, window=w)
        model = M.f16_single_range(c.q, k, v, 4, 2, c.kv_len, c.q_pos0, True, c.scale, tree, window=w)
        if st != V8_OK or mismatch(ref, model)[0]:
            bad.append(f"q{n_q}/past{past}/d{d}/w{w}")
    evidence(Rung.ORACLE, not bad, contract="f16_online_single_range", provider="attn_online_f16kv",
             backend="numpy_model", tree=tree, window=True, failures=bad)
    assert not bad, bad


@pytest.mark.parametrize("workers", [2, 3])
def test_split_oracle_matches_numpy_model(workers: int, evidence: Callable[..., Any]) -> None:
    on = M.Online()
    bad = []
    for kv, w in ((1058, 1), (1058, 300), (1609, 700), (513, 100)):
        c = case(1, 0, 64, w, kv_len=kv)
        k, v = c.k16.view(np.uint16), c.v16.view(np.uint16)
        st, ref = on.call("v8_attn_online_split_ref_tree", _ATTN["V8_ATTN_F16_ONLINE_FP32_MERGE"], c.q, k, v,
                          2, kv, kv - 1, 1, c.scale, _ATTN["V8_ATTN_TREE_AVX512FP16_F16X32X4"], workers,
                          window=w)
        model = M.f16_split_kv(c.q, k, v, 4, 2, kv, c.scale, M.TREE_AVX512FP16, workers, window=w)
        if st != V8_OK or mismatch(ref, model)[0]:
            bad.append(f"kv{kv}/w{w}")
    evidence(Rung.ORACLE, not bad, contract="f16_online_fp32_merge", provider="attn_online_split_f16kv",
             backend="numpy_model", chunks=workers, window=True, failures=bad)
    assert not bad, bad


@pytest.mark.parametrize("lanes,contract", [(16, TILED), (8, TILED + "_8_lane_vexp")])
def test_tiled_oracle_matches_numpy_model(lanes: int, contract: str, evidence: Callable[..., Any]) -> None:
    run = Runner(lib(), "v8_attn_tiled", contract)
    bad = []
    for n_q, past, d, w in ((64, 0, 64, 7), (100, 300, 64, 64), (130, 40, 128, 100), (64, 200, 64, 1)):
        c = case(n_q, past, d, w)
        st, ref = run.run("ref", c)
        model = tiled_attention(c.q, c.k16, c.v16, c.kv_len, c.q_pos0, True, c.scale, 2,
                                lanes=lanes, window=w)
        if st != V8_OK or mismatch(ref, model)[0]:
            bad.append(f"q{n_q}/past{past}/d{d}/w{w}")
    evidence(Rung.ORACLE, not bad, contract=contract, provider="attn_tiled64_f16kv",
             backend="numpy_model", window=True, failures=bad)
    assert not bad, bad


def test_llama_regular_oracle_matches_numpy_model(evidence: Callable[..., Any]) -> None:
    run = Runner(build_llama_regular(), "v8_attn_llama_regular", REGULAR)
    bad = []
    for n_q, past, d, w in ((1, 299, 64, 100), (20, 40, 64, 7), (70, 0, 128, 33)):
        c = case(n_q, past, d, w)
        st, ref = run.run("ref", c)
        model = llama_regular(c.q, c.k16, c.v16, c.kv_len, c.q_pos0, True, c.scale, 2, window=w)
        if st != V8_OK or mismatch(ref, model)[0]:
            bad.append(f"q{n_q}/past{past}/d{d}/w{w}")
    evidence(Rung.ORACLE, not bad, contract=REGULAR, provider="attn_llama_regular_f16kv",
             backend="numpy_model", window=True, failures=bad)
    assert not bad, bad


# ---- production and threadpool vs oracle ---------------------------------------------------

PROVIDERS = [("v8_attn_auto", AUTO["avx512"], "attn_auto_qtile64_f16kv"),
             ("v8_attn_tiled", TILED, "attn_tiled64_f16kv"),
             ("v8_attn_llama_regular", REGULAR, "attn_llama_regular_f16kv")]


def runner(prefix: str, contract: str) -> Runner:
    return Runner(build_llama_regular() if prefix == "v8_attn_llama_regular" else lib(), prefix, contract)


@pytest.mark.parametrize("mask", [AVX2_MASK, ALL], ids=["avx2", "native"])
@pytest.mark.parametrize("prefix,contract,provider", PROVIDERS, ids=[p[2] for p in PROVIDERS])
def test_production_equals_oracle_per_isa(prefix: str, contract: str, provider: str, mask: int,
                                          evidence: Callable[..., Any]) -> None:
    run = runner(prefix, contract)
    run.lib.v8_cpu_restrict(mask)
    try:
        shapes = [s for s in PREFILL[::4] if prefix != "v8_attn_tiled" or s[0] >= 64]
        bad = [f"q{n_q}/past{past}/d{d}/w{w}" for n_q, past, d, w in shapes
               if mismatch(run.run("prod", c := case(n_q, past, d, w))[1], run.run("ref", c)[1])[0]]
    finally:
        run.lib.v8_cpu_restrict(ALL)
    evidence(Rung.PRODUCTION, not bad, contract=contract, provider=provider, cpu_mask=mask,
             window=True, failures=bad)
    assert not bad, bad


@pytest.mark.parametrize("workers", [2, 3])
def test_threadpool_equals_oracle(workers: int, evidence: Callable[..., Any]) -> None:
    bad = []
    auto = Runner(lib(), "v8_attn_auto", AUTO["avx512"])
    for n_q, past, d, w in ((5, 300, 128, 100), (64, 0, 64, 7), (130, 40, 64, 64)):
        c = case(n_q, past, d, w)
        if mismatch(run_pool(auto, c, workers)[1], auto.run("ref", c)[1])[0]:
            bad.append(f"auto q{n_q}/past{past}/w{w}")
    split = Runner(lib(), "v8_attn_online_split", SPLIT)
    for kv, w in ((1058, 300), (1609, 1), (1609, 1500)):
        c = case(1, 0, 128, w, kv_len=kv)
        st, got = run_pool(split, c, workers)
        args, keep = split._args(c, ref := np.zeros_like(c.q), workers)
        assert lib().lib.v8_attn_online_split_ref_workers(workers, *args) == 0 and st == V8_OK
        del keep
        if mismatch(got, ref)[0]:
            bad.append(f"split kv{kv}/w{w}")
    for contract, provider in ((AUTO["avx512"], "attn_auto_qtile64_f16kv"),
                               (SPLIT, "attn_online_split_f16kv")):
        evidence(Rung.THREADPOOL, not bad, contract=contract, provider=provider, workers=workers,
                 window=True, failures=bad)
    assert not bad, bad


# ---- the window's own properties and argument checks ----------------------------------------

def test_window_covering_every_key_changes_nothing() -> None:
    """A window at least as long as the sequence masks nothing: the bits of plain causal."""
    run = Runner(lib(), "v8_attn_auto", AUTO["avx512"])
    for n_q, past in ((5, 300), (100, 40)):
        windowed = run.run("ref", case(n_q, past, 64, past + n_q))[1]
        plain = case(n_q, past, 64, past + n_q)
        plain.window = 0
        assert mismatch(windowed, run.run("ref", plain)[1])[0] == 0


def test_window_changes_the_result() -> None:
    """The mask is live: a window shorter than the prompt gives other values than causal."""
    run = Runner(lib(), "v8_attn_auto", AUTO["avx512"])
    c = case(64, 100, 64, 16)
    windowed = run.run("ref", c)[1]
    c.window = 0
    assert mismatch(windowed, run.run("ref", c)[1])[0] > 0


@pytest.mark.parametrize("prefix,contract,provider", PROVIDERS + [
    ("v8_attn_online_split", SPLIT, "attn_online_split_f16kv")], ids=lambda p: str(p))
@pytest.mark.parametrize("window,causal", [(-1, True), (5, False)])
def test_bad_window_is_refused_untouched(prefix: str, contract: str, provider: str, window: int,
                                         causal: bool) -> None:
    run = runner(prefix, contract)
    c = case(1, 299, 64, 0) if prefix == "v8_attn_online_split" else case(64, 10, 64, 0)
    c.window, c.causal = window, causal
    for kind in ("ref", "prod"):
        st, out = run.run(kind, c)
        assert st == V8_ERR_BAD_DIMENSION and np.isnan(out).all(), (kind, st)
