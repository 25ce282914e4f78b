/* Shared by the runtime_c/ops sources (not part of the public API). */
#ifndef V8_OPS_INTERNAL_H
#define V8_OPS_INTERNAL_H

#include <float.h>

#include "ops/v8_ops.h"

/* The contracts are written in IEEE single operations.  Excess precision
 * (x87) or value-changing optimisation would silently change the bits.
 * FLT_EVAL_METHOD 16 (AVX512-FP16 targets) only widens _Float16 and still
 * evaluates float as float. */
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0 && FLT_EVAL_METHOD != 16
#error "runtime_c/ops needs float arithmetic evaluated in float (FLT_EVAL_METHOD 0)"
#endif
#if defined(__FAST_MATH__)
#error "runtime_c/ops must not be compiled with -ffast-math: the contracts pin every rounding"
#endif

/* No contraction of a*b+c into an FMA, whatever -ffp-contract or -std=gnu*
 * the includer uses: every product is rounded before it is added.  GCC
 * ignores the standard pragma (and warns), so it gets its own spelling. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* Splits n_items into contiguous task ranges.  A few tasks per worker keep
 * the pool balanced; the split never changes results because every task
 * owns disjoint outputs. */
typedef struct v8_ops_chunks {
    int64_t n_items;
    int64_t per_task;
    int64_t n_tasks;
} v8_ops_chunks;

static inline v8_ops_chunks v8_ops_split(int64_t n_items, int n_workers, int64_t min_per_task) {
    v8_ops_chunks c;
    int64_t want = (int64_t)n_workers * 4;
    if (min_per_task < 1) {
        min_per_task = 1;
    }
    int64_t per = (n_items + want - 1) / want;
    if (per < min_per_task) {
        per = min_per_task;
    }
    c.n_items = n_items;
    c.per_task = per;
    c.n_tasks = (n_items + per - 1) / per;
    return c;
}

/* v8_ops_split with tasks of at most max_per_task items (unless min_per_task asks for more):
 * for long streaming jobs, where the worker that finishes first waits for the other's last
 * task. */
static inline v8_ops_chunks v8_ops_split_capped(int64_t n_items, int n_workers, int64_t min_per_task,
                                                int64_t max_per_task) {
    v8_ops_chunks c = v8_ops_split(n_items, n_workers, min_per_task);
    if (max_per_task >= 1 && c.per_task > max_per_task && max_per_task >= min_per_task) {
        c.per_task = max_per_task;
        c.n_tasks = (n_items + max_per_task - 1) / max_per_task;
    }
    return c;
}

static inline void v8_ops_chunk_range(const v8_ops_chunks *c, int64_t task, int64_t *begin,
                                      int64_t *end) {
    int64_t b = task * c->per_task;
    int64_t e = b + c->per_task;
    *begin = b;
    *end = e < c->n_items ? e : c->n_items;
}

/* Largest element count a kernel accepts for one buffer, so index
 * arithmetic in int64_t (and size_t byte counts) never overflows. */
#define V8_OPS_MAX_ELEMENTS ((int64_t)1 << 40)

/* a * b <= V8_OPS_MAX_ELEMENTS for positive a, b, without overflowing. */
static inline int v8_ops_product_ok(int64_t a, int64_t b) {
    return a >= 1 && b >= 1 && a <= V8_OPS_MAX_ELEMENTS / b;
}

#endif /* V8_OPS_INTERNAL_H */
