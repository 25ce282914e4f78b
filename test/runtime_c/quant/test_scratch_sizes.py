"""Scratch-size agreement for the block-order quantized linear providers
(runtime_c/quant: K-quant GEMV / GEMM / split-K GEMV, the 32-element Q8_0 / Q5_0 /
Q4_0 x Q8_0 and Q4_1 / Q5_1 x Q8_1 GEMV / GEMM).

Each entry point (oracle, production on every dispatch path this host has, threadpool
dispatch) must refuse a scratch one byte smaller than the size function its kernel map
names (status V8_ERR_BAD_DIMENSION, output and scratch untouched) and must accept exactly
that size (status 0, every output written, bits equal to a roomy-scratch call, nothing
written past the size).  Weights come from v8's own reference quantizers (no ggml).
"""

from __future__ import annotations

import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ql_support import Q0_ACTIVATION, QL, isa_paths, make_activation, make_weights

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test/runtime_c: shared checks
from scratch_agreement import (  # noqa: E402
    Caller,
    check_agreement,
)

N = 40                      # weight rows: not a multiple of the 16 / 32-row tiles
WORKERS = 2

KQ_FORMATS = ("q4_k", "q5_k", "q6_k")
Q0_FORMATS = ("q8_0", "q5_0", "q4_0", "q4_1", "q5_1")
VARIANTS = ("ref", "prod", "pool")
SUFFIX = {"ref": "_ref", "prod": "", "pool": "_parallel_dispatch"}
# (kind, m, k): GEMV takes one activation row; K a multiple of 256 / 32
KQ_SHAPES = (("gemv", 1, 512), ("gemm", 2, 512), ("gemm", 9, 768))
Q0_SHAPES = (("gemv", 1, 160), ("gemm", 2, 96), ("gemm", 9, 288))
SPLIT_SHAPES = ((512, 3), (768, 2))   # (k, parts): parts 3 over 2 super-blocks leaves one empty


def shape_id(s: tuple[Any, ...]) -> str:
    return "_".join(str(v) for v in s)


def selector(ql: QL, fmt: str) -> int:
    if fmt in Q0_ACTIVATION:
        return int(getattr(ql.lib, f"V8_QL_{fmt.upper()}_X_{Q0_ACTIVATION[fmt].upper()}_FP32_BLOCK_ORDER"))
    return int(getattr(ql.lib, f"V8_QL_{fmt.upper()}_X_Q8_K_FP32_BLOCK_ORDER"))


def scratch_need(ql: QL, fmt: str, kind: str, m: int, k: int) -> int:
    """The size function the format's kernel map names (runtime_c/quant/*.kmap.json)."""
    family = "ql" if fmt in KQ_FORMATS else "ql1" if Q0_ACTIVATION[fmt] == "q8_1" else "ql0"
    if kind == "gemv":
        return int(getattr(ql.lib, f"v8_{family}_gemv_scratch_bytes")(k))
    return int(getattr(ql.lib, f"v8_{family}_gemm_scratch_bytes")(m, k))








def masks_for(ql: QL, variant: str) -> list[int]:
    """The oracle has one path; production and threadpool take every dispatch path."""
    return [0xFFFFFFFF] if variant == "ref" else [mask for _, mask in isa_paths(ql)]


def linear_caller(ql: QL, fmt: str, kind: str, variant: str, w: np.ndarray,
                  x: np.ndarray, m: int, k: int) -> Caller:
    fn = getattr(ql.lib, f"v8_{fmt}_{kind}{SUFFIX[variant]}")
    sel = selector(ql, fmt)

    def call(y: np.ndarray, scratch: np.ndarray, nbytes: int) -> int:
        args: list[Any] = [sel, ql.ptr(y, "float *"), ql.ptr(w, "void *"),
                           ql.ptr(x, "float *"), ql.ffi.NULL]
        args += [N, k] if kind == "gemv" else [m, N, k]
        args += [ql.ptr(scratch, "void *"), nbytes]
        if variant == "pool":
            args.insert(0, ql.pool(WORKERS))
        return int(fn(*args))

    return call


def run_linear(ql: QL, fmt: str, shape: tuple[str, int, int], variant: str) -> None:
    kind, m, k = shape
    seed = zlib.crc32(f"scratch:{fmt}:{shape_id(shape)}".encode()) & 0xFFFF
    w = ql.quantize(fmt, make_weights(N, k, seed))
    x = make_activation(k, seed + 1) if kind == "gemv" else make_activation(k, seed + 1, m)
    y_shape = (N,) if kind == "gemv" else (m, N)
    check_agreement(ql.lib.v8_cpu_restrict, linear_caller(ql, fmt, kind, variant, w, x, m, k), y_shape,
                    scratch_need(ql, fmt, kind, m, k), masks_for(ql, variant))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", KQ_SHAPES, ids=shape_id)
@pytest.mark.parametrize("fmt", KQ_FORMATS)
def test_kquant_scratch_agrees_with_size_function(ql: QL, fmt: str, shape: tuple[str, int, int],
                                                  variant: str) -> None:
    run_linear(ql, fmt, shape, variant)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", Q0_SHAPES, ids=shape_id)
@pytest.mark.parametrize("fmt", Q0_FORMATS)
def test_q0_scratch_agrees_with_size_function(ql: QL, fmt: str, shape: tuple[str, int, int],
                                              variant: str) -> None:
    run_linear(ql, fmt, shape, variant)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", SPLIT_SHAPES, ids=shape_id)
def test_split_k_scratch_agrees_with_size_function(ql: QL, shape: tuple[int, int],
                                                   variant: str) -> None:
    k, parts = shape
    w = ql.quantize("q4_k", make_weights(N, k, k + parts))
    x = make_activation(k, k + parts + 1)
    fn = getattr(ql.lib, f"v8_q4_k_gemv_split_k{SUFFIX[variant]}")
    sel = int(ql.lib.V8_QL_Q4_K_X_Q8_K_FP32_SPLIT_K_ASCENDING_MERGE)

    def call(y: np.ndarray, scratch: np.ndarray, nbytes: int) -> int:
        args: list[Any] = [sel, ql.ptr(y, "float *"), ql.ptr(w, "void *"), ql.ptr(x, "float *"),
                           ql.ffi.NULL, N, k, parts, ql.ptr(scratch, "void *"), nbytes]
        if variant == "pool":
            args.insert(0, ql.pool(WORKERS))
        return int(fn(*args))

    need = int(ql.lib.v8_ql_split_k_scratch_bytes(N, k, parts))
    assert need > int(ql.lib.v8_ql_gemv_scratch_bytes(k))   # the partials are part of it
    check_agreement(ql.lib.v8_cpu_restrict, call, (N,), need, masks_for(ql, variant))
