"""An independent numpy model of the tiled K-quant x Q8_K prefill arithmetic
(contracts/quantized_linear_tiled.json), written from the block formats and the
contract text, sharing no code with the C provider.

Per output (token t, weight row r) and super-block b, ascending in b:

    Q4_K  S1 = sum_g sc_g * sum_e q4 * q8          (exact integers)
          S2 = sum_g mn_g * (bsum_{2g} + bsum_{2g+1})
          v  = fma(-dmin, f32(S2), f32(f32(S1) * d))
    Q5_K  as Q4_K with the 5-bit codes
    Q6_K  S1 = sum_s sc_s * sum_e (q6 - 32) * q8
          v  = f32(f32(S1) * d)
    acc   = fma(v, x.d, acc)                        (acc starts at +0.0)

f32(n) of an integer rounds to nearest even (numpy's int -> float32 cast);
fma is evaluated exactly: the product of two fp32 values is exact in fp64, the
sum is rounded to fp64 with round-to-odd (two-sum error term), then to fp32,
which is the correctly rounded fused result.
"""

from __future__ import annotations

import numpy as np

QK_K = 256
BLOCK_BYTES = {"q4_k": 144, "q5_k": 176, "q6_k": 210}


# ---- Q8_K activation quantizer ------------------------------------------------

