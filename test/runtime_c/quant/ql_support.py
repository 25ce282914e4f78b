"""Shared support for the quantized-linear evidence tests and the benchmark.

Builds the runtime_c/quant provider through cffi, drives ggml's ``mul_mat``
(the external oracle) through ggml-python, and writes/reads weights through
real GGUF files.  Numpy arrays are passed to C by pointer; every call's
status is checked by the caller.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test/runtime_c: shared support
from cffi_module import ProviderModule, cpu_restricted  # noqa: E402, F401 - re-exported

from v8dialect.data.c_abi import constants
from v8dialect.runtime.cbuild import RUNTIME_CORE_SOURCES, CBuild, build, runtime_cdef

QK_K = 256
Q4_K_BYTES = 144
Q5_K_BYTES = 176
Q6_K_BYTES = 210
Q8_K_BYTES = 292

CONTRACT_Q4 = "q4_k_x_q8_k_fp32_block_order"
CONTRACT_Q6 = "q6_k_x_q8_k_fp32_block_order"
CONTRACT_SPLIT = "q4_k_x_q8_k_fp32_split_k_ascending_merge"
CONTRACT_Q5 = "q5_k_x_q8_k_fp32_block_order"

# kernel-map ids (runtime_c/quant/*.kmap.json)
MAP_Q4_GEMV = "q4_k_x_q8_k_gemv"
MAP_Q4_GEMM = "q4_k_x_q8_k_gemm"
MAP_Q6_GEMV = "q6_k_x_q8_k_gemv"
MAP_Q6_GEMM = "q6_k_x_q8_k_gemm"
MAP_Q4_SPLIT = "q4_k_x_q8_k_gemv_split_k"
MAP_Q5_GEMV = "q5_k_x_q8_k_gemv"
MAP_Q5_GEMM = "q5_k_x_q8_k_gemm"

_V8 = constants(["v8_runtime.h"])
V8_OK = _V8["V8_OK"]
V8_CPU_AVX2 = _V8["V8_CPU_AVX2"]
V8_CPU_FMA = _V8["V8_CPU_FMA"]
V8_CPU_F16C = _V8["V8_CPU_F16C"]
V8_CPU_AVX512VNNI = _V8["V8_CPU_AVX512VNNI"]
AVX2_ONLY = V8_CPU_AVX2 | V8_CPU_FMA | V8_CPU_F16C
ALL_FEATURES = 0xFFFFFFFF
# the avx512 variant's path without VNNI (same variant, same bits required)
NO_VNNI = ALL_FEATURES & ~V8_CPU_AVX512VNNI
ISA_NAMES = {_V8[f"V8_ISA_{isa.upper()}"]: isa for isa in ("scalar", "avx2", "avx512")}

QUANT_SOURCES = ("quant/q_formats.c", "quant/q_dot_ref.c", "quant/q_linear.c",
                 "quant/q0_formats.c", "quant/q0_linear.c")

# 32-element block formats (x Q8_0 activations): elements and bytes per block
QK8_0 = 32
Q0_BLOCK_BYTES = {"q8_0": 34, "q5_0": 22, "q4_0": 18, "q4_1": 20, "q5_1": 24}
# the activation block each 32-element format pairs with
Q0_ACTIVATION = {"q8_0": "q8_0", "q5_0": "q8_0", "q4_0": "q8_0", "q4_1": "q8_1", "q5_1": "q8_1"}
# elements and bytes per block of every weight format the tests drive
BLOCKS = {"q4_k": (QK_K, Q4_K_BYTES), "q6_k": (QK_K, Q6_K_BYTES), "q8_k": (QK_K, Q8_K_BYTES),
          "q5_k": (QK_K, Q5_K_BYTES),
          "q8_1": (QK8_0, 36), **{f: (QK8_0, b) for f, b in Q0_BLOCK_BYTES.items()}}

# every quant/v8_quant.h function but the embedding's (q_embedding.c is not built here)
QUANT_CDEF = runtime_cdef("quant/v8_quant.h", functions=lambda name: not name.startswith("v8_embedding_quant"))


def quant_lib() -> ModuleType:
    return build(CBuild(name="v8_quant", cdef=QUANT_CDEF,
                        source='#include "quant/v8_quant.h"\n',
                        runtime_sources=RUNTIME_CORE_SOURCES + QUANT_SOURCES))


class QL(ProviderModule):
    """Thin typed wrapper over the compiled module (numpy in, numpy out)."""

    def __init__(self) -> None:
        super().__init__(quant_lib())


    # -- quantizers -----------------------------------------------------
    def quantize(self, fmt: str, x: np.ndarray) -> np.ndarray:
        rows, k = x.shape
        elems, per = BLOCKS[{"q8_0_act": "q8_0", "q8_1_act": "q8_1"}.get(fmt, fmt)]
        out = np.zeros((rows, k // elems * per), dtype=np.uint8)
        fn = {"q4_k": self.lib.v8_quantize_q4_k_ref, "q6_k": self.lib.v8_quantize_q6_k_ref,
              "q8_k": self.lib.v8_quantize_q8_k, "q8_0_act": self.lib.v8_quantize_q8_0,
              "q8_1_act": self.lib.v8_quantize_q8_1,
              "q5_k": self.lib.v8_quantize_q5_k_ref,
              **{f: getattr(self.lib, f"v8_quantize_{f}_ref") for f in Q0_BLOCK_BYTES}}[fmt]
        st = fn(self.ptr(np.ascontiguousarray(x, dtype=np.float32), "float *"),
                self.ptr(out, "void *"), rows, k)
        assert st == V8_OK, st
        return out

    def dequantize_q8_k(self, a: np.ndarray, k: int) -> np.ndarray:
        rows = a.shape[0]
        out = np.zeros((rows, k), dtype=np.float32)
        assert self.lib.v8_dequantize_q8_k(self.ptr(a, "void *"), self.ptr(out, "float *"),
                                           rows, k) == 0
        return out

    # -- kernels --------------------------------------------------------
    def linear(self, fmt: str, variant: str, w: np.ndarray, x: np.ndarray, *,
               workers: int = 0, bias: np.ndarray | None = None,
               contract: int | None = None) -> tuple[int, np.ndarray]:
        """GEMV when x is 1-D, GEMM when x is [m, k]; variant: ref | prod | pool."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        gemv = x.ndim == 1
        m, k = (1, x.shape[0]) if gemv else x.shape
        n = w.shape[0]
        y = np.full((n,) if gemv else (m, n), np.nan, dtype=np.float32)
        q0 = fmt in Q0_BLOCK_BYTES
        size = (self.lib.v8_ql1_gemm_scratch_bytes if q0 and Q0_ACTIVATION[fmt] == "q8_1"
                else self.lib.v8_ql0_gemm_scratch_bytes if q0 else self.lib.v8_ql_gemm_scratch_bytes)(m, k)
        scratch = np.zeros(size // 4 + 1, dtype=np.float32)
        sel = contract if contract is not None else (
            getattr(self.lib, f"V8_QL_{fmt.upper()}_X_{Q0_ACTIVATION[fmt].upper()}_FP32_BLOCK_ORDER")
            if q0
            else self.lib.V8_QL_Q4_K_X_Q8_K_FP32_BLOCK_ORDER if fmt == "q4_k"
            else self.lib.V8_QL_Q5_K_X_Q8_K_FP32_BLOCK_ORDER if fmt == "q5_k"
            else self.lib.V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER)
        name = f"v8_{fmt}_{'gemv' if gemv else 'gemm'}"
        suffix = {"ref": "_ref", "prod": "", "pool": "_parallel_dispatch"}[variant]
        fn = getattr(self.lib, name + suffix)
        args: list[Any] = [sel, self.ptr(y, "float *"), self.ptr(w, "void *"),
                           self.ptr(x, "float *"), self.ptr(bias, "float *")]
        args += [n, k] if gemv else [m, n, k]
        args += [self.ptr(scratch, "void *"), scratch.nbytes]
        if variant == "pool":
            args.insert(0, self.pool(workers))
        return fn(*args), y

    def split_k(self, variant: str, w: np.ndarray, x: np.ndarray, parts: int, *,
                workers: int = 0, bias: np.ndarray | None = None) -> tuple[int, np.ndarray]:
        x = np.ascontiguousarray(x, dtype=np.float32)
        n, k = w.shape[0], x.shape[0]
        y = np.full((n,), np.nan, dtype=np.float32)
        scratch = np.zeros(self.lib.v8_ql_split_k_scratch_bytes(n, k, parts) // 4 + 1,
                           dtype=np.float32)
        fn = getattr(self.lib, "v8_q4_k_gemv_split_k" +
                     {"ref": "_ref", "prod": "", "pool": "_parallel_dispatch"}[variant])
        args: list[Any] = [self.lib.V8_QL_Q4_K_X_Q8_K_FP32_SPLIT_K_ASCENDING_MERGE,
                           self.ptr(y, "float *"), self.ptr(w, "void *"), self.ptr(x, "float *"),
                           self.ptr(bias, "float *"), n, k, parts,
                           self.ptr(scratch, "void *"), scratch.nbytes]
        if variant == "pool":
            args.insert(0, self.pool(workers))
        return fn(*args), y


# ---- inputs that expose order -------------------------------------------

def make_weights(n: int, k: int, seed: int) -> np.ndarray:
    """Normals with per-row magnitudes over ~3 decades and a few 10x outliers."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k), dtype=np.float32)
    w *= (10.0 ** rng.uniform(-2.0, 1.0, size=(n, 1))).astype(np.float32)
    w[rng.random((n, k)) < 1e-3] *= 10.0
    return w


def make_activation(k: int, seed: int, m: int | None = None) -> np.ndarray:
    """Normals whose magnitude varies over ~5 decades along K (so Q8_K block
    scales and the fp32 lane sums span many binades)."""
    rng = np.random.default_rng(seed)
    shape = (k,) if m is None else (m, k)
    x = rng.standard_normal(shape, dtype=np.float32)
    x *= (10.0 ** rng.uniform(-3.0, 2.0, size=shape)).astype(np.float32)
    return x


def bitexact(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """(matching, total) by bit pattern."""
    ai = np.ascontiguousarray(a).view(np.uint32)
    bi = np.ascontiguousarray(b).view(np.uint32)
    return int(np.count_nonzero(ai == bi)), int(ai.size)


def max_abs_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def frac(t: tuple[int, int]) -> str:
    return f"{t[0]}/{t[1]}"


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """fp32 fma(a, b, c), exactly rounded, for a*b exact in float64 (a 24-bit factor
    times an integer below 2^29): the float64 sum is made round-to-odd from its exact
    error (TwoSum), and round-to-odd to 53 bits then nearest to 24 bits is exact."""
    p = a.astype(np.float64) * b.astype(np.float64)
    c64 = c.astype(np.float64)
    s = p + c64
    t = s - p
    err = (p - (s - t)) + (c64 - t)
    bump = (err != 0) & ((s.view(np.int64) & 1) == 0)
    s = np.where(bump, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s.astype(np.float32)


def tree8(acc: np.ndarray) -> np.ndarray:
    """The x86 lane tree over the last axis of [..., 8] fp32 lanes."""
    r = acc[..., 4:] + acc[..., :4]
    return (r[..., 0] + r[..., 2]) + (r[..., 1] + r[..., 3])


def isa_paths(ql: QL) -> list[tuple[str, int]]:
    """(variant, mask) for every dispatch path this host can take; the avx512
    variant appears twice when the CPU has VNNI (with and without it)."""
    ql.lib.v8_cpu_restrict(ALL_FEATURES)
    best = ql.lib.v8_cpu_best_isa()
    has_vnni = bool(ql.lib.v8_cpu_features() & ~NO_VNNI)
    out = []
    if best == 2:
        out.append(("avx512", ALL_FEATURES))
        if has_vnni:
            out.append(("avx512", NO_VNNI))
    if best >= 1:
        out.append(("avx2", AVX2_ONLY))
    out.append(("scalar", 0))
    return out


# ---- ggml (external oracle) ----------------------------------------------

def import_ggml() -> Any | None:
    try:
        import ggml  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001 - any import failure makes the rung unresolved
        return None
    return ggml


GGML_TYPES = {"q4_k": "GGML_TYPE_Q4_K", "q6_k": "GGML_TYPE_Q6_K", "q8_0": "GGML_TYPE_Q8_0",
              "q5_k": "GGML_TYPE_Q5_K", "q4_1": "GGML_TYPE_Q4_1", "q5_1": "GGML_TYPE_Q5_1",
              "q5_0": "GGML_TYPE_Q5_0", "q4_0": "GGML_TYPE_Q4_0"}


@dataclass
class GgmlLinear:
    """One ggml context holding W (quantized), X (f32) and the mul_mat graph."""

    ggml: Any
    fmt: str
    n: int
    k: int
    m: int

    def __post_init__(self) -> None:
        g = self.ggml
        qtype = getattr(g, GGML_TYPES[self.fmt])
        elems, per = BLOCKS[self.fmt]
        self.w_bytes = self.n * (self.k // elems) * per
        # room for ggml's own activation quantization (Q8_K or Q8_0 work data), which
        # ggml_graph_compute_with_ctx takes from the context anew on every call: the
        # headroom covers the few hundred calls of a benchmark's timed rounds
        act = self.m * (self.k // QK_K * Q8_K_BYTES if elems == QK_K else self.k // QK8_0 * 36)
        mem = self.w_bytes + 4 * self.m * self.k + 4 * self.m * self.n + act + (128 << 20)
        self.ctx = g.ggml_init(g.ggml_init_params(mem_size=mem, mem_buffer=None, no_alloc=False))
        assert self.ctx is not None
        self.qtype = qtype
        self.w = g.ggml_new_tensor_2d(self.ctx, qtype, self.k, self.n)
        self.x = g.ggml_new_tensor_2d(self.ctx, g.GGML_TYPE_F32, self.k, self.m)
        self.y = g.ggml_mul_mat(self.ctx, self.w, self.x)
        self.graph = g.ggml_new_graph(self.ctx)
        g.ggml_build_forward_expand(self.graph, self.y)

    def quantize(self, w_f32: np.ndarray) -> np.ndarray:
        """ggml_quantize_chunk of W into the tensor; returns a copy of the bytes."""
        g = self.ggml
        src = np.ascontiguousarray(w_f32, dtype=np.float32)
        g.ggml_quantize_chunk(self.qtype, src.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                              g.ggml_get_data(self.w), 0, self.n, self.k, None)
        return self.weight_bytes().copy()

    def weight_bytes(self) -> np.ndarray:
        buf = (ctypes.c_uint8 * self.w_bytes).from_address(self.ggml.ggml_get_data(self.w))
        return np.frombuffer(buf, dtype=np.uint8).reshape(self.n, -1)

    def set_weights(self, wq: np.ndarray) -> None:
        assert wq.nbytes == self.w_bytes
        ctypes.memmove(self.ggml.ggml_get_data(self.w), np.ascontiguousarray(wq).ctypes.data,
                       self.w_bytes)

    def run(self, x: np.ndarray, threads: int) -> np.ndarray:
        g = self.ggml
        xs = np.ascontiguousarray(x, dtype=np.float32).reshape(self.m, self.k)
        ctypes.memmove(g.ggml_get_data(self.x), xs.ctypes.data, xs.nbytes)
        g.ggml_graph_compute_with_ctx(self.ctx, self.graph, threads)
        return self.output()

    def compute(self, threads: int) -> None:
        self.ggml.ggml_graph_compute_with_ctx(self.ctx, self.graph, threads)

    def output(self) -> np.ndarray:
        buf = (ctypes.c_float * (self.m * self.n)).from_address(
            self.ggml.ggml_get_data(self.y))
        return np.frombuffer(buf, dtype=np.float32).reshape(self.m, self.n).copy()

    def close(self) -> None:
        if self.ctx is not None:
            self.ggml.ggml_free(self.ctx)
            self.ctx = None


# ---- GGUF round trip ------------------------------------------------------

def gguf_roundtrip(path: Path, tensors: dict[str, tuple[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Write raw quantized blocks with GGUFWriter, read them back with GGUFReader.

    ``tensors`` maps name -> (format, uint8 array [rows, row_bytes]); returns
    name -> uint8 array [rows, row_bytes] read from the file (memory-mapped)."""
    import gguf

    qtypes = {f: getattr(gguf.GGMLQuantizationType, f.upper())
              for f in ("q4_k", "q6_k", "q5_k", "q8_0", "q5_0", "q4_0", "q4_1", "q5_1")}
    writer = gguf.GGUFWriter(str(path), "v8-quant-test")
    for name, (fmt, data) in tensors.items():
        writer.add_tensor(name, data, raw_dtype=qtypes[fmt])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reader = gguf.GGUFReader(str(path))
    out: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        fmt, data = tensors[t.name]
        assert t.tensor_type == qtypes[fmt]
        out[t.name] = np.asarray(t.data).reshape(data.shape)
    return out
