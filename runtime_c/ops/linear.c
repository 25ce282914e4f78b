/* fp32 linear, contracts linear_fp32_ascending_fp32_accumulate and
 * logits_fp32_ascending_fp32_accumulate (see ops/v8_ops.h): one fp32
 * accumulator per output, k ascending, product and sum rounded separately,
 * bias after the complete dot.
 *
 * A SIMD dot product over k would reassociate the sum, so the AVX2 variant
 * vectorises across outputs instead: eight weight rows are transposed in
 * 8x8 tiles so lane p carries output n0 + p through exactly the scalar
 * sequence acc = acc + w*x (separate vmulps and vaddps, never an FMA).  It
 * therefore gives the oracle's bits on every CPU. */
#include "ops/ops_internal.h"

typedef struct lin_args {
    float *y;
    const float *w;
    const float *x;
    const float *bias;
    int64_t m, n, k;
} lin_args;

static v8_status prepare(int contract, lin_args *a, float *y, const float *w, const float *x,
                         const float *bias, int64_t m, int64_t n, int64_t k) {
    V8_REQUIRE(contract == V8_LINEAR_FP32_ASCENDING_FP32_ACCUMULATE ||
                   contract == V8_LOGITS_FP32_ASCENDING_FP32_ACCUMULATE,
               V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && w != NULL && x != NULL, V8_ERR_NULL_ARGUMENT); /* bias optional */
    V8_REQUIRE(v8_ops_product_ok(n, k), V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(v8_ops_product_ok(m, k), V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(v8_ops_product_ok(m, n), V8_ERR_BAD_DIMENSION);
    a->y = y;
    a->w = w;
    a->x = x;
    a->bias = bias;
    a->m = m;
    a->n = n;
    a->k = k;
    return V8_OK;
}

/* One output, the contract's sequence; shared by the oracle and the rows
 * the SIMD variant leaves over. */
static inline float dot_ascending(const float *w, const float *x, int64_t k) {
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
        const float p = w[j] * x[j];
        acc = acc + p;
    }
    return acc;
}

static void rows_scalar(const lin_args *a, int64_t n0, int64_t n1) {
    for (int64_t mi = 0; mi < a->m; ++mi) {
        const float *x = a->x + mi * a->k;
        float *y = a->y + mi * a->n;
        for (int64_t ni = n0; ni < n1; ++ni) {
            float acc = dot_ascending(a->w + ni * a->k, x, a->k);
            y[ni] = a->bias != NULL ? acc + a->bias[ni] : acc;
        }
    }
}

/* ---- AVX2 across eight outputs ---------------------------------------------- */

#define V8_SIMD_AVX2
#include "core/simd.h"
#include <immintrin.h>

/* r[q] lane p := in[p] lane q */
static inline void transpose8(__m256 r[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]);
    __m256 t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]);
    __m256 t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]);
    __m256 t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]);
    __m256 t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* Tokens share each transposed tile; four accumulators stay in registers. */
#define LIN_M_TILE 4

