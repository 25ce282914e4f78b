"""Scratch-size agreement for the tiled-prefill K-quant GEMM (v8_<fmt>_tiled_gemm*, size
v8_qlt_gemm_scratch_bytes) and the row-count composite (v8_<fmt>_auto_gemm*, size
v8_qla_gemm_scratch_bytes, the larger of its two parts' needs).

Each entry point (oracle, production on every dispatch path this host has, threadpool
dispatch) must refuse a scratch one byte smaller than the size function its kernel map
names (status V8_ERR_BAD_DIMENSION, output and scratch untouched) and must accept exactly
that size (status 0, every output written, bits equal to a roomy-scratch call, nothing
written past the size).  The composite is checked on both sides of its 8-row threshold:
below it the block-order part needs less than the composite's size function says, and
the composite must still hold callers to its own size.  Weights are random blocks with
finite fp16 scales (no ggml).
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qt_support import ALL_FEATURES, FORMATS, make_activation, random_blocks
from test_quant_auto import QA

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test/runtime_c: shared checks
from scratch_agreement import (  # noqa: E402
    check_agreement,
)

N = 40                      # weight rows: not a multiple of the 16-row tiles
WORKERS = 2
VARIANTS = ("ref", "prod", "pool")
SUFFIX = {"ref": "_ref", "prod": "", "pool": "_parallel_dispatch"}
SHAPES = ((2, 512), (9, 768))   # (m, k): m = 2 below the composite's threshold, 9 above
# provider -> (size function of its kernel map, selector name pattern)
PROVIDERS = {"tiled_gemm": ("v8_qlt_gemm_scratch_bytes", "V8_QL_{F}_X_Q8_K_FP32_SUPER_BLOCK_FMA_CHAIN"),
             "auto_gemm": ("v8_qla_gemm_scratch_bytes", "V8_QL_{F}_X_Q8_K_LLAMACPP_AUTO_ROWS8")}

@pytest.fixture(scope="module")
def qs() -> Iterator[QA]:
    lib = QA()  # test_quant_auto.py's module: the composite and both parts, built once
    yield lib
    lib.lib.v8_cpu_restrict(ALL_FEATURES)
    lib.close()








@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"m{s[0]}_k{s[1]}")
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("provider", tuple(PROVIDERS))
def test_scratch_agrees_with_size_function(qs: QA, provider: str, fmt: str,
                                           shape: tuple[int, int], variant: str) -> None:
    m, k = shape
    size_fn, sel_name = PROVIDERS[provider]
    seed = zlib.crc32(f"scratch:{provider}:{fmt}:{m}:{k}".encode()) & 0xFFFF
    w = random_blocks(fmt, N, k, seed)
    x = make_activation(m, k, seed + 1)
    fn = getattr(qs.lib, f"v8_{fmt}_{provider}{SUFFIX[variant]}")
    sel = int(getattr(qs.lib, sel_name.format(F=fmt.upper())))

    def call(y: np.ndarray, scratch: np.ndarray, nbytes: int) -> int:
        args: list[Any] = [sel, qs.ptr(y, "float *"), qs.ptr(w, "void *"), qs.ptr(x, "float *"),
                           qs.ffi.NULL, m, N, k, qs.ptr(scratch, "void *"), nbytes]
        if variant == "pool":
            args.insert(0, qs.pool(WORKERS))
        return int(fn(*args))

    masks = [ALL_FEATURES] if variant == "ref" else [mask for _, mask in qs.isas()]
    check_agreement(qs.lib.v8_cpu_restrict, call, (m, N), int(getattr(qs.lib, size_fn)(m, k)), masks)
