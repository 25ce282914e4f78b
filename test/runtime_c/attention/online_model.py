"""Independent numpy models of the online attention contracts, and a runner
for ggml's ``ggml_flash_attn_ext`` (the external oracle).

The models follow docs/NUMERICS.md and the lane trees as the contracts name them;
they share no code with the C.  Every rounding is made explicit: fp16 and fp32
values are carried in float64, where products of two fp16 (22 bits) or of an
fp16 and an fp32 (35 bits) are exact, and each declared rounding point is an
explicit, correctly rounded conversion.  A fused multiply-add is rounded once
from the exact value (see ``_round_exact``).

exp is the C library's ``expf`` (the contracts name it: ggml calls it too);
numpy's own float32 exp is a different function, so it is called via ctypes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from dataclasses import dataclass

import numpy as np

_libm = ctypes.CDLL(ctypes.util.find_library("m"))
_libm.expf.restype = ctypes.c_float
_libm.expf.argtypes = [ctypes.c_float]

F16 = np.float16
F32 = np.float32

# Lane trees of the f16 dot product (ggml_vec_dot_f16 as compiled for an ISA).
TREE_AVX2 = "avx2_f32x8x4"          # 4 accumulators x 8 fp32 lanes, FMA, step 32
TREE_AVX512 = "avx512_f32x16x4"     # 4 accumulators x 16 fp32 lanes, FMA, step 64
TREE_AVX512FP16 = "avx512fp16_f16x32x4"  # 4 accumulators x 32 fp16 lanes, fp16 FMA, step 128
# the *_fp32_dot contracts on an AVX512-FP16 CPU: TREE_AVX512 scores, fp16-lane value updates
TREE_AVX512FP16_VALUES = "avx512fp16_values_f32x16x4_dot"
TREES = (TREE_AVX2, TREE_AVX512, TREE_AVX512FP16, TREE_AVX512FP16_VALUES)


def tree_of_id() -> dict[int, str]:
    """The tree each V8_ATTN_TREE_* value of v8_attention.h names (read from the header; the
    import is here because the AVX2-ggml interpreter imports this module without v8dialect)."""
    from v8dialect.data.c_abi import constants
    c = constants(["attention/v8_attention.h"])
    return {c["V8_ATTN_TREE_AVX2_F32X8X4"]: TREE_AVX2, c["V8_ATTN_TREE_AVX512_F32X16X4"]: TREE_AVX512,
            c["V8_ATTN_TREE_AVX512FP16_F16X32X4"]: TREE_AVX512FP16,
            c["V8_ATTN_TREE_AVX512FP16_VALUES_F32X16X4_DOT"]: TREE_AVX512FP16_VALUES}


def expf(x: float) -> float:
    return float(_libm.expf(float(x)))


def expf_vec(x: np.ndarray) -> np.ndarray:
    flat = np.asarray(x, dtype=np.float64).ravel()
    out = np.fromiter((_libm.expf(v) for v in flat), dtype=np.float64, count=flat.size)
    return out.reshape(np.shape(x))


def r16(x) -> np.ndarray:
    """Round (from float64, once) to fp16, carried back in float64."""
    return np.asarray(x, dtype=np.float64).astype(F16).astype(np.float64)


def r32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).astype(F32).astype(np.float64)


def _round_exact(s: np.ndarray, e: np.ndarray, rnd) -> np.ndarray:
    """Round the exact value s + e (s = fl64(s+e), |e| tiny) with `rnd`.

    Only when s sits exactly on a rounding midpoint of the target format can
    e change the answer; then round the double next to s on e's side."""
    s = np.asarray(s, dtype=np.float64)
    e = np.asarray(e, dtype=np.float64)
    r = rnd(s)
    up = rnd(np.nextafter(s, np.inf))
    dn = rnd(np.nextafter(s, -np.inf))
    tie = (up != dn) & (e != 0)
    if np.any(tie):
        nudged = rnd(np.nextafter(s, np.where(e > 0, np.inf, -np.inf)))
        r = np.where(tie, nudged, r)
    return r


def _two_sum(a, b):
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


def fma_to(a, b, c, rnd) -> np.ndarray:
    """rnd(a*b + c) with one rounding; a*b must be exact in float64."""
    p = np.asarray(a, np.float64) * np.asarray(b, np.float64)
    s, e = _two_sum(p, np.asarray(c, np.float64))
    return _round_exact(s, e, rnd)


def fma16(a, b, c):
    return fma_to(a, b, c, r16)


