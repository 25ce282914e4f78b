"""Fixtures for the tiled-prefill quantized-linear evidence: one compiled provider,
llama.cpp's own ggml (llama-cpp-python's libggml through ctypes) and per-shape
weights quantized by that ggml, built once per session."""

from __future__ import annotations

import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from qt_support import ALL_FEATURES, QT, make_weights, random_blocks  # noqa: E402


@pytest.fixture(scope="session")
def qt() -> Iterator[QT]:
    lib = QT()
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
    def __init__(self, qt: QT, ggml: Any | None) -> None:
        self.qt, self.ggml = qt, ggml
        self.cache: dict[tuple[str, int, int], np.ndarray] = {}

    def get(self, fmt: str, n: int, k: int) -> np.ndarray:
        """Raw weight blocks [n, row bytes], quantized by llama.cpp's ggml."""
        key = (fmt, n, k)
        if key not in self.cache:
            seed = zlib.crc32(f"tiled:{fmt}:{n}:{k}".encode()) & 0xFFFF
            if self.ggml is not None:
                self.cache[key] = self.ggml.quantize(fmt, make_weights(n, k, seed))
            else:                           # no ggml: random blocks with finite scales
                self.cache[key] = random_blocks(fmt, n, k, seed)
        return self.cache[key]


@pytest.fixture(scope="session")
def weights(qt: QT, ggml_ops: Any | None) -> Weights:
    return Weights(qt, ggml_ops)
