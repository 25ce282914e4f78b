"""runtime_c/ops compiled with the foundations, and pools at 1-8 workers."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test/runtime_c: shared support

from v8dialect.runtime.cbuild import RUNTIME_CORE_SOURCES, CBuild, build, runtime_cdef

OPS_SOURCES = ("ops/norm.c", "ops/rope.c", "ops/embedding.c", "ops/linear.c",
               "ops/elementwise.c", "ops/kv_store.c", "ops/gated_delta.c",
               "ops/vision.c", "ops/glu_ggml.c", "ops/gated_delta_ggml.c", "ops/scale.c")
WORKERS = (1, 2, 3, 4, 8)


@pytest.fixture(scope="session")
def ops() -> ModuleType:
    return build(CBuild(
        name="v8_ops_test",
        cdef=runtime_cdef("ops/v8_ops.h"),
        source='#include "v8_runtime.h"\n#include "ops/v8_ops.h"\n',
        runtime_sources=tuple(RUNTIME_CORE_SOURCES) + OPS_SOURCES,
    ))


@pytest.fixture(scope="session")
def pools(ops: ModuleType) -> Iterator[dict[int, Any]]:
    made = {w: ops.lib.v8_threadpool_create(w) for w in WORKERS}
    assert all(p != ops.ffi.NULL for p in made.values())
    yield made
    for p in made.values():
        ops.lib.v8_threadpool_destroy(p)
