"""CPU feature detection against /proc/cpuinfo, and the persistent threadpool:
every task runs exactly once, on a valid worker, for many task/worker counts."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Rung

ALL_FEATURES = 0xFFFFFFFF
# bit -> /proc/cpuinfo flag (v8_runtime.h's V8_CPU_* order)
FEATURE_FLAGS = {
    1 << 0: "avx2",
    1 << 1: "fma",
    1 << 2: "f16c",
    1 << 3: "avx512f",
    1 << 4: "avx512bw",
    1 << 5: "avx512vl",
    1 << 6: "avx512dq",
    1 << 7: "avx512_vnni",
}
AVX2_SET = (1 << 0) | (1 << 1) | (1 << 2)
AVX512_SET = AVX2_SET | (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6)
_V8 = constants(["v8_runtime.h"])
V8_OK = _V8["V8_OK"]
V8_ERR_NULL_ARGUMENT = _V8["V8_ERR_NULL_ARGUMENT"]
V8_ERR_BAD_DIMENSION = _V8["V8_ERR_BAD_DIMENSION"]


def cpuinfo_flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    raise AssertionError("no flags line in /proc/cpuinfo")


def test_cpu_features_match_cpuinfo(core: ModuleType, evidence: Callable[..., Any]) -> None:
    flags = cpuinfo_flags()
    features = core.lib.v8_cpu_features()
    disagreements = {name: {"cpuinfo": name in flags, "v8": bool(features & bit)}
                     for bit, name in FEATURE_FLAGS.items()
                     if (name in flags) != bool(features & bit)}
    # /proc/cpuinfo already hides what the OS does not enable (XSAVE state)
    best = core.lib.v8_cpu_best_isa()
    want_best = (2 if features & AVX512_SET == AVX512_SET
                 else 1 if features & AVX2_SET == AVX2_SET else 0)
    ok = not disagreements and best == want_best
    evidence(Rung.ORACLE, ok, provider="runtime_core.cpu", what="features vs /proc/cpuinfo",
             features=hex(features), best_isa=best, disagreements=disagreements)
    assert ok, (disagreements, best, want_best)


def cpuinfo_vendor() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("vendor_id"):
            return line.split(":", 1)[1].strip()
    raise AssertionError("no vendor_id line in /proc/cpuinfo")


@pytest.mark.parametrize("trait", ["V8_CPU_LINE_PREFETCH", "V8_CPU_WIDE_F16_NARROWING"])
def test_measured_traits_follow_the_vendor(core: ModuleType, trait: str) -> None:
    """The measured traits belong to every CPU but AMD's (v8_runtime.h), and like the ISA bits a
    restriction can mask them off."""
    lib = core.lib
    bit = _V8[trait]
    assert bool(lib.v8_cpu_features() & bit) == (cpuinfo_vendor() != "AuthenticAMD")
    try:
        lib.v8_cpu_restrict(ALL_FEATURES & ~bit)
        assert not lib.v8_cpu_features() & bit
    finally:
        lib.v8_cpu_restrict(ALL_FEATURES)


def test_cpu_restrict(core: ModuleType) -> None:
    lib = core.lib
    full = lib.v8_cpu_features()
    try:
        lib.v8_cpu_restrict(0)
        assert lib.v8_cpu_features() == 0
        assert lib.v8_cpu_best_isa() == 0
        lib.v8_cpu_restrict(AVX2_SET)
        assert lib.v8_cpu_features() == full & AVX2_SET
        assert lib.v8_cpu_best_isa() == (1 if full & AVX2_SET == AVX2_SET else 0)
        # a restriction never adds what the CPU lacks
        lib.v8_cpu_restrict(ALL_FEATURES)
        assert lib.v8_cpu_features() == full
    finally:
        lib.v8_cpu_restrict(ALL_FEATURES)


# ---- threadpool ---------------------------------------------------------------

def run_job(core: ModuleType, pool: Any, n_tasks: int, spin: int = 0
            ) -> tuple[int, np.ndarray, np.ndarray, int]:
    ffi, lib = core.ffi, core.lib
    workers = lib.v8_threadpool_workers(pool)
    counts = np.zeros(max(n_tasks, 1), dtype=np.int32)
    per_worker = np.zeros(workers, dtype=np.int32)
    bad = ffi.new("int32_t *")
    status = lib.probe_run(pool, n_tasks, ffi.from_buffer("int32_t[]", counts),
                           ffi.from_buffer("int32_t[]", per_worker), spin, bad)
    return status, counts[:n_tasks], per_worker, bad[0]


WORKERS = (1, 2, 3, 4, 8)
TASK_COUNTS = (0, 1, 2, 3, 5, 7, 8, 9, 16, 63, 64, 65, 1000, 4097)


@pytest.mark.parametrize("workers", WORKERS)
def test_every_task_exactly_once(core: ModuleType, workers: int,
                                 evidence: Callable[..., Any]) -> None:
    lib = core.lib
    pool = lib.v8_threadpool_create(workers)
    assert pool != core.ffi.NULL
    failures: list[str] = []
    jobs = 0
    try:
        assert lib.v8_threadpool_workers(pool) == workers
        for repeat in range(3):  # repeated jobs on the one pool
            for n_tasks in TASK_COUNTS:
                status, counts, per_worker, bad = run_job(core, pool, n_tasks,
                                                          spin=2000 if repeat == 0 else 0)
                jobs += 1
                if status != V8_OK or bad != 0 or not np.all(counts == 1) \
                        or int(per_worker.sum()) != n_tasks:
                    failures.append(f"n_tasks={n_tasks} repeat={repeat} status={status} "
                                    f"bad={bad} counts!=1: {int(np.sum(counts != 1))}")
        # many small jobs back to back: the wake/done handshake under churn
        for i in range(300):
            n_tasks = i % 11
            status, counts, per_worker, bad = run_job(core, pool, n_tasks)
            jobs += 1
            if status != V8_OK or bad != 0 or not np.all(counts == 1):
                failures.append(f"churn job {i}: status={status} bad={bad}")
    finally:
        lib.v8_threadpool_destroy(pool)
    evidence(Rung.THREADPOOL, not failures, provider="runtime_core.threadpool",
             what="every task exactly once", workers=workers, jobs=jobs, failures=failures[:5])
    assert not failures, failures[:5]


def test_several_workers_take_part(core: ModuleType) -> None:
    """With slow tasks, helpers must actually run some (the pool is not serial)."""
    pool = core.lib.v8_threadpool_create(4)
    try:
        status, counts, per_worker, bad = run_job(core, pool, 64, spin=200_000)
        assert status == V8_OK and bad == 0 and np.all(counts == 1)
        assert np.count_nonzero(per_worker) >= 2, per_worker
    finally:
        core.lib.v8_threadpool_destroy(pool)


def test_a_woken_helper_leaves_its_callers_cpu(core: ModuleType) -> None:
    """A helper woken onto the CPU its caller runs on moves off it before its first task
    (threadpool.c's step_aside): left there, the two share one CPU while another idles.
    The caller is pinned and the helper asleep before each job, the case a virtual CPU's
    wake-up placed beside the caller in about half the jobs."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs this process may run on")
    pool = core.lib.v8_threadpool_create(2)
    try:
        helper_tasks = core.ffi.new("int *")
        on_caller = core.lib.probe_placement(pool, cpus[0], 40, 5000, helper_tasks)
    finally:
        core.lib.v8_threadpool_destroy(pool)
    assert on_caller >= 0, "could not pin the calling thread"
    assert helper_tasks[0] > 0, "the helper never took part"
    assert on_caller == 0, f"{on_caller} of the helper's {helper_tasks[0]} tasks ran on the caller's CPU"


