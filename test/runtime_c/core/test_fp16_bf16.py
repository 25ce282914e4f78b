"""fp16 and bf16 conversions: exhaustive / random bit patterns against numpy.

numpy's float16 cast is an independent implementation of IEEE round-to-
nearest-even.  Every input must give identical bits on every path: the
scalar functions (driven over raw-bit buffers by a small C probe, so NaN
payloads never pass through a Python float), the F16C array helpers, and the
array helpers forced onto the software path with v8_cpu_restrict(0).  For
NaNs the model applies the documented rule (quiet bit set, top payload bits
kept, as F16C does), since numpy leaves signalling NaNs signalling.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import numpy as np

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Rung

ALL_FEATURES = 0xFFFFFFFF
_V8 = constants(["v8_runtime.h"])
V8_CPU_F16C = _V8["V8_CPU_F16C"]


@contextmanager
def restricted(core: ModuleType, mask: int) -> Iterator[None]:
    core.lib.v8_cpu_restrict(mask)
    try:
        yield
    finally:
        core.lib.v8_cpu_restrict(ALL_FEATURES)


def _call(core: ModuleType, fn: str, src: np.ndarray, src_t: str, dst_dtype: type,
          dst_t: str) -> np.ndarray:
    src = np.ascontiguousarray(src)
    out = np.empty(src.size, dtype=dst_dtype)
    getattr(core.lib, fn)(core.ffi.from_buffer(f"{src_t}[]", src),
                          core.ffi.from_buffer(f"{dst_t}[]", out), src.size)
    return out


def f16_to_f32_array(core: ModuleType, h: np.ndarray) -> np.ndarray:
    return _call(core, "v8_f16_to_f32_array", h.astype(np.uint16), "uint16_t", np.float32,
                 "float").view(np.uint32)


def f32_to_f16_array(core: ModuleType, bits: np.ndarray) -> np.ndarray:
    return _call(core, "v8_f32_to_f16_array", bits.astype(np.uint32).view(np.float32), "float",
                 np.uint16, "uint16_t")


def scalar(core: ModuleType, fn: str, src: np.ndarray) -> np.ndarray:
    if src.dtype == np.uint32:
        return _call(core, fn, src, "uint32_t", np.uint16, "uint16_t")
    return _call(core, fn, src, "uint16_t", np.uint32, "uint32_t")


# ---- independent models -----------------------------------------------------

def numpy_f16_to_f32_bits(h: np.ndarray) -> np.ndarray:
    """numpy's widening, with the documented NaN rule (quiet bit) applied."""
    bits = h.view(np.float16).astype(np.float32).view(np.uint32)
    nan = np.isnan(h.view(np.float16))
    return np.where(nan, bits | 0x400000, bits).astype(np.uint32)


def numpy_f32_to_f16_bits(bits: np.ndarray) -> np.ndarray:
    """numpy's RNE narrowing; NaN -> sign | 0x7e00 | top 9 payload bits."""
    with np.errstate(over="ignore", invalid="ignore"):
        h = bits.view(np.float32).astype(np.float16).view(np.uint16)
    nan = np.isnan(bits.view(np.float32))
    nan_bits = ((bits >> 16) & 0x8000) | 0x7E00 | ((bits >> 13) & 0x3FF)
    return np.where(nan, nan_bits, h).astype(np.uint16)


