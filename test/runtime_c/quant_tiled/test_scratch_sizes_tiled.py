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
from qt_support import ALL_FEATURES, FORMATS, QT, make_activation, random_blocks

from v8dialect.cbuild import RUNTIME_CORE_CDEF, RUNTIME_CORE_SOURCES, CBuild, build

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

_GEMM = ("int contract, float *y, const void *w, const float *x, const float *bias, "
         "int64_t m, int64_t n, int64_t k, void *scratch, size_t scratch_bytes")
CDEF = """
enum { V8_QL_Q4_K_X_Q8_K_FP32_SUPER_BLOCK_FMA_CHAIN = 101,
       V8_QL_Q6_K_X_Q8_K_FP32_SUPER_BLOCK_FMA_CHAIN = 102,
       V8_QL_Q5_K_X_Q8_K_FP32_SUPER_BLOCK_FMA_CHAIN = 103,
       V8_QL_Q4_K_X_Q8_K_LLAMACPP_AUTO_ROWS8 = 111,
       V8_QL_Q6_K_X_Q8_K_LLAMACPP_AUTO_ROWS8 = 112,
       V8_QL_Q5_K_X_Q8_K_LLAMACPP_AUTO_ROWS8 = 113 };
size_t v8_ql_gemm_scratch_bytes(int64_t m, int64_t k);
size_t v8_qlt_gemm_scratch_bytes(int64_t m, int64_t k);
size_t v8_qla_gemm_scratch_bytes(int64_t m, int64_t k);
"""
for _f in FORMATS:
    for _part in ("tiled_gemm", "auto_gemm"):
        CDEF += f"""
v8_status v8_{_f}_{_part}_ref({_GEMM});
v8_status v8_{_f}_{_part}({_GEMM});
v8_status v8_{_f}_{_part}_parallel_dispatch(v8_threadpool *pool, {_GEMM});
"""
SOURCES = ("quant/q_formats.c", "quant/q_dot_ref.c", "quant/q_linear.c", "quant_tiled/qt_linear.c",
           "quant_tiled/qt_auto.c")


class QS(QT):
    """The tiled provider and the composite (with its block-order part) in one module."""

    def __init__(self) -> None:  # pyright: ignore[reportMissingSuperCall]
        mod = build(CBuild(name="v8_quant_tiled_scratch", cdef=RUNTIME_CORE_CDEF + CDEF,
                           source='#include "quant_tiled/v8_quant_auto.h"\n',
                           runtime_sources=RUNTIME_CORE_SOURCES + SOURCES))
        self.ffi: Any = mod.ffi
        self.lib: Any = mod.lib
        self._pools: dict[int, Any] = {}


@pytest.fixture(scope="module")
def qs() -> Iterator[QS]:
    lib = QS()
    yield lib
    lib.lib.v8_cpu_restrict(ALL_FEATURES)
    lib.close()








@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"m{s[0]}_k{s[1]}")
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("provider", tuple(PROVIDERS))
def test_scratch_agrees_with_size_function(qs: QS, provider: str, fmt: str,
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
