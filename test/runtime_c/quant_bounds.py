"""Weight blocks and activations at the integer bounds of the K-quant dot products.

Every code at its maximum (Q4_K 15, Q5_K 31, Q6_K 63) against activations that all
quantize to -127 (the Q8_K quantizer maps a block's first largest magnitude to -127 and
caps the rest at 127) gives the largest pair, group and block sums any input can reach:
a kernel that keeps partial sums in narrower integers than the oracle and overflows
there differs from the oracle here."""

from __future__ import annotations

import numpy as np

BLOCK_BYTES = {"q4_k": 144, "q5_k": 176, "q6_k": 210}
FP16_SCALE = np.float16(2.0**-10).tobytes()


def bound_blocks(fmt: str, n: int, k: int, scale_byte: int) -> np.ndarray:
    """[n, k/256 * block bytes] blocks with every code at its maximum and every 6-bit
    scale and min at 63 (Q4_K, Q5_K) or every int8 scale = scale_byte (Q6_K)."""
    nb = k // 256
    blocks = np.full((n, nb, BLOCK_BYTES[fmt]), 0xFF, dtype=np.uint8)
    if fmt == "q6_k":
        blocks[:, :, 192:208] = scale_byte                # int8 scales after ql, qh
        blocks[:, :, 208:210] = np.frombuffer(FP16_SCALE, np.uint8)
    else:
        blocks[:, :, 0:2] = np.frombuffer(FP16_SCALE, np.uint8)   # d
        blocks[:, :, 2:4] = np.frombuffer(FP16_SCALE, np.uint8)   # dmin
    return blocks.reshape(n, nb * BLOCK_BYTES[fmt])


def bound_activation(m: int, k: int) -> np.ndarray:
    """Rows whose every element quantizes to -127: one value per row (negative and
    positive rows alternate; the quantizer maps either sign's maximum to -127)."""
    signs = np.where(np.arange(m) % 2 == 0, -1.0, 1.0).astype(np.float32)
    return np.ascontiguousarray(np.repeat(signs[:, None] * 0.75, k, axis=1))
