"""Numpy model of the K-quant linear contracts (Q4_K / Q6_K weights x Q8_K activations).

Written from the contract fields (docs/NUMERICS.md, contracts/quantized_linear.json) and ggml's
block formats, not from our C: per 256-weight super-block the integer sums go into 8 int32
lanes (lane u holds elements 4u..4u+3 of every 32-element group, each group times its
scale), the super-block scale fp16(d) * x.d (one fp32 product) is applied by an fp32 FMA per
lane, Q4_K's mins enter 4 fp32 lanes (lane v: sub-blocks 2v and 2v+1 via the Q8_K block
sums) times -fp16(dmin) * x.d, super-blocks ascend, then the fixed horizontal tree
((a[i+4] + a[i]) for i < 4, then (r0 + r2) + (r1 + r3); the 4 min lanes (m0 + m2) + (m1 + m3))
and the bias after the complete dot.  Integer sums are exact, so only the fp32 steps decide
the bits; each is one numpy float32 operation or a correctly rounded FMA.

Q8_K activation quantization is the existing independent model (test_quant_linear.numpy_q8_k).
"""

from __future__ import annotations

import numpy as np
from test_quant_linear import numpy_q8_k
from tiled_model import fma32

F32 = np.float32
QK_K = 256
Q4_K_BYTES, Q6_K_BYTES = 144, 210


def _f16(raw: np.ndarray) -> np.ndarray:
    """Little-endian fp16 from two bytes, widened to fp32 (exact)."""
    return np.ascontiguousarray(raw).view(np.float16).astype(F32)[..., 0]


