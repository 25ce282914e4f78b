/* RMSNorm and QK-norm, contract *_fp32_fp64_sum_ascending (see ops/v8_ops.h).
 *
 * The arithmetic is ggml's rms_norm followed by mul: squares rounded to fp32,
 * summed in fp64 in ascending order, the mean rounded to fp32, and the
 * weight applied after the scale.  The fp64 sum is one serial dependency
 * chain by definition, so there is no SIMD variant over one row that keeps
 * the bits (lanes would reassociate the sum); the production path is the
 * scalar row routine, running several rows' chains side by side, and the
 * threadpool splits rows. */
#include <math.h>
#include <string.h>

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

/* The fp64 sum of a row is one serial chain (an add's latency per element),
 * which left the adder idle most of the time; four rows' chains run side by
 * side instead, each in its own register, each still summing its own squares
 * in ascending order, so the bits are the oracle's. */
static inline double square(float v) {
    return (double)(v * v);
}

static void sum_squares4(const float *x, int64_t n, double sum[4]) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        s0 += square(x[i]);
        s1 += square(x[n + i]);
        s2 += square(x[2 * n + i]);
        s3 += square(x[3 * n + i]);
    }
    sum[0] = s0;
    sum[1] = s1;
    sum[2] = s2;
    sum[3] = s3;
}

static double sum_squares1(const float *x, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        s += square(x[i]);
    }
    return s;
}

/* y[i] = (x[i] * scale) * w[i], each lane the same two roundings as the
 * oracle's.  y may alias x exactly, which keeps compilers from vectorising
 * the plain loop (they would have to prove the rows apart); four lanes at a
 * time, each group loaded before it is stored, are correct either way. */
typedef float norm_f4 __attribute__((vector_size(16)));

static void scale_row(float *y, const float *x, const float *w, int64_t n, float scale) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        norm_f4 xv, wv;
        memcpy(&xv, x + i, sizeof xv);
        memcpy(&wv, w + i, sizeof wv);
        const norm_f4 yv = (xv * scale) * wv;
        memcpy(y + i, &yv, sizeof yv);
    }
    for (; i < n; ++i) {
        y[i] = (x[i] * scale) * w[i];
    }
}

static void norm_rows(const norm_args *a, int64_t r0, int64_t r1) {
    const int64_t n = a->n;
    for (int64_t rg = r0; rg < r1; rg += 4) {
        const int nr = r1 - rg < 4 ? (int)(r1 - rg) : 4;
        double sum[4];
        if (nr == 4) {
            sum_squares4(a->x + rg * n, n, sum);
        } else {
            for (int j = 0; j < nr; ++j) {
                sum[j] = sum_squares1(a->x + (rg + j) * n, n);
            }
        }
        for (int j = 0; j < nr; ++j) {
            const int64_t r = rg + j;
            const float scale = 1.0f / sqrtf((float)(sum[j] / (double)n) + a->eps);
            scale_row(a->y + r * n, a->x + r * n, a->w, n, scale);
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
