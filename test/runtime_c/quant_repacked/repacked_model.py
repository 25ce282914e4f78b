"""An independent numpy model of llama.cpp's repacked Q4_K x Q8_K arithmetic
(contracts/quantized_linear_repacked.json), written from the block formats and the
contract text, sharing no code with the C provider.

Per output (token t, weight row r) and super-block b, ascending in b, with
    ds  = f32(d * x.d)          dm = f32(dmin * x.d)   (fp16 d, dmin widened exactly)
and the exact integer sums over a set G of 32-element groups
    S1(G) = sum_{g in G} sc_g * sum_{e in g} q4_e * q8_e
    S2(G) = sum_{g in G} mn_g * (bsum_{2g} + bsum_{2g+1})
the update is, for every part G of the super-block in ascending order,
    acc  = fma(f32(S1(G)), ds, acc)                     (acc, accm start at +0.0)
    accm = fma(f32(S2(G)), dm, accm)
where the parts are
    GEMV rows: one part, all 8 groups                   (row t >= 4*floor(M/4))
    GEMM rows: 4 parts, groups {0,1}, {2,3}, {4,5}, {6,7}  (row t < 4*floor(M/4))
and finally y = f32(acc - accm) (+ bias after, when given).

f32(n) of an integer rounds to nearest even (numpy's int64 -> float32 cast); fma is
evaluated exactly (fp64 product, round-to-odd sum, then fp32).

Activation: every row is quantized with the Q8_K reference quantizer (largest
magnitude, first on ties; iscale = -127/max; round half even; d = 1/iscale).  llama.cpp
packs rows 4 at a time with its own quantizer, which can only differ from this by
negating a whole block (q, bsums and d), and that leaves every output bit unchanged.
"""

from __future__ import annotations

import numpy as np

QK_K = 256
Q4K_BYTES = 144


def q8_k(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows x [m, k] -> (d [m, nb] fp32, q [m, k] int64, bsums [m, k/16] int64)."""
    m, k = x.shape
    blocks = np.ascontiguousarray(x, np.float32).reshape(-1, QK_K)
    first = np.argmax(np.abs(blocks), axis=1)           # first occurrence of the max |x|
    mx = blocks[np.arange(blocks.shape[0]), first]
    zero = mx == 0
    iscale = np.where(zero, np.float32(0),
                      np.float32(-127.0) / np.where(zero, np.float32(1), mx)).astype(np.float32)
    prod = (iscale[:, None] * blocks).astype(np.float32)          # rounded product
    q = np.minimum(np.rint(prod), 127).astype(np.int64)           # rint: half to even
    d = np.where(zero, np.float32(0),
                 np.float32(1) / np.where(zero, np.float32(1), iscale)).astype(np.float32)
    bsums = q.reshape(-1, 16, 16).sum(axis=2)
    return d.reshape(m, k // QK_K), q.reshape(m, k), bsums.reshape(m, k // 16)


def decode_q4_k(w: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """Raw rows [n, row bytes] -> codes [n, nb, 256] (0..15), sc/mn [n, nb, 8], d/dmin fp32."""
    n = w.shape[0]
    nb = k // QK_K
    b = np.ascontiguousarray(w).reshape(n, nb, Q4K_BYTES)
    f16 = b[..., 0:4].copy().view(np.float16).astype(np.float32)
    s = b[..., 4:16].astype(np.int64)
    sc = np.concatenate([s[..., 0:4] & 63, (s[..., 8:12] & 15) | ((s[..., 0:4] >> 6) << 4)], -1)
    mn = np.concatenate([s[..., 4:8] & 63, (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)], -1)
    qs = b[..., 16:144].astype(np.int64)
    codes = np.empty((n, nb, QK_K), np.int64)
    for j in range(4):
        codes[..., 64 * j:64 * j + 32] = qs[..., 32 * j:32 * j + 32] & 15
        codes[..., 64 * j + 32:64 * j + 64] = qs[..., 32 * j:32 * j + 32] >> 4
    return {"codes": codes, "sc": sc, "mn": mn, "d": f16[..., 0], "dmin": f16[..., 1]}


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Correctly rounded fp32 fma(a, b, c) elementwise."""
    p = a.astype(np.float64) * b.astype(np.float64)     # exact
    c64 = c.astype(np.float64)
    s = p + c64
    bp = s - c64
    err = (p - bp) + (c64 - (s - bp))
    odd = (s.view(np.int64) & 1) == 1
    fix = (err != 0) & ~odd & np.isfinite(s)
    s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s.astype(np.float32)


def repacked_gemm(w: np.ndarray, x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """Y[m, n] = X[m, k] . W[n, k]^T (Q4_K rows) under the repacked contract."""
    m, k = x.shape
    nb = k // QK_K
    dec = decode_q4_k(w, k)
    xd, xq, xbs = q8_k(x)
    xq = xq.reshape(m, nb, QK_K)
    n = w.shape[0]
    m4 = 4 * (m // 4)                       # rows [0, m4) take the 4-row GEMM form
    y = np.zeros((m, n), np.float32)
    for rows, parts in ((slice(0, m4), ((0, 1), (2, 3), (4, 5), (6, 7))),
                        (slice(m4, m), (tuple(range(8)),))):
        r = xq[rows]
        if r.shape[0] == 0:
            continue
        acc = np.zeros((r.shape[0], n), np.float32)
        accm = np.zeros((r.shape[0], n), np.float32)
        for blk in range(nb):
            ds = (dec["d"][None, :, blk] * xd[rows, blk, None]).astype(np.float32)
            dm = (dec["dmin"][None, :, blk] * xd[rows, blk, None]).astype(np.float32)
            for part in parts:
                s1 = np.zeros(acc.shape, np.int64)
                s2 = np.zeros(acc.shape, np.int64)
                for g in part:
                    sl = slice(32 * g, 32 * g + 32)
                    dot = np.rint(r[:, blk, sl].astype(np.float64)
                                  @ dec["codes"][:, blk, sl].T.astype(np.float64)).astype(np.int64)  # exact (< 2^53)
                    s1 += dot * dec["sc"][None, :, blk, g]
                    pair = xbs[rows, 16 * blk + 2 * g] + xbs[rows, 16 * blk + 2 * g + 1]
                    s2 += pair[:, None] * dec["mn"][None, :, blk, g]
                assert np.abs(s1).max(initial=0) < 2**31 and np.abs(s2).max(initial=0) < 2**31
                acc = fma32(s1.astype(np.float32), ds, acc)
                accm = fma32(s2.astype(np.float32), dm, accm)
        y[rows] = (acc - accm).astype(np.float32)
    if bias is not None:
        y = (y + bias[None, :].astype(np.float32)).astype(np.float32)
    return y
