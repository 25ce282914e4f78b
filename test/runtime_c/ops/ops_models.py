"""Independent numpy models of the simple-op contracts.

Each model spells out the contract's rounding points with numpy float32 /
float64 operations (one ufunc per C operation, so every step is rounded on
its own) and explicit ascending loops where the contract fixes an order;
numpy's own sum (pairwise) and dot (BLAS) are never used.  The transcendental
functions the contracts name (powf, cosf, sinf, expf, tanhf: the C library's)
are called from libm through ctypes, element by element.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

import numpy as np

_libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
for _name, _nargs in (("cosf", 1), ("sinf", 1), ("expf", 1), ("tanhf", 1), ("powf", 2),
                      ("fmaf", 3)):
    _fn = getattr(_libm, _name)
    _fn.restype = ctypes.c_float
    _fn.argtypes = [ctypes.c_float] * _nargs

F32 = np.float32


def _libm_map(name: str, x: np.ndarray) -> np.ndarray:
    fn = getattr(_libm, name)
    flat = np.asarray(x, dtype=F32).ravel()
    out = np.fromiter((fn(float(v)) for v in flat), dtype=F32, count=flat.size)
    return out.reshape(np.shape(x))


def powf(a: float, b: float) -> np.float32:
    return F32(_libm.powf(float(F32(a)), float(F32(b))))


# ---- RMSNorm / QK-norm ----------------------------------------------------------

def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """rmsnorm_fp32_fp64_sum_ascending over the last axis."""
    x = np.asarray(x, dtype=F32)
    rows = x.reshape(-1, x.shape[-1])
    n = rows.shape[1]
    sq = rows * rows                              # fp32 products
    total = np.zeros(rows.shape[0], dtype=np.float64)
    for i in range(n):                            # ascending, fp64
        total = total + sq[:, i].astype(np.float64)
    mean = (total / np.float64(n)).astype(F32)    # fp64 divide, one rounding to fp32
    scale = F32(1.0) / np.sqrt(mean + F32(eps))   # fp32 add, correctly rounded sqrt, divide
    scaled = rows * scale[:, None]                # x * scale, rounded
    return (scaled * np.asarray(w, dtype=F32)[None, :]).reshape(x.shape)


# ---- RoPE -----------------------------------------------------------------------

def theta_table(start: np.ndarray, theta_scale: np.float32, n_pairs: int) -> np.ndarray:
    """theta[..., i]: the start multiplied by theta_scale i times in fp32."""
    theta = np.asarray(start, dtype=F32)
    out = np.empty(theta.shape + (n_pairs,), dtype=F32)
    for i in range(n_pairs):
        out[..., i] = theta
        theta = theta * theta_scale
    return out


def fmaf(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """libm's fmaf element by element (one rounding of a*b + c)."""
    a, b, c = np.broadcast_arrays(np.asarray(a, F32), np.asarray(b, F32), np.asarray(c, F32))
    out = np.fromiter((_libm.fmaf(float(p), float(q), float(r))
                       for p, q, r in zip(a.ravel(), b.ravel(), c.ravel(), strict=True)),
                      dtype=F32, count=a.size)
    return out.reshape(a.shape)


def _rotate(x: np.ndarray, theta: np.ndarray, n_rot: int, neox: bool,
            fused: bool = False) -> np.ndarray:
    """x [T][H][D]; theta [T][n_rot/2] angle of each pair.  ``fused`` models a
    build that contracts the rotation into fma(a, c, -(b*s)) and fma(a, s, b*c)
    (what GCC makes of ggml's C++ with FMA enabled): not our contract, only
    used to explain an external backend's bits."""
    c = _libm_map("cosf", theta)[:, None, :]
    s = _libm_map("sinf", theta)[:, None, :]
    y = x.copy()
    half = n_rot // 2
    if neox:
        a, b = x[..., :half], x[..., half:n_rot]
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
    if fused:
        ya = fmaf(a, c, -(b * s))
        yb = fmaf(a, s, b * c)
    else:
        ya = a * c - b * s                        # two rounded products, rounded difference
        yb = a * s + b * c
    if neox:
        y[..., :half], y[..., half:n_rot] = ya, yb
    else:
        y[..., 0:n_rot:2], y[..., 1:n_rot:2] = ya, yb
    return y


