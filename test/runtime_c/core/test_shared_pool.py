"""One threadpool shared by several calling threads: jobs run one after another, never mixed,
never deadlocked; a task that dispatches on its own pool gets an error status."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from v8dialect.data.c_abi import constants
from v8dialect.data.contracts import load_registry
from v8dialect.ir.contract_ir import to_attr
from v8dialect.runtime.cbuild import CBuild, build, runtime_cdef
from v8dialect.runtime.program import Program
from v8dialect.runtime.program import build as build_program

SOURCE = r"""
#include "v8_runtime.h"

typedef struct tag_ctx {
    int32_t tag;
    int32_t *seen;     /* [n_tasks]: the tag of the job that ran the task */
    int32_t *counts;   /* [n_tasks] */
    v8_threadpool *pool;
    int32_t nested;    /* status of a dispatch from inside a task */
} tag_ctx;

static void tag_task(void *raw, int64_t task, int worker) {
    tag_ctx *c = (tag_ctx *)raw;
    (void)worker;
    volatile int sink = 0;
    for (int i = 0; i < 200; ++i) {
        sink += i;
    }
    (void)sink;
    __atomic_store_n(&c->seen[task], c->tag, __ATOMIC_RELAXED);
    __atomic_fetch_add(&c->counts[task], 1, __ATOMIC_RELAXED);
}

int tag_run(v8_threadpool *pool, int32_t tag, int64_t n_tasks, int32_t *seen, int32_t *counts) {
    tag_ctx c = {tag, seen, counts, pool, 0};
    return (int)v8_parallel_for(pool, n_tasks, tag_task, &c);
}

static void nested_task(void *raw, int64_t task, int worker) {
    tag_ctx *c = (tag_ctx *)raw;
    (void)worker;
    if (task == 0) {
        c->nested = (int32_t)v8_parallel_for(c->pool, 4, tag_task, c);
    }
}

int nested_run(v8_threadpool *pool, int32_t *nested) {
    int32_t seen[4] = {0}, counts[4] = {0};
    tag_ctx c = {1, seen, counts, pool, -1};
    int st = (int)v8_parallel_for(pool, 8, nested_task, &c);
    *nested = c.nested;
    return st;
}
"""

CDEF = """
int tag_run(v8_threadpool *pool, int32_t tag, int64_t n_tasks, int32_t *seen, int32_t *counts);
int nested_run(v8_threadpool *pool, int32_t *nested);
"""

_V8 = constants(["v8_runtime.h"])
V8_OK = _V8["V8_OK"]
V8_ERR_BAD_THREADING = _V8["V8_ERR_BAD_THREADING"]


@pytest.fixture(scope="module")
def probe() -> ModuleType:
    return build(CBuild(name="v8_shared_pool_probe", cdef=runtime_cdef() + CDEF, source=SOURCE))


def run_threads(count: int, body: Callable[[int], None], timeout: float = 60.0) -> None:
    """Run body(i) on `count` threads; a thread that does not finish in time is a deadlock."""
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            body(i)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a caller never returned: deadlock"
    if errors:
        raise errors[0]


@pytest.mark.parametrize("callers,workers", [(2, 2), (4, 3), (3, 8)])
def test_callers_sharing_a_pool_never_mix_jobs(probe: ModuleType, callers: int, workers: int) -> None:
    ffi, lib = probe.ffi, probe.lib
    pool = lib.v8_threadpool_create(workers)
    assert pool != ffi.NULL
    n_tasks = 37

    def body(i: int) -> None:
        tag = i + 1
        for _ in range(300):
            seen = np.zeros(n_tasks, dtype=np.int32)
            counts = np.zeros(n_tasks, dtype=np.int32)
            status = lib.tag_run(pool, tag, n_tasks, ffi.from_buffer("int32_t[]", seen),
                                 ffi.from_buffer("int32_t[]", counts))
            assert status == V8_OK
            assert (counts == 1).all(), counts
            assert (seen == tag).all(), seen

    try:
        run_threads(callers, body)
    finally:
        lib.v8_threadpool_destroy(pool)


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_dispatch_from_inside_a_task_is_refused(probe: ModuleType, workers: int) -> None:
    ffi, lib = probe.ffi, probe.lib
    pool = lib.v8_threadpool_create(workers)
    nested = ffi.new("int32_t *")
    try:
        assert lib.nested_run(pool, nested) == 0
        assert nested[0] == V8_ERR_BAD_THREADING
        # the pool is still usable afterwards
        seen = np.zeros(5, dtype=np.int32)
        counts = np.zeros(5, dtype=np.int32)
        status = lib.tag_run(pool, 9, 5, ffi.from_buffer("int32_t[]", seen),
                             ffi.from_buffer("int32_t[]", counts))
        assert status == V8_OK
        assert (counts == 1).all() and (seen == 9).all()
    finally:
        lib.v8_threadpool_destroy(pool)


T, E = 2, 96


def contract(contract_id: str) -> str:
    registry = load_registry()
    found = registry.get(contract_id)
    assert found is not None
    return str(to_attr(found, registry))


def graph() -> str:
    def t(*dims: int) -> str:
        return "tensor<" + "x".join(map(str, dims)) + "xf32>"

    x, w, v = t(T, E), t(E, E), t(E)
    norm = contract("rmsnorm_fp32_fp64_sum_ascending")
    linear = contract("linear_fp32_ascending_fp32_accumulate")
    add = contract("residual_add_fp32")
    return f"""
func.func @decode(%x: {x}, %norm_w: {v}, %w: {w}) -> {x} {{
  %h = v8.rmsnorm "norm" decode %x, %norm_w eps 1.0e-06 contract {norm} : ({x}, {v}) -> {x}
  %y = v8.linear "proj" decode %h, %w contract {linear} : ({x}, {w}) -> {x}
  %r = v8.residual_add "res" decode %y, %x contract {add} : ({x}, {x}) -> {x}
  func.return %r : {x}
}}
"""


@pytest.fixture(scope="module")
def program() -> Program:
    return build_program(graph())


@pytest.mark.parametrize("callers", [2, 4])
def test_program_run_from_several_threads(program: Program, callers: int) -> None:
    rng = np.random.default_rng(7)
    inputs: list[dict[str, Any]] = [
        {"x": rng.standard_normal((T, E)).astype(np.float32),
         "norm_w": rng.standard_normal(E).astype(np.float32),
         "w": rng.standard_normal((E, E)).astype(np.float32)}
        for _ in range(callers)]
    expected = [program.run("decode", workers=1, **args)[0] for args in inputs]
    program.run("decode", workers=3, **inputs[0])  # the shared pool exists before the threads start

    def body(i: int) -> None:
        for _ in range(200):
            out = program.run("decode", workers=3, **inputs[i])[0]
            assert np.array_equal(out.view(np.uint32), expected[i].view(np.uint32))

    run_threads(callers, body)
