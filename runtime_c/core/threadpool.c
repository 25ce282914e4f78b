/* A persistent pthread pool.  Workers sleep on a condition variable between
 * jobs; the caller (worker 0) works on each job too.  A job's tasks are split
 * into one contiguous span per worker: a worker claims its own span's tasks
 * in order through that span's atomic counter, then helps finish the other
 * spans the same way.  Task-to-worker assignment is therefore still dynamic
 * (a late worker's tasks go to whoever is free, and a worker that wakes after
 * every task was claimed does not join at all): kernels make results
 * independent of it by giving every task disjoint outputs or its own partial
 * slot.
 *
 * Why spans and not one shared counter: a GEMV task is a run of weight rows,
 * and with one counter two workers take alternate tasks, so neither reads a
 * sequential stream; each one's software prefetch runs into the rows the
 * other is reading and every task starts on lines nobody fetched.  Measured
 * on AMD EPYC (Zen 4), 2 threads, the 196 repacked Q4_K / Q6_K GEMVs of a
 * 28-layer 1024-wide decode step, alternating in one process: 16.7-20.6 GB/s
 * with one counter, 24.2-26.9 GB/s with spans.
 *
 * A pool holds one job at a time.  Callers on several threads may share a
 * pool (a Program keeps one per worker count): each v8_parallel_for holds the
 * pool's dispatch mutex from publishing its job until its helpers are done,
 * so jobs run one after another, never mixed.  A task that dispatches on the
 * pool it is running on would wait for itself; it gets V8_ERR_BAD_THREADING. */
#ifndef _GNU_SOURCE /* sched_getcpu, pthread_{get,set}affinity_np: the helpers' CPU (below) */
#define _GNU_SOURCE 1
#endif
#include "v8_runtime.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

/* Tasks [next, end) of a job not yet claimed; `next` is claimed atomically.
 * One cache line each, so workers claiming from their own spans never share a line. */
typedef struct {
    int64_t next;
    int64_t end;
    char pad[64 - 2 * sizeof(int64_t)];
} task_span;

struct v8_threadpool {
    int n_workers;
    pthread_t *threads;
    pthread_mutex_t dispatch; /* held by the caller for a whole job */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_cond_t done;
    /* current job, guarded by lock except the atomic counters */
    uint64_t generation;
    int stopping;
    v8_task_fn fn;
    void *ctx;
    task_span *spans;      /* [n_workers]: worker w's share of the tasks */
    int open;              /* helpers may still join the current job */
    int active_helpers;    /* helpers that joined it and are still inside */
    int caller_cpu;        /* the CPU the current job's caller dispatched it from, or -1 */
};

typedef struct {
    v8_threadpool *pool;
    int worker;
} worker_arg;

/* The pool whose job this thread is working on, if any. */
static _Thread_local const v8_threadpool *inside_job;

/* The vector-state audit (v8_runtime.h): off, one relaxed load per task costs nothing. */
static int audit_on;
static uintptr_t audit_fn;   /* the first finding's task function, 0 while none */
static int audit_at_start;

static void audit(v8_task_fn fn, int at_job_start) {
    if (!__atomic_load_n(&audit_on, __ATOMIC_RELAXED) || v8_cpu_upper_state_dirty() != 1) {
        return;
    }
    uintptr_t none = 0;
    if (__atomic_compare_exchange_n(&audit_fn, &none, (uintptr_t)fn, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED)) {
        __atomic_store_n(&audit_at_start, at_job_start, __ATOMIC_RELEASE);
    }
}

