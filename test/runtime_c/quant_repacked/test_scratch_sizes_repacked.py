"""Scratch-size agreement for the repacked-arithmetic Q4_K linear (v8_q4_k_repacked_gemv*,
size v8_qlr_gemv_scratch_bytes; v8_q4_k_repacked_gemm*, size v8_qlr_gemm_scratch_bytes).

Each entry point (oracle, production on every dispatch path this host has, threadpool
dispatch) must refuse a scratch one byte smaller than the size function its kernel map
names (status V8_ERR_BAD_DIMENSION, output and scratch untouched) and must accept exactly
that size (status 0, every output written, bits equal to a roomy-scratch call, nothing
written past the size).  GEMM rows 2 (all in the super-block tail) and 9 (two 4-row
groups and a tail).  Weights are random Q4_K blocks with finite fp16 scales (no ggml).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from qr_support import ALL_FEATURES, QR, SELECTOR, make_activation, random_blocks

V8_OK, V8_ERR_BAD_DIMENSION = 0, 2
N = 40                      # weight rows: not a multiple of the 16-row tiles
WORKERS = 2
GUARD = 64                  # pattern bytes after the scratch size, must stay intact
PATTERN = 0xA5
ROOMY = 4096                # extra bytes for the reference call
VARIANTS = ("ref", "prod", "pool")
SUFFIX = {"ref": "_ref", "prod": "", "pool": "_parallel_dispatch"}
SHAPES = (("gemv", 1, 512), ("gemm", 2, 512), ("gemm", 9, 768))   # (kind, m, k)


def scratch_buffer(size: int) -> np.ndarray:
    """size bytes plus a guard tail, 4-byte aligned (the providers require it), all PATTERN."""
    raw = np.empty((size + GUARD + 3) // 4, dtype=np.float32)
    buf = raw.view(np.uint8)[: size + GUARD]
    buf[:] = PATTERN
    assert buf.ctypes.data % 4 == 0
    return buf


Caller = Callable[[np.ndarray, np.ndarray, int], int]


def check_agreement(qr: QR, call: Caller, y_shape: tuple[int, ...], need: int,
                    masks: list[int]) -> None:
    """Short scratch refused before any write; exact scratch accepted, fully written, bits as
    with a roomy scratch, nothing past `need` touched; on each CPU mask given."""
    assert need > 0
    try:
        for mask in masks:
            qr.lib.v8_cpu_restrict(mask)
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
        qr.lib.v8_cpu_restrict(ALL_FEATURES)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}_m{s[1]}_k{s[2]}")
def test_scratch_agrees_with_size_function(qr: QR, shape: tuple[str, int, int], variant: str) -> None:
    kind, m, k = shape
    seed = zlib.crc32(f"scratch:repacked:{kind}:{m}:{k}".encode()) & 0xFFFF
    w = random_blocks(N, k, seed)
    x = make_activation(m, k, seed + 1)
    fn = getattr(qr.lib, f"v8_q4_k_repacked_{kind}{SUFFIX[variant]}")
    sel = int(getattr(qr.lib, SELECTOR[kind]))

    def call(y: np.ndarray, scratch: np.ndarray, nbytes: int) -> int:
        args: list[Any] = [sel, qr.ptr(y, "float *"), qr.ptr(w, "void *"), qr.ptr(x, "float *"),
                           qr.ffi.NULL]
        args += [N, k] if kind == "gemv" else [m, N, k]
        args += [qr.ptr(scratch, "void *"), nbytes]
        if variant == "pool":
            args.insert(0, qr.pool(WORKERS))
        return int(fn(*args))

    need = int(qr.lib.v8_qlr_gemv_scratch_bytes(k) if kind == "gemv"
               else qr.lib.v8_qlr_gemm_scratch_bytes(m, k))
    masks = [ALL_FEATURES] if variant == "ref" else [mask for _, mask in qr.isas()]
    check_agreement(qr, call, (m, N), need, masks)
