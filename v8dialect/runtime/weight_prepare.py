"""Weights in a prepared layout, made once at load time by the function the kernel map reading
them declares (``weight_prepare``): the file's plain rows in, the layout's bytes out.

    module = preparation_module(maps.preparation("q4_k_x16"))
    prepare_into(module, prepare, out, rows, n, k, workers=1)
"""

from __future__ import annotations

from functools import cache
from types import ModuleType
from typing import Any

import numpy as np

from v8dialect.data import vocab
from v8dialect.data.kernel_maps import WeightPrepare
from v8dialect.runtime.cbuild import RUNTIME_CORE_SOURCES, CBuild, build, runtime_cdef


@cache
def preparation_module(prepare: WeightPrepare) -> ModuleType:
    """A cffi module over the map's header with the preparation's functions (cached by content)."""
    from pathlib import Path

    header = str(Path(prepare.root) / prepare.header)
    functions = [f for f in (prepare.function, prepare.threadpool, prepare.bytes) if f]
    return build(CBuild(name=f"v8_prepare_{prepare.layout}",
                        cdef=runtime_cdef(header, functions=functions),
                        source=f'#include "{prepare.header}"\n',
                        runtime_sources=RUNTIME_CORE_SOURCES,
                        extra_sources=tuple(prepare.source_paths()),
                        include_dirs=(Path(prepare.root),)))


def prepare_into(prepare: WeightPrepare, out: np.ndarray[Any, Any], rows: np.ndarray[Any, Any],
                 n: int, k: int, workers: int = 1) -> None:
    """out[:] = the prepared layout of the n x k plain rows (workers > 1: the threadpool form)."""
    module = preparation_module(prepare)
    ffi, lib = module.ffi, module.lib
    expected = vocab.prepared_bytes(prepare.layout, n, k)
    if getattr(lib, prepare.bytes)(n, k) != expected or out.nbytes != expected:
        raise ValueError(f"{prepare.layout}: {n}x{k} takes {expected} bytes; the C says "
                         f"{getattr(lib, prepare.bytes)(n, k)}, the buffer has {out.nbytes}")
    src = np.ascontiguousarray(rows)
    args = (ffi.from_buffer(out), out.nbytes, ffi.from_buffer(src), n, k)
    if workers > 1 and prepare.threadpool:
        pool = lib.v8_threadpool_create(workers)
        try:
            status = getattr(lib, prepare.threadpool)(pool, *args)
        finally:
            lib.v8_threadpool_destroy(pool)
    else:
        status = getattr(lib, prepare.function)(*args)
    if status != 0:
        name = ffi.string(lib.v8_status_name(status)).decode()
        raise RuntimeError(f"{prepare.function} failed: {name} (status {status})")
