"""An independent numpy model of llama.cpp's repacked Q4_0 x Q8_0 arithmetic
(contracts/quantized_linear_repacked_q4_0.json), written from the block formats and the
contract text, sharing no code with the C provider.

Activation, per 32-element block of each row (ggml's x86 Q8_0 quantizer; the 4-row packer
of its GEMM computes the same):
    amax = max |x|,  d = fp16(f32(amax / 127)),  id = f32(127 / amax) (0 when amax = 0),
    q = clip(rint(f32(x * id)), -128, 127)                  (rint: half to even)
Per output (token t, weight row r), blocks b ascending, acc from +0.0:
    D_b = sum_e (nibble_e - 8) * q_e                         exact integer
    s_b = f32(f32(w.d) * f32(a.d))
    acc = fma(f32(D_b), s_b, acc)                            exact fma, one rounding
and y = acc (+ bias after, when given).  Every row count M gives the same per-output steps:
llama.cpp's GEMM (rows in groups of 4) and GEMV (the rest) differ only in how they tile.
"""

from __future__ import annotations

import numpy as np
from repacked_model import fma32

QK = 32
Q40_BYTES = 18


def q8_0(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows x [m, k] -> (d [m, nb] fp32 (fp16-rounded), q [m, nb, 32] int64)."""
    m, k = x.shape
    blocks = np.ascontiguousarray(x, np.float32).reshape(m, k // QK, QK)
    amax = np.abs(blocks).max(axis=2)
    zero = amax == 0
    d = (amax / np.float32(127)).astype(np.float32).astype(np.float16).astype(np.float32)
    safe = np.where(zero, np.float32(1), amax).astype(np.float32)
    idv = np.where(zero, np.float32(0), np.float32(127) / safe).astype(np.float32)
    prod = (blocks * idv[..., None]).astype(np.float32)
    q = np.clip(np.rint(prod), -128, 127).astype(np.int64)
    return d, q


def decode_q4_0(w: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Raw rows [n, row bytes] -> (d [n, nb] fp32, levels [n, nb, 32] in -8..7)."""
    n = w.shape[0]
    nb = k // QK
    b = np.ascontiguousarray(w).reshape(n, nb, Q40_BYTES)
    d = b[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    qs = b[..., 2:].astype(np.int64)
    levels = np.concatenate([qs & 15, qs >> 4], axis=-1) - 8
    return d, levels


def repacked_q4_0_gemm(w: np.ndarray, x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """Y[m, n] = X[m, k] . W[n, k]^T (Q4_0 rows) under the repacked contract."""
    m, k = x.shape
    wd, lv = decode_q4_0(w, k)
    ad, aq = q8_0(x)
    n = w.shape[0]
    acc = np.zeros((m, n), np.float32)
    for b in range(k // QK):
        dot = np.rint(aq[:, b, :].astype(np.float64) @ lv[:, b, :].T.astype(np.float64))
        s = (ad[:, b, None] * wd[None, :, b]).astype(np.float32)
        acc = fma32(dot.astype(np.float32), s, acc)      # |D| <= 32*8*128: exact in f32
    if bias is not None:
        acc = (acc + bias[None, :].astype(np.float32)).astype(np.float32)
    return acc