def spans(n_tasks: int, workers: int) -> list[range]:
    """Worker w's contiguous share of a job's tasks (the first n_tasks % workers get one more)."""
    share, extra = divmod(n_tasks, workers)
    bounds = [0]
    for w in range(workers):
        bounds.append(bounds[-1] + share + (w < extra))
    return [range(bounds[w], bounds[w + 1]) for w in range(workers)]


def span_walk_problem(order: list[int], own: int, parts: list[range]) -> str | None:
    """None if `order` is an increasing run of span `own`, then of own + 1, ... (wrapping)."""
    walk = [(own + k) % len(parts) for k in range(len(parts))]
    position = 0
    for i, task in enumerate(order):
        span = next(w for w, part in enumerate(parts) if task in part)
        while position < len(walk) and walk[position] != span:
            position += 1
        if position == len(walk):
            return f"task {task} (span {span}) out of the walk {walk} at step {i}: {order}"
        if i > 0 and order[i - 1] in parts[span] and order[i - 1] >= task:
            return f"span {span} not claimed in order: {order}"
    return None


@pytest.mark.parametrize("workers", (2, 3, 4))
def test_workers_walk_their_own_span_first(core: ModuleType, workers: int) -> None:
    """A worker claims its own contiguous span in order, then helps the next spans: its
    weight rows (GEMV tasks) are one sequential stream, not every workers-th task."""
    ffi, lib = core.ffi, core.lib
    pool = lib.v8_threadpool_create(workers)
    try:
        for n_tasks, spin in ((64, 20_000), (7, 50_000), (1000, 0)):
            for _ in range(5):
                counts = np.zeros(n_tasks, dtype=np.int32)
                per_worker = np.zeros(workers, dtype=np.int32)
                order = np.full((workers, n_tasks), -1, dtype=np.int32)
                bad = ffi.new("int32_t *")
                status = lib.probe_run_order(pool, n_tasks, ffi.from_buffer("int32_t[]", counts),
                                             ffi.from_buffer("int32_t[]", per_worker),
                                             ffi.from_buffer("int32_t[]", order), spin, bad)
                assert status == V8_OK and bad[0] == 0 and np.all(counts == 1)
                parts = spans(n_tasks, workers)
                for w in range(workers):
                    problem = span_walk_problem(order[w, :per_worker[w]].tolist(), w, parts)
                    assert problem is None, f"worker {w}, {n_tasks} tasks: {problem}"
    finally:
        lib.v8_threadpool_destroy(pool)