def rope(x: np.ndarray, pos: np.ndarray, n_rot: int, freq_base: float, neox: bool,
         fused: bool = False) -> np.ndarray:
    x = np.asarray(x, dtype=F32)
    theta_scale = powf(freq_base, float(F32(-2.0) / F32(n_rot)))
    theta = theta_table(np.asarray(pos).astype(F32), theta_scale, n_rot // 2)
    return _rotate(x, theta, n_rot, neox, fused)


def mrope(x: np.ndarray, pos4: np.ndarray, n_rot: int, freq_base: float,
          sections: tuple[int, int, int, int], fused: bool = False) -> np.ndarray:
    """GGML_ROPE_TYPE_MROPE: neox pairs, stream chosen by sector = i % sum(sections)."""
    x = np.asarray(x, dtype=F32)
    theta_scale = powf(freq_base, float(F32(-2.0) / F32(n_rot)))
    n_pairs = n_rot // 2
    streams = theta_table(np.asarray(pos4).astype(F32), theta_scale, n_pairs)  # [4][T][pairs]
    total = sum(sections)
    bounds = np.cumsum(sections)
    sector = np.arange(n_pairs) % total
    which = np.searchsorted(bounds, sector, side="right")      # 0 t, 1 h, 2 w, 3 e
    theta = np.take_along_axis(streams, which[None, None, :].repeat(x.shape[0], 1), 0)[0]
    return _rotate(x, theta, n_rot, neox=True, fused=fused)


def rope_by_powf(x: np.ndarray, pos: np.ndarray, n_rot: int, freq_base: float,
                 neox: bool) -> np.ndarray:
    """A *different* contract (angle = pos * powf(base, -2i/n_rot)), used only as
    a negative control: the tests must be able to tell it apart."""
    x = np.asarray(x, dtype=F32)
    i = np.arange(n_rot // 2)
    inv = np.array([powf(freq_base, float(F32(-2.0) * F32(k) / F32(n_rot))) for k in i], F32)
    theta = np.asarray(pos).astype(F32)[:, None] * inv[None, :]
    return _rotate(x, theta, n_rot, neox)


# ---- embedding / linear -----------------------------------------------------------

def embedding(table: np.ndarray, ids: np.ndarray) -> np.ndarray:
    return np.asarray(table, dtype=F32)[np.asarray(ids)]


def linear(w: np.ndarray, x: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """linear_fp32_ascending_fp32_accumulate: y[m][n], one fp32 accumulator, k ascending."""
    w = np.asarray(w, dtype=F32)
    x = np.asarray(x, dtype=F32)
    acc = np.zeros((x.shape[0], w.shape[0]), dtype=F32)
    for j in range(w.shape[1]):
        prod = x[:, j][:, None] * w[:, j][None, :]   # rounded product
        acc = acc + prod                             # rounded sum
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=F32)[None, :]
    return acc


# ---- elementwise (printer-inline ops) ---------------------------------------------

def residual_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=F32) + np.asarray(b, dtype=F32)


def swiglu(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    g = np.asarray(g, dtype=F32)
    e = _libm_map("expf", -g)
    silu = g / (F32(1.0) + e)
    return silu * np.asarray(u, dtype=F32)


GELU_C = F32(0.79788456080286535587989211986876)
GELU_A = F32(0.044715)


def geglu(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    g = np.asarray(g, dtype=F32)
    inner = (GELU_C * g) * (F32(1.0) + (GELU_A * g) * g)
    t = _libm_map("tanhf", inner)
    gelu = (F32(0.5) * g) * (F32(1.0) + t)
    return gelu * np.asarray(u, dtype=F32)


# ---- comparison ----------------------------------------------------------------------

def compare(got: np.ndarray, want: np.ndarray) -> dict[str, Any]:
    """Bit-exact count plus the size of any difference (NaN == NaN by bits)."""
    g = np.ascontiguousarray(got, dtype=F32).ravel()
    w = np.ascontiguousarray(want, dtype=F32).ravel()
    same = g.view(np.uint32) == w.view(np.uint32)
    with np.errstate(invalid="ignore"):
        diff = np.abs(g.astype(np.float64) - w.astype(np.float64))
    diff = np.where(same, 0.0, diff)  # identical NaN payloads count as no error
    gi = g.view(np.int32).astype(np.int64)
    wi = w.view(np.int32).astype(np.int64)
    # ulp distance on the monotone integer line
    gi = np.where(gi < 0, -(gi & 0x7FFFFFFF), gi)
    wi = np.where(wi < 0, -(wi & 0x7FFFFFFF), wi)
    return {
        "compared": int(g.size),
        "bit_exact": int(same.sum()),
        "max_abs_err": float(np.nanmax(diff)) if diff.size and not np.isnan(diff).all()
        else (float("nan") if diff.size else 0.0),
        "max_ulp": int(np.abs(gi - wi).max()) if g.size else 0,
    }
