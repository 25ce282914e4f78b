"""runtime_c/ops compiled with the foundations, and pools at 1-8 workers."""

from __future__ import annotations

import re
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from v8dialect.cbuild import RUNTIME_CORE_CDEF, RUNTIME_CORE_SOURCES, CBuild, build
from v8dialect.paths import runtime_c_dir

OPS_SOURCES = ("ops/norm.c", "ops/rope.c", "ops/embedding.c", "ops/linear.c",
               "ops/elementwise.c", "ops/kv_store.c", "ops/gated_delta.c",
               "ops/vision.c", "ops/glu_ggml.c", "ops/gated_delta_ggml.c", "ops/scale.c")
WORKERS = (1, 2, 3, 4, 8)


def header_cdef() -> str:
    """The declarations of ops/v8_ops.h as cffi reads them: comments,
    preprocessor lines and the C++ guard removed, so the test binding can
    never drift from the header."""
    text = (runtime_c_dir() / "ops" / "v8_ops.h").read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    lines = [ln for ln in text.splitlines()
             if not ln.lstrip().startswith("#") and ln.strip() not in ('extern "C" {', "}")]
    return "\n".join(lines)


PARALLEL_CDEF = """
typedef void (*v8_task_fn)(void *ctx, int64_t task, int worker);
v8_status v8_parallel_for(v8_threadpool *pool, int64_t n_tasks, v8_task_fn fn, void *ctx);
"""


@pytest.fixture(scope="session")
def ops() -> ModuleType:
    return build(CBuild(
        name="v8_ops_test",
        cdef=RUNTIME_CORE_CDEF + PARALLEL_CDEF + header_cdef(),
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
