"""f16_online_single_range_fp32_dot, f16_online_fp32_merge_fp32_dot and the composite
f16_flash_auto_qtile64_fp32_dot: llama.cpp's current flash attention on the CPU.

External rung: the ggml llama.cpp ships (ggml_flash_attn_ext of llama-cpp-python's libggml,
fp16 caches over the valid length rounded up to 256 as llama.cpp's KV cache presents them),
bit for bit: prefill below and from 64 query rows at 1 and 2 threads, decode single range,
and split-KV decode at W workers against ggml at W threads.  Production and threadpool
against the oracle; negative control: on CPUs with AVX512-FP16 the fp16-lane contract
(f16_online_single_range) is other arithmetic than llama.cpp's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from tiled_model import Runner, build_lib, make_case, mismatch

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Outcome, Rung

V8_OK = constants(["v8_runtime.h"])["V8_OK"]
AUTO = "f16_flash_auto_qtile64_fp32_dot"
SPLIT = "f16_online_fp32_merge_fp32_dot"
PREFILL = [(n_q, past, d) for d in (64, 128) for n_q in (2, 5, 14, 63, 64, 65) for past in (0, 5, 300)]
DECODE_KV = (1, 255, 256, 257, 511, 512, 513, 1058, 1609)


@functools.cache
def lib() -> Any:
    return build_lib(with_online=True)


def case(n_q: int, past: int, d: int, kv_len: int | None = None, heads: tuple[int, int] = (4, 2)
         ) -> Any:
    kv = kv_len if kv_len is not None else past + n_q
    room = -(-kv // 256) * 256 - kv + 7  # llama.cpp's cache always covers the padded extent
    return make_case(7 * n_q + past + d + kv + heads[0], n_q, kv - n_q if kv_len else past,
                     *heads, d, extra_cap=room, kv_len=kv)


def ggml_or_unresolved(evidence: Callable[..., Any], contract: str, provider: str) -> Any:
    try:
        from v8dialect.parity.ggml_ops import GgmlOps

        return GgmlOps(1 << 30)
    except Exception as exc:  # noqa: BLE001 - llama.cpp's ggml not loadable
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=contract, provider=provider,
                 backend="llama-cpp-python libggml", reason=str(exc))
        pytest.fail(f"llama.cpp's ggml is not loadable: {exc} (recorded as unresolved)")


def reference(g: Any, c: Any, threads: int) -> np.ndarray:
    return g.flash_attn_ext(c.q, c.k16, c.v16, c.kv_len, c.q_pos0, c.causal, c.scale, threads)


def test_prefill_and_decode_vs_llamacpp(evidence: Callable[..., Any]) -> None:
    g = ggml_or_unresolved(evidence, AUTO, "attn_auto_qtile64_f16kv")
    if g.build != "avx512":
        # from 64 query rows the composite runs the AVX-512 build's tiled arithmetic (16-key
        # groups, AVX-512 ggml_v_expf); the twin for this build is ..._fp32_dot_8_lane
        pytest.skip(f"{AUTO} is llama.cpp's AVX-512 build; this libggml is the {g.build} build "
                    "(test_fp32_dot_contracts_avx2.py compares its twin)")
    run = Runner(lib(), "v8_attn_auto", AUTO)
    figures: dict[str, int] = {}
    # one query over an extent below 512 (256): the single range at any thread count
    cases = PREFILL + [(1, kv - 1, d) for d in (64, 128) for kv in (1, 255, 256)]
    for n_q, past, d in cases:
        c = case(n_q, past, d)
        st, ours = run.run("ref", c)
        assert st == V8_OK
        st, prod = run.run("prod", c)
        assert st == V8_OK and mismatch(prod, ours)[0] == 0
        for threads in (1, 2):
            figures[f"q{n_q}/past{past}/d{d}/t{threads}"] = mismatch(ours, reference(g, c, threads))[0]
    ok = not any(figures.values())
    evidence(Rung.EXTERNAL, ok, contract=AUTO, provider="attn_auto_qtile64_f16kv",
             backend="ggml_flash_attn_ext of llama-cpp-python 0.3.36 (ggml 0.25.3), native build",
             differing_elements={k: v for k, v in figures.items() if v}, cases=len(figures))
    assert ok, {k: v for k, v in figures.items() if v}


def test_split_kv_decode_vs_llamacpp(evidence: Callable[..., Any]) -> None:
    g = ggml_or_unresolved(evidence, SPLIT, "attn_online_split_f16kv")
    run = Runner(lib(), "v8_attn_online_split", SPLIT)
    figures: dict[str, int] = {}
    for d in (64, 128):
        for kv in DECODE_KV:
            c = case(1, 0, d, kv_len=kv)
            for workers in (1, 2):
                pool = lib().lib.v8_threadpool_create(workers)
                try:
                    st, ours = run.run("pool", c, workers=workers, pool=pool)
                finally:
                    lib().lib.v8_threadpool_destroy(pool)
                assert st == V8_OK
                figures[f"kv{kv}/d{d}/w{workers}"] = mismatch(ours, reference(g, c, workers))[0]
    ok = not any(figures.values())
    evidence(Rung.EXTERNAL, ok, contract=SPLIT, provider="attn_online_split_f16kv",
             backend="ggml_flash_attn_ext split-KV decode of llama-cpp-python 0.3.36, threads = workers",
             differing_elements={k: v for k, v in figures.items() if v}, cases=len(figures))
    assert ok, {k: v for k, v in figures.items() if v}


# (H, Hkv, D): query heads per KV head 1, 3, 4 (one group), 6 and 8 (two groups of 3 and 4)
# at D 128, and 1, 2 (one group) and 4 (two of 2) at D 256, where AVX512-FP16 CPUs run the
# heads of a KV head together; D 80 runs head by head everywhere
GROUPED_HEADS = [(4, 4, 128), (6, 2, 128), (8, 2, 128), (12, 2, 128), (16, 2, 128),
                 (3, 3, 256), (2, 1, 256), (8, 2, 256), (6, 2, 80)]


@pytest.mark.parametrize("shape", GROUPED_HEADS, ids=lambda s: f"h{s[0]}_{s[1]}_d{s[2]}")
def test_head_groups_vs_oracle_and_llamacpp(shape: tuple[int, int, int],
                                            evidence: Callable[..., Any]) -> None:
    """Decode (single range, and split-KV at 2 workers) and a 5-row prefill over head shapes
    whose heads run in groups: production, threadpool and ggml against the oracle."""
    h, hkv, d = shape
    g = ggml_or_unresolved(evidence, SPLIT, "attn_online_split_f16kv")
    split = Runner(lib(), "v8_attn_online_split", SPLIT)
    auto = Runner(lib(), "v8_attn_auto", AUTO)
    pool = lib().lib.v8_threadpool_create(2)
    bad: dict[str, tuple[int, int, int]] = {}
    try:
        for kv in (37, 300, 1058):
            c = case(1, 0, d, kv_len=kv, heads=(h, hkv))
            ref = np.zeros_like(c.q)
            args, keep = split._args(c, ref, 2)
            assert lib().lib.v8_attn_online_split_ref_workers(2, *args) == V8_OK
            del keep
            one = split.run("ref", c)[1]
            figures = (mismatch(split.run("prod", c)[1], one)[0],
                       mismatch(split.run("pool", c, 2, pool)[1], ref)[0],
                       mismatch(ref, reference(g, c, 2))[0])
            if any(figures):
                bad[f"decode kv{kv}"] = figures
        c = case(5, 300, d, heads=(h, hkv))
        if g.build == "avx512":  # the composite is the AVX-512 build's (see above)
            ref = auto.run("ref", c)[1]
            figures = (mismatch(auto.run("prod", c)[1], ref)[0],
                       mismatch(auto.run("pool", c, 2, pool)[1], ref)[0],
                       mismatch(ref, reference(g, c, 1))[0])
            if any(figures):
                bad["prefill q5 past300"] = figures
    finally:
        lib().lib.v8_threadpool_destroy(pool)
    evidence(Rung.EXTERNAL, not bad, contract=SPLIT, provider="attn_online_split_f16kv",
             backend="ggml_flash_attn_ext of llama-cpp-python 0.3.36, threads = workers",
             shape=dict(H=h, Hkv=hkv, D=d), tree=int(lib().lib.v8_attn_online_fp32_dot_tree()),
             differing_elements={k: list(v) for k, v in bad.items()})
    assert not bad, f"(production, threadpool, ggml) differing elements: {bad}"


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 8])
def test_threadpool_equals_oracle(workers: int, evidence: Callable[..., Any]) -> None:
    lb = lib().lib
    pool = lb.v8_threadpool_create(workers)
    bad: list[str] = []
    try:
        auto = Runner(lib(), "v8_attn_auto", AUTO)
        for n_q, past, d in ((5, 300, 128), (63, 0, 64), (64, 5, 128), (65, 300, 64)):
            c = case(n_q, past, d)
            if mismatch(auto.run("pool", c, workers, pool)[1], auto.run("ref", c)[1])[0]:
                bad.append(f"auto q{n_q} past{past} d{d}")
        split = Runner(lib(), "v8_attn_online_split", SPLIT)
        lb_ref = lib().lib.v8_attn_online_split_ref_workers
        for kv in (511, 1058):
            c = case(1, 0, 128, kv_len=kv)
            st, got = split.run("pool", c, workers, pool)
            args, keep = split._args(c, ref := np.zeros_like(c.q), workers)
            assert lb_ref(workers, *args) == 0 and st == V8_OK
            del keep
            if mismatch(got, ref)[0]:
                bad.append(f"split kv{kv}")
    finally:
        lb.v8_threadpool_destroy(pool)
    for contract, provider in ((AUTO, "attn_auto_qtile64_f16kv"), (SPLIT, "attn_online_split_f16kv")):
        evidence(Rung.THREADPOOL, not bad, contract=contract, provider=provider, workers=workers,
                 failures=bad)
    assert not bad, bad


@pytest.mark.parametrize("mask", [0x7, 0xFFFFFFFF], ids=["avx2", "native"])
def test_production_equals_oracle_per_isa(mask: int, evidence: Callable[..., Any]) -> None:
    lb = lib().lib
    lb.v8_cpu_restrict(mask)
    try:
        run = Runner(lib(), "v8_attn_auto", AUTO)
        bad = [f"q{n_q}/past{past}/d{d}" for n_q, past, d in PREFILL[::3]
               if mismatch(run.run("prod", case(n_q, past, d))[1], run.run("ref", case(n_q, past, d))[1])[0]]
        tree = int(lb.v8_attn_online_fp32_dot_tree())
    finally:
        lb.v8_cpu_restrict(0xFFFFFFFF)
    evidence(Rung.PRODUCTION, not bad, contract=AUTO, provider="attn_auto_qtile64_f16kv", tree=tree,
             failures=bad)
    assert not bad, bad


def test_fp16_lane_contract_is_other_arithmetic(evidence: Callable[..., Any]) -> None:
    """On an AVX512-FP16 CPU the fp16-lane dot (f16_online_single_range) is not llama.cpp's;
    the fp32-dot contract is.  Elsewhere both trees are fp32 lanes and agree."""
    g = ggml_or_unresolved(evidence, AUTO, "attn_auto_qtile64_f16kv")
    fp16_host = int(lib().lib.v8_attn_online_dot_tree()) == 3
    c = case(14, 300, 128)
    old = Runner(lib(), "v8_attn_auto", "f16_flash_auto_qtile64").run("prod", c)[1]
    ref = reference(g, c, 1)
    if fp16_host:
        assert mismatch(old, ref)[0] > 0
    assert mismatch(Runner(lib(), "v8_attn_auto", AUTO).run("prod", c)[1], ref)[0] == 0
