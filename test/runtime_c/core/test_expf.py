"""v8_expf_array (core/expf.c) against the C library's expf, bit for bit: the vector lanes of
every ISA variant, the library path with V8_CPU_LIBM_EXPF_LANES masked off, the self-check's
trait, and argument errors."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Rung

_V8 = constants(["v8_runtime.h"])
ALL = 0xFFFFFFFF
LANES = _V8["V8_CPU_LIBM_EXPF_LANES"]
AVX2_SET = _V8["V8_CPU_AVX2"] | _V8["V8_CPU_FMA"] | _V8["V8_CPU_F16C"]
VARIANTS = {"native": ALL, "avx2_lanes": AVX2_SET | LANES, "libm": ALL & ~LANES}

# the edges of the lanes' main range and of the library's special cases, each with its
# neighbours: zeros, infinities, NaNs (quiet, signalling, negative), subnormals, 1 ulp around
# -87 and 88 (the lanes' range), -103.97 (the library's underflow to 0), 88.72 (overflow)
EDGES = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7FA00001, 0xFFC00001,
         0x00000001, 0x807FFFFF, 0x00800000, 0xC2AE0000, 0xC2B00000, 0x42B00000, 0x42AFFFFF,
         0xC2CFF1B4, 0xC2CFF1B5, 0x42B17218, 0x42B17217, 0x3F800000, 0xBF800000]


def edge_bits() -> np.ndarray:
    centre = np.array(EDGES, dtype=np.int64)
    return (centre[:, None] + np.arange(-3, 4)[None, :]).ravel().astype(np.uint32)


def sample_bits(stride: int) -> np.ndarray:
    """Every stride-th float bit pattern over both signs, the edges, and 2^16 values spread
    over the softmax's (-32, 0]."""
    rng = np.random.default_rng(3)
    softmax = (-32 * rng.random(1 << 16)).astype(np.float32).view(np.uint32)
    spread = np.arange(0, 1 << 32, stride, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([spread, edge_bits(), softmax])


def libm(core: ModuleType, bits: np.ndarray) -> np.ndarray:
    out = np.empty_like(bits)
    core.lib.probe_libm_expf(core.ffi.from_buffer("uint32_t[]", bits),
                             core.ffi.from_buffer("uint32_t[]", out), bits.size)
    return out


def expf_array(core: ModuleType, bits: np.ndarray, mask: int) -> tuple[int, np.ndarray]:
    lib, ffi = core.lib, core.ffi
    out = np.zeros_like(bits)
    try:
        lib.v8_cpu_restrict(mask)
        status = lib.v8_expf_array(ffi.cast("const float *", ffi.from_buffer("uint32_t[]", bits)),
                                   ffi.cast("float *", ffi.from_buffer("uint32_t[]", out)), bits.size)
    finally:
        lib.v8_cpu_restrict(ALL)
    return status, out


def has_avx2(core: ModuleType) -> bool:
    return core.lib.v8_cpu_features() & AVX2_SET == AVX2_SET


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_expf_array_is_the_library_bit_for_bit(core: ModuleType, evidence: Callable[..., Any],
                                               variant: str) -> None:
    if variant == "avx2_lanes" and not has_avx2(core):
        pytest.skip("no AVX2 on this CPU")
    bits = sample_bits(4099)
    status, got = expf_array(core, bits, VARIANTS[variant])
    want = libm(core, bits)
    # NaN results compare by being NaN (the library is free in its payload; so are the lanes,
    # which hand NaN inputs to the library anyway)
    nan = (want & 0x7FFFFFFF) > 0x7F800000
    differ = (got != want) & ~(nan & ((got & 0x7FFFFFFF) > 0x7F800000))
    ok = status == _V8["V8_OK"] and not differ.any()
    evidence(Rung.ORACLE, ok, provider="runtime_core.expf", what="v8_expf_array vs libm expf",
             variant=variant, values=int(bits.size), mismatches=int(differ.sum()))
    assert status == _V8["V8_OK"]
    assert not differ.any(), [hex(int(b)) for b in bits[differ][:8]]


def test_lanes_trait_set_where_the_library_is_the_fma_algorithm(core: ModuleType) -> None:
    """On an AVX2 + FMA host the self-check passes against glibc's expf (2.27 on), so the trait
    is set; like every trait, a restriction masks it off."""
    lib = core.lib
    if not has_avx2(core):
        assert not lib.v8_cpu_features() & LANES
        return
    assert lib.v8_cpu_features() & LANES
    try:
        lib.v8_cpu_restrict(ALL & ~LANES)
        assert not lib.v8_cpu_features() & LANES
    finally:
        lib.v8_cpu_restrict(ALL)


def test_expf_array_checks_its_arguments(core: ModuleType) -> None:
    lib, ffi = core.lib, core.ffi
    x = np.ones(16, np.float32)
    y = np.full(16, 7.0, np.float32)
    xp, yp = ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y)
    assert lib.v8_expf_array(ffi.NULL, yp, 16) == _V8["V8_ERR_NULL_ARGUMENT"]
    assert lib.v8_expf_array(xp, ffi.NULL, 16) == _V8["V8_ERR_NULL_ARGUMENT"]
    assert lib.v8_expf_array(xp, yp, -1) == _V8["V8_ERR_BAD_DIMENSION"]
    assert (y == 7.0).all()
    assert lib.v8_expf_array(xp, yp, 0) == _V8["V8_OK"]
    assert (y == 7.0).all()


@pytest.mark.parametrize("n", [1, 7, 8, 15, 16, 17, 33, 64])
def test_expf_array_tails(core: ModuleType, n: int) -> None:
    """Lengths around the lane widths: every value written, none past n."""
    bits = (-20 * np.random.default_rng(n).random(n)).astype(np.float32).view(np.uint32)
    padded = np.concatenate([bits, np.zeros(4, np.uint32)])
    lib, ffi = core.lib, core.ffi
    out = np.full(n + 4, 0xDEADBEEF, np.uint32)
    assert lib.v8_expf_array(ffi.cast("const float *", ffi.from_buffer("uint32_t[]", padded)),
                             ffi.cast("float *", ffi.from_buffer("uint32_t[]", out)), n) == _V8["V8_OK"]
    assert (out[:n] == libm(core, bits)).all()
    assert (out[n:] == 0xDEADBEEF).all()
