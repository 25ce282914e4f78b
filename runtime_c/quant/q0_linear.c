/* Quantized linear entry points for the 32-element block formats: Q8_0,
 * Q5_0 and Q4_0 weights x Q8_0 activations, Q4_1 and Q5_1 x Q8_1
 * (contracts *_x_q8_0_fp32_block_order / *_x_q8_1_fp32_block_order, see
 * v8_quant.h).
 *
 * As for the K-quants, each provider has the scalar contract oracle (*_ref),
 * the production function (AVX-512 / AVX2 / scalar chosen at run time by
 * v8_cpu_best_isa, VNNI only when the CPU reports it) and
 * *_parallel_dispatch, which gives each output to one task whole
 * (independent_rows for GEMV, output_tiles for GEMM), so bits never depend
 * on the worker count. */
#include <immintrin.h>
#include <math.h>

#include "quant/ql_internal.h"

/* a: activation blocks (Q8_0 or Q8_1 as the format pairs), lda in blocks */
typedef void (*ql0_tile_fn)(ql0_format fmt, float *y, int64_t ldy, const uint8_t *w,
                            size_t row_bytes, int64_t nblk, const uint8_t *a, int64_t lda,
                            int64_t ntok, int64_t nrows);
typedef void (*ql0_quant_fn)(const float *x, uint8_t *y, int64_t rows, int64_t k);

/* One core/simd.h selection per variant over the bodies of q0_kernels.inc; the VNNI build
 * is entered only when the CPU reports it. */
#define V8_SIMD_AVX2
#include "core/simd.h"
#include "quant/q0_kernels.inc"
#include "core/simd_end.h"

#define V8_SIMD_AVX512
#include "core/simd.h"
#include "quant/q0_kernels.inc"
#include "core/simd_end.h"

#define V8_SIMD_AVX512
#define V8_SIMD_VNNI
#include "core/simd.h"
#include "quant/q0_kernels.inc"
#include "core/simd_end.h"

/* Scalar variant: the oracle's lane model itself. */
static void q0_tile_scalar(ql0_format fmt, float *y, int64_t ldy, const uint8_t *w,
                           size_t row_bytes, int64_t nblk, const uint8_t *a, int64_t lda,
                           int64_t ntok, int64_t nrows) {
    const size_t abytes = ql0_act_bytes(fmt);
    for (int64_t t = 0; t < ntok; ++t) {
        for (int64_t r = 0; r < nrows; ++r) {
            y[t * ldy + r] = ql0_dot_ref(fmt, w + (size_t)r * row_bytes,
                                         a + (size_t)(t * lda) * abytes, nblk);
        }
    }
}

static void q80_rows_scalar(const float *x, uint8_t *y, int64_t rows, int64_t k) {
    (void)v8_quantize_q8_0(x, y, rows, k);
}

static void q81_rows_scalar(const float *x, uint8_t *y, int64_t rows, int64_t k) {
    (void)v8_quantize_q8_1(x, y, rows, k);
}

typedef struct {
    ql0_tile_fn tile;
    ql0_quant_fn quant;
} ql0_impl;

static ql0_impl ql0_impl_for(ql0_format fmt, int use_ref) {
    const int q81 = ql0_has_min(fmt);
    ql0_impl im = {q0_tile_scalar, q81 ? q81_rows_scalar : q80_rows_scalar};
    if (use_ref) {
        return im;
    }
    switch (v8_cpu_best_isa()) {
    case V8_ISA_AVX512:
        if (v8_cpu_features() & V8_CPU_AVX512VNNI) {
            im.tile = q0_tile_avx512vnni;
            im.quant = q81 ? q81_rows_avx512vnni : q80_rows_avx512vnni;
        } else {
            im.tile = q0_tile_avx512;
            im.quant = q81 ? q81_rows_avx512 : q80_rows_avx512;
        }
        return im;
    case V8_ISA_AVX2:
        im.tile = q0_tile_avx2;
        im.quant = q81 ? q81_rows_avx2 : q80_rows_avx2;
        return im;
    default:
        return im;
    }
}

