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

import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qr_support import ALL_FEATURES, QR, SELECTOR, make_activation, random_blocks

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test/runtime_c: shared checks
from scratch_agreement import (  # noqa: E402
    check_agreement,
)

N = 40                      # weight rows: not a multiple of the 16-row tiles
WORKERS = 2
VARIANTS = ("ref", "prod", "pool")
SUFFIX = {"ref": "_ref", "prod": "", "pool": "_parallel_dispatch"}
SHAPES = (("gemv", 1, 512), ("gemm", 2, 512), ("gemm", 9, 768))   # (kind, m, k)








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
    check_agreement(qr.lib.v8_cpu_restrict, call, (m, N), need, masks)