def fma32(a, b, c):
    return fma_to(a, b, c, r32)


def add16(a, b):
    return r16(np.asarray(a) + np.asarray(b))  # exact in float64 for fp16 inputs


def add32(a, b):
    return r32(np.asarray(a) + np.asarray(b))  # exact in float64 for fp32 inputs in range


# ---------------------------------------------------------------- dot trees

def _tail_f64(k: np.ndarray, q: np.ndarray, start: int, acc: np.ndarray) -> np.ndarray:
    """ggml's leftover loop: exact fp32 products summed in float64, ascending."""
    for i in range(start, k.shape[-1]):
        acc = acc + k[..., i] * q[..., i]
    return acc


def dot_f16(k: np.ndarray, q: np.ndarray, tree: str) -> np.ndarray:
    """fp32 dot of fp16 vectors (float64 arrays of fp16 values), last axis."""
    d = k.shape[-1]
    shape = np.broadcast_shapes(k.shape, q.shape)[:-1]
    if tree == TREE_AVX512FP16_VALUES:
        tree = TREE_AVX512
    if tree == TREE_AVX512FP16:
        step, lanes = 128, 32
    elif tree == TREE_AVX512:
        step, lanes = 64, 16
    elif tree == TREE_AVX2:
        step, lanes = 32, 8
    else:
        raise ValueError(tree)
    np_ = d - d % step
    if np_ == 0:
        total = np.zeros(shape)
    else:
        acc = [np.zeros(shape + (lanes,)) for _ in range(4)]
        for i in range(0, np_, step):
            for j in range(4):
                sl = slice(i + j * lanes, i + (j + 1) * lanes)
                if tree == TREE_AVX512FP16:
                    acc[j] = fma16(k[..., sl], q[..., sl], acc[j])
                else:
                    acc[j] = fma32(k[..., sl], q[..., sl], acc[j])
        add = add16 if tree == TREE_AVX512FP16 else add32
        a0 = add(add(acc[0], acc[2]), add(acc[1], acc[3]))
        if tree == TREE_AVX512FP16:
            t = add(a0[..., :16], a0[..., 16:])          # 512 -> 256
            t = add(t[..., :8], t[..., 8:])              # 256 -> 128
            t = add(t, t[..., [4, 5, 6, 7, 0, 1, 2, 3]])  # lane i + lane (i+4)%8
            total = add(add(t[..., 0], t[..., 2]), add(t[..., 1], t[..., 3]))
        elif tree == TREE_AVX512:
            t = add(a0[..., :8], a0[..., 8:])
            t = add(t[..., :4], t[..., 4:])
            total = add(add(t[..., 0], t[..., 2]), add(t[..., 1], t[..., 3]))
        else:
            t = add(a0[..., :4], a0[..., 4:])
            total = add(add(t[..., 0], t[..., 1]), add(t[..., 2], t[..., 3]))
    return r32(_tail_f64(k, q, np_, total))


# ------------------------------------------------- value update (fp16 store)

def vec_scale_f16(a: np.ndarray, ms: np.ndarray, tree: str) -> np.ndarray:
    """A = r16(A * ms), per ggml_vec_scale_f16 for the ISA of `tree`."""
    d = a.shape[-1]
    ms = np.asarray(ms, np.float64)[..., None]
    out = r16(r32(a * ms))  # fp32 product, then fp16 store
    if tree in (TREE_AVX512FP16, TREE_AVX512FP16_VALUES):
        np_ = d - d % 128   # fp16 lanes: the factor is first rounded to fp16
        if np_:
            out[..., :np_] = r16(a[..., :np_] * r16(ms))
    return out


def vec_mad_f16(a: np.ndarray, v: np.ndarray, vs: np.ndarray, tree: str) -> np.ndarray:
    """A = r16(A + v * vs), per ggml_vec_mad_f16 for the ISA of `tree`."""
    d = a.shape[-1]
    vs = np.asarray(vs, np.float64)[..., None]
    out = r16(fma32(v, vs, a))  # fp32 FMA, then fp16 store
    if tree in (TREE_AVX512FP16, TREE_AVX512FP16_VALUES):
        np_ = d - d % 128   # one fp16 FMA with the factor rounded to fp16
        if np_:
            out[..., :np_] = fma16(v[..., :np_], r16(vs), a[..., :np_])
    return out


# ------------------------------------------------------------ the contracts

