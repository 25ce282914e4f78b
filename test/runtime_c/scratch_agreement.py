"""The scratch-size rule every provider keeps, checked one way for all of them.

A provider refuses a scratch one byte smaller than the size function its kernel map names
(V8_ERR_BAD_DIMENSION, output and scratch untouched) and accepts exactly that size (status
0, every output written, the bits of a roomy-scratch call, nothing written past the size).
The quantized-linear folders' scratch tests import this module.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from v8dialect.data.c_abi import constants

_V8 = constants(["v8_runtime.h"])
V8_OK = _V8["V8_OK"]
V8_ERR_BAD_DIMENSION = _V8["V8_ERR_BAD_DIMENSION"]
GUARD = 64                  # pattern bytes after the scratch size, must stay intact
PATTERN = 0xA5
ROOMY = 4096                # extra bytes for the reference call
ALL_FEATURES = 0xFFFFFFFF

# a call: (y, scratch, scratch_bytes) -> status
Caller = Callable[[np.ndarray, np.ndarray, int], int]


def scratch_buffer(size: int) -> np.ndarray:
    """size bytes plus a guard tail, 4-byte aligned (the providers require it), all PATTERN."""
    raw = np.empty((size + GUARD + 3) // 4, dtype=np.float32)
    buf = raw.view(np.uint8)[: size + GUARD]
    buf[:] = PATTERN
    assert buf.ctypes.data % 4 == 0
    return buf


def check_agreement(restrict: Callable[[int], None], call: Caller, y_shape: tuple[int, ...],
                    need: int, masks: list[int]) -> None:
    """Short scratch refused before any write; exact scratch accepted, fully written, bits as
    with a roomy scratch, nothing past `need` touched; on each CPU mask given (`restrict` is
    the library's v8_cpu_restrict)."""
    assert need > 0
    try:
        for mask in masks:
            restrict(mask)
            y = np.full(y_shape, np.nan, dtype=np.float32)
            scratch = scratch_buffer(need)
            st = call(y, scratch, need - 1)
            assert st == V8_ERR_BAD_DIMENSION, (hex(mask), st)
            assert np.isnan(y).all(), hex(mask)
            assert (scratch == PATTERN).all(), f"short scratch written before refusal ({hex(mask)})"

            y_roomy = np.full(y_shape, np.nan, dtype=np.float32)
            assert call(y_roomy, scratch_buffer(need + ROOMY), need + ROOMY) == V8_OK, hex(mask)
            y = np.full(y_shape, np.nan, dtype=np.float32)
            scratch = scratch_buffer(need)
            st = call(y, scratch, need)
            assert st == V8_OK, (hex(mask), st)
            assert np.isfinite(y).all(), hex(mask)
            assert np.array_equal(y.view(np.uint32), y_roomy.view(np.uint32)), hex(mask)
            assert (scratch[need:] == PATTERN).all(), f"wrote past the scratch size ({hex(mask)})"
    finally:
        restrict(ALL_FEATURES)
