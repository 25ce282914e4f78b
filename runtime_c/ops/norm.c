/* RMSNorm and QK-norm, contract *_fp32_fp64_sum_ascending (see ops/v8_ops.h).
 *
 * The arithmetic is ggml's rms_norm followed by mul: squares rounded to fp32,
 * summed in fp64 in ascending order, the mean rounded to fp32, and the
 * weight applied after the scale.  The fp64 sum is one serial dependency
 * chain by definition, so there is no SIMD variant over one row that keeps
 * the bits (lanes would reassociate the sum); production runs several rows'
 * chains side by side instead (vector lanes across rows on AVX2, scalar
 * registers otherwise), and the threadpool splits rows. */
#include <math.h>
#include <string.h>

#include "ops/ops_internal.h"
#include "v8_runtime.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define NORM_X86 1
#endif

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

#ifdef NORM_X86
/* Eight rows' chains in two 4-lane fp64 registers, lane r holding row r's sum.
 * An 8 x 8 block of the rows' squares is transposed so that column i (element
 * i of every row) is one vector: each lane then adds its own row's squares in
 * ascending order, as the oracle does, with one add per column for all eight
 * rows.  A square is the same fp32 product as the scalar one, widened exactly. */
__attribute__((target("avx2"))) static void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int k = 0; k < 4; ++k) {
        t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 2; ++k) {       /* rows 4k..4k+3: columns (0,4) (1,5) (2,6) (3,7) */
        u[4 * k] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
        u[4 * k + 1] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0xEE);
        u[4 * k + 2] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
        u[4 * k + 3] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xEE);
    }
    for (int c = 0; c < 4; ++c) {
        r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
        r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
    }
}

__attribute__((target("avx2"))) static void sum_squares8_avx2(const float *x, int64_t n,
                                                             double sum[8]) {
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();   /* rows 0-3, 4-7 */
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 col[8];
        for (int r = 0; r < 8; ++r) {
            const __m256 v = _mm256_loadu_ps(x + r * n + i);
            col[r] = _mm256_mul_ps(v, v);
        }
        transpose8(col);
        for (int c = 0; c < 8; ++c) {
            lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(col[c])));
            hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(col[c], 1)));
        }
    }
    _mm256_storeu_pd(sum, lo);
    _mm256_storeu_pd(sum + 4, hi);
    for (; i < n; ++i) {                 /* the rest, each chain continuing in order */
        for (int r = 0; r < 8; ++r) {
            sum[r] += square(x[r * n + i]);
        }
    }
}

/* scale_row eight lanes at a time, the same two roundings per lane. */
__attribute__((target("avx2"))) static void scale_row_avx2(float *y, const float *x, const float *w,
                                                          int64_t n, float scale) {
    const __m256 s = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), s);
        _mm256_storeu_ps(y + i, _mm256_mul_ps(v, _mm256_loadu_ps(w + i)));
    }
    _mm256_zeroupper(); /* GCC 12 omits it before this tail call into baseline code */
    scale_row(y + i, x + i, w + i, n - i, scale);
}
#endif

/* The sums of nr rows' squares (8 only with AVX2, 4, or 1), and their scaling. */
static void row_sums(const float *x, int64_t n, int nr, double sum[8]) {
#ifdef NORM_X86
    if (nr == 8) {
        sum_squares8_avx2(x, n, sum);
        return;
    }
#endif
    if (nr == 4) {
        sum_squares4(x, n, sum);
    } else {
        sum[0] = sum_squares1(x, n);
    }
}

static void scale_row_isa(int simd, float *y, const float *x, const float *w, int64_t n,
                          float scale) {
#ifdef NORM_X86
    if (simd) {
        scale_row_avx2(y, x, w, n, scale);
        return;
    }
#endif
    (void)simd;
    scale_row(y, x, w, n, scale);
}

/* Rows [r0, r1): eight chains at a time with AVX2, else four, the rest one by one. */
static void norm_rows(const norm_args *a, int64_t r0, int64_t r1) {
    const int64_t n = a->n;
#ifdef NORM_X86
    const int simd = v8_cpu_best_isa() >= V8_ISA_AVX2;
#else
    const int simd = 0;
#endif
    int nr;
    for (int64_t rg = r0; rg < r1; rg += nr) {
        const int64_t left = r1 - rg;
        nr = simd && left >= 8 ? 8 : left >= 4 ? 4 : 1;
        double sum[8];
        row_sums(a->x + rg * n, n, nr, sum);
        for (int j = 0; j < nr; ++j) {
            const int64_t r = rg + j;
            const float scale = 1.0f / sqrtf((float)(sum[j] / (double)n) + a->eps);
            scale_row_isa(simd, a->y + r * n, a->x + r * n, a->w, n, scale);
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