def q4_k_fields(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(d, dmin [N, nb] fp32; scales, mins [N, nb, 8]; levels [N, nb, 256] in Q8_K order)."""
    n = w.shape[0]
    b = w.reshape(n, -1, Q4_K_BYTES)
    d, dmin = _f16(b[..., 0:2]), _f16(b[..., 2:4])
    q = b[..., 4:16].astype(np.int64)
    sc = np.empty(b.shape[:2] + (8,), np.int64)
    mn = np.empty_like(sc)
    for j in range(8):  # ggml's get_scale_min_k4
        if j < 4:
            sc[..., j], mn[..., j] = q[..., j] & 63, q[..., j + 4] & 63
        else:
            sc[..., j] = (q[..., j + 4] & 0xF) | ((q[..., j - 4] >> 6) << 4)
            mn[..., j] = (q[..., j + 4] >> 4) | ((q[..., j] >> 6) << 4)
    qs = b[..., 16:144].astype(np.int64).reshape(n, -1, 4, 32)  # 4 halves of 64 weights
    levels = np.concatenate([qs & 15, qs >> 4], axis=-1)       # [.., half, 64]: lo 32 then hi 32
    return d, dmin, sc, mn, levels.reshape(n, -1, QK_K)


def q6_k_fields(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(d [N, nb] fp32; int8 scales [N, nb, 16]; levels 0..63 [N, nb, 256] in Q8_K order)."""
    n = w.shape[0]
    b = w.reshape(n, -1, Q6_K_BYTES)
    ql = b[..., 0:128].astype(np.int64)
    qh = b[..., 128:192].astype(np.int64)
    sc = b[..., 192:208].view(np.int8).astype(np.int64)
    d = _f16(b[..., 208:210])
    levels = np.empty(b.shape[:2] + (QK_K,), np.int64)
    for h in range(2):          # 128-weight halves
        for c in range(4):      # 32-weight groups: low nibbles of ql[0:32], ql[32:64], then high
            lo = ql[..., 64 * h + 32 * (c & 1): 64 * h + 32 * (c & 1) + 32]
            nib = lo & 15 if c < 2 else lo >> 4
            top = (qh[..., 32 * h: 32 * h + 32] >> (2 * c)) & 3
            levels[..., 128 * h + 32 * c: 128 * h + 32 * c + 32] = nib | (top << 4)
    return d, sc, levels


def _group_lane_sums(levels: np.ndarray, q8: np.ndarray) -> np.ndarray:
    """S[m, n, b, g, u] = sum of levels * q8 over elements 4u..4u+3 of 32-group g (exact)."""
    n, nb, _ = levels.shape
    m = q8.shape[0]
    lv = levels.reshape(n, nb, 8, 8, 4)
    qa = q8.astype(np.int64).reshape(m, nb, 8, 8, 4)
    return np.einsum("nbguk,mbguk->mnbgu", lv, qa)


def tree8(acc: np.ndarray) -> np.ndarray:
    r = [(acc[..., i + 4] + acc[..., i]).astype(F32) for i in range(4)]
    return ((r[0] + r[2]).astype(F32) + (r[1] + r[3]).astype(F32)).astype(F32)


def tree4(m: np.ndarray) -> np.ndarray:
    return ((m[..., 0] + m[..., 2]).astype(F32) + (m[..., 1] + m[..., 3]).astype(F32)).astype(F32)


def linear(fmt: str, w: np.ndarray, x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """y[m][n] for x [M, K] fp32 and raw weight blocks w [N, K/256 * block bytes]."""
    x = np.ascontiguousarray(x, F32)
    m, k = x.shape
    nb = k // QK_K
    xd, xq, xbs = numpy_q8_k(x)                 # d [M, nb], q [M, K] int8, bsums [M, K/16]
    xq = xq.reshape(m, nb, QK_K)
    bsums = xbs.reshape(m, nb, 16).astype(np.int64)
    n = w.shape[0]
    acc = np.zeros((m, n, 8), F32)
    if fmt == "q4_k":
        d, dmin, sc, mn, levels = q4_k_fields(w)
        sums = _group_lane_sums(levels, xq)                         # [M, N, nb, 8 groups, 8 lanes]
        lanes = np.einsum("mnbgu,nbg->mnbu", sums, sc)              # each group times its scale
        pairs = bsums.reshape(m, nb, 8, 2).sum(axis=-1)             # per 32-element sub-block
        mins = np.einsum("mbg,nbg->mnbg", pairs, mn).reshape(m, n, nb, 4, 2).sum(axis=-1)
        accm = np.zeros((m, n, 4), F32)
        for blk in range(nb):                                       # super-blocks ascending
            scale = (xd[:, blk][:, None] * d[None, :, blk]).astype(F32)
            neg = (-xd[:, blk][:, None] * dmin[None, :, blk]).astype(F32)
            acc = fma32(scale[..., None], lanes[:, :, blk].astype(F32), acc)
            accm = fma32(neg[..., None], mins[:, :, blk].astype(F32), accm)
        y = (tree8(acc) + tree4(accm)).astype(F32)
    elif fmt == "q6_k":
        d, sc, levels = q6_k_fields(w)
        sums = _group_lane_sums(levels, xq)
        u = np.arange(8)
        lane_scale = sc[:, :, 2 * np.arange(8)[:, None] + u[None, :] // 4]  # [N, nb, g, u]
        lanes = np.einsum("mnbgu,nbgu->mnbu", sums, lane_scale)
        # the -32 offset as an integer correction: lane u owns 16-element sub-blocks 2u, 2u+1
        corr = 32 * (bsums[:, None, :, 0::2] * sc[None, :, :, 0::2]
                     + bsums[:, None, :, 1::2] * sc[None, :, :, 1::2])
        lanes = lanes - corr
        for blk in range(nb):
            scale = (xd[:, blk][:, None] * d[None, :, blk]).astype(F32)
            acc = fma32(scale[..., None], lanes[:, :, blk].astype(F32), acc)
        y = tree8(acc)
    else:
        raise ValueError(fmt)
    if bias is not None:
        y = (y + np.asarray(bias, F32)[None, :]).astype(F32)
    return y