static void V8_SIMD_FN(rows)(const lin_args *a, int64_t n0, int64_t n1) {
    const int64_t k = a->k;
    const int64_t k8 = k - k % 8;
    int64_t nb = n0;
    for (; nb + 8 <= n1; nb += 8) {
        const float *wrow = a->w + nb * k;
        for (int64_t m0 = 0; m0 < a->m; m0 += LIN_M_TILE) {
            const int64_t mt = a->m - m0 < LIN_M_TILE ? a->m - m0 : LIN_M_TILE;
            __m256 acc[LIN_M_TILE];
            for (int q = 0; q < LIN_M_TILE; ++q) {
                acc[q] = _mm256_setzero_ps();
            }
            for (int64_t j = 0; j < k8; j += 8) {
                __m256 col[8];
                for (int p = 0; p < 8; ++p) {
                    col[p] = _mm256_loadu_ps(wrow + p * k + j);
                }
                transpose8(col);
                for (int64_t q = 0; q < mt; ++q) {
                    const float *x = a->x + (m0 + q) * k + j;
                    for (int jj = 0; jj < 8; ++jj) {
                        __m256 prod = _mm256_mul_ps(col[jj], _mm256_set1_ps(x[jj]));
                        acc[q] = _mm256_add_ps(acc[q], prod);
                    }
                }
            }
            for (int64_t j = k8; j < k; ++j) {
                __m256 col = _mm256_setr_ps(wrow[j], wrow[k + j], wrow[2 * k + j],
                                            wrow[3 * k + j], wrow[4 * k + j], wrow[5 * k + j],
                                            wrow[6 * k + j], wrow[7 * k + j]);
                for (int64_t q = 0; q < mt; ++q) {
                    __m256 prod = _mm256_mul_ps(col, _mm256_set1_ps(a->x[(m0 + q) * k + j]));
                    acc[q] = _mm256_add_ps(acc[q], prod);
                }
            }
            for (int64_t q = 0; q < mt; ++q) {
                __m256 out = acc[q];
                if (a->bias != NULL) {
                    out = _mm256_add_ps(out, _mm256_loadu_ps(a->bias + nb));
                }
                _mm256_storeu_ps(a->y + (m0 + q) * a->n + nb, out);
            }
        }
    }
    if (nb < n1) {
        rows_scalar(a, nb, n1);
    }
}
#include "core/simd_end.h"

static void rows_best(const lin_args *a, int64_t n0, int64_t n1) {
    /* AVX2 alone suffices (no FMA is used); AVX-512 hosts take it too. */
    if (v8_cpu_features() & V8_CPU_AVX2) {
        rows_avx2(a, n0, n1);
    } else {
        rows_scalar(a, n0, n1);
    }
}

/* ---- public functions --------------------------------------------------------- */

v8_status v8_linear_f32_ref(int contract, float *y, const float *w, const float *x,
                            const float *bias, int64_t m, int64_t n, int64_t k) {
    lin_args a;
    v8_status st = prepare(contract, &a, y, w, x, bias, m, n, k);
    if (st != V8_OK) {
        return st;
    }
    for (int64_t mi = 0; mi < m; ++mi) {
        for (int64_t ni = 0; ni < n; ++ni) {
            float acc = 0.0f;
            for (int64_t j = 0; j < k; ++j) {
                const float p = w[ni * k + j] * x[mi * k + j];
                acc = acc + p;
            }
            y[mi * n + ni] = bias != NULL ? acc + bias[ni] : acc;
        }
    }
    return V8_OK;
}

v8_status v8_linear_f32(int contract, float *y, const float *w, const float *x,
                        const float *bias, int64_t m, int64_t n, int64_t k) {
    lin_args a;
    v8_status st = prepare(contract, &a, y, w, x, bias, m, n, k);
    if (st != V8_OK) {
        return st;
    }
    rows_best(&a, 0, n);
    return V8_OK;
}

typedef struct lin_job {
    lin_args args;
    v8_ops_chunks chunks; /* over blocks of 8 output rows */
} lin_job;

static void lin_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const lin_job *job = (const lin_job *)ctx;
    int64_t b0, b1;
    v8_ops_chunk_range(&job->chunks, task, &b0, &b1);
    int64_t n1 = b1 * 8 < job->args.n ? b1 * 8 : job->args.n;
    rows_best(&job->args, b0 * 8, n1);
}

v8_status v8_linear_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                          const float *w, const float *x, const float *bias,
                                          int64_t m, int64_t n, int64_t k) {
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    lin_job job;
    v8_status st = prepare(contract, &job.args, y, w, x, bias, m, n, k);
    if (st != V8_OK) {
        return st;
    }
    /* Tasks own whole blocks of eight output rows (the SIMD width), so
     * each task is the same code path as the serial production run. */
    int64_t blocks = (n + 7) / 8;
    int64_t macs_per_block = 8 * m * k;
    job.chunks = v8_ops_split(blocks, v8_threadpool_workers(pool),
                              (int64_t)32768 / macs_per_block);
    return v8_parallel_for(pool, job.chunks.n_tasks, lin_task, &job);
}
