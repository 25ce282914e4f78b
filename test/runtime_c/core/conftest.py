"""The runtime foundations compiled with a small threadpool probe."""

from __future__ import annotations

from types import ModuleType

import pytest

from v8dialect.runtime.cbuild import CBuild, build, runtime_cdef

# A task callback that counts, atomically, how often each task ran and which
# worker ran it, so the tests can prove "exactly once" for every task.
PROBE_SOURCE = r"""
#ifndef _GNU_SOURCE /* sched_getcpu, pthread_setaffinity_np: probe_placement */
#define _GNU_SOURCE 1
#endif
#include "v8_runtime.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

typedef struct probe_ctx {
    int32_t *counts;      /* [n_tasks] */
    int32_t *per_worker;  /* [n_workers] */
    int32_t *order;       /* NULL, or [n_workers][n_tasks]: each worker's tasks as it ran them */
    int64_t n_tasks;
    int32_t bad_worker;
    int n_workers;
    int spin;             /* busy work per task, so several workers take part */
} probe_ctx;

static void probe_task(void *raw, int64_t task, int worker) {
    probe_ctx *c = (probe_ctx *)raw;
    __atomic_fetch_add(&c->counts[task], 1, __ATOMIC_RELAXED);
    if (worker < 0 || worker >= c->n_workers) {
        __atomic_fetch_add(&c->bad_worker, 1, __ATOMIC_RELAXED);
    } else {
        const int32_t seq = __atomic_fetch_add(&c->per_worker[worker], 1, __ATOMIC_RELAXED);
        if (c->order != NULL) {
            c->order[(int64_t)worker * c->n_tasks + seq] = (int32_t)task;
        }
    }
    volatile int sink = 0;
    for (int i = 0; i < c->spin; ++i) {
        sink += i;
    }
    (void)sink;
}

int probe_run_order(v8_threadpool *pool, int64_t n_tasks, int32_t *counts, int32_t *per_worker,
                    int32_t *order, int spin, int32_t *bad_worker) {
    probe_ctx c;
    c.counts = counts;
    c.per_worker = per_worker;
    c.order = order;
    c.n_tasks = n_tasks;
    c.bad_worker = 0;
    c.n_workers = v8_threadpool_workers(pool);
    c.spin = spin;
    v8_status st = v8_parallel_for(pool, n_tasks, probe_task, &c);
    *bad_worker = c.bad_worker;
    return (int)st;
}

int probe_run(v8_threadpool *pool, int64_t n_tasks, int32_t *counts, int32_t *per_worker,
              int spin, int32_t *bad_worker) {
    return probe_run_order(pool, n_tasks, counts, per_worker, NULL, spin, bad_worker);
}

/* The scalar conversions over buffers of raw bits, so NaN payloads never
 * pass through a Python float (which would quiet a signalling NaN). */
void probe_scalar_f32_to_f16(const uint32_t *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        float f;
        memcpy(&f, &src[i], sizeof f);
        dst[i] = v8_f32_to_f16(f);
    }
}

void probe_scalar_f16_to_f32(const uint16_t *src, uint32_t *dst, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        float f = v8_f16_to_f32(src[i]);
        memcpy(&dst[i], &f, sizeof f);
    }
}

void probe_scalar_f32_to_bf16(const uint32_t *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        float f;
        memcpy(&f, &src[i], sizeof f);
        dst[i] = v8_f32_to_bf16(f);
    }
}

void probe_scalar_bf16_to_f32(const uint16_t *src, uint32_t *dst, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        float f = v8_bf16_to_f32(src[i]);
        memcpy(&dst[i], &f, sizeof f);
    }
}

/* the C library's expf per value, over raw bits (the oracle of v8_expf_array) */
void probe_libm_expf(const uint32_t *src, uint32_t *dst, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        float f;
        memcpy(&f, &src[i], sizeof f);
        f = expf(f);
        memcpy(&dst[i], &f, sizeof f);
    }
}

int probe_null_fn(v8_threadpool *pool) {
    return (int)v8_parallel_for(pool, 4, NULL, NULL);
}

int probe_negative(v8_threadpool *pool) {
    int32_t counts[1] = {0};
    int32_t per_worker[1] = {0};
    int32_t bad = 0;
    return probe_run(pool, -1, counts, per_worker, 0, &bad);
}

/* The vector-state audit: a 256-bit write puts the ymm upper halves in use, vzeroupper clears
 * them (AVX hosts only: the caller checks v8_cpu_features first). */
static void put_upper_in_use(void) { __asm__ volatile("vpcmpeqd %%ymm1, %%ymm1, %%ymm1" ::: "xmm1"); }
static void clear_upper(void) { __asm__ volatile("vzeroupper" ::: "memory"); }

void probe_upper_in_use(int in_use) {
    if (in_use) {
        put_upper_in_use();
    } else {
        clear_upper();
    }
}

static void clean_task(void *ctx, int64_t task, int worker) { (void)ctx, (void)task, (void)worker; }
static void dirty_task(void *ctx, int64_t task, int worker) {
    (void)ctx, (void)worker;
    if (task == 2) {
        put_upper_in_use();
    }
}

uintptr_t probe_task_address(int dirty) {
    return dirty ? (uintptr_t)dirty_task : (uintptr_t)clean_task;
}

/* One audited job of 4 tasks: dirty_start leaves the state in use before it, dirty_task has
 * task 2 leave it so.  Returns the finding; the state is clear again afterwards. */
uintptr_t probe_audited_job(v8_threadpool *pool, int dirty_start, int dirty_task_too,
                            int *at_job_start, int *status) {
    v8_threadpool_audit_upper(1);
    if (dirty_start) {
        put_upper_in_use();
    }
    *status = (int)v8_parallel_for(pool, 4, dirty_task_too ? dirty_task : clean_task, NULL);
    v8_threadpool_audit_upper(0);
    clear_upper();
    return v8_threadpool_audit_finding(at_job_start);
}

/* Helper placement: the calling thread, pinned to `cpu`, runs `jobs` jobs of two slow
 * tasks, idle for `idle_us` before each so the helper is asleep when the job wakes it.
 * Every task notes the CPU it starts on.  Returns the helper's tasks that started on the
 * caller's CPU (-1: the pin failed); *helper_tasks counts the helper's tasks. */
typedef struct placement_ctx {
    int cpu;
    int helper_tasks;
    int helper_on_caller;
} placement_ctx;

static void placement_task(void *raw, int64_t task, int worker) {
    placement_ctx *c = (placement_ctx *)raw;
    (void)task;
    if (worker != 0) {
        __atomic_fetch_add(&c->helper_tasks, 1, __ATOMIC_RELAXED);
        if (sched_getcpu() == c->cpu) {
            __atomic_fetch_add(&c->helper_on_caller, 1, __ATOMIC_RELAXED);
        }
    }
    volatile int sink = 0;
    for (int i = 0; i < 2000000; ++i) {
        sink += i;
    }
    (void)sink;
}

int probe_placement(v8_threadpool *pool, int cpu, int jobs, int idle_us, int *helper_tasks) {
    cpu_set_t before, one;
    if (pthread_getaffinity_np(pthread_self(), sizeof before, &before) != 0) {
        return -1;
    }
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) != 0) {
        return -1;
    }
    placement_ctx c = {cpu, 0, 0};
    const struct timespec idle = {0, (long)idle_us * 1000L};
    for (int j = 0; j < jobs; ++j) {
        nanosleep(&idle, NULL);
        (void)v8_parallel_for(pool, 2, placement_task, &c);
    }
    (void)pthread_setaffinity_np(pthread_self(), sizeof before, &before);
    *helper_tasks = c.helper_tasks;
    return c.helper_on_caller;
}
"""