@dataclass
class State:
    m: np.ndarray  # fp32 running max, per row
    s: np.ndarray  # fp32 running sum
    a: np.ndarray  # accumulator (fp16 or fp32 values), per row x D


def online_f16_range(q16, k16, v16, scale, tree, lo, hi, valid):
    """The f16 single-range recurrence over keys [lo, hi) for a batch of rows.

    q16: (R, D) fp16 values; k16, v16: (R, KV, D) fp16 values (per row's KV
    head); valid: (R, KV) bool, False keys are skipped (ggml's -inf mask)."""
    rows, d = q16.shape
    st = State(np.full(rows, -np.inf), np.zeros(rows), np.zeros((rows, d)))
    if hi <= lo:
        return st
    scores = dot_f16(k16[:, lo:hi, :], q16[:, None, :], tree)  # (R, n)
    scores = r32(scores * np.float64(F32(scale)))
    for j in range(lo, hi):
        live = valid[:, j]
        if not live.any():
            continue
        s = scores[:, j - lo]
        new_max = live & (s > st.m)
        ms = np.ones(rows)
        vs = np.ones(rows)
        if new_max.any():
            ms_new = expf_vec(r32(st.m[new_max] - s[new_max]))
            ms[new_max] = ms_new
            st.a[new_max] = vec_scale_f16(st.a[new_max], ms_new, tree)
            st.m = np.where(new_max, s, st.m)
        other = live & ~new_max
        if other.any():
            vs[other] = expf_vec(r32(s[other] - st.m[other]))
        idx = np.nonzero(live)[0]
        st.a[idx] = vec_mad_f16(st.a[idx], v16[idx, j, :], vs[idx], tree)
        st.s = np.where(live, fma32(st.s, ms, vs), st.s)
    return st


def finish(st: State) -> np.ndarray:
    inv = np.where(st.s == 0, 0.0, r32(1.0 / st.s))
    return r32(st.a * inv[:, None]).astype(F32)


def _expand(q, k, v, n_head, n_head_kv, kv_len):
    """Per (row = token, head): q (T*H, D); K/V gathered per head (H, KV, D)."""
    group = n_head // n_head_kv
    kh = np.repeat(k[:, :kv_len, :], group, axis=0)
    vh = np.repeat(v[:, :kv_len, :], group, axis=0)
    return kh, vh


def f16_single_range(q, k_bits, v_bits, n_head, n_head_kv, kv_len, q_pos0, causal, scale, tree,
                     window=0):
    """f16_online_single_range; q (T, H, D) fp32; k/v (Hkv, cap, D) uint16.  window > 0
    masks keys at or more than `window` positions behind the query (llama.cpp's SWA)."""
    t, h, d = q.shape
    k16 = k_bits.view(F16).astype(np.float64)
    v16 = v_bits.view(F16).astype(np.float64)
    kh, vh = _expand(q, k16, v16, n_head, n_head_kv, kv_len)
    out = np.empty((t, h, d), F32)
    for i in range(t):
        end = q_pos0 + i + 1 if causal else kv_len
        valid = np.zeros((h, kv_len), bool)
        valid[:, :end] = True
        if window:
            valid[:, :max(0, q_pos0 + i + 1 - window)] = False
        q16 = r16(q[i].astype(np.float64))
        st = online_f16_range(q16, kh, vh, scale, tree, 0, end, valid)
        out[i] = finish(st)
    return out


def split_extent(kv_len: int) -> int:
    return (kv_len + 255) // 256 * 256