def q8_k(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of x [m, k] -> (d [m, nb] fp32, q [m, k] int8, bsums [m, k/16] int32).

    Per block: mx = the signed value of largest magnitude (first on ties),
    iscale = -127/mx, q = min(127, rint(iscale*x)), d = 1/iscale; zero block -> zeros."""
    m, k = x.shape
    blocks = x.reshape(-1, QK_K).astype(np.float32)
    idx = np.argmax(np.abs(blocks), axis=1)
    mx = blocks[np.arange(blocks.shape[0]), idx]
    zero = mx == 0
    safe = np.where(zero, np.float32(1), mx).astype(np.float32)
    iscale = np.where(zero, np.float32(0), np.float32(-127.0) / safe).astype(np.float32)
    q = np.minimum(np.rint(iscale[:, None] * blocks), 127).astype(np.int8)
    safe_i = np.where(zero, np.float32(1), iscale).astype(np.float32)
    d = np.where(zero, np.float32(0), np.float32(1) / safe_i).astype(np.float32)
    bsums = q.reshape(-1, 16, 16).astype(np.int32).sum(axis=2)
    return d.reshape(m, k // QK_K), q.reshape(m, k), bsums.reshape(m, k // 16)


# ---- weight decoding: integer codes and integer scales -------------------------

def _f16(raw: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(raw).view(np.float16).astype(np.float32).reshape(raw.shape[:-1])


def _q4k_scales(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = s.astype(np.int64)
    sc = np.empty(s.shape[:-1] + (8,), np.int64)
    mn = np.empty_like(sc)
    sc[..., :4] = s[..., 0:4] & 63
    mn[..., :4] = s[..., 4:8] & 63
    sc[..., 4:] = (s[..., 8:12] & 15) | ((s[..., 0:4] >> 6) << 4)
    mn[..., 4:] = (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)
    return sc, mn


def decode(fmt: str, w: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """Raw weight rows [n, row bytes] -> codes [n, nb, 256] (Q6_K minus 32), per-group
    integer scales (and mins), fp32 d (and dmin) per super-block."""
    n = w.shape[0]
    nb = k // QK_K
    b = w.reshape(n, nb, BLOCK_BYTES[fmt])
    if fmt in ("q4_k", "q5_k"):
        d, dmin = _f16(b[..., 0:2]), _f16(b[..., 2:4])
        sc, mn = _q4k_scales(b[..., 4:16])
        qs = b[..., 16:144] if fmt == "q4_k" else b[..., 48:176]
        codes = np.empty((n, nb, QK_K), np.int64)
        for j in range(4):                      # 64-element chunks
            chunk = qs[..., 32 * j:32 * j + 32].astype(np.int64)
            codes[..., 64 * j:64 * j + 32] = chunk & 15
            codes[..., 64 * j + 32:64 * j + 64] = chunk >> 4
        if fmt == "q5_k":
            qh = b[..., 16:48].astype(np.int64)
            for j in range(8):                  # 32-element group j takes bit j of qh[l]
                codes[..., 32 * j:32 * j + 32] |= ((qh >> j) & 1) << 4
        return {"codes": codes, "sc": sc, "mn": mn, "d": d, "dmin": dmin}
    ql = b[..., 0:128].astype(np.int64)
    qh = b[..., 128:192].astype(np.int64)
    sc = b[..., 192:208].view(np.int8).astype(np.int64)
    d = _f16(b[..., 208:210])
    codes = np.empty((n, nb, QK_K), np.int64)
    for h in range(2):
        lo, hi = ql[..., 64 * h:64 * h + 64], qh[..., 32 * h:32 * h + 32]
        base = 128 * h
        codes[..., base + 0:base + 32] = (lo[..., 0:32] & 15) | ((hi & 3) << 4)
        codes[..., base + 32:base + 64] = (lo[..., 32:64] & 15) | (((hi >> 2) & 3) << 4)
        codes[..., base + 64:base + 96] = (lo[..., 0:32] >> 4) | (((hi >> 4) & 3) << 4)
        codes[..., base + 96:base + 128] = (lo[..., 32:64] >> 4) | (((hi >> 6) & 3) << 4)
    return {"codes": codes - 32, "sc": sc, "d": d}


# ---- exact fp32 fused multiply-add ---------------------------------------------

def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Correctly rounded fp32 fma(a, b, c), elementwise (a, b, c fp32)."""
    p = a.astype(np.float64) * b.astype(np.float64)      # exact: 24 + 24 bits
    c64 = c.astype(np.float64)
    s = p + c64
    bp = s - c64                                          # two-sum error of p + c
    e = (p - bp) + (c64 - (s - bp))
    odd = (s.view(np.int64) & 1) == 1
    fix = (e != 0) & ~odd & np.isfinite(s)
    s = np.where(fix, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)  # round to odd
    return s.astype(np.float32)


# ---- the tiled GEMM ------------------------------------------------------------

def tiled_gemm(fmt: str, w: np.ndarray, x: np.ndarray, bias: np.ndarray | None = None,
               row_chunk: int = 512) -> np.ndarray:
    """Y[m, n] = X[m, k] . W[n, k]^T under the tiled contract of `fmt` (+ bias after)."""
    m, k = x.shape
    n = w.shape[0]
    nb = k // QK_K
    xd, xq, xbs = q8_k(x)
    xq64 = xq.astype(np.float64).reshape(m, nb, QK_K)
    y = np.zeros((m, n), np.float32)
    for r0 in range(0, n, row_chunk):
        dec = decode(fmt, w[r0:r0 + row_chunk], k)
        rows = dec["codes"].shape[0]
        acc = np.zeros((m, rows), np.float32)
        for blk in range(nb):
            codes = dec["codes"][:, blk].astype(np.float64)
            if fmt == "q6_k":
                s1 = np.zeros((m, rows), np.int64)
                for s in range(16):
                    sl = slice(16 * s, 16 * s + 16)
                    raw = np.rint(xq64[:, blk, sl] @ codes[:, sl].T).astype(np.int64)
                    s1 += raw * dec["sc"][None, :, blk, s]
                s1 = ((s1 + 2**31) % 2**32) - 2**31                  # int32 (never wraps here)
                v = (s1.astype(np.float32) * dec["d"][None, :, blk]).astype(np.float32)
            else:
                s1 = np.zeros((m, rows), np.int64)
                s2 = np.zeros((m, rows), np.int64)
                for g in range(8):
                    sl = slice(32 * g, 32 * g + 32)
                    raw = np.rint(xq64[:, blk, sl] @ codes[:, sl].T).astype(np.int64)
                    s1 += raw * dec["sc"][None, :, blk, g]
                    bsum = (xbs[:, 16 * blk + 2 * g] + xbs[:, 16 * blk + 2 * g + 1]).astype(np.int64)
                    s2 += bsum[:, None] * dec["mn"][None, :, blk, g]
                prod = (s1.astype(np.float32) * dec["d"][None, :, blk]).astype(np.float32)
                neg_dmin = np.broadcast_to(-dec["dmin"][None, :, blk], prod.shape)
                v = fma32(neg_dmin, s2.astype(np.float32), prod)
            acc = fma32(v, np.broadcast_to(xd[:, blk:blk + 1], v.shape), acc)
        y[:, r0:r0 + rows] = acc
    if bias is not None:
        y = (y + bias[None, :].astype(np.float32)).astype(np.float32)
    return y
