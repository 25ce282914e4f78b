"""A compiled provider module as the runtime_c tests drive it: its ffi and lib, numpy arrays as
C pointers, one threadpool per worker count (destroyed by close), and a block run under a CPU
feature mask."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import numpy as np

ALL_FEATURES = 0xFFFFFFFF


@contextmanager
def cpu_restricted(mod: Any, mask: int) -> Iterator[None]:
    """The block runs with the runtime's CPU features cut to `mask` (a module with .lib, or the
    lib itself); the restriction is lifted afterwards, also when the block fails."""
    lib = getattr(mod, "lib", mod)
    lib.v8_cpu_restrict(mask)
    try:
        yield
    finally:
        lib.v8_cpu_restrict(ALL_FEATURES)


class ProviderModule:
    def __init__(self, mod: ModuleType) -> None:
        self.mod = mod
        self.ffi: Any = mod.ffi
        self.lib: Any = mod.lib
        self._pools: dict[int, Any] = {}

    def ptr(self, a: np.ndarray | None, ctype: str) -> Any:
        if a is None:
            return self.ffi.NULL
        assert a.flags.c_contiguous
        return self.ffi.cast(ctype, a.ctypes.data)

    def pool(self, workers: int) -> Any:
        if workers not in self._pools:
            p = self.lib.v8_threadpool_create(workers)
            assert p != self.ffi.NULL
            self._pools[workers] = p
        return self._pools[workers]

    def close(self) -> None:
        for p in self._pools.values():
            self.lib.v8_threadpool_destroy(p)
        self._pools.clear()