def f16_split_kv(q, k_bits, v_bits, n_head, n_head_kv, kv_len, scale, tree, workers, window=0):
    """f16_online_fp32_merge (decode: one query row at position kv_len - 1)."""
    extent = split_extent(kv_len)
    chunks = workers if extent >= 512 else 1
    if chunks == 1 and extent < 512:
        return f16_single_range(q, k_bits, v_bits, n_head, n_head_kv, kv_len,
                                kv_len - 1, True, scale, tree, window)
    _, h, d = q.shape
    k16 = k_bits.view(F16).astype(np.float64)
    v16 = v_bits.view(F16).astype(np.float64)
    kp = np.zeros((k16.shape[0], extent, d))
    vp = np.zeros_like(kp)
    kp[:, :kv_len] = k16[:, :kv_len]
    vp[:, :kv_len] = v16[:, :kv_len]
    kh, vh = _expand(q, kp, vp, n_head, n_head_kv, extent)
    valid = np.zeros((h, extent), bool)
    valid[:, :kv_len] = True
    if window:
        valid[:, :max(0, kv_len - window)] = False
    q16 = r16(q[0].astype(np.float64))
    size = (extent + chunks - 1) // chunks
    m = np.full(h, -np.inf)
    s = np.zeros(h)
    o = np.zeros((h, d))
    for c in range(chunks):
        lo = c * size
        if lo >= extent:
            continue
        st = online_f16_range(q16, kh, vh, scale, tree, lo, min(lo + size, extent), valid)
        for r in range(h):
            if st.s[r] == 0:
                continue
            m_new = max(m[r], st.m[r])
            a = expf(r32(m[r] - m_new))
            b = expf(r32(st.m[r] - m_new))
            o[r] = fma32(o[r], a, r32(st.a[r] * b))
            s[r] = fma32(s[r], a, r32(st.s[r] * b))
            m[r] = m_new
    inv = np.where(s == 0, 1.0, r32(1.0 / np.where(s == 0, 1.0, s)))
    res = np.where(s[:, None] == 0, o, r32(o * inv[:, None]))
    return res.astype(F32)[None]


# ------------------------------------------------------------ ggml runner

def ggml_available() -> str | None:
    """None when ggml can be used, else the reason it cannot."""
    try:
        import ggml  # noqa: F401
    except Exception as exc:  # pragma: no cover - environment dependent
        return f"ggml-python not importable: {exc}"
    return None


class GgmlFlashAttn:
    """ggml_flash_attn_ext with F16 K/V, GGML_PREC_F32, an f16 mask hiding
    positions >= valid KV, and the K/V tensors padded to a multiple of 256
    (the length ggml's split-KV decision looks at), as llama.cpp does."""

    def __init__(self, mem_bytes: int = 512 << 20):
        import ggml
        self.g = ggml
        self.mem_bytes = mem_bytes

    def run(self, q, k_bits, v_bits, n_head_kv, kv_len, q_pos0, causal, scale,
            n_threads, pad_to=256, repeats=1, timings=None, window=0):
        g = self.g
        t, h, d = q.shape
        kv_pad = (kv_len + pad_to - 1) // pad_to * pad_to
        params = g.ggml_init_params(mem_size=self.mem_bytes, mem_buffer=None, no_alloc=False)
        ctx = g.ggml_init(params)
        try:
            tq = g.ggml_new_tensor_3d(ctx, g.GGML_TYPE_F32, d, t, h)
            tk = g.ggml_new_tensor_3d(ctx, g.GGML_TYPE_F16, d, kv_pad, n_head_kv)
            tv = g.ggml_new_tensor_3d(ctx, g.GGML_TYPE_F16, d, kv_pad, n_head_kv)
            tm = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F16, kv_pad, t)
            qa = _as_array(g, tq, np.float32, (h, t, d))
            qa[...] = np.transpose(q, (1, 0, 2))
            ka = _as_array(g, tk, np.uint16, (n_head_kv, kv_pad, d))
            va = _as_array(g, tv, np.uint16, (n_head_kv, kv_pad, d))
            ka[...] = 0
            va[...] = 0
            ka[:, :kv_len] = k_bits[:, :kv_len]
            va[:, :kv_len] = v_bits[:, :kv_len]
            ma = _as_array(g, tm, np.float16, (t, kv_pad))
            ma[...] = np.float16(-np.inf)
            for i in range(t):
                end = q_pos0 + i + 1 if causal else kv_len
                ma[i, :end] = 0
                if window:  # llama.cpp's SWA: hidden when (q_pos0 + i) - key >= window
                    ma[i, :max(0, q_pos0 + i + 1 - window)] = np.float16(-np.inf)
            out = g.ggml_flash_attn_ext(ctx, tq, tk, tv, tm, float(scale), 0.0, 0.0)
            g.ggml_flash_attn_ext_set_prec(out, g.GGML_PREC_F32)
            gf = g.ggml_new_graph(ctx)
            g.ggml_build_forward_expand(gf, out)
            import time
            for _ in range(repeats):
                t0 = time.perf_counter()
                g.ggml_graph_compute_with_ctx(ctx, gf, n_threads)
                if timings is not None:
                    timings.append(time.perf_counter() - t0)
            # out: ne = (D, H, T) -> numpy [T][H][D]
            res = _as_array(g, out, np.float32, (t, h, d)).copy()
        finally:
            g.ggml_free(ctx)
        return res