def test_one_task_runs_on_the_caller(core: ModuleType) -> None:
    """A one-task job is the caller's (worker 0): no helper is woken for it, however slow."""
    pool = core.lib.v8_threadpool_create(4)
    try:
        for _ in range(50):
            status, counts, per_worker, bad = run_job(core, pool, 1, spin=20_000)
            assert status == V8_OK and bad == 0 and np.all(counts == 1)
            assert per_worker.tolist() == [1, 0, 0, 0], per_worker
    finally:
        core.lib.v8_threadpool_destroy(pool)


def test_create_destroy_many_times(core: ModuleType) -> None:
    lib = core.lib
    for i in range(200):
        workers = WORKERS[i % len(WORKERS)]
        pool = lib.v8_threadpool_create(workers)
        assert pool != core.ffi.NULL
        if i % 3 == 0:  # some pools die without ever running a job
            status, counts, _, bad = run_job(core, pool, 17)
            assert status == V8_OK and bad == 0 and np.all(counts == 1)
        lib.v8_threadpool_destroy(pool)


def test_invalid_worker_counts(core: ModuleType) -> None:
    lib, ffi = core.lib, core.ffi
    for n in (0, -1, -1000, 257, 1 << 30):
        assert lib.v8_threadpool_create(n) == ffi.NULL, n
    assert lib.v8_threadpool_workers(ffi.NULL) == 0
    lib.v8_threadpool_destroy(ffi.NULL)  # a no-op, not a crash
    pool = lib.v8_threadpool_create(256)  # the documented maximum is accepted
    assert pool != ffi.NULL
    try:
        status, counts, _, bad = run_job(core, pool, 300)
        assert status == V8_OK and bad == 0 and np.all(counts == 1)
    finally:
        lib.v8_threadpool_destroy(pool)


def test_parallel_for_argument_checks(core: ModuleType) -> None:
    lib, ffi = core.lib, core.ffi
    pool = lib.v8_threadpool_create(2)
    try:
        assert lib.probe_null_fn(pool) == V8_ERR_NULL_ARGUMENT
        assert lib.probe_null_fn(ffi.NULL) == V8_ERR_NULL_ARGUMENT
        assert lib.probe_negative(pool) == V8_ERR_BAD_DIMENSION
        # the pool still works after rejected calls
        status, counts, _, bad = run_job(core, pool, 10)
        assert status == V8_OK and bad == 0 and np.all(counts == 1)
    finally:
        lib.v8_threadpool_destroy(pool)


def upper_state_readable(core: ModuleType) -> bool:
    return core.lib.v8_cpu_upper_state_dirty() >= 0 and bool(core.lib.v8_cpu_features() & AVX2_SET)


def test_upper_state_follows_the_registers(core: ModuleType) -> None:
    if not upper_state_readable(core):
        pytest.skip("no XGETBV with ECX = 1 or no AVX on this CPU")
    lib = core.lib
    lib.probe_upper_in_use(1)
    in_use = lib.v8_cpu_upper_state_dirty()
    lib.probe_upper_in_use(0)
    assert (in_use, lib.v8_cpu_upper_state_dirty()) == (1, 0)


@pytest.mark.parametrize("workers", (1, 2))
@pytest.mark.parametrize(("dirty_start", "dirty_task", "expect"), [
    (0, 0, None),          # nothing in use: no finding
    (0, 1, (1, 0)),        # task 2 leaves the halves in use: the dirty task, after a task
    (1, 0, (0, 1)),        # the code before the job did: the job's task, at its start
])
def test_audit_names_the_task_and_the_moment(core: ModuleType, workers: int, dirty_start: int,
                                             dirty_task: int, expect: tuple[int, int] | None) -> None:
    if not upper_state_readable(core):
        pytest.skip("no XGETBV with ECX = 1 or no AVX on this CPU")
    lib, ffi = core.lib, core.ffi
    pool = lib.v8_threadpool_create(workers)  # fresh: a helper left in use stays so
    try:
        at_start, status = ffi.new("int *"), ffi.new("int *")
        fn = lib.probe_audited_job(pool, dirty_start, dirty_task, at_start, status)
        assert status[0] == V8_OK
        if expect is None:
            assert fn == 0
        else:
            task_is_dirty, job_start = expect
            assert (fn, at_start[0]) == (lib.probe_task_address(task_is_dirty), job_start)
    finally:
        lib.v8_threadpool_destroy(pool)
