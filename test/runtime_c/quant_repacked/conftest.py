"""Fixtures for the repacked quantized-linear evidence: one compiled provider,
llama.cpp's own ggml (llama-cpp-python's libggml through ctypes, with its
CPU_REPACK buffer type) and per-shape Q4_K weights quantized by that ggml."""

from __future__ import annotations

import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from qr_support import ALL_FEATURES, QR, make_weights, random_blocks  # noqa: E402


@pytest.fixture(scope="session")
def qr() -> Iterator[QR]:
    lib = QR()
    yield lib
    lib.lib.v8_cpu_restrict(ALL_FEATURES)
    lib.close()


@pytest.fixture(scope="session")
def ggml_ops() -> Any | None:
    """llama.cpp's ggml, or None when llama-cpp-python is not importable."""
    try:
        from v8dialect.parity.ggml_ops import GgmlOps

        return GgmlOps()
    except Exception:  # noqa: BLE001 - any failure leaves the external rung unresolved
        return None


class Weights:
    def __init__(self, ggml: Any | None) -> None:
        self.ggml = ggml
        self.cache: dict[tuple[int, int], np.ndarray] = {}

    def get(self, n: int, k: int) -> np.ndarray:
        """Raw Q4_K blocks [n, row bytes], quantized by llama.cpp's ggml."""
        key = (n, k)
        if key not in self.cache:
            seed = zlib.crc32(f"repacked:q4_k:{n}:{k}".encode()) & 0xFFFF
            if self.ggml is not None:
                self.cache[key] = self.ggml.quantize("q4_k", make_weights(n, k, seed))
            else:                           # no ggml: random blocks with finite scales
                self.cache[key] = random_blocks(n, k, seed)
        return self.cache[key]


@pytest.fixture(scope="session")
def weights(ggml_ops: Any | None) -> Weights:
    return Weights(ggml_ops)