void v8_threadpool_audit_upper(int on) {
    if (on) { /* a new audit: forget the last one's finding */
        __atomic_store_n(&audit_fn, 0, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&audit_on, on, __ATOMIC_RELEASE);
}

uintptr_t v8_threadpool_audit_finding(int *at_job_start) {
    const uintptr_t fn = __atomic_load_n(&audit_fn, __ATOMIC_ACQUIRE);
    if (at_job_start != NULL) {
        *at_job_start = fn != 0 && __atomic_load_n(&audit_at_start, __ATOMIC_ACQUIRE);
    }
    return fn;
}

static void run_tasks(v8_threadpool *pool, int worker) {
    const v8_threadpool *outer = inside_job;
    inside_job = pool;
    for (int k = 0; k < pool->n_workers; ++k) {
        task_span *span = &pool->spans[(worker + k) % pool->n_workers];
        for (;;) {
            const int64_t t = __atomic_fetch_add(&span->next, 1, __ATOMIC_RELAXED);
            if (t >= span->end) {
                break;
            }
            pool->fn(pool->ctx, t, worker);
            audit(pool->fn, 0);
        }
    }
    inside_job = outer;
}

/* Decode runs many short jobs back to back: a worker that goes to sleep the
 * moment a job ends pays a wake-up (tens of microseconds) on the next one.
 * Waiting parties therefore spin briefly on the shared counters before they
 * block; the counters are only ever changed under the lock, so the spin is
 * just an early look and the locked check below stays the authority. */
#define V8_SPIN_ROUNDS 20000

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void spin_while_equal(const uint64_t *value, uint64_t seen, const int *stopping) {
    for (int i = 0; i < V8_SPIN_ROUNDS; ++i) {
        if (__atomic_load_n(value, __ATOMIC_ACQUIRE) != seen ||
            __atomic_load_n(stopping, __ATOMIC_ACQUIRE)) {
            return;
        }
        cpu_relax();
    }
}

static void spin_while_positive(const int *value) {
    for (int i = 0; i < V8_SPIN_ROUNDS && __atomic_load_n(value, __ATOMIC_ACQUIRE) > 0; ++i) {
        cpu_relax();
    }
}

/* The CPU the calling thread runs on, or -1 where that is not known. */
static int current_cpu(void) {
#ifdef __linux__
    return sched_getcpu();
#else
    return -1;
#endif
}

/* A helper woken onto the CPU its caller runs on leaves it.
 *
 * The kernel chooses where a woken thread runs, and it may choose its waker's CPU
 * (wake-affine placement).  Caller and helper then share one CPU while the other
 * idles: the helper preempts the caller, and its spin between jobs takes the caller's
 * time.  Traced (sched_wakeup) on Intel Xeon under KVM, 2 vCPUs, a 2-layer 256-wide
 * model's 64-token prefill after 300 ms idle: 134 of 230 wake-ups put the helper on
 * the caller's CPU, and the 2-thread prefill took 4.2 ms (median) against 3.0 ms with
 * 1 thread.  Stepping aside, 2.1 ms against 2.2-2.5 ms; one decode-attention call
 * (KV 1058, 2 threads) after 20-300 ms idle took 0.70-0.86 of the time (same-process
 * A/B, both ways round).
 *
 * The helper excludes that CPU from its affinity for a moment, which moves it at once,
 * then takes back its whole affinity (it is never left pinned; where it runs next is
 * the scheduler's again).  Nothing else changes: every task has its own outputs, so no
 * result depends on which thread or CPU runs it. */
static void step_aside(int caller_cpu) {
#ifdef __linux__
    if (caller_cpu < 0 || current_cpu() != caller_cpu) {
        return;
    }
    cpu_set_t allowed, others;
    if (pthread_getaffinity_np(pthread_self(), sizeof allowed, &allowed) != 0) {
        return;
    }
    others = allowed;
    CPU_CLR(caller_cpu, &others);
    if (CPU_COUNT(&others) == 0 ||
        pthread_setaffinity_np(pthread_self(), sizeof others, &others) != 0) {
        return; /* nowhere else to go: share the CPU */
    }
    (void)pthread_setaffinity_np(pthread_self(), sizeof allowed, &allowed);
#else
    (void)caller_cpu;
#endif
}

static void *worker_main(void *raw) {
    worker_arg arg = *(worker_arg *)raw;
    free(raw);
    v8_threadpool *pool = arg.pool;
    uint64_t seen = 0;
    for (;;) {
        spin_while_equal(&pool->generation, seen, &pool->stopping);
        pthread_mutex_lock(&pool->lock);
        while (!pool->stopping && pool->generation == seen) {
            pthread_cond_wait(&pool->wake, &pool->lock);
        }
        if (pool->stopping) {
            break;
        }
        seen = pool->generation;
        if (!pool->open) { /* woke after the caller finished the job alone */
            pthread_mutex_unlock(&pool->lock);
            continue;
        }
        __atomic_add_fetch(&pool->active_helpers, 1, __ATOMIC_RELAXED);
        const int caller_cpu = pool->caller_cpu;
        pthread_mutex_unlock(&pool->lock);
        step_aside(caller_cpu);
        run_tasks(pool, arg.worker);
        pthread_mutex_lock(&pool->lock);
        if (__atomic_sub_fetch(&pool->active_helpers, 1, __ATOMIC_RELEASE) == 0) {
            pthread_cond_signal(&pool->done);
        }
        pthread_mutex_unlock(&pool->lock);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

static void stop_workers(v8_threadpool *pool, int started) {
    pthread_mutex_lock(&pool->lock);
    __atomic_store_n(&pool->stopping, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 0; i < started; ++i) {
        pthread_join(pool->threads[i], NULL);
    }
}

static void free_pool(v8_threadpool *pool) {
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->lock);
    pthread_mutex_destroy(&pool->dispatch);
    free(pool->threads);
    free(pool->spans);
    free(pool);
}

v8_threadpool *v8_threadpool_create(int n_workers) {
    if (n_workers < 1 || n_workers > V8_MAX_WORKERS) {
        return NULL;
    }
    v8_threadpool *pool = calloc(1, sizeof *pool);
    if (pool == NULL) {
        return NULL;
    }
    pool->n_workers = n_workers;
    pool->threads = calloc((size_t)n_workers, sizeof *pool->threads);
    pool->spans = aligned_alloc(64, (size_t)n_workers * sizeof *pool->spans);
    pthread_mutex_init(&pool->dispatch, NULL);
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    if (pool->threads == NULL || pool->spans == NULL) {
        free_pool(pool);
        return NULL;
    }
    for (int i = 1; i < n_workers; ++i) {
        worker_arg *arg = malloc(sizeof *arg);
        if (arg != NULL) {
            arg->pool = pool;
            arg->worker = i;
        }
        if (arg == NULL || pthread_create(&pool->threads[i - 1], NULL, worker_main, arg) != 0) {
            free(arg);
            stop_workers(pool, i - 1);
            free_pool(pool);
            return NULL;
        }
    }
    return pool;
}

void v8_threadpool_destroy(v8_threadpool *pool) {
    if (pool == NULL) {
        return;
    }
    stop_workers(pool, pool->n_workers - 1);
    free_pool(pool);
}

int v8_threadpool_workers(const v8_threadpool *pool) { return pool == NULL ? 0 : pool->n_workers; }

v8_status v8_parallel_for(v8_threadpool *pool, int64_t n_tasks, v8_task_fn fn, void *ctx) {
    V8_REQUIRE(pool != NULL && fn != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(n_tasks >= 0, V8_ERR_BAD_DIMENSION);
    if (n_tasks == 0) {
        return V8_OK;
    }
    V8_REQUIRE(inside_job != pool, V8_ERR_BAD_THREADING);
    audit(fn, 1);
    pthread_mutex_lock(&pool->dispatch);
    if (n_tasks == 1 || pool->n_workers == 1) {
        /* nothing to share: the caller runs the job as worker 0 without a round trip
         * through the helpers (decode has a few hundred such jobs per token: one-row
         * norms, RoPE of a few heads); the dispatch mutex still makes it the pool's
         * only job, so worker 0's per-worker state is its alone */
        const v8_threadpool *outer = inside_job;
        inside_job = pool;
        for (int64_t t = 0; t < n_tasks; ++t) {
            fn(ctx, t, 0);
            audit(fn, 0);
        }
        inside_job = outer;
        pthread_mutex_unlock(&pool->dispatch);
        return V8_OK;
    }
    pthread_mutex_lock(&pool->lock);
    pool->fn = fn;
    pool->ctx = ctx;
    const int64_t share = n_tasks / pool->n_workers, extra = n_tasks % pool->n_workers;
    int64_t begin = 0;
    for (int w = 0; w < pool->n_workers; ++w) {
        pool->spans[w].next = begin;
        begin += share + (w < extra);
        pool->spans[w].end = begin;
    }
    pool->open = 1;
    pool->caller_cpu = current_cpu();
    __atomic_store_n(&pool->generation, pool->generation + 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);

    run_tasks(pool, 0);

    /* Every task is claimed now; the job is done when the helpers that joined have
     * left.  A helper still asleep is not waited for: on virtual CPUs its wake after
     * idle can take milliseconds, and the caller has already run its tasks (AMD EPYC
     * KVM, 2 threads, a 2-layer 256-wide model's decode step after 20 ms idle: 11.5 ms
     * when every helper had to check in, 0.5-0.6 ms now).  It finds the job closed
     * when it wakes and waits for the next. */
    spin_while_positive(&pool->active_helpers);
    pthread_mutex_lock(&pool->lock);
    pool->open = 0;
    while (pool->active_helpers > 0) {
        pthread_cond_wait(&pool->done, &pool->lock);
    }
    pthread_mutex_unlock(&pool->lock);
    pthread_mutex_unlock(&pool->dispatch);
    return V8_OK;
}
