"""swiglu_fp32_ggml / geglu_fp32_ggml: llama.cpp's gated activations.

External rung: the ggml that llama.cpp ships (llama-cpp-python's libggml, ggml_swiglu_split /
ggml_geglu_split) against the scalar oracle, bit for bit, at 1 and 2 threads; its fp16 GELU
table against ours, all 65536 entries.  Production per ISA variant (CPU mask) and the
threadpool at 1-8 workers against the oracle of the same variant.  Row lengths with a tail
(n % 16 != 0, n % 8 != 0) and gates spanning the polynomial's saturation (|x| > 88) and the
table's clamps (|x| >= 10) expose the lane blocks and the special cases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Outcome, Rung

V8_OK = constants(["v8_runtime.h"])["V8_OK"]
SWIGLU = ("swiglu_fp32_ggml_vexp", "swiglu_fp32_ggml", "v8_swiglu_ggml_f32", "V8_SWIGLU_FP32_GGML_VEXP")
GEGLU = ("geglu_fp32_ggml_fp16_table", "geglu_fp32_ggml", "v8_geglu_ggml_f32",
         "V8_GEGLU_FP32_GGML_FP16_TABLE")
SHAPES = ((1, 512), (3, 3072), (5, 1000), (2, 13), (7, 4864), (1, 6912))
CPU_AVX2_ONLY = 0b111  # AVX2 | FMA | F16C
# NaNs with payloads (one signalling), infinities, -0, and gates that round to fp16 infinity
SPECIAL_GATES = np.array([0x7FC00000, 0xFFC12345, 0x7F800001, 0x7F800000, 0xFF800000,
                          0x80000000, 0x477FF000, 0xC77FF000], np.uint32).view(np.float32)
CPU_SCALAR = 0


def gates(rng: np.random.Generator, rows: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gates spanning magnitudes (incl. beyond the polynomial's and table's ranges), ups ~ N(0, 1)."""
    g = (rng.standard_normal((rows, n)) * 10.0 ** rng.uniform(-2, 1.3, (rows, n))).astype(np.float32)
    g.flat[:: max(1, n // 7)] = np.float32(rng.choice([-120.0, -95.0, -10.0, 10.0, 90.0, 0.0]))
    return g, rng.standard_normal((rows, n)).astype(np.float32)


def call(ops: ModuleType, fn: str, selector: str, g: np.ndarray, u: np.ndarray,
         pool: Any = None) -> np.ndarray:
    ffi, lib = ops.ffi, ops.lib
    y = np.zeros_like(g)
    args = [getattr(lib, selector), ffi.cast("float *", ffi.from_buffer(y)),
            ffi.cast("float *", ffi.from_buffer(g)), ffi.cast("float *", ffi.from_buffer(u)),
            g.shape[0], g.shape[1]]
    st = getattr(lib, fn)(*([pool] if pool is not None else []), *args)
    assert st == V8_OK, st
    return y


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))


@pytest.fixture
def restricted(ops: ModuleType) -> Iterator[Callable[[int], None]]:
    yield ops.lib.v8_cpu_restrict
    ops.lib.v8_cpu_restrict(0xFFFFFFFF)


def llamacpp_ggml(evidence: Callable[..., Any], contract: str, provider: str) -> Any:
    try:
        from v8dialect.parity.ggml_ops import GgmlOps

        return GgmlOps()
    except Exception as exc:  # noqa: BLE001 - any failure to load llama.cpp's ggml
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=contract, provider=provider,
                 backend="llama-cpp-python libggml", reason=str(exc))
        pytest.fail(f"llama.cpp's ggml is not loadable: {exc} (recorded as unresolved)")


@pytest.mark.parametrize("spec", (SWIGLU, GEGLU), ids=lambda s: s[0])
def test_oracle_vs_llamacpp_ggml(ops: ModuleType, spec: tuple[str, ...],
                                 evidence: Callable[..., Any]) -> None:
    contract, provider, base, selector = spec
    g_ops = llamacpp_ggml(evidence, contract, provider)
    rng = np.random.default_rng(5)
    figures: dict[str, Any] = {}
    for rows, n in SHAPES:
        g, u = gates(rng, rows, n)
        ours = call(ops, base + "_ref", selector, g, u)
        for threads in (1, 2):
            ref = (g_ops.swiglu if spec is SWIGLU else g_ops.geglu)(g, u, threads)
            figures[f"{rows}x{n}/threads={threads}"] = int(np.count_nonzero(
                ours.view(np.uint32) != ref.view(np.uint32)))
    ok = not any(figures.values())
    evidence(Rung.EXTERNAL, ok, contract=contract, provider=provider,
             backend="llama-cpp-python 0.3.36 libggml (ggml 0.25.3), native build",
             differing_elements=figures)
    assert ok, figures