static int ql0_selector(ql0_format fmt) {
    switch (fmt) {
    case QL0_Q8_0:
        return V8_QL_Q8_0_X_Q8_0_FP32_BLOCK_ORDER;
    case QL0_Q5_0:
        return V8_QL_Q5_0_X_Q8_0_FP32_BLOCK_ORDER;
    case QL0_Q4_0:
        return V8_QL_Q4_0_X_Q8_0_FP32_BLOCK_ORDER;
    case QL0_Q4_1:
        return V8_QL_Q4_1_X_Q8_1_FP32_BLOCK_ORDER;
    default:
        return V8_QL_Q5_1_X_Q8_1_FP32_BLOCK_ORDER;
    }
}

/* ---- work ----------------------------------------------------------------- */

typedef struct {
    ql0_format fmt;
    ql0_impl im;
    float *y;
    const uint8_t *w;
    const float *x;
    const float *bias;
    const uint8_t *a;
    int64_t m, n, nb;
    size_t row_bytes, act_bytes;
    int64_t row_tile, tok_tile, n_row_tiles;
} ql0_job;

static void ql0_run_tile(const ql0_job *j, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    j->im.tile(j->fmt, j->y + t0 * j->n + r0, j->n, j->w + (size_t)r0 * j->row_bytes,
               j->row_bytes, j->nb, j->a + (size_t)(t0 * j->nb) * j->act_bytes, j->nb, t1 - t0,
               r1 - r0);
    if (j->bias != NULL) {
        for (int64_t t = t0; t < t1; ++t) {
            for (int64_t r = r0; r < r1; ++r) {
                j->y[t * j->n + r] += j->bias[r]; /* after the complete dot */
            }
        }
    }
}

static void ql0_tile_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const ql0_job *j = (const ql0_job *)ctx;
    int64_t rt = task % j->n_row_tiles, tt = task / j->n_row_tiles;
    int64_t r0 = rt * j->row_tile, r1 = r0 + j->row_tile < j->n ? r0 + j->row_tile : j->n;
    int64_t t0 = tt * j->tok_tile, t1 = t0 + j->tok_tile < j->m ? t0 + j->tok_tile : j->m;
    ql0_run_tile(j, r0, r1, t0, t1);
}

typedef struct {
    ql0_quant_fn quant;
    const float *x;
    uint8_t *a;
    int64_t k, nb;
    size_t act_bytes;
} ql0_quant_job;

static void ql0_quant_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const ql0_quant_job *q = (const ql0_quant_job *)ctx;
    q->quant(q->x + task * q->k, q->a + (size_t)(task * q->nb) * q->act_bytes, 1, q->k);
}