PROBE_CDEF = """
int probe_run_order(v8_threadpool *pool, int64_t n_tasks, int32_t *counts, int32_t *per_worker,
                    int32_t *order, int spin, int32_t *bad_worker);
int probe_run(v8_threadpool *pool, int64_t n_tasks, int32_t *counts, int32_t *per_worker,
              int spin, int32_t *bad_worker);
int probe_null_fn(v8_threadpool *pool);
void probe_libm_expf(const uint32_t *src, uint32_t *dst, size_t n);
void probe_scalar_f32_to_f16(const uint32_t *src, uint16_t *dst, size_t n);
void probe_scalar_f16_to_f32(const uint16_t *src, uint32_t *dst, size_t n);
void probe_scalar_f32_to_bf16(const uint32_t *src, uint16_t *dst, size_t n);
void probe_scalar_bf16_to_f32(const uint16_t *src, uint32_t *dst, size_t n);
int probe_negative(v8_threadpool *pool);
void probe_upper_in_use(int in_use);
uintptr_t probe_task_address(int dirty);
uintptr_t probe_audited_job(v8_threadpool *pool, int dirty_start, int dirty_task_too,
                            int *at_job_start, int *status);
int probe_placement(v8_threadpool *pool, int cpu, int jobs, int idle_us, int *helper_tasks);
"""


@pytest.fixture(scope="session")
def core() -> ModuleType:
    return build(CBuild(name="v8_core_probe", cdef=runtime_cdef() + PROBE_CDEF,
                        source=PROBE_SOURCE))
