/* RMSNorm and QK-norm, contract *_fp32_fp64_sum_ascending (see ops/v8_ops.h).
 *
 * The arithmetic is ggml's rms_norm followed by mul: squares rounded to fp32,
 * summed in fp64 in ascending order, the mean rounded to fp32, and the
 * weight applied after the scale.  The fp64 sum is one serial dependency
 * chain by definition, so there is no SIMD variant that keeps the bits
 * (lanes would reassociate the sum); the production path is the scalar row
 * routine and the threadpool splits rows. */
#include <math.h>

#include "ops/ops_internal.h"

typedef struct norm_args {
    float *y;
    const float *x;
    const float *w;
    int64_t n_rows;
    int64_t n;       /* row length */
    float eps;
} norm_args;

static v8_status check_norm(int contract, int expected, const float *y, const float *x,
                            const float *w, int64_t n_rows, int64_t n, float eps) {
    V8_REQUIRE(contract == expected, V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && x != NULL && w != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(v8_ops_product_ok(n_rows, n), V8_ERR_BAD_DIMENSION);
    /* ggml asserts eps >= 0; a NaN eps fails this comparison too. */
    V8_REQUIRE(eps >= 0.0f && eps <= FLT_MAX, V8_ERR_BAD_DIMENSION);
    return V8_OK;
}

/* ---- oracle: the contract written out literally ------------------------ */

static void norm_oracle(const norm_args *a) {
    for (int64_t r = 0; r < a->n_rows; ++r) {
        const float *x = a->x + r * a->n;
        float *y = a->y + r * a->n;
        double sum = 0.0;
        for (int64_t i = 0; i < a->n; ++i) {
            float sq = x[i] * x[i];
            sum = sum + (double)sq;
        }
        float mean = (float)(sum / (double)a->n);
        float scale = 1.0f / sqrtf(mean + a->eps);
        for (int64_t i = 0; i < a->n; ++i) {
            float scaled = x[i] * scale;
            y[i] = scaled * a->w[i];
        }
    }
}

/* ---- production rows (also the threadpool's unit of work) -------------- */

static void norm_rows(const norm_args *a, int64_t r0, int64_t r1) {
    const int64_t n = a->n;
    for (int64_t r = r0; r < r1; ++r) {
        const float *restrict x = a->x + r * n;
        double sum = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            sum += (double)(x[i] * x[i]);
        }
        const float scale = 1.0f / sqrtf((float)(sum / (double)n) + a->eps);
        /* Elementwise from here on: compilers may vectorise this loop without
         * changing any bits (each lane does the same two roundings).  y may
         * alias x exactly, so no restrict on either. */
        float *y = a->y + r * n;
        const float *xr = a->x + r * n;
        for (int64_t i = 0; i < n; ++i) {
            y[i] = (xr[i] * scale) * a->w[i];
        }
    }
}

typedef struct norm_job {
    norm_args args;
    v8_ops_chunks chunks;
} norm_job;

static void norm_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const norm_job *job = (const norm_job *)ctx;
    int64_t r0, r1;
    v8_ops_chunk_range(&job->chunks, task, &r0, &r1);
    norm_rows(&job->args, r0, r1);
}

static v8_status norm_parallel(v8_threadpool *pool, const norm_args *a) {
    norm_job job;
    job.args = *a;
    /* Rows of a few hundred elements are cheap: keep ~16k elements per task. */
    int64_t min_rows = (int64_t)16384 / a->n;
    job.chunks = v8_ops_split(a->n_rows, v8_threadpool_workers(pool), min_rows);
    return v8_parallel_for(pool, job.chunks.n_tasks, norm_task, &job);
}

static norm_args make_args(float *y, const float *x, const float *w, int64_t n_rows,
                           int64_t n, float eps) {
    norm_args a;
    a.y = y;
    a.x = x;
    a.w = w;
    a.n_rows = n_rows;
    a.n = n;
    a.eps = eps;
    return a;
}

/* ---- RMSNorm ------------------------------------------------------------- */

v8_status v8_rmsnorm_f32_ref(int contract, float *y, const float *x, const float *w,
                             int64_t n_rows, int64_t n, float eps) {
    v8_status st = check_norm(contract, V8_RMSNORM_FP32_FP64_SUM_ASCENDING, y, x, w, n_rows, n,
                              eps);
    if (st != V8_OK) {
        return st;
    }
    norm_args a = make_args(y, x, w, n_rows, n, eps);
    norm_oracle(&a);
    return V8_OK;
}

v8_status v8_rmsnorm_f32(int contract, float *y, const float *x, const float *w,
                         int64_t n_rows, int64_t n, float eps) {
    v8_status st = check_norm(contract, V8_RMSNORM_FP32_FP64_SUM_ASCENDING, y, x, w, n_rows, n,
                              eps);
    if (st != V8_OK) {
        return st;
    }
    norm_args a = make_args(y, x, w, n_rows, n, eps);
    norm_rows(&a, 0, n_rows);
    return V8_OK;
}

v8_status v8_rmsnorm_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                           const float *x, const float *w, int64_t n_rows,
                                           int64_t n, float eps) {
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    v8_status st = check_norm(contract, V8_RMSNORM_FP32_FP64_SUM_ASCENDING, y, x, w, n_rows, n,
                              eps);
    if (st != V8_OK) {
        return st;
    }
    norm_args a = make_args(y, x, w, n_rows, n, eps);
    return norm_parallel(pool, &a);
}

/* ---- QK-norm: the same rows, one per (token, head) ------------------------ */

static v8_status check_qk(int contract, const float *y, const float *x, const float *w,
                          int64_t n_tokens, int64_t n_head, int64_t head_dim, float eps) {
    V8_REQUIRE(contract == V8_QK_NORM_FP32_FP64_SUM_ASCENDING, V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(v8_ops_product_ok(n_tokens, n_head), V8_ERR_BAD_DIMENSION);
    return check_norm(contract, V8_QK_NORM_FP32_FP64_SUM_ASCENDING, y, x, w, n_tokens * n_head,
                      head_dim, eps);
}

v8_status v8_qk_norm_f32_ref(int contract, float *y, const float *x, const float *w,
                             int64_t n_tokens, int64_t n_head, int64_t head_dim, float eps) {
    v8_status st = check_qk(contract, y, x, w, n_tokens, n_head, head_dim, eps);
    if (st != V8_OK) {
        return st;
    }
    norm_args a = make_args(y, x, w, n_tokens * n_head, head_dim, eps);
    norm_oracle(&a);
    return V8_OK;
}

v8_status v8_qk_norm_f32(int contract, float *y, const float *x, const float *w,
                         int64_t n_tokens, int64_t n_head, int64_t head_dim, float eps) {
    v8_status st = check_qk(contract, y, x, w, n_tokens, n_head, head_dim, eps);
    if (st != V8_OK) {
        return st;
    }
    norm_args a = make_args(y, x, w, n_tokens * n_head, head_dim, eps);
    norm_rows(&a, 0, a.n_rows);
    return V8_OK;
}

v8_status v8_qk_norm_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                           const float *x, const float *w, int64_t n_tokens,
                                           int64_t n_head, int64_t head_dim, float eps) {
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    v8_status st = check_qk(contract, y, x, w, n_tokens, n_head, head_dim, eps);
    if (st != V8_OK) {
        return st;
    }
    norm_args a = make_args(y, x, w, n_tokens * n_head, head_dim, eps);
    return norm_parallel(pool, &a);
}