def _as_array(g, tensor, dtype, shape):
    ptr = g.ggml_get_data(tensor)
    n = int(np.prod(shape))
    buf = (ctypes.c_char * (n * np.dtype(dtype).itemsize)).from_address(ptr)
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


# ------------------------------------------------------------ C build

ONLINE_SOURCES = ("attention/online.c",)

def build_online(extra_sources=(), extra_cdef="", name="v8_attn_online", extra_headers=()):
    """online.c with v8_attention.h declared from the header; callers that add sources (and
    include their headers) add those declarations as extra_cdef."""
    from v8dialect.runtime.cbuild import RUNTIME_CORE_SOURCES, CBuild, build, runtime_cdef
    includes = "".join(f'#include "{h}"\n' for h in ("attention/v8_attention.h", *extra_headers))
    return build(CBuild(name=name, cdef=runtime_cdef("attention/v8_attention.h") + extra_cdef,
                        source=includes,
                        runtime_sources=RUNTIME_CORE_SOURCES + ONLINE_SOURCES + tuple(extra_sources)))


class Online:
    """Thin caller of the online providers over numpy arrays."""

    def __init__(self, mod=None):
        self.mod = mod or build_online()
        self.ffi, self.lib = self.mod.ffi, self.mod.lib
        self._pools = {}

    def pool(self, workers):
        if workers not in self._pools:
            self._pools[workers] = self.lib.v8_threadpool_create(workers)
        return self._pools[workers]

    def call(self, fn, contract, q, k, v, n_head_kv, kv_len, q_pos0, causal, scale,
             *lead, out=None, scratch_bytes=None, window=0):
        t, h, d = q.shape
        cap = k.shape[1]
        out = np.full((t, h, d), np.nan, np.float32) if out is None else out
        if scratch_bytes is None:
            scratch_bytes = int(self.lib.v8_attn_online_split_scratch_bytes(t, h, d, 256))
        scratch = self.ffi.new("char[]", max(scratch_bytes, 1))
        f = self.ffi.cast("float *", out.ctypes.data)
        st = getattr(self.lib, fn)(*lead, contract, f, self.ffi.cast("float *", q.ctypes.data),
                                   self.ffi.cast("void *", k.ctypes.data),
                                   self.ffi.cast("void *", v.ctypes.data), t, h, n_head_kv, d,
                                   kv_len, cap, q_pos0, causal, window, scale, scratch,
                                   scratch_bytes)
        return st, out


# ------------------------------------------- fp32-accumulator contracts

def _dot_f32x8(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """8 fp32 lanes, lane l takes elements d = l (mod 8) by FMA ascending;
    then u_i = l_i + l_(i+4) and (u0 + u2) + (u1 + u3).  q (D,), k (n, D)."""
    n, d = k.shape
    lanes = np.zeros((n, 8))
    for i in range(0, d, 8):
        lanes = fma32(k[:, i:i + 8], q[None, i:i + 8], lanes)
    u = add32(lanes[:, :4], lanes[:, 4:])
    return add32(add32(u[:, 0], u[:, 2]), add32(u[:, 1], u[:, 3]))


def f32_online(q, k, v, n_head, n_head_kv, kv_len, q_pos0, causal, scale, kv_is_f16):
    """fp32_online (fp32 K/V) or f16_kv_fp32_online (K/V stored fp16, widened)."""
    t, h, d = q.shape
    kk = (k.view(F16) if kv_is_f16 else k).astype(np.float64)
    vv = (v.view(F16) if kv_is_f16 else v).astype(np.float64)
    group = n_head // n_head_kv
    out = np.empty((t, h, d), F32)
    sc = np.float64(F32(scale))
    for i in range(t):
        end = q_pos0 + i + 1 if causal else kv_len
        for hh in range(h):
            kh = kk[hh // group, :end]
            vh = vv[hh // group, :end]
            s_all = r32(_dot_f32x8(q[i, hh].astype(np.float64), kh) * sc)
            m, s, a = -np.inf, 0.0, np.zeros(d)
            for j in range(end):
                sj = s_all[j]
                ms = vs = 1.0
                if sj > m:
                    ms = expf(r32(m - sj))
                    m = sj
                    a = r32(a * ms)
                else:
                    vs = expf(r32(sj - m))
                a = fma32(vh[j], vs, a)
                s = float(fma32(s, ms, vs))
            inv = 0.0 if s == 0 else float(r32(1.0 / s))
            out[i, hh] = r32(a * inv)
    return out
