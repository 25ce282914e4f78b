"""Side-by-side timing shared by the benchmarks.

Every timed call starts after SETTLE_S of idle: ggml's and llama.cpp's OpenMP workers spin
for a while after each graph, and v8's workers spin after each job, so back-to-back calls of
two engines would measure one engine's spinning threads stealing the other's cores.  With
both pools quiet each side pays only its own wake-ups.  The two sides alternate, and which
goes first alternates too, so drifting load on a shared host hits both alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable

SETTLE_S = 0.02


def settled(fn: Callable[[], object]) -> float:
    """Wall seconds of one call of fn, started after SETTLE_S idle."""
    time.sleep(SETTLE_S)
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def alternating(a: Callable[[], object], b: Callable[[], object],
                repeats: int, warmup: int = 2) -> tuple[list[float], list[float]]:
    """Wall times (s) of a and b over `repeats` rounds, the order flipped every round."""
    for _ in range(warmup):
        a()
        b()
    ta: list[float] = []
    tb: list[float] = []
    for i in range(repeats):
        if i % 2 == 0:
            ta.append(settled(a))
            tb.append(settled(b))
        else:
            tb.append(settled(b))
            ta.append(settled(a))
    return ta, tb