def f32_to_f16_inputs(rng: np.random.Generator, n_random: int) -> np.ndarray:
    """Random bit patterns plus the cases RNE gets wrong first."""
    parts = [rng.integers(0, 2**32, size=n_random, dtype=np.uint64).astype(np.uint32)]
    # every finite fp16 value, every halfway point between neighbours, and one
    # fp32 ulp either side of both: ties to even, carries into the exponent,
    # the subnormal/normal boundary, the overflow threshold 65520
    halves = np.arange(0, 0x7C00, dtype=np.uint32).astype(np.uint16)
    lo = halves.view(np.float16).astype(np.float64)
    hi = (halves + 1).astype(np.uint16).view(np.float16).astype(np.float64)
    hi[-1] = 65536.0  # rounding treats 65504's upper neighbour as 2^16
    mid = ((lo + hi) / 2).astype(np.float32).view(np.uint32)  # exact in fp32
    exact = lo.astype(np.float32).view(np.uint32)
    for base in (mid, exact):
        for delta in (-1, 0, 1):
            parts.append((base.astype(np.int64) + delta).clip(0, 0x7FFFFFFF).astype(np.uint32))
    # fp32 subnormals, values around 2^-25 (round to zero or to the smallest
    # subnormal), the overflow edge, NaN payloads, specials
    parts.append(rng.integers(0, 0x00800000, size=65536, dtype=np.uint32))
    parts.append(np.arange(0x32FF0000, 0x33810000, 0x100, dtype=np.uint32))
    parts.append(np.arange(0x477FE000, 0x47800100, 1, dtype=np.uint32))
    parts.append(rng.integers(0x7F800001, 0x80000000, size=20000, dtype=np.uint64)
                 .astype(np.uint32))
    parts.append(np.array([0, 0x7F800000, 0x7F800001, 0x7FC00000, 0x7FBFFFFF, 0x7FFFFFFF,
                           0x7F802000, 0x7F801FFF, 0x7F7FFFFF, 0x00000001], dtype=np.uint32))
    base = np.concatenate(parts)
    return np.concatenate([base, base | 0x80000000])  # both signs


# ---- fp16 -> fp32 -------------------------------------------------------------

def test_f16_to_f32_exhaustive(core: ModuleType, evidence: Callable[..., Any]) -> None:
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    expected = numpy_f16_to_f32_bits(h)
    fast = f16_to_f32_array(core, h)
    with restricted(core, 0):
        soft = f16_to_f32_array(core, h)
    scalar_bits = scalar(core, "probe_scalar_f16_to_f32", h)
    # and the scalar function through its Python binding (exact for non-NaN)
    finite = ~np.isnan(h.view(np.float16))
    via_python = np.array([core.lib.v8_f16_to_f32(int(v)) for v in h[finite]],
                          dtype=np.float32).view(np.uint32)
    mismatches = {
        "f16c_array": int(np.count_nonzero(fast != expected)),
        "software_array": int(np.count_nonzero(soft != expected)),
        "scalar": int(np.count_nonzero(scalar_bits != expected)),
        "scalar_python_binding": int(np.count_nonzero(via_python != expected[finite])),
    }
    ok = not any(mismatches.values())
    evidence(Rung.ORACLE, ok, provider="runtime_core.fp16",
             what="f16->f32 all 65536 halves vs numpy (NaN: quiet bit rule)", compared=65536,
             mismatches=mismatches,
             f16c_available=bool(core.lib.v8_cpu_features() & V8_CPU_F16C))
    assert ok, mismatches


# ---- fp32 -> fp16 -------------------------------------------------------------

def test_f32_to_f16_random_and_edges(core: ModuleType, evidence: Callable[..., Any]) -> None:
    rng = np.random.default_rng(1234)
    bits = f32_to_f16_inputs(rng, 3_000_000)
    expected = numpy_f32_to_f16_bits(bits)
    fast = f32_to_f16_array(core, bits)
    with restricted(core, 0):
        soft = f32_to_f16_array(core, bits)
    scalar_bits = scalar(core, "probe_scalar_f32_to_f16", bits)
    mismatches = {
        "f16c_array": int(np.count_nonzero(fast != expected)),
        "software_array": int(np.count_nonzero(soft != expected)),
        "scalar": int(np.count_nonzero(scalar_bits != expected)),
    }
    ok = not any(mismatches.values())
    evidence(Rung.ORACLE, ok, provider="runtime_core.fp16",
             what="f32->f16 random bits, ties, subnormals, overflow, NaN/inf vs numpy",
             compared=int(bits.size), mismatches=mismatches)
    assert ok, mismatches


