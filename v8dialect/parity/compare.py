"""How two fp32 arrays differ: bit-exact, or the largest difference in value and in ulps and
where the first differing element is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Difference:
    count: int  # elements that differ in their bits
    total: int
    max_abs: float
    max_ulps: int
    first_index: tuple[int, ...] | None  # in the compared arrays' shape
    first_values: tuple[float, float] | None  # (v8, reference) at first_index

    @property
    def exact(self) -> bool:
        return self.count == 0

    def describe(self) -> str:
        if self.exact:
            return "bit-exact"
        where = f" first at {list(self.first_index)}" if self.first_index is not None else ""
        values = ""
        if self.first_values is not None:
            values = f" ({self.first_values[0]:.9g} vs {self.first_values[1]:.9g})"
        return (f"{self.count}/{self.total} differ, max |Δ| {self.max_abs:.3g}, "
                f"{self.max_ulps} ulp{where}{values}")


def ordered_bits(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """fp32 bits mapped to integers that are ordered like the floats (so the difference of
    two is their distance in ulps, across zero too)."""
    bits = np.ascontiguousarray(a, np.float32).view(np.int32).astype(np.int64)
    return np.where(bits < 0, np.int64(-(2**31)) - bits, bits)


def difference(ours: np.ndarray[Any, Any], reference: np.ndarray[Any, Any]) -> Difference:
    a = np.ascontiguousarray(ours, np.float32)
    b = np.ascontiguousarray(reference, np.float32)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    differs = a.view(np.uint32) != b.view(np.uint32)
    count = int(np.count_nonzero(differs))
    if count == 0:
        return Difference(0, a.size, 0.0, 0, None, None)
    first = tuple(int(i) for i in np.unravel_index(int(np.flatnonzero(differs)[0]), a.shape))
    with np.errstate(invalid="ignore"):
        delta = np.abs(a.astype(np.float64) - b.astype(np.float64))
    ulps = np.abs(ordered_bits(a) - ordered_bits(b))
    return Difference(count, a.size, float(np.nanmax(delta)), int(ulps.max()), first,
                      (float(a[first]), float(b[first])))
