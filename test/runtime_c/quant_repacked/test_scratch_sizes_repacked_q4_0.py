"""Scratch-size agreement for the repacked-arithmetic Q4_0 linear (v8_q4_0_repacked_gemv*,
size v8_qlr0_gemv_scratch_bytes; v8_q4_0_repacked_gemm*, size v8_qlr0_gemm_scratch_bytes).

Each entry point (oracle, production on every dispatch path this host has, threadpool
dispatch) must refuse a scratch one byte smaller than the size function its kernel map
names (status V8_ERR_BAD_DIMENSION, output and scratch untouched) and must accept exactly
that size (status 0, every output written, bits equal to a roomy-scratch call, nothing
written past the size).  GEMM rows 2 (all through llama.cpp's GEMV route) and 9 (two 4-row
groups and a leftover row); K = 96 and 800 are multiples of 32 but not of 256.  Weights are
random Q4_0 blocks with finite fp16 scales (no ggml).
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qr0_support import QR0, SELECTOR, random_q4_0
from qr_support import ALL_FEATURES, make_activation

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test/runtime_c: shared checks
from scratch_agreement import check_agreement  # noqa: E402

N = 40                      # weight rows: a multiple of 8, not of the 16-row tiles
WORKERS = 2
VARIANTS = ("ref", "prod", "pool")
SUFFIX = {"ref": "_ref", "prod": "", "pool": "_parallel_dispatch"}
SHAPES = (("gemv", 1, 96), ("gemm", 2, 800), ("gemm", 9, 96))   # (kind, m, k)


@pytest.fixture(scope="module")
def qr0() -> Iterator[QR0]:
    lib = QR0()
    yield lib
    lib.lib.v8_cpu_restrict(ALL_FEATURES)
    lib.close()


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}_m{s[1]}_k{s[2]}")
def test_scratch_agrees_with_size_function(qr0: QR0, shape: tuple[str, int, int],
                                           variant: str) -> None:
    kind, m, k = shape
    seed = zlib.crc32(f"scratch:repacked_q4_0:{kind}:{m}:{k}".encode()) & 0xFFFF
    w = random_q4_0(N, k, seed)
    x = make_activation(m, k, seed + 1)
    fn = getattr(qr0.lib, f"v8_q4_0_repacked_{kind}{SUFFIX[variant]}")
    sel = int(getattr(qr0.lib, SELECTOR))

    def call(y: np.ndarray, scratch: np.ndarray, nbytes: int) -> int:
        args: list[Any] = [sel, qr0.ptr(y, "float *"), qr0.ptr(w, "void *"),
                           qr0.ptr(x, "float *"), qr0.ffi.NULL]
        args += [N, k] if kind == "gemv" else [m, N, k]
        args += [qr0.ptr(scratch, "void *"), nbytes]
        if variant == "pool":
            args.insert(0, qr0.pool(WORKERS))
        return int(fn(*args))

    need = int(qr0.lib.v8_qlr0_gemv_scratch_bytes(k) if kind == "gemv"
               else qr0.lib.v8_qlr0_gemm_scratch_bytes(m, k))
    masks = [ALL_FEATURES] if variant == "ref" else [mask for _, mask in qr0.isas()]
    check_agreement(qr0.lib.v8_cpu_restrict, call, (m, N), need, masks)