def test_f16_array_tails(core: ModuleType) -> None:
    """Lengths that are not a multiple of the 8-lane F16C block use the scalar tail."""
    rng = np.random.default_rng(7)
    for n in (0, 1, 7, 8, 9, 15, 17, 33):
        bits = (rng.standard_normal(n) * 1000).astype(np.float32).view(np.uint32)
        assert np.array_equal(f32_to_f16_array(core, bits), numpy_f32_to_f16_bits(bits))
        h = numpy_f32_to_f16_bits(bits)
        assert np.array_equal(f16_to_f32_array(core, h), numpy_f16_to_f32_bits(h))


def test_round_f16(core: ModuleType) -> None:
    rng = np.random.default_rng(3)
    vals = (rng.standard_normal(20000) * np.exp2(rng.integers(-30, 20, 20000))).astype(np.float32)
    got = np.array([core.lib.v8_round_f16(float(v)) for v in vals], dtype=np.float32)
    with np.errstate(over="ignore"):
        want = vals.astype(np.float16).astype(np.float32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


# ---- bf16 ---------------------------------------------------------------------

def bf16_model(bits: np.ndarray) -> np.ndarray:
    """RNE to the upper 16 bits, written as a comparison on the dropped half;
    NaN keeps its upper half with the quiet bit set."""
    upper = (bits >> 16).astype(np.uint32)
    lower = bits & 0xFFFF
    round_up = (lower > 0x8000) | ((lower == 0x8000) & ((upper & 1) == 1))
    rounded = (upper + round_up.astype(np.uint32)) & 0xFFFF
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, upper | 0x40, rounded).astype(np.uint16)


def test_bf16_round_to_nearest_even(core: ModuleType, evidence: Callable[..., Any]) -> None:
    rng = np.random.default_rng(99)
    rand = rng.integers(0, 2**32, size=2_000_000, dtype=np.uint64).astype(np.uint32)
    # ties and their neighbours at random upper halves, NaNs, the overflow edge
    uppers = rng.integers(0, 0x10000, size=50_000, dtype=np.uint32) << 16
    ties = np.concatenate([uppers | 0x8000, uppers | 0x7FFF, uppers | 0x8001, uppers])
    edges = np.array([0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF, 0x7F800000, 0x7F800001, 0x7FC00000,
                      0x7FBFFFFF, 0xFF800001, 0xFF7FFFFF, 0x00000001, 0x00008000, 0x00018000],
                     dtype=np.uint32)
    bits = np.concatenate([rand, ties, edges])
    expected = bf16_model(bits)
    got = scalar(core, "probe_scalar_f32_to_bf16", bits)
    mismatches = int(np.count_nonzero(got != expected))
    # torch's bf16 cast checks the model itself on the non-NaN inputs
    torch_mismatches: int | None = None
    try:
        import torch

        keep = (bits & 0x7FFFFFFF) <= 0x7F800000
        t = torch.from_numpy(bits[keep].view(np.float32).copy()).to(torch.bfloat16)
        torch_bits = t.view(torch.int16).numpy().view(np.uint16)
        torch_mismatches = int(np.count_nonzero(torch_bits != expected[keep]))
    except ImportError:
        pass
    b = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    wide = scalar(core, "probe_scalar_bf16_to_f32", b)
    widen_bad = int(np.count_nonzero(wide != (b.astype(np.uint32) << 16)))
    ok = mismatches == 0 and widen_bad == 0 and torch_mismatches in (None, 0)
    evidence(Rung.ORACLE, ok, provider="runtime_core.bf16",
             what="f32->bf16 RNE vs numpy bit model (and torch), bf16->f32 all 65536",
             compared=int(bits.size), mismatches=mismatches, torch_mismatches=torch_mismatches,
             widen_mismatches=widen_bad)
    assert ok
