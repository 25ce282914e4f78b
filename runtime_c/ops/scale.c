/* Provider scale_fp32, contract scale_fp32_multiply: y[i] = x[i] * factor, one fp32
 * rounding per element (ggml_scale's ggml_vec_scale_f32 with no bias).  The oracle, the
 * production function and the threadpool dispatch over disjoint element ranges; every check
 * runs before the first write.  y may alias x exactly. */
#include <math.h>

#include "ops/ops_internal.h"

static v8_status check_scale(int contract, const float *y, const float *x, int64_t n,
                             float factor) {
    V8_REQUIRE(contract == V8_SCALE_FP32_MULTIPLY, V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && x != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(n >= 1 && n <= V8_OPS_MAX_ELEMENTS, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(isfinite(factor) && factor != 0.0f, V8_ERR_BAD_DIMENSION);
    return V8_OK;
}

/* The multiply has no order and no lanes to name: a vectorized loop gives these bits. */
static void scale_range(float *y, const float *x, float factor, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
        y[i] = x[i] * factor;
    }
}

v8_status v8_scale_f32_ref(int contract, float *y, const float *x, int64_t n, float factor) {
    v8_status st = check_scale(contract, y, x, n, factor);
    if (st != V8_OK) {
        return st;
    }
    for (int64_t i = 0; i < n; ++i) {
        const float xi = x[i];
        y[i] = xi * factor;
    }
    return V8_OK;
}

v8_status v8_scale_f32(int contract, float *y, const float *x, int64_t n, float factor) {
    v8_status st = check_scale(contract, y, x, n, factor);
    if (st != V8_OK) {
        return st;
    }
    scale_range(y, x, factor, 0, n);
    return V8_OK;
}

typedef struct scale_job {
    float *y;
    const float *x;
    float factor;
    v8_ops_chunks chunks;
} scale_job;

static void scale_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const scale_job *job = (const scale_job *)ctx;
    int64_t i0, i1;
    v8_ops_chunk_range(&job->chunks, task, &i0, &i1);
    scale_range(job->y, job->x, job->factor, i0, i1);
}

v8_status v8_scale_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const float *x, int64_t n, float factor) {
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    v8_status st = check_scale(contract, y, x, n, factor);
    if (st != V8_OK) {
        return st;
    }
    scale_job job = {y, x, factor, {0, 0, 0}};
    job.chunks = v8_ops_split(n, v8_threadpool_workers(pool), 4096);
    return v8_parallel_for(pool, job.chunks.n_tasks, scale_task, &job);
}
