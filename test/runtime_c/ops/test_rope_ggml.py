"""rope_{neox,normal}_fp32_ggml_fma and imrope_fp32_ggml_fma against the ggml llama.cpp ships
(ggml_rope_ext / ggml_rope_multi of llama-cpp-python's libggml), bit for bit at 1 and 2 threads;
production and threadpool against the oracle; and the negative control: the portable contract's
separately rounded rotation differs from llama.cpp on the same inputs."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from cffi_module import ALL_FEATURES, cpu_restricted

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Outcome, Rung

V8_OK = constants(["v8_runtime.h"])["V8_OK"]
CASES = (  # (mode, T, H, D, n_rot, base, sections)
    ("neox", 9, 4, 128, 128, 1e6, None),
    ("neox", 17, 2, 64, 64, 1e4, None),
    ("neox", 5, 3, 256, 256, 1e6, None),
    ("neox", 6, 2, 128, 64, 5e5, None),
    ("neox", 4, 3, 40, 40, 1e4, None),  # 20 pairs: two 8-pair steps and a scalar tail
    ("neox", 3, 2, 48, 24, 1e4, None),  # partial rotation, 12 pairs
    ("normal", 9, 4, 128, 128, 1e4, None),
    ("normal", 7, 2, 64, 64, 5e5, None),
    ("normal", 4, 3, 40, 40, 1e4, None),  # 20 pairs: not a whole number of vector groups
    ("normal", 3, 2, 48, 24, 1e4, None),  # partial rotation, 12 pairs
    ("imrope", 9, 4, 128, 128, 5e6, (24, 20, 20, 0)),
    ("imrope", 5, 2, 64, 32, 1e7, (6, 5, 5, 0)),
)
SELECTORS = {"neox": "V8_ROPE_NEOX_FP32_GGML_FMA", "normal": "V8_ROPE_NORMAL_FP32_GGML_FMA",
             "imrope": "V8_IMROPE_FP32_GGML_FMA"}
PORTABLE = {"neox": "V8_ROPE_NEOX_FP32_ITERATIVE_THETA", "normal": "V8_ROPE_NORMAL_FP32_ITERATIVE_THETA",
            "imrope": "V8_IMROPE_FP32_ITERATIVE_THETA_INTERLEAVED_SECTIONS"}
CONTRACTS = {"neox": "rope_neox_fp32_ggml_fma", "normal": "rope_normal_fp32_ggml_fma",
             "imrope": "imrope_fp32_ggml_fma"}


def inputs(rng: np.random.Generator, t: int, h: int, d: int, sections: Any) -> tuple[np.ndarray, np.ndarray]:
    x = (rng.standard_normal((t, h, d)) * 10.0 ** rng.uniform(-1, 1, (t, h, d))).astype(np.float32)
    p = rng.integers(0, 5000, t).astype(np.int32)
    if sections is not None:  # a token batch: t = h = w, e = 0
        return x, np.stack([p, p, p, np.zeros_like(p)]).astype(np.int32)
    return x, p


def run(ops: ModuleType, mode: str, selector: str, suffix: str, x: np.ndarray, pos: np.ndarray,
        n_rot: int, base: float, sections: Any, pool: Any = None) -> np.ndarray:
    ffi, lib = ops.ffi, ops.lib
    t, h, d = x.shape
    y = np.zeros_like(x)
    fn = getattr(lib, ("v8_imrope_f32" if mode == "imrope" else "v8_rope_f32") + suffix)
    args = [getattr(lib, selector), ffi.cast("float *", ffi.from_buffer(y)),
            ffi.cast("float *", ffi.from_buffer(x)), ffi.cast("int32_t *", ffi.from_buffer(pos)),
            t, h, d, n_rot, base]
    if sections is not None:
        args.append(ffi.new("int32_t[4]", list(sections)))
    st = fn(*([pool] if pool is not None else []), *args)
    assert st == V8_OK, st
    return y


def differ(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))


@pytest.mark.parametrize("mode", ("neox", "normal", "imrope"))
def test_rope_fused_vs_llamacpp_ggml(ops: ModuleType, mode: str, evidence: Callable[..., Any]) -> None:
    try:
        from v8dialect.parity.ggml_ops import GgmlOps

        g = GgmlOps()
    except Exception as exc:  # noqa: BLE001 - llama.cpp's ggml not loadable
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=CONTRACTS[mode], provider="rope_fp32",
                 backend="llama-cpp-python libggml", reason=str(exc))
        pytest.fail(f"llama.cpp's ggml is not loadable: {exc} (recorded as unresolved)")
    rng = np.random.default_rng(17)
    figures: dict[str, int] = {}
    portable_differs = 0
    for m, t, h, d, n_rot, base, sections in CASES:
        if m != mode:
            continue
        x, pos = inputs(rng, t, h, d, sections)
        ours = run(ops, mode, SELECTORS[mode], "_ref", x, pos, n_rot, base, sections)
        portable = run(ops, mode, PORTABLE[mode], "_ref", x, pos, n_rot, base, sections)
        for threads in (1, 2):
            ref = g.rope(x, pos, n_rot, base, mode, sections, threads)
            figures[f"{t}x{h}x{d}/rot={n_rot}/threads={threads}"] = differ(ours, ref)
            portable_differs += differ(portable, ref)
    ok = not any(figures.values())
    evidence(Rung.EXTERNAL, ok, contract=CONTRACTS[mode],
             provider="imrope_fp32" if mode == "imrope" else "rope_fp32",
             backend="llama-cpp-python 0.3.36 libggml (ggml 0.25.3), native build",
             differing_elements=figures)
    assert ok, figures
    assert portable_differs > 0  # the separately rounded rotation is visibly other arithmetic


@pytest.mark.parametrize("mode", ("neox", "normal", "imrope"))
def test_rope_fused_production_and_threadpool(ops: ModuleType, pools: dict[int, Any], mode: str,
                                              evidence: Callable[..., Any]) -> None:
    rng = np.random.default_rng(4)
    bad: list[str] = []
    for m, t, h, d, n_rot, base, sections in CASES:
        if m != mode:
            continue
        x, pos = inputs(rng, t, h, d, sections)
        ref = run(ops, mode, SELECTORS[mode], "_ref", x, pos, n_rot, base, sections)
        # the full CPU takes the FMA-compiled rotation, mask 0 the library fmaf
        for mask in (ALL_FEATURES, 0):
            with cpu_restricted(ops, mask):
                got = run(ops, mode, SELECTORS[mode], "", x, pos, n_rot, base, sections)
            if differ(got, ref):
                bad.append(f"production cpu mask {mask:#x} {t}x{h}x{d}")
        for workers, pool in pools.items():
            got = run(ops, mode, SELECTORS[mode], "_parallel_dispatch", x, pos, n_rot, base, sections, pool)
            if differ(got, ref):
                bad.append(f"threadpool {workers} {t}x{h}x{d}")
    provider = "imrope_fp32" if mode == "imrope" else "rope_fp32"
    evidence(Rung.PRODUCTION, not bad, contract=CONTRACTS[mode], provider=provider, failures=bad)
    evidence(Rung.THREADPOOL, not bad, contract=CONTRACTS[mode], provider=provider, workers=list(pools))
    assert not bad, bad


def test_angle_tables_follow_every_key(ops: ModuleType, evidence: Callable[..., Any]) -> None:
    """Production keeps one token's angle tables per thread for the next call (a decode step's
    layers share a position): one-token calls in a row that share the position and differ in
    one other input each (base, rotated pairs, sections, one stream's position, interleaving),
    then the same call again, and a head longer than the kept tables, each equal to the
    oracle."""
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((1, 2, 128)) * 4).astype(np.float32)
    pos = np.array([77], np.int32)
    pos4 = np.array([[77], [78], [77], [0]], np.int32)
    other_h = np.array([[77], [79], [77], [0]], np.int32)
    # base^(-2/n_rot) is the same angle step at 64 pairs / base 1e8 as at 32 / 1e4
    calls = [("neox", x, pos, 128, 1e6, None), ("neox", x, pos, 128, 1e4, None),
             ("neox", x, pos, 64, 1e4, None), ("neox", x, pos, 128, 1e8, None),
             ("normal", x, pos, 64, 1e4, None),
             ("imrope", x, pos4, 128, 1e4, (24, 20, 20, 0)),
             ("imrope", x, pos4, 128, 1e4, (20, 24, 20, 0)),
             ("imrope", x, other_h, 128, 1e4, (20, 24, 20, 0)),
             ("mrope", x, other_h, 128, 1e4, (20, 24, 20, 0)),
             ("neox", x, pos, 128, 1e6, None), ("neox", x, pos, 128, 1e6, None),
             ("neox", (rng.standard_normal((1, 1, 520))).astype(np.float32), pos, 520, 1e4, None)]
    bad = []
    for i, (mode, xi, p, n_rot, base, sections) in enumerate(calls):
        if mode == "mrope":
            selector, fn = "V8_MROPE_FP32_ITERATIVE_THETA_SECTIONS", "v8_mrope_f32"
            got, ref = (mrope_call(ops, fn + suffix, selector, xi, p, n_rot, base, sections)
                        for suffix in ("", "_ref"))
        else:
            got = run(ops, mode, SELECTORS[mode], "", xi, p, n_rot, base, sections)
            ref = run(ops, mode, SELECTORS[mode], "_ref", xi, p, n_rot, base, sections)
        if differ(got, ref):
            bad.append(f"call {i}: {mode} rot={n_rot} base={base} sections={sections}")
    evidence(Rung.PRODUCTION, not bad, contract=CONTRACTS["neox"], provider="rope_fp32",
             calls=len(calls), failures=bad)
    assert not bad, bad


def mrope_call(ops: ModuleType, fn: str, selector: str, x: np.ndarray, pos4: np.ndarray, n_rot: int,
               base: float, sections: tuple[int, ...]) -> np.ndarray:
    ffi, lib = ops.ffi, ops.lib
    t, h, d = x.shape
    y = np.zeros_like(x)
    st = getattr(lib, fn)(getattr(lib, selector), ffi.cast("float *", ffi.from_buffer(y)),
                          ffi.cast("float *", ffi.from_buffer(x)),
                          ffi.cast("int32_t *", ffi.from_buffer(pos4)), t, h, d, n_rot, base,
                          ffi.new("int32_t[4]", list(sections)))
    assert st == V8_OK, st
    return y
