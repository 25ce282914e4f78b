"""Independent numpy models of the tiled-prefill and llama-regular attention
contracts, plus a runner for ggml's own operators (the external oracle).

Written from docs/NUMERICS.md and from the arithmetic ggml's CPU backend performs
(ops.cpp tiled flash attention, vec.cpp soft_max, vec.h expf), not from our C.
numpy has no fused multiply-add, so ``fma32`` builds a correctly rounded one
from float64 arithmetic with round-to-odd (exact product, exact sum error,
then one rounding to float32).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from dataclasses import dataclass

import numpy as np

F32 = np.float32
F64 = np.float64
Q_TILE = 64
KV_TILE = 64


# ---- exact float32 primitives ------------------------------------------------

def fma32(a, b, c):
    """float32 fma(a, b, c) with a single rounding (round-to-nearest-even)."""
    a = np.asarray(a, F32).astype(F64)
    b = np.asarray(b, F32).astype(F64)
    c = np.asarray(c, F32).astype(F64)
    p = a * b                       # exact: 24 x 24 bits fit in 53
    s = p + c
    # TwoSum error of s = p + c (exact), then round-to-odd: an inexact s with
    # an even last bit moves one ulp toward the true value.  A float64 rounded
    # to odd carries enough bits for a correct final rounding to float32.
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    with np.errstate(invalid="ignore"):
        bits = s.view(np.int64)
        fix = (err != 0) & ((bits & 1) == 0) & np.isfinite(s)
    if np.any(fix):
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s.astype(F32)


def HX(s):
    """A C99 hex-float constant as float32."""
    return F32(float.fromhex(s))


_R = F32(HX("0x1.8p23"))


def expf_ggml512(x):
    """ggml_v_expf, AVX-512 form: Cody-Waite reduction, degree-5 polynomial
    that includes the leading 1, then scalef(j, n) (exact scaling, one rounding)."""
    x = np.asarray(x, F32)
    with np.errstate(invalid="ignore", over="ignore"):
        z = fma32(x, F32(HX("0x1.715476p+0")), _R)
        n = (z - _R).astype(F32)
        b = fma32(-n, F32(HX("0x1.7f7d1cp-20")), fma32(-n, F32(HX("0x1.62e4p-1")), x))
        u = (b * b).astype(F32)
        j = fma32(fma32(fma32(F32(HX("0x1.0e4020p-7")), b, F32(HX("0x1.573e2ep-5"))), u,
                        fma32(F32(HX("0x1.555e66p-3")), b, F32(HX("0x1.fffdb6p-2")))),
                  u, fma32(F32(HX("0x1.ffffecp-1")), b, F32(1.0)))
        nn = np.where(np.isfinite(n), n, 0).astype(np.int64)
        res = np.ldexp(j.astype(F64), np.clip(nn, -300, 300)).astype(F32)
        big = ~(np.abs(n) <= F32(192))           # NaN compares false: counts as big
        alt = np.where(n <= 0, F32(0), F32(np.inf)).astype(F32)
        return np.where(big, alt, res).astype(F32)


def expf_ggml256(x):
    """ggml_v_expf, AVX2 form (llama.cpp's AVX2 build): the same reduction, a polynomial
    without the leading 1, k = 2^n built from the exponent bits of z, result k + k*j;
    126 < |n| <= 192 splits the scale into s2 = 2^n / s1 and s1 = 2^+-126-ish factors,
    |n| > 192 gives s1 * s1 (0 or +inf)."""
    x = np.asarray(x, F32)
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        z = fma32(x, HX("0x1.715476p+0"), _R)
        n = (z - _R).astype(F32)
        b = fma32(-n, HX("0x1.7f7d1cp-20"), fma32(-n, HX("0x1.62e4p-1"), x))
        e = (z.view(np.uint32) << np.uint32(23)).astype(np.uint32)
        k = (e + np.uint32(0x3F800000)).astype(np.uint32).view(F32)
        u = (b * b).astype(F32)
        j = fma32(fma32(fma32(HX("0x1.0e4020p-7"), b, HX("0x1.573e2ep-5")), u,
                        fma32(HX("0x1.555e66p-3"), b, HX("0x1.fffdb6p-2"))),
                  u, (HX("0x1.ffffecp-1") * b).astype(F32))
        plain = fma32(k, j, k)
        g = np.where(n <= 0, np.uint32(0x82000000), np.uint32(0)).astype(np.uint32)
        s1 = (g + np.uint32(0x7F000000)).astype(np.uint32).view(F32)
        s2 = (e - g).astype(np.uint32).view(F32)
        split = (fma32(s2, j, s2) * s1).astype(F32)
        absn = np.abs(n)
        out = np.where(absn > F32(126), split, plain)
        return np.where(absn > F32(192), (s1 * s1).astype(F32), out).astype(F32)


_LIBM = ctypes.CDLL(ctypes.util.find_library("m"))
_LIBM.expf.restype = ctypes.c_float
_LIBM.expf.argtypes = [ctypes.c_float]


def libm_expf(x):
    """The C library's expf, element by element (the rescale factor ggml computes
    with the scalar expf; numpy's own float32 exp is a different approximation)."""
    x = np.asarray(x, F32)
    return np.array([_LIBM.expf(float(t)) for t in x.ravel()], F32).reshape(x.shape)


def reduce16(v):
    """_mm512_reduce_add_ps tree over the last axis (16 lanes)."""
    v = np.asarray(v, F32)
    a = (v[..., 8:16] + v[..., 0:8]).astype(F32)
    b = (a[..., 4:8] + a[..., 0:4]).astype(F32)
    c0 = (b[..., 0] + b[..., 2]).astype(F32)
    c1 = (b[..., 1] + b[..., 3]).astype(F32)
    return (c0 + c1).astype(F32)


def reduce8(v):
    """ggml_vec_soft_max_f32's AVX2 horizontal sum of 8 lanes (high + low 128-bit halves,
    movehl, movehdup): (a0 + a2) + (a1 + a3) with a_i = v[i+4] + v[i]."""
    v = np.asarray(v, F32)
    a = (v[..., 4:8] + v[..., 0:4]).astype(F32)
    c0 = (a[..., 0] + a[..., 2]).astype(F32)
    c1 = (a[..., 1] + a[..., 3]).astype(F32)
    return (c0 + c1).astype(F32)


# ---- f16_kv_tiled64_fp32_softmax_fp64_sum_update (and its 8-lane twin) -----------

def tiled_attention(q, k16, v16, kv_len, q_pos0, causal, scale, n_head_kv, lanes=16, window=0):
    """q [n_q][H][D] fp32; k16, v16 [Hkv][cap][D] float16.  Returns [n_q][H][D] fp32.
    lanes=16: llama.cpp's AVX-512 build (as below); lanes=8: its AVX2 build, where the
    exp is expf_ggml256 and the tile sum runs over 8 groups of 8 keys with reduce8.

    Per (head, query row) and per 64-key tile starting at key 0:
      s = fma chain over d (ascending, from 0) of q[d]*k[d]; s *= scale
      masked / padded keys -> -inf; a row whose tile is all -inf skips the tile
      Mn = max(M, tile max); if Mn > M: A *= expf(M - Mn), S *= expf(M - Mn)
      p = expf_ggml512(s - Mn);  S = f32(f64(S) + sum_g f64(reduce16(p[16g:16g+16])))
      A[d] = fma chain over the 64 keys of p*v[d], continuing from A
    out = A * (1 / S)
    """
    n_q, n_head, d = q.shape
    group = n_head // n_head_kv
    scale = F32(scale)
    out = np.zeros_like(q, dtype=F32)
    rows = np.arange(n_q)
    last = (q_pos0 + rows) if causal else np.full(n_q, kv_len - 1)  # last visible key
    n_tiles = (kv_len + KV_TILE - 1) // KV_TILE
    for h in range(n_head):
        kf = k16[h // group, :kv_len].astype(F32)
        vf = v16[h // group, :kv_len].astype(F32)
        qh = q[:, h, :].astype(F32)
        M = np.full(n_q, -np.inf, F32)
        S = np.zeros(n_q, F32)
        A = np.zeros((n_q, d), F32)
        for t in range(n_tiles):
            k0 = t * KV_TILE
            kt = np.zeros((KV_TILE, d), F32)
            vt = np.zeros((KV_TILE, d), F32)
            nk = min(KV_TILE, kv_len - k0)
            kt[:nk] = kf[k0:k0 + nk]
            vt[:nk] = vf[k0:k0 + nk]
            s = np.zeros((n_q, KV_TILE), F32)
            for i in range(d):
                s = fma32(qh[:, i:i + 1], kt[None, :, i], s)
            s = (s * scale).astype(F32)
            keys = k0 + np.arange(KV_TILE)
            visible = (keys[None, :] <= last[:, None]) & (keys[None, :] < kv_len)
            if window:  # llama.cpp's SWA: hidden when the query is window or more ahead
                visible &= last[:, None] - keys[None, :] < window
            s = np.where(visible, s, F32(-np.inf)).astype(F32)
            tmax = s.max(axis=1)
            live = tmax != -np.inf
            Mn = np.maximum(M, tmax).astype(F32)
            grow = live & (Mn > M)
            ms = np.ones(n_q, F32)
            ms[grow] = libm_expf((M - Mn)[grow].astype(F32))
            A = np.where(grow[:, None], (A * ms[:, None]).astype(F32), A)
            S = np.where(grow, (S * ms).astype(F32), S)
            M = np.where(live, Mn, M).astype(F32)
            exp, tree = (expf_ggml512, reduce16) if lanes == 16 else (expf_ggml256, reduce8)
            with np.errstate(invalid="ignore"):
                p = exp((s - M[:, None]).astype(F32))
            p = np.where(live[:, None], p, F32(0)).astype(F32)
            tsum = np.zeros(n_q, F64)
            for g in range(KV_TILE // lanes):
                tsum = tsum + tree(p[:, lanes * g:lanes * (g + 1)]).astype(F64)
            S = np.where(live, (S.astype(F64) + tsum).astype(F32), S)
            for j in range(KV_TILE):
                A = fma32(p[:, j:j + 1], vt[None, j, :], A)
        inv = np.where(S == 0, F32(0), (F32(1) / np.where(S == 0, F32(1), S)).astype(F32))
        out[:, h, :] = (A * inv[:, None]).astype(F32)
    return out


# ---- inputs -------------------------------------------------------------------

@dataclass
class AttnCase:
    q: np.ndarray        # [n_q][H][D] fp32
    k16: np.ndarray      # [Hkv][cap][D] float16
    v16: np.ndarray
    kv_len: int
    q_pos0: int
    causal: bool
    scale: float
    window: int = 0  # sliding window (0: none)

    @property
    def n_q(self) -> int:
        return self.q.shape[0]

    @property
    def n_head(self) -> int:
        return self.q.shape[1]

    @property
    def n_head_kv(self) -> int:
        return self.k16.shape[0]

    @property
    def head_dim(self) -> int:
        return self.q.shape[2]

    @property
    def capacity(self) -> int:
        return self.k16.shape[1]


def make_case(seed, n_q, past, n_head, n_head_kv, d, causal=True, extra_cap=7, kv_len=None,
              v_mult=1.0, window=0):
    """Random normal inputs whose rows span magnitudes (per-row scale 2^[-3, 3])."""
    rng = np.random.default_rng(seed)
    kv = kv_len if kv_len is not None else past + n_q
    cap = kv + extra_cap
    qs = np.exp2(rng.uniform(-3, 3, size=(n_q, n_head, 1)))
    q = (rng.standard_normal((n_q, n_head, d)) * qs).astype(F32)
    ks = np.exp2(rng.uniform(-2, 2, size=(n_head_kv, cap, 1)))
    k = (rng.standard_normal((n_head_kv, cap, d)) * ks).astype(np.float16)
    v = (rng.standard_normal((n_head_kv, cap, d)) * v_mult).astype(np.float16)
    return AttnCase(q, k, v, kv, past, causal, float(F32(1.0 / np.sqrt(d))), window)


# ---- ggml (external oracle) ---------------------------------------------------

def ggml_python_build() -> str:
    """The x86 build class ("avx512", "avx2", "other") of ggml-python's libggml, the
    backend ggml_flash_attn compares against (as GgmlOps.build for llama.cpp's)."""
    import ggml
    if ggml.ggml_cpu_has_avx512():
        return "avx512"
    return "avx2" if ggml.ggml_cpu_has_avx2() else "other"


def _ggml_ctx(mem_bytes):
    import ggml
    params = ggml.ggml_init_params(mem_size=mem_bytes, mem_buffer=None, no_alloc=False)
    return ggml.ggml_init(params)


def _mask(case: AttnCase, n_kv_pad: int, n_rows: int) -> np.ndarray:
    """f16 mask [n_rows][n_kv_pad]: 0 where visible, -inf elsewhere (padding included)."""
    mask = np.full((n_rows, n_kv_pad), -np.inf, np.float16)
    for i in range(case.n_q):
        end = case.q_pos0 + i + 1 if case.causal else case.kv_len
        mask[i, :end] = 0
        if case.window:  # llama.cpp's SWA: hidden when the query is window or more ahead
            mask[i, :max(0, case.q_pos0 + i + 1 - case.window)] = -np.inf
    return mask


def ggml_flash_attn(case: AttnCase, n_threads: int, pad: int = 256) -> np.ndarray:
    """ggml_flash_attn_ext with F16 K/V padded to a multiple of ``pad`` (as llama.cpp's
    cache), an f16 mask hiding the padding (and the future when causal),
    GGML_PREC_F32.  Returns [n_q][H][D] fp32."""
    import ggml
    import ggml.utils as gu
    n_kv_pad = -(-case.kv_len // pad) * pad
    d, hkv = case.head_dim, case.n_head_kv
    kp = np.zeros((hkv, n_kv_pad, d), np.float16)
    vp = np.zeros((hkv, n_kv_pad, d), np.float16)
    n_real = min(n_kv_pad, case.capacity)
    kp[:, :n_real] = case.k16[:, :n_real]     # beyond kv_len: cache garbage, masked
    vp[:, :n_real] = case.v16[:, :n_real]
    n_rows = -(-case.n_q // 64) * 64
    mask = _mask(case, n_kv_pad, n_rows)
    qh = np.ascontiguousarray(case.q.transpose(1, 0, 2))  # [H][n_q][D]
    need = (qh.nbytes + kp.nbytes + vp.nbytes + mask.nbytes + case.q.nbytes) * 2 + (64 << 20)
    need += n_threads * 4 * (64 * d * 4 + 64 * 64 * 2 + 64 * 64) * 4
    ctx = _ggml_ctx(need)
    try:
        tq = gu.from_numpy(qh, ctx)
        tk = gu.from_numpy(kp, ctx)
        tv = gu.from_numpy(vp, ctx)
        tm = gu.from_numpy(mask, ctx)
        out = ggml.ggml_flash_attn_ext(ctx, tq, tk, tv, tm, ctypes.c_float(case.scale), 0.0, 0.0)
        ggml.ggml_flash_attn_ext_set_prec(out, ggml.GGML_PREC_F32)
        gf = ggml.ggml_new_graph(ctx)
        ggml.ggml_build_forward_expand(gf, out)
        ggml.ggml_graph_compute_with_ctx(ctx, gf, n_threads)
        res = gu.to_numpy(out).reshape(case.n_q, case.n_head, d).copy()
    finally:
        ggml.ggml_free(ctx)
    return res


# ---- the C providers under test (cffi) ------------------------------------------

def _attention_constants() -> dict[str, int]:
    from v8dialect.data.c_abi import constants
    return constants(["attention/v8_attention.h"])


SELECTORS = {name: _attention_constants()[f"V8_ATTN_{name.upper()}"] for name in (
    "fp32_llama_regular",
    "f16_online_single_range",
    "f16_kv_tiled64_fp32_softmax_fp64_sum_update",
    "f16_flash_auto_qtile64",
    "f16_online_single_range_fp32_dot",
    "f16_online_fp32_merge_fp32_dot",
    "f16_flash_auto_qtile64_fp32_dot",
    "f16_kv_tiled64_fp32_softmax_fp64_sum_update_8_lane_vexp",
    "f16_flash_auto_qtile64_fp32_dot_8_lane",
)}


def _tiled_cdef(*prefixes: str, also: tuple[str, ...] = ()) -> str:
    """The runtime core and the v8_attention_tiled.h providers named by prefix (and `also`)."""
    from v8dialect.runtime.cbuild import runtime_cdef
    return runtime_cdef("attention/v8_attention_tiled.h",
                        functions=lambda name: name.startswith(prefixes) or name in also)


def build_llama_regular():
    from v8dialect.runtime.cbuild import RUNTIME_CORE_SOURCES, CBuild, build
    return build(CBuild(name="v8_attn_llama_regular_test",
                        cdef=_tiled_cdef("v8_attn_llama_regular"),
                        source='#include "attention/v8_attention_tiled.h"\n',
                        runtime_sources=tuple(RUNTIME_CORE_SOURCES) + ("attention/llama_regular.c",)))


def build_lib(with_online: bool = False):
    """Compile runtime core + our attention sources (and the single-range provider
    the auto composite dispatches to); returns the cffi module."""
    from v8dialect.data.c_abi import declared_in
    from v8dialect.runtime.cbuild import RUNTIME_CORE_SOURCES, CBuild, build
    sources = list(RUNTIME_CORE_SOURCES) + ["attention/tiled.c"]
    cdef = _tiled_cdef("v8_attn_tiled")
    if with_online:
        sources += ["attention/online.c", "attention/tiled_auto.c"]
        cdef = _tiled_cdef("v8_attn_tiled", "v8_attn_auto", also=tuple(declared_in("attention/v8_attention.h")))
    return build(CBuild(name="v8_attn_tiled_test" + ("_auto" if with_online else ""), cdef=cdef,
                        source='#include "attention/v8_attention_tiled.h"\n',
                        runtime_sources=tuple(sources)))


class Runner:
    """Calls one provider's oracle / production / threadpool function on an AttnCase."""

    def __init__(self, mod, prefix: str, contract: str):
        self.mod, self.ffi, self.lib = mod, mod.ffi, mod.lib
        self.prefix = prefix
        self.selector = SELECTORS[contract]

    def _args(self, case: AttnCase, out, workers: int, scratch_override=None):
        ffi = self.ffi
        nbytes = getattr(self.lib, self.prefix + "_scratch_bytes")(
            case.n_q, case.n_head, case.head_dim, workers)
        scratch = ffi.new("char[]", max(int(nbytes), 1))
        keep = [scratch, case]
        args = [self.selector, ffi.cast("float *", ffi.from_buffer(out)),
                ffi.cast("const float *", ffi.from_buffer(case.q)),
                ffi.cast("const void *", ffi.from_buffer(case.k16)),
                ffi.cast("const void *", ffi.from_buffer(case.v16)),
                case.n_q, case.n_head, case.n_head_kv, case.head_dim, case.kv_len, case.capacity,
                case.q_pos0, int(case.causal), case.window, case.scale, scratch, int(nbytes)]
        return args, keep

    def run(self, kind: str, case: AttnCase, workers: int = 1, pool=None, selector=None):
        out = np.full(case.q.shape, np.nan, F32)
        args, keep = self._args(case, out, workers)
        if selector is not None:
            args[0] = selector
        if kind == "ref":
            st = getattr(self.lib, self.prefix + "_ref")(*args)
        elif kind == "prod":
            st = getattr(self.lib, self.prefix)(*args)
        else:
            st = getattr(self.lib, self.prefix + "_parallel_dispatch")(pool, *args)
        del keep
        return st, out


def bits_equal(a, b) -> bool:
    return a.shape == b.shape and np.array_equal(np.asarray(a, F32).view(np.uint32),
                                                 np.asarray(b, F32).view(np.uint32))


def mismatch(a, b):
    """(number of differing elements, max abs error) between two float32 arrays."""
    a = np.asarray(a, F32)
    b = np.asarray(b, F32)
    diff = a.view(np.uint32) != b.view(np.uint32)
    err = float(np.max(np.abs(a.astype(F64) - b.astype(F64)))) if a.size else 0.0
    return int(diff.sum()), err


# ---- fp32_llama_regular ----------------------------------------------------------

def llama_regular(q, k16, v16, kv_len, q_pos0, causal, scale, n_head_kv, window=0):
    """The regular (non-flash) path with this provider's declared dot orders
    (sequential fma chains): q rounded to fp16; scores fp32; soft_max as ggml's
    (scale, mask, max, exp16, 16-key sum tree in fp64, fp64 reciprocal); the
    probabilities rounded to fp16; P.V as an fp32 fma chain over keys."""
    n_q, n_head, d = q.shape
    group = n_head // n_head_kv
    scale = F32(scale)
    out = np.zeros_like(q, dtype=F32)
    q16 = q.astype(np.float16).astype(F32)
    for h in range(n_head):
        kf = k16[h // group, :kv_len].astype(F32)
        vf = v16[h // group, :kv_len].astype(F32)
        s = np.zeros((n_q, kv_len), F32)
        for i in range(d):
            s = fma32(q16[:, h, i:i + 1], kf[None, :, i], s)
        w = (s * scale).astype(F32)
        rows = np.arange(n_q)
        end = (q_pos0 + rows + 1) if causal else np.full(n_q, kv_len)
        keys = np.arange(kv_len)[None, :]
        seen = keys < end[:, None]
        if window:  # llama.cpp's SWA: hidden when the query is window or more ahead
            seen &= keys > (end[:, None] - 1 - window)
        w = np.where(seen, w, F32(-np.inf)).astype(F32)
        m = w.max(axis=1)
        p = expf_ggml512((w - m[:, None]).astype(F32))
        pad = -(-kv_len // 16) * 16
        pp = np.zeros((n_q, pad), F32)
        pp[:, :kv_len] = p
        tot = np.zeros(n_q, F64)
        for g in range(pad // 16):
            tot = tot + reduce16(pp[:, 16 * g:16 * g + 16]).astype(F64)
        inv = (1.0 / tot).astype(F32)
        p16 = (p * inv[:, None]).astype(F32).astype(np.float16).astype(F32)
        acc = np.zeros((n_q, d), F32)
        for j in range(kv_len):
            acc = fma32(p16[:, j:j + 1], vf[None, j, :], acc)
        out[:, h, :] = acc
    return out


def ggml_regular(case: AttnCase, n_threads: int, pad: int = 256) -> np.ndarray:
    """llama.cpp's non-flash graph: mul_mat(K f16, Q) -> soft_max_ext(mask f16, scale)
    -> mul_mat(V^T f16, P) (P converted to fp16 by mul_mat).  Returns [n_q][H][D]."""
    import ggml
    import ggml.utils as gu
    n_kv_pad = -(-case.kv_len // pad) * pad
    d, hkv = case.head_dim, case.n_head_kv
    kp = np.zeros((hkv, n_kv_pad, d), np.float16)
    n_real = min(n_kv_pad, case.capacity)
    kp[:, :n_real] = case.k16[:, :n_real]
    vt = np.zeros((hkv, d, n_kv_pad), np.float16)
    vt[:, :, :n_real] = case.v16[:, :n_real].transpose(0, 2, 1)
    mask = _mask(case, n_kv_pad, -(-case.n_q // 64) * 64)
    qh = np.ascontiguousarray(case.q.transpose(1, 0, 2))
    need = 4 * (qh.nbytes + kp.nbytes + vt.nbytes + mask.nbytes
                + 2 * case.n_q * case.n_head * n_kv_pad * 4) + (64 << 20)
    ctx = _ggml_ctx(need)
    try:
        tq, tk, tv, tm = (gu.from_numpy(x, ctx) for x in (qh, kp, vt, mask))
        kq = ggml.ggml_mul_mat(ctx, tk, tq)
        kq = ggml.ggml_soft_max_ext(ctx, kq, tm, ctypes.c_float(case.scale), 0.0)
        kqv = ggml.ggml_mul_mat(ctx, tv, kq)
        gf = ggml.ggml_new_graph(ctx)
        ggml.ggml_build_forward_expand(gf, kqv)
        ggml.ggml_graph_compute_with_ctx(ctx, gf, n_threads)
        res = gu.to_numpy(kqv).reshape(case.n_head, case.n_q, d).transpose(1, 0, 2).copy()
    finally:
        ggml.ggml_free(ctx)
    return res