static v8_status ql0_linear(v8_threadpool *pool, int use_ref, ql0_format fmt, int contract,
                            float *y, const void *w, const float *x, const float *bias,
                            int64_t m, int64_t n, int64_t k, void *scratch,
                            size_t scratch_bytes) {
    /* every check before the first write */
    V8_REQUIRE(contract == ql0_selector(fmt), V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && w != NULL && x != NULL && scratch != NULL, V8_ERR_NULL_ARGUMENT);
    /* K not a multiple of 32 is refused (ggml refuses it too) */
    V8_REQUIRE(m > 0 && n > 0 && k > 0 && k % V8_QK8_0 == 0, V8_ERR_BAD_DIMENSION);
    const size_t need = ql0_has_min(fmt) ? v8_ql1_gemm_scratch_bytes(m, k)
                                         : v8_ql0_gemm_scratch_bytes(m, k);
    V8_REQUIRE(need > 0 && scratch_bytes >= need, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(((uintptr_t)scratch & 1u) == 0, V8_ERR_BAD_DIMENSION); /* fp16 fields */
    ql0_job j;
    j.fmt = fmt;
    j.im = ql0_impl_for(fmt, use_ref);
    j.y = y;
    j.w = (const uint8_t *)w;
    j.x = x;
    j.bias = bias;
    j.a = (const uint8_t *)scratch;
    j.m = m;
    j.n = n;
    j.nb = k / V8_QK8_0;
    j.row_bytes = (size_t)j.nb * ql0_block_bytes(fmt);
    j.act_bytes = ql0_act_bytes(fmt);
    if (pool == NULL) {
        j.im.quant(x, (uint8_t *)scratch, m, k);
        /* weight-row tiles outermost so a tile stays in cache across tokens;
         * the order of independent outputs changes no bits */
        const int64_t rt = 16;
        for (int64_t r0 = 0; r0 < n; r0 += rt) {
            ql0_run_tile(&j, r0, r0 + rt < n ? r0 + rt : n, 0, m);
        }
        return V8_OK;
    }
    /* the activation: one task per token row when there is enough of it to
     * pay for a pool round trip, otherwise on the caller */
    ql0_quant_job qj = {j.im.quant, x, (uint8_t *)scratch, k, j.nb, j.act_bytes};
    const int64_t QL0_QUANT_SERIAL = (int64_t)1 << 18;
    const int scalar = j.im.quant == q80_rows_scalar || j.im.quant == q81_rows_scalar;
    if (m == 1 || (!scalar && m * k <= QL0_QUANT_SERIAL)) {
        j.im.quant(x, (uint8_t *)scratch, m, k);
    } else {
        v8_status st = v8_parallel_for(pool, m, ql0_quant_task, &qj);
        V8_REQUIRE(st == V8_OK, st);
    }
    /* output tiles: 32 weight rows x up to 32 tokens (one token tile: the
     * independent-rows partition of GEMV) */
    j.row_tile = 32;
    j.tok_tile = m < 32 ? m : 32;
    j.n_row_tiles = (n + j.row_tile - 1) / j.row_tile;
    const int64_t n_tok_tiles = (m + j.tok_tile - 1) / j.tok_tile;
    return v8_parallel_for(pool, j.n_row_tiles * n_tok_tiles, ql0_tile_task, &j);
}

/* ---- public entry points ---------------------------------------------------- */

#define QL0_ENTRY_POINTS(fmt, FMT)                                                             \
    v8_status v8_##fmt##_gemv_ref(int contract, float *y, const void *w, const float *x,      \
                                  const float *bias, int64_t n, int64_t k, void *scratch,     \
                                  size_t scratch_bytes) {                                     \
        return ql0_linear(NULL, 1, FMT, contract, y, w, x, bias, 1, n, k, scratch,            \
                          scratch_bytes);                                                     \
    }                                                                                         \
    v8_status v8_##fmt##_gemv(int contract, float *y, const void *w, const float *x,          \
                              const float *bias, int64_t n, int64_t k, void *scratch,         \
                              size_t scratch_bytes) {                                         \
        return ql0_linear(NULL, 0, FMT, contract, y, w, x, bias, 1, n, k, scratch,            \
                          scratch_bytes);                                                     \
    }                                                                                         \
    v8_status v8_##fmt##_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y,  \
                                                const void *w, const float *x,                \
                                                const float *bias, int64_t n, int64_t k,      \
                                                void *scratch, size_t scratch_bytes) {        \
        V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);                                       \
        return ql0_linear(pool, 0, FMT, contract, y, w, x, bias, 1, n, k, scratch,            \
                          scratch_bytes);                                                     \
    }                                                                                         \
    v8_status v8_##fmt##_gemm_ref(int contract, float *y, const void *w, const float *x,      \
                                  const float *bias, int64_t m, int64_t n, int64_t k,         \
                                  void *scratch, size_t scratch_bytes) {                      \
        return ql0_linear(NULL, 1, FMT, contract, y, w, x, bias, m, n, k, scratch,            \
                          scratch_bytes);                                                     \
    }                                                                                         \
    v8_status v8_##fmt##_gemm(int contract, float *y, const void *w, const float *x,          \
                              const float *bias, int64_t m, int64_t n, int64_t k,             \
                              void *scratch, size_t scratch_bytes) {                          \
        return ql0_linear(NULL, 0, FMT, contract, y, w, x, bias, m, n, k, scratch,            \
                          scratch_bytes);                                                     \
    }                                                                                         \
    v8_status v8_##fmt##_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,  \
                                                const void *w, const float *x,                \
                                                const float *bias, int64_t m, int64_t n,      \
                                                int64_t k, void *scratch,                     \
                                                size_t scratch_bytes) {                       \
        V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);                                       \
        return ql0_linear(pool, 0, FMT, contract, y, w, x, bias, m, n, k, scratch,            \
                          scratch_bytes);                                                     \
    }

QL0_ENTRY_POINTS(q8_0, QL0_Q8_0)
QL0_ENTRY_POINTS(q5_0, QL0_Q5_0)
QL0_ENTRY_POINTS(q4_0, QL0_Q4_0)
QL0_ENTRY_POINTS(q4_1, QL0_Q4_1)
QL0_ENTRY_POINTS(q5_1, QL0_Q5_1)