def test_gelu_table_equals_llamacpp(ops: ModuleType, evidence: Callable[..., Any]) -> None:
    g_ops = llamacpp_ggml(evidence, GEGLU[0], GEGLU[1])
    theirs = g_ops.gelu_table()
    ours = np.frombuffer(ops.ffi.buffer(ops.lib.v8_geglu_ggml_table(), 2 * 65536), np.uint16)
    # NaN inputs have no defined table entry to agree on
    finite = np.isfinite(np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16))
    differ = int(np.count_nonzero((ours != theirs) & finite))
    evidence(Rung.EXTERNAL, differ == 0, contract=GEGLU[0], provider=GEGLU[1],
             backend="ggml_table_gelu_f16 of llama-cpp-python's libggml-cpu", differing_entries=differ)
    assert differ == 0


@pytest.mark.parametrize("mask", (None, CPU_AVX2_ONLY, CPU_SCALAR), ids=("native", "avx2", "scalar"))
@pytest.mark.parametrize("spec", (SWIGLU, GEGLU), ids=lambda s: s[0])
def test_production_and_threadpool_equal_oracle(ops: ModuleType, pools: dict[int, Any],
                                                spec: tuple[str, ...], mask: int | None,
                                                restricted: Callable[[int], None],
                                                evidence: Callable[..., Any]) -> None:
    contract, provider, base, selector = spec
    if mask is not None:
        restricted(mask)
    rng = np.random.default_rng(9)
    bad: list[str] = []
    for rows, n in SHAPES:
        g, u = gates(rng, rows, n)
        if spec is GEGLU:  # the table's NaN and infinity entries, and a signed zero
            g.flat[3:: max(4, n // 5)] = rng.choice(SPECIAL_GATES, len(g.flat[3:: max(4, n // 5)]))
        ref = call(ops, base + "_ref", selector, g, u)
        if not same(call(ops, base, selector, g, u), ref):
            bad.append(f"production {rows}x{n}")
        for workers, pool in pools.items():
            if not same(call(ops, base + "_parallel_dispatch", selector, g, u, pool), ref):
                bad.append(f"threadpool {workers} {rows}x{n}")
    isa = int(ops.lib.v8_cpu_best_isa())
    evidence(Rung.PRODUCTION, not bad, contract=contract, provider=provider, isa=isa, failures=bad)
    evidence(Rung.THREADPOOL, not bad, contract=contract, provider=provider, isa=isa, workers=list(pools))
    assert not bad, bad


def test_swiglu_lane_width_is_arithmetic(ops: ModuleType, restricted: Callable[[int], None]) -> None:
    """Negative control: the AVX-512 and AVX2 lane functions give different bits somewhere,
    so a test that ran the wrong width would see it."""
    rng = np.random.default_rng(3)
    g, u = gates(rng, 4, 4096)
    wide = call(ops, "v8_swiglu_ggml_f32_ref", SWIGLU[3], g, u)
    restricted(CPU_AVX2_ONLY)
    narrow = call(ops, "v8_swiglu_ggml_f32_ref", SWIGLU[3], g, u)
    if int(ops.lib.v8_cpu_features()) & ops.lib.V8_CPU_AVX512F:  # AVX-512 present before the restriction
        assert not same(wide, narrow)


@pytest.mark.parametrize("spec", (SWIGLU, GEGLU), ids=lambda s: s[0])
def test_bad_arguments_leave_output_untouched(ops: ModuleType, spec: tuple[str, ...]) -> None:
    _, _, base, selector = spec
    ffi, lib = ops.ffi, ops.lib
    g = np.ones((2, 8), np.float32)
    y = np.full_like(g, 7.0)
    gp, yp = ffi.cast("float *", ffi.from_buffer(g)), ffi.cast("float *", ffi.from_buffer(y))
    sel = getattr(lib, selector)
    for fn in (base + "_ref", base):
        f = getattr(lib, fn)
        assert f(sel + 99, yp, gp, gp, 2, 8) != 0
        assert f(sel, ffi.NULL, gp, gp, 2, 8) != 0
        assert f(sel, yp, gp, gp, 0, 8) != 0
    assert (y == 7.0).all()
