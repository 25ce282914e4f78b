"""Side-by-side timing shared by the benchmarks.

Every timed call starts after SETTLE_S of idle: ggml's and llama.cpp's OpenMP workers spin
for a while after each graph, and v8's workers spin after each job, so back-to-back calls of
two engines would measure one engine's spinning threads stealing the other's cores.  With
both pools quiet each side pays only its own wake-ups.  The two sides alternate, and which
goes first alternates too, so drifting load on a shared host hits both alike.

A settled call measures a kernel as the first op after idle sees it: on virtual CPUs a
sleeping worker takes tens to hundreds of microseconds to wake, which dominates short
multi-threaded calls.  Inside a model the ops run back to back with the workers awake, so
`warm_alternating` also times bursts: after a longer settle (WARM_SETTLE_S), untimed calls
for WAKE_S wake the side's workers, then BURST calls run back to back and each counts as the
burst's mean.
"""

from __future__ import annotations

import time
from collections.abc import Callable

SETTLE_S = 0.02
BURST = 8
# Before a warm burst both sides' workers must be asleep, not merely idle: ggml's OpenMP
# workers spin for longer than SETTLE_S, and a burst that starts while they spin shares
# its cores with them (AMD EPYC, 2 threads, decode attention KV1058: v8's warm burst took
# 1.27 ms per call after 20 ms, 0.66 ms after 300 ms).
WARM_SETTLE_S = 0.3
# Waking a worker that slept: on virtual CPUs the helper's vCPU can take milliseconds to run
# again (Intel Xeon under KVM, 2 vCPUs: 1.5-4.4 ms in some minutes, 10-240 us in others),
# so one waking call of a sub-millisecond kernel left the timed burst without its helper
# (2 threads, decode attention KV1058: 0.60 ms per call against 0.22 back to back).
WAKE_S = 0.01


def settled(fn: Callable[[], object]) -> float:
    """Wall seconds of one call of fn, started after SETTLE_S idle."""
    time.sleep(SETTLE_S)
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def flipped(a: Callable[[], object], b: Callable[[], object], repeats: int,
            measure: Callable[[Callable[[], object]], float]) -> tuple[list[float], list[float]]:
    """measure(a) and measure(b) over `repeats` rounds, the order flipped every round."""
    ta: list[float] = []
    tb: list[float] = []
    for i in range(repeats):
        if i % 2 == 0:
            ta.append(measure(a))
            tb.append(measure(b))
        else:
            tb.append(measure(b))
            ta.append(measure(a))
    return ta, tb


def alternating(a: Callable[[], object], b: Callable[[], object],
                repeats: int, warmup: int = 2) -> tuple[list[float], list[float]]:
    """Wall times (s) of settled calls of a and b over `repeats` rounds."""
    for _ in range(warmup):
        a()
        b()
    return flipped(a, b, repeats, settled)


def warm_call(fn: Callable[[], object], burst: int = BURST) -> float:
    """Mean wall seconds of `burst` back-to-back calls of fn, after a settle and WAKE_S of
    waking calls (at least one)."""
    time.sleep(WARM_SETTLE_S)
    wake_until = time.perf_counter() + WAKE_S
    fn()
    while time.perf_counter() < wake_until:
        fn()
    t0 = time.perf_counter()
    for _ in range(burst):
        fn()
    return (time.perf_counter() - t0) / burst


def warm_alternating(a: Callable[[], object], b: Callable[[], object],
                     repeats: int) -> tuple[list[float], list[float]]:
    """Per-call wall times (s) of warm bursts of a and b over `repeats` rounds."""
    return flipped(a, b, repeats, warm_call)
