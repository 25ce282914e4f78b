"""The 16-row interleaved Q4_K layout (runtime_c/quant_repacked/qr_x16.c): v8_q4_k_x16_repack
then v8_q4_k_x16_gemv* must equal the plain-layout contract oracle v8_q4_k_repacked_gemv_ref
bit for bit, for every ISA variant this host can take (scalar walk of the layout, AVX2,
AVX-512 with and without VNNI), row counts that are not multiples of 16, 1..4 and 8 workers,
and inputs at the int16 bounds of the kernels' partial sums; bad arguments leave the outputs
untouched."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from avx512_int_emulated import emulated_module
from qr_support import (
    ALL_FEATURES,
    CDEF,
    ISA_NAMES,
    QK_K,
    QR,
    SOURCES,
    bitexact,
    make_activation,
    random_blocks,
)

from v8dialect.data.c_abi import constants, declared_in
from v8dialect.evidence.record import Rung
from v8dialect.runtime.cbuild import RUNTIME_CORE_SOURCES, CBuild, build, runtime_cdef

_V8 = constants(["v8_runtime.h"])
V8_OK = _V8["V8_OK"]
V8_ERR_NULL_ARGUMENT = _V8["V8_ERR_NULL_ARGUMENT"]
V8_ERR_BAD_DIMENSION = _V8["V8_ERR_BAD_DIMENSION"]
V8_ERR_UNKNOWN_SELECTOR = _V8["V8_ERR_UNKNOWN_SELECTOR"]
V8_ERR_BAD_THREADING = _V8["V8_ERR_BAD_THREADING"]
V8_CPU_LINE_PREFETCH = _V8["V8_CPU_LINE_PREFETCH"]

X16_HEADER = "quant_repacked/v8_quant_repacked_x16.h"
Q6K_PLAIN = ["v8_quantize_q6_k_ref", "v8_q6_k_gemv_ref", "v8_ql_gemv_scratch_bytes"]
X16_CDEF = runtime_cdef("quant/v8_quant.h", "quant_repacked/v8_quant_repacked.h", X16_HEADER,
                        functions=[*declared_in("quant_repacked/v8_quant_repacked.h"),
                                   *declared_in(X16_HEADER), *Q6K_PLAIN])
Q6K_BYTES = 210
# the kernel maps these tests are evidence for
PROVIDERS = {"q4_k": dict(provider="q4_k_x_q8_k_x16_gemv",
                          contract="q4_k_x_q8_k_fp32_repacked_super_block_chain"),
             "q6_k": dict(provider="q6_k_x_q8_k_x16_gemv", contract="q6_k_x_q8_k_fp32_block_order")}


@contextmanager
def recorded(evidence: Callable[..., None], rung: Rung, fmt: str, **detail: Any) -> Iterator[None]:
    """One evidence entry for the block: a pass when it finishes, a fail when it raises."""
    ok = False
    try:
        yield
        ok = True
    finally:
        evidence(rung, ok, **PROVIDERS[fmt], **detail)
assert CDEF  # the plain provider's declarations are a subset of X16_CDEF's


class QX(QR):
    """The plain provider plus the interleaved layout's functions."""

    def __init__(self) -> None:  # noqa: D107 - builds a different module than QR
        mod = build(CBuild(name="v8_quant_repacked_x16", cdef=X16_CDEF,
                           source=f'#include "{X16_HEADER}"\n',
                           runtime_sources=RUNTIME_CORE_SOURCES + SOURCES
                           + ("quant/q_dot_ref.c", "quant/q_linear.c",
                              "quant_repacked/qr_x16.c")))
        super(QR, self).__init__(mod)

    def isas(self) -> list[tuple[str, int]]:
        """QR's dispatch paths plus, where the CPU has V8_CPU_LINE_PREFETCH, each AVX-512
        path again with it masked off: the Q4_K walk without per-line prefetches."""
        out = super().isas()
        if self.lib.v8_cpu_features() & V8_CPU_LINE_PREFETCH:
            out += [(isa, mask & ~V8_CPU_LINE_PREFETCH) for isa, mask in out if isa == "avx512"]
        return out

    def repack(self, w: np.ndarray, n: int, k: int, workers: int = 0,
               fmt: str = "q4_k") -> np.ndarray:
        size = getattr(self.lib, f"v8_{fmt}_x16_repack_bytes")(n, k)
        assert size > 0
        out = np.full(size, 0xA5, dtype=np.uint8)
        if workers:
            st = getattr(self.lib, f"v8_{fmt}_x16_repack_parallel_dispatch")(
                self.pool(workers), self.ptr(out, "void *"), size, self.ptr(w, "void *"), n, k)
        else:
            st = getattr(self.lib, f"v8_{fmt}_x16_repack")(self.ptr(out, "void *"), size,
                                                           self.ptr(w, "void *"), n, k)
        assert st == V8_OK
        return out

    def x16(self, variant: str, wx: np.ndarray, x: np.ndarray, n: int, *, workers: int = 0,
            bias: np.ndarray | None = None, contract: int | None = None,
            scratch_shrink: int = 0, fmt: str = "q4_k") -> tuple[int, np.ndarray]:
        x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
        k = x.size
        y = np.full(n, np.nan, dtype=np.float32)
        size = getattr(self.lib, f"v8_{fmt}_x16_gemv_scratch_bytes")(k)
        scratch = np.zeros(max(size, 4) // 4 + 1, dtype=np.float32)
        sel = (contract if contract is not None
               else self.lib.V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN if fmt == "q4_k"
               else self.lib.V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER)
        args: list[Any] = [sel, self.ptr(y, "float *"), self.ptr(wx, "void *"),
                           self.ptr(x, "float *"), self.ptr(bias, "float *"), n, k,
                           self.ptr(scratch, "void *"), max(size, 4) - scratch_shrink]
        if variant == "pool":
            fn = getattr(self.lib, f"v8_{fmt}_x16_gemv_parallel_dispatch")
            return fn(self.pool(workers), *args), y
        suffix = {"ref": "_ref", "prod": ""}[variant]
        return getattr(self.lib, f"v8_{fmt}_x16_gemv{suffix}")(*args), y

    def q6k_quantize(self, w: np.ndarray) -> np.ndarray:
        n, k = w.shape
        out = np.zeros((n, k // QK_K * Q6K_BYTES), np.uint8)
        w = np.ascontiguousarray(w, np.float32)
        assert self.lib.v8_quantize_q6_k_ref(self.ptr(w, "float *"), self.ptr(out, "void *"),
                                             n, k) == V8_OK
        return out

    def q6k_oracle(self, w: np.ndarray, x: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        n = w.shape[0]
        k = x.size
        y = np.full(n, np.nan, np.float32)
        size = self.lib.v8_ql_gemv_scratch_bytes(k)
        scratch = np.zeros(size // 4 + 1, np.float32)
        x = np.ascontiguousarray(x, np.float32)
        st = self.lib.v8_q6_k_gemv_ref(self.lib.V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER,
                                       self.ptr(y, "float *"), self.ptr(w, "void *"),
                                       self.ptr(x, "float *"), self.ptr(bias, "float *"), n, k,
                                       self.ptr(scratch, "void *"), size)
        assert st == V8_OK
        return y


@pytest.fixture(scope="module")
def qx() -> Any:
    lib = QX()
    yield lib
    lib.lib.v8_cpu_restrict(ALL_FEATURES)
    lib.close()


@contextmanager
def _restored(qx: QX) -> Iterator[None]:
    """Every CPU feature back on after the block."""
    try:
        yield
    finally:
        qx.lib.v8_cpu_restrict(ALL_FEATURES)


def isa_list(qx: QX) -> str:
    return ",".join(isa for isa, _ in qx.isas())


def oracle(qx: QX, w: np.ndarray, x: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    st, y = qx.run("gemv", "ref", w, x.reshape(1, -1), bias=bias)
    assert st == V8_OK
    return y[0]


SHAPES = [(1, 256), (15, 256), (16, 256), (17, 512), (33, 768), (100, 1024), (1024, 1024),
          (520, 512), (3072, 1024), (1024, 3072)]


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
def test_x16_every_isa_vs_plain_oracle(qx: QX, weights: Any, shape: tuple[int, int],
                                       evidence: Callable[..., None]) -> None:
    n, k = shape
    w = weights.get(n, k)
    wx = qx.repack(w, n, k)
    with recorded(evidence, Rung.PRODUCTION, "q4_k", shape=f"1x{n}x{k}", isas=isa_list(qx)):
        every_isa_q4k(qx, w, wx, n, k)


def every_isa_q4k(qx: QX, w: np.ndarray, wx: np.ndarray, n: int, k: int) -> None:
    for seed, with_bias in ((11, True), (12, False)):
        x = make_activation(1, k, seed + n)[0]
        bias = make_activation(1, n, seed)[0] if with_bias else None
        y_ref = oracle(qx, w, x, bias)
        st, y = qx.x16("ref", wx, x, n, bias=bias)
        same, total = bitexact(y_ref, y)
        assert st == V8_OK and same == total, ("x16 scalar", same, total)
        try:
            for isa, mask in qx.isas():
                qx.lib.v8_cpu_restrict(mask)
                assert ISA_NAMES[qx.lib.v8_cpu_best_isa()] == isa
                st, y = qx.x16("prod", wx, x, n, bias=bias)
                same, total = bitexact(y_ref, y)
                assert st == V8_OK and same == total, (isa, hex(mask), same, total)
        finally:
            qx.lib.v8_cpu_restrict(ALL_FEATURES)


POOL_SHAPES = [(1024, 1024), (520, 512), (17, 256), (100, 768)]


@pytest.mark.parametrize("shape", POOL_SHAPES, ids=[f"{n}x{k}" for n, k in POOL_SHAPES])
def test_x16_threadpool_vs_plain_oracle(qx: QX, weights: Any, shape: tuple[int, int],
                                       evidence: Callable[..., None]) -> None:
    n, k = shape
    w = weights.get(n, k)
    wx = qx.repack(w, n, k)
    x = make_activation(1, k, 5)[0]
    bias = make_activation(1, n, 9)[0]
    y_ref = oracle(qx, w, x, bias)
    with recorded(evidence, Rung.THREADPOOL, "q4_k", shape=f"1x{n}x{k}", workers="1,2,3,4,8"), \
            _restored(qx):
        for isa, mask in qx.isas():
            qx.lib.v8_cpu_restrict(mask)
            for workers in (1, 2, 3, 4, 8):
                assert np.array_equal(qx.repack(w, n, k, workers=workers), wx)
                st, y = qx.x16("pool", wx, x, n, workers=workers, bias=bias)
                same, total = bitexact(y_ref, y)
                assert st == V8_OK and same == total, (isa, workers, same, total)


def test_x16_int16_bounds_and_random_blocks(qx: QX) -> None:
    """Codes 15 with 6-bit scales and mins 63 against activations quantizing to -128 and 127:
    the kernels' int16 partial sums reach their largest magnitudes (16 * 15 * 128); plus random
    bytes in every block field (scales, mins, codes) with finite fp16 d, dmin."""
    k = 1024
    n = 40
    w = random_blocks(n, k, 4).reshape(n, k // QK_K, 144)
    w[:8, :, 4:] = 0xFF                       # all scales, mins 63; all codes 15
    w[8:12, :, 4:16] = 0xFF
    w[8:12, :, 16:] = 0x00                    # codes 0
    w = np.ascontiguousarray(w.reshape(n, -1))
    wx = qx.repack(w, n, k)
    xs = [np.full(k, -1.0, np.float32), np.full(k, 1.0, np.float32),
          np.where(np.arange(k) % 3 == 0, -1.0, 0.5).astype(np.float32),
          make_activation(1, k, 21)[0]]
    try:
        for x in xs:
            y_ref = oracle(qx, w, x, None)
            for isa, mask in [*qx.isas(), ("ref", ALL_FEATURES)]:
                qx.lib.v8_cpu_restrict(mask)
                st, y = qx.x16("ref" if isa == "ref" else "prod", wx, x, n)
                same, total = bitexact(y_ref, y)
                assert st == V8_OK and same == total, (isa, same, total)
    finally:
        qx.lib.v8_cpu_restrict(ALL_FEATURES)


def test_x16_padding_rows_are_zero(qx: QX, weights: Any) -> None:
    n, k = 17, 512
    wx = qx.repack(weights.get(n, k), n, k).reshape(2, k // QK_K, 2368)
    # second row group: rows 17..31 are padding: d, dmin, scales, mins and codes all zero
    blk = wx[1]
    d = blk[:, 0:32].view(np.uint16).reshape(-1, 2, 16)
    assert np.all(d[:, :, 1:] == 0)
    sc = blk[:, 64:192].reshape(-1, 8, 16)
    assert np.all(sc[:, :, 1:] == 0)
    mn = blk[:, 192:320].reshape(-1, 4, 16, 2)
    assert np.all(mn[:, :, 1:, :] == 0)
    qs = blk[:, 320:].reshape(-1, 32, 16, 4)
    assert np.all(qs[:, :, 1:, :] == 0)
    assert qx.lib.v8_q4_k_x16_repack_bytes(n, k) == 2 * (k // QK_K) * 2368


def test_x16_api_rejects_bad_input_without_writing(qx: QX, weights: Any) -> None:
    n, k = 40, 512
    w = weights.get(n, k)
    wx = qx.repack(w, n, k)
    x = make_activation(1, k, 3)[0]
    lib, ffi = qx.lib, qx.ffi
    checks: dict[str, tuple[int, bool, int]] = {}
    gsel = lib.V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN
    for variant in ("ref", "prod", "pool"):
        cases: dict[str, dict[str, Any]] = {
            "selector": dict(contract=99, expect=V8_ERR_UNKNOWN_SELECTOR),
            "gemm_form": dict(contract=lib.V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_4_ROW_GROUPS,
                              expect=V8_ERR_UNKNOWN_SELECTOR),
            "short_scratch": dict(scratch_shrink=4, expect=V8_ERR_BAD_DIMENSION),
        }
        for name, case in cases.items():
            expect = case.pop("expect")
            st, y = qx.x16(variant, wx, x, n, workers=2, **case)
            checks[f"{variant}_{name}"] = (st, bool(np.all(np.isnan(y))), expect)
    # raw entry points: NULL pointers, bad n / k, misaligned scratch, NULL pool
    y = np.full(n, np.nan, np.float32)
    size = lib.v8_q4_k_x16_gemv_scratch_bytes(k)
    scratch = np.zeros(size // 4 + 2, np.float32)
    yp, xp, wp = qx.ptr(y, "float *"), qx.ptr(x, "float *"), qx.ptr(wx, "void *")
    sp = qx.ptr(scratch, "void *")
    sp_odd = ffi.cast("void *", scratch.ctypes.data + 1)
    raw = {
        "null_y": (lib.v8_q4_k_x16_gemv(gsel, ffi.NULL, wp, xp, ffi.NULL, n, k, sp, size),
                   V8_ERR_NULL_ARGUMENT),
        "null_w": (lib.v8_q4_k_x16_gemv(gsel, yp, ffi.NULL, xp, ffi.NULL, n, k, sp, size),
                   V8_ERR_NULL_ARGUMENT),
        "null_x": (lib.v8_q4_k_x16_gemv(gsel, yp, wp, ffi.NULL, ffi.NULL, n, k, sp, size),
                   V8_ERR_NULL_ARGUMENT),
        "null_scratch": (lib.v8_q4_k_x16_gemv(gsel, yp, wp, xp, ffi.NULL, n, k, ffi.NULL, size),
                         V8_ERR_NULL_ARGUMENT),
        "n0": (lib.v8_q4_k_x16_gemv(gsel, yp, wp, xp, ffi.NULL, 0, k, sp, size),
               V8_ERR_BAD_DIMENSION),
        "n_negative": (lib.v8_q4_k_x16_gemv(gsel, yp, wp, xp, ffi.NULL, -16, k, sp, size),
                       V8_ERR_BAD_DIMENSION),
        "k896": (lib.v8_q4_k_x16_gemv(gsel, yp, wp, xp, ffi.NULL, n, 896, sp, size),
                 V8_ERR_BAD_DIMENSION),
        "k0": (lib.v8_q4_k_x16_gemv(gsel, yp, wp, xp, ffi.NULL, n, 0, sp, size),
               V8_ERR_BAD_DIMENSION),
        "misaligned_scratch": (lib.v8_q4_k_x16_gemv(gsel, yp, wp, xp, ffi.NULL, n, k, sp_odd,
                                                    size), V8_ERR_BAD_DIMENSION),
        "null_pool": (lib.v8_q4_k_x16_gemv_parallel_dispatch(ffi.NULL, gsel, yp, wp, xp,
                                                             ffi.NULL, n, k, sp, size),
                      V8_ERR_BAD_THREADING),
    }
    for name, (st, expect) in raw.items():
        checks[name] = (st, bool(np.all(np.isnan(y))), expect)
    # repack: the destination stays as it was
    need = lib.v8_q4_k_x16_repack_bytes(n, k)
    dst = np.full(need + 64, 0x5A, np.uint8)
    dp = qx.ptr(dst, "void *")
    bad_repack = {
        "repack_null_dst": (lib.v8_q4_k_x16_repack(ffi.NULL, need, qx.ptr(w, "void *"), n, k),
                            V8_ERR_NULL_ARGUMENT),
        "repack_null_w": (lib.v8_q4_k_x16_repack(dp, need, ffi.NULL, n, k),
                          V8_ERR_NULL_ARGUMENT),
        "repack_short_dst": (lib.v8_q4_k_x16_repack(dp, need - 1, qx.ptr(w, "void *"), n, k),
                             V8_ERR_BAD_DIMENSION),
        "repack_n0": (lib.v8_q4_k_x16_repack(dp, need, qx.ptr(w, "void *"), 0, k),
                      V8_ERR_BAD_DIMENSION),
        "repack_k896": (lib.v8_q4_k_x16_repack(dp, need, qx.ptr(w, "void *"), n, 896),
                        V8_ERR_BAD_DIMENSION),
        "repack_null_pool": (lib.v8_q4_k_x16_repack_parallel_dispatch(
            ffi.NULL, dp, need, qx.ptr(w, "void *"), n, k), V8_ERR_BAD_THREADING),
    }
    for name, (st, expect) in bad_repack.items():
        checks[name] = (st, bool(np.all(dst == 0x5A)), expect)
    # overlapping source and destination
    both = np.zeros(need + w.nbytes, np.uint8)
    both[:w.nbytes] = w.reshape(-1)
    before = both.copy()
    st = lib.v8_q4_k_x16_repack(ffi.cast("void *", both.ctypes.data + 64), need,
                                ffi.cast("void *", both.ctypes.data), n, k)
    checks["repack_overlap"] = (st, bool(np.array_equal(both, before)), V8_ERR_BAD_DIMENSION)
    assert lib.v8_q4_k_x16_repack_bytes(0, 512) == 0
    assert lib.v8_q4_k_x16_repack_bytes(16, 896) == 0
    assert lib.v8_q4_k_x16_repack_bytes(-1, 512) == 0
    assert lib.v8_q4_k_x16_gemv_scratch_bytes(896) == 0
    assert lib.v8_q4_k_x16_gemv_scratch_bytes(0) == 0
    bad = {name: v for name, v in checks.items() if not (v[0] == v[2] and v[1])}
    assert not bad, bad


# ---- AVX-512 variants, emulated (hosts without AVX-512) --------------------------------------

HERE = Path(__file__).resolve().parent
EMULATED_C = HERE / "qx_avx512_emulated.c"


@pytest.fixture(scope="module")
def qx_emulated() -> Any:
    """qr_x16.c built with its AVX-512 variants on portable intrinsic emulations (AVX2 host)."""
    return emulated_module("v8_qx_avx512_emulated", EMULATED_C, "quant_repacked/qr_x16.c", """
        int q6x_emulated_avx512_gemv(float *y, const void *w, const float *x,
                                     const float *bias, int64_t n, int64_t k, void *scratch,
                                     size_t scratch_bytes);
        int qx_emulated_avx512_gemv(int vnni, float *y, const void *w, const float *x,
                                    const float *bias, int64_t n, int64_t k, void *scratch,
                                    size_t scratch_bytes);""")


EMU_SHAPES = [(1, 256), (17, 512), (100, 768), (256, 1024)]


@pytest.mark.parametrize("shape", EMU_SHAPES, ids=[f"{n}x{k}" for n, k in EMU_SHAPES])
def test_x16_emulated_avx512_vs_plain_oracle(qx: QX, qx_emulated: Any, weights: Any,
                                             shape: tuple[int, int]) -> None:
    n, k = shape
    w = weights.get(n, k)
    wx = qx.repack(w, n, k)
    ffi, lib = qx_emulated.ffi, qx_emulated.lib
    cases = [(make_activation(1, k, 31)[0], make_activation(1, n, 4)[0]),
             (np.full(k, -1.0, np.float32), None)]
    for x, bias in cases:
        y_ref = oracle(qx, w, x, bias)
        for vnni in (0, 1):
            y = np.full(n, np.nan, np.float32)
            size = qx.lib.v8_q4_k_x16_gemv_scratch_bytes(k)
            scratch = np.zeros(size // 4 + 1, np.float32)
            st = lib.qx_emulated_avx512_gemv(
                vnni, ffi.cast("float *", y.ctypes.data), ffi.cast("void *", wx.ctypes.data),
                ffi.cast("float *", x.ctypes.data),
                ffi.NULL if bias is None else ffi.cast("float *", bias.ctypes.data), n, k,
                ffi.cast("void *", scratch.ctypes.data), size)
            same, total = bitexact(y_ref, y)
            assert st == V8_OK and same == total, ("emulated avx512", vnni, same, total)


# ---- Q6_K ------------------------------------------------------------------------------------

def q6k_weights(qx: QX, n: int, k: int, seed: int) -> np.ndarray:
    """Q6_K rows by the reference quantizer (ggml's bytes), from make_weights' inputs."""
    from qr_support import make_weights
    return qx.q6k_quantize(make_weights(n, k, seed))


def q6k_extreme_blocks(n: int, k: int, seed: int) -> np.ndarray:
    """Random bytes in every field (levels 0..63, int8 scales incl. -128) with a finite
    positive d; the first rows all levels 63 (or 0) with scales 127 / -128."""
    rng = np.random.default_rng(seed)
    nb = k // QK_K
    raw = rng.integers(0, 256, size=(n, nb, Q6K_BYTES), dtype=np.uint8)
    raw[..., 208:210] = rng.uniform(1e-4, 1e-2, size=(n, nb, 1)).astype(np.float16).view(np.uint8)
    # levels 63 with scales 127 and -128, levels 0 with scales -128
    for r, (levels, scale) in enumerate([(0xFF, 127), (0xFF, 0x80), (0x00, 0x80)][:n]):
        raw[r, :, 0:192] = levels
        raw[r, :, 192:208] = scale
    return np.ascontiguousarray(raw.reshape(n, nb * Q6K_BYTES))


Q6_SHAPES = [(1, 256), (17, 512), (33, 768), (100, 1024), (1024, 1024), (3072, 1024)]


@pytest.mark.parametrize("shape", Q6_SHAPES, ids=[f"{n}x{k}" for n, k in Q6_SHAPES])
def test_q6k_x16_every_isa_vs_plain_oracle(qx: QX, shape: tuple[int, int],
                                           evidence: Callable[..., None]) -> None:
    with recorded(evidence, Rung.PRODUCTION, "q6_k", shape=f"1x{shape[0]}x{shape[1]}",
                  isas=isa_list(qx)):
        every_isa_q6k(qx, shape)


def every_isa_q6k(qx: QX, shape: tuple[int, int]) -> None:
    n, k = shape
    for w in (q6k_weights(qx, n, k, 3 + n), q6k_extreme_blocks(n, k, 5 + n)):
        wx = qx.repack(w, n, k, fmt="q6_k")
        assert wx.nbytes == (n + 15) // 16 * (k // QK_K) * 3360
        for seed, with_bias in ((11, True), (12, False)):
            x = make_activation(1, k, seed + n)[0]
            bias = make_activation(1, n, seed)[0] if with_bias else None
            for xx in (x, np.full(k, -1.0, np.float32)):
                y_ref = qx.q6k_oracle(w, xx, bias)
                st, y = qx.x16("ref", wx, xx, n, bias=bias, fmt="q6_k")
                same, total = bitexact(y_ref, y)
                assert st == V8_OK and same == total, ("x16 scalar", same, total)
                try:
                    for isa, mask in qx.isas():
                        qx.lib.v8_cpu_restrict(mask)
                        st, y = qx.x16("prod", wx, xx, n, bias=bias, fmt="q6_k")
                        same, total = bitexact(y_ref, y)
                        assert st == V8_OK and same == total, (isa, hex(mask), same, total)
                finally:
                    qx.lib.v8_cpu_restrict(ALL_FEATURES)


@pytest.mark.parametrize("shape", POOL_SHAPES, ids=[f"{n}x{k}" for n, k in POOL_SHAPES])
def test_q6k_x16_threadpool_vs_plain_oracle(qx: QX, shape: tuple[int, int],
                                            evidence: Callable[..., None]) -> None:
    n, k = shape
    w = q6k_weights(qx, n, k, 7)
    wx = qx.repack(w, n, k, fmt="q6_k")
    x = make_activation(1, k, 5)[0]
    bias = make_activation(1, n, 9)[0]
    y_ref = qx.q6k_oracle(w, x, bias)
    with recorded(evidence, Rung.THREADPOOL, "q6_k", shape=f"1x{n}x{k}", workers="1,2,3,4,8"), \
            _restored(qx):
        for isa, mask in qx.isas():
            qx.lib.v8_cpu_restrict(mask)
            for workers in (1, 2, 3, 4, 8):
                assert np.array_equal(qx.repack(w, n, k, workers=workers, fmt="q6_k"), wx)
                st, y = qx.x16("pool", wx, x, n, workers=workers, bias=bias, fmt="q6_k")
                same, total = bitexact(y_ref, y)
                assert st == V8_OK and same == total, (isa, workers, same, total)


@pytest.mark.parametrize("shape", EMU_SHAPES, ids=[f"{n}x{k}" for n, k in EMU_SHAPES])
def test_q6k_x16_emulated_avx512_vs_plain_oracle(qx: QX, qx_emulated: Any,
                                                 shape: tuple[int, int]) -> None:
    n, k = shape
    ffi, lib = qx_emulated.ffi, qx_emulated.lib
    for w in (q6k_weights(qx, n, k, 3 + n), q6k_extreme_blocks(n, k, 5 + n)):
        wx = qx.repack(w, n, k, fmt="q6_k")
        for x, bias in ((make_activation(1, k, 31)[0], make_activation(1, n, 4)[0]),
                        (np.full(k, -1.0, np.float32), None)):
            y_ref = qx.q6k_oracle(w, x, bias)
            y = np.full(n, np.nan, np.float32)
            size = qx.lib.v8_q6_k_x16_gemv_scratch_bytes(k)
            scratch = np.zeros(size // 4 + 1, np.float32)
            st = lib.q6x_emulated_avx512_gemv(
                ffi.cast("float *", y.ctypes.data), ffi.cast("void *", wx.ctypes.data),
                ffi.cast("float *", x.ctypes.data),
                ffi.NULL if bias is None else ffi.cast("float *", bias.ctypes.data), n, k,
                ffi.cast("void *", scratch.ctypes.data), size)
            same, total = bitexact(y_ref, y)
            assert st == V8_OK and same == total, ("emulated avx512 q6_k", same, total)


def test_q6k_x16_api_rejects_bad_input_without_writing(qx: QX) -> None:
    n, k = 40, 512
    w = q6k_weights(qx, n, k, 1)
    wx = qx.repack(w, n, k, fmt="q6_k")
    x = make_activation(1, k, 3)[0]
    lib, ffi = qx.lib, qx.ffi
    checks: dict[str, tuple[int, bool, int]] = {}
    for variant in ("ref", "prod", "pool"):
        cases: dict[str, dict[str, Any]] = {
            "selector": dict(contract=99, expect=V8_ERR_UNKNOWN_SELECTOR),
            "q4_k_contract": dict(contract=lib.V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN,
                                  expect=V8_ERR_UNKNOWN_SELECTOR),
            "short_scratch": dict(scratch_shrink=4, expect=V8_ERR_BAD_DIMENSION),
        }
        for name, case in cases.items():
            expect = case.pop("expect")
            st, y = qx.x16(variant, wx, x, n, workers=2, fmt="q6_k", **case)
            checks[f"{variant}_{name}"] = (st, bool(np.all(np.isnan(y))), expect)
    sel = lib.V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER
    y = np.full(n, np.nan, np.float32)
    size = lib.v8_q6_k_x16_gemv_scratch_bytes(k)
    scratch = np.zeros(size // 4 + 2, np.float32)
    yp, xp, wp = qx.ptr(y, "float *"), qx.ptr(x, "float *"), qx.ptr(wx, "void *")
    sp = qx.ptr(scratch, "void *")
    sp_odd = ffi.cast("void *", scratch.ctypes.data + 2)
    raw = {
        "null_y": (lib.v8_q6_k_x16_gemv(sel, ffi.NULL, wp, xp, ffi.NULL, n, k, sp, size),
                   V8_ERR_NULL_ARGUMENT),
        "null_w": (lib.v8_q6_k_x16_gemv(sel, yp, ffi.NULL, xp, ffi.NULL, n, k, sp, size),
                   V8_ERR_NULL_ARGUMENT),
        "null_x": (lib.v8_q6_k_x16_gemv(sel, yp, wp, ffi.NULL, ffi.NULL, n, k, sp, size),
                   V8_ERR_NULL_ARGUMENT),
        "null_scratch": (lib.v8_q6_k_x16_gemv(sel, yp, wp, xp, ffi.NULL, n, k, ffi.NULL, size),
                         V8_ERR_NULL_ARGUMENT),
        "n0": (lib.v8_q6_k_x16_gemv(sel, yp, wp, xp, ffi.NULL, 0, k, sp, size),
               V8_ERR_BAD_DIMENSION),
        "k896": (lib.v8_q6_k_x16_gemv(sel, yp, wp, xp, ffi.NULL, n, 896, sp, size),
                 V8_ERR_BAD_DIMENSION),
        "misaligned_scratch": (lib.v8_q6_k_x16_gemv(sel, yp, wp, xp, ffi.NULL, n, k, sp_odd,
                                                    size), V8_ERR_BAD_DIMENSION),
        "null_pool": (lib.v8_q6_k_x16_gemv_parallel_dispatch(ffi.NULL, sel, yp, wp, xp,
                                                             ffi.NULL, n, k, sp, size),
                      V8_ERR_BAD_THREADING),
    }
    for name, (st, expect) in raw.items():
        checks[name] = (st, bool(np.all(np.isnan(y))), expect)
    need = lib.v8_q6_k_x16_repack_bytes(n, k)
    dst = np.full(need + 64, 0x5A, np.uint8)
    dp = qx.ptr(dst, "void *")
    wpp = qx.ptr(w, "void *")
    bad_repack = {
        "repack_null_dst": (lib.v8_q6_k_x16_repack(ffi.NULL, need, wpp, n, k),
                            V8_ERR_NULL_ARGUMENT),
        "repack_null_w": (lib.v8_q6_k_x16_repack(dp, need, ffi.NULL, n, k), V8_ERR_NULL_ARGUMENT),
        "repack_short_dst": (lib.v8_q6_k_x16_repack(dp, need - 1, wpp, n, k),
                             V8_ERR_BAD_DIMENSION),
        "repack_n0": (lib.v8_q6_k_x16_repack(dp, need, wpp, 0, k), V8_ERR_BAD_DIMENSION),
        "repack_k896": (lib.v8_q6_k_x16_repack(dp, need, wpp, n, 896), V8_ERR_BAD_DIMENSION),
        "repack_null_pool": (lib.v8_q6_k_x16_repack_parallel_dispatch(ffi.NULL, dp, need, wpp,
                                                                      n, k), V8_ERR_BAD_THREADING),
    }
    for name, (st, expect) in bad_repack.items():
        checks[name] = (st, bool(np.all(dst == 0x5A)), expect)
    both = np.zeros(need + w.nbytes, np.uint8)
    both[:w.nbytes] = w.reshape(-1)
    before = both.copy()
    st = lib.v8_q6_k_x16_repack(ffi.cast("void *", both.ctypes.data + 64), need,
                                ffi.cast("void *", both.ctypes.data), n, k)
    checks["repack_overlap"] = (st, bool(np.array_equal(both, before)), V8_ERR_BAD_DIMENSION)
    assert lib.v8_q6_k_x16_repack_bytes(0, 512) == 0
    assert lib.v8_q6_k_x16_repack_bytes(16, 896) == 0
    assert lib.v8_q6_k_x16_gemv_scratch_bytes(896) == 0
    bad = {name: v for name, v in checks.items() if not (v[0] == v[2] and v[1])}
    assert not bad, bad
