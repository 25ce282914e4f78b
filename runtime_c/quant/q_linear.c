/* Quantized linear entry points: Q4_K / Q5_K / Q6_K weights x Q8_K activations.
 *
 * Each provider has three functions with one argument list: the scalar
 * contract oracle (*_ref), the production function (AVX-512 / AVX2 / scalar
 * chosen at run time by v8_cpu_best_isa) and *_parallel_dispatch, which
 * splits work over the threadpool only along the partition its kernel map
 * declares.  Every independent-output partition gives each output to one
 * task whole, so bits never depend on the worker count; the split-K
 * provider's chunking is part of its own contract. */
#include <immintrin.h>
#include <math.h>

#include "quant/ql_internal.h"

/* ---- ISA variants ------------------------------------------------------ */

typedef void (*ql_rows_fn)(float *out, const uint8_t *w, size_t row_bytes, int64_t blk0,
                           int64_t nblk, const v8_block_q8_k *a, int64_t nrows);
/* GEMM tile: y[t*ldy + r] for rows [0, nrows) x tokens [0, ntok), token t's
 * activation blocks at a + t*lda; each weight super-block is decoded once
 * per group of tokens. */
typedef void (*ql_tile_fn)(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes,
                           int64_t blk0, int64_t nblk, const v8_block_q8_k *a, int64_t lda,
                           int64_t ntok, int64_t nrows);
/* Q8_K activation quantizer (q4k_order: the AVX-512 Q4_K chunk order) */
typedef void (*ql_quant_fn)(const float *x, v8_block_q8_k *a, int64_t rows, int64_t k,
                            int q4k_order);

/* Each variant is one core/simd.h selection over the same bodies: ql_simd.inc (AVX2) or
 * ql_avx512.inc, then the pair-mapped Q5_K kernels.  The AVX-512 bodies are built with and
 * without VNNI (same bits, see ql_avx512.inc); the VNNI build is entered only when the CPU
 * reports it. */
#define V8_SIMD_AVX2
#include "core/simd.h"
#include "quant/ql_simd.inc"
#include "quant/q5k_kernels.inc"
#include "core/simd_end.h"

#define V8_SIMD_AVX512
#include "core/simd.h"
#include "quant/ql_avx512.inc"
#include "quant/q5k_kernels.inc"
#include "core/simd_end.h"

#define V8_SIMD_AVX512
#define V8_SIMD_VNNI
#include "core/simd.h"
#include "quant/ql_avx512.inc"
#include "quant/q5k_kernels.inc"
#include "core/simd_end.h"

/* Scalar variant: the oracle's lane model itself. */
static void q4k_rows_scalar(float *out, const uint8_t *w, size_t row_bytes, int64_t blk0,
                            int64_t nblk, const v8_block_q8_k *a, int64_t nrows) {
    for (int64_t r = 0; r < nrows; ++r) {
        out[r] = ql_q4k_dot_ref((const v8_block_q4_k *)(w + (size_t)r * row_bytes) + blk0,
                                a + blk0, nblk);
    }
}

static void q6k_rows_scalar(float *out, const uint8_t *w, size_t row_bytes, int64_t blk0,
                            int64_t nblk, const v8_block_q8_k *a, int64_t nrows) {
    for (int64_t r = 0; r < nrows; ++r) {
        out[r] = ql_q6k_dot_ref((const v8_block_q6_k *)(w + (size_t)r * row_bytes) + blk0,
                                a + blk0, nblk);
    }
}

static void q5k_rows_scalar(float *out, const uint8_t *w, size_t row_bytes, int64_t blk0,
                            int64_t nblk, const v8_block_q8_k *a, int64_t nrows) {
    for (int64_t r = 0; r < nrows; ++r) {
        out[r] = ql_q5k_dot_ref((const v8_block_q5_k *)(w + (size_t)r * row_bytes) + blk0,
                                a + blk0, nblk);
    }
}

static void ql_quant_scalar(const float *x, v8_block_q8_k *a, int64_t rows, int64_t k,
                            int q4k_order) {
    (void)q4k_order;
    (void)v8_quantize_q8_k(x, a, rows, k);
}

typedef enum { QL_Q4K = 0, QL_Q6K = 1, QL_Q5K = 2 } ql_format;

/* One variant's kernels.  tile == NULL: GEMM runs rows() once per token.
 * q4k_order: the activation is stored in the AVX-512 Q4_K chunk order,
 * which only that variant's own kernels read. */
typedef struct {
    ql_rows_fn rows;
    ql_tile_fn tile;
    ql_quant_fn quant;
    int q4k_order;
} ql_impl;

static ql_impl ql_impl_for(ql_format fmt, int use_ref) {
    ql_impl im = {fmt == QL_Q4K ? q4k_rows_scalar : q6k_rows_scalar, NULL, ql_quant_scalar, 0};
    if (fmt == QL_Q5K) {
        im.rows = q5k_rows_scalar;
    }
    if (use_ref) {
        return im;
    }
    if (fmt == QL_Q5K) {
        switch (v8_cpu_best_isa()) {
        case V8_ISA_AVX512:
            if (v8_cpu_features() & V8_CPU_AVX512VNNI) {
                im.rows = q5k_rows_avx512vnni;
                im.tile = q5k_tile_avx512vnni;
                im.quant = q8k_rows_avx512vnni;
            } else {
                im.rows = q5k_rows_avx512;
                im.tile = q5k_tile_avx512;
                im.quant = q8k_rows_avx512;
            }
            return im;
        case V8_ISA_AVX2:
            im.rows = q5k_rows_avx2;
            im.tile = q5k_tile_avx2;
            return im;
        default:
            return im;
        }
    }
    switch (v8_cpu_best_isa()) {
    case V8_ISA_AVX512:
        if (v8_cpu_features() & V8_CPU_AVX512VNNI) {
            im.rows = fmt == QL_Q4K ? q4k_rows_avx512vnni : q6k_rows_avx512vnni;
            im.tile = fmt == QL_Q4K ? q4k_tile_avx512vnni : q6k_tile_avx512vnni;
            im.quant = q8k_rows_avx512vnni;
        } else {
            im.rows = fmt == QL_Q4K ? q4k_rows_avx512 : q6k_rows_avx512;
            im.tile = fmt == QL_Q4K ? q4k_tile_avx512 : q6k_tile_avx512;
            im.quant = q8k_rows_avx512;
        }
        im.q4k_order = fmt == QL_Q4K;
        return im;
    case V8_ISA_AVX2:
        im.rows = fmt == QL_Q4K ? q4k_rows_avx2 : q6k_rows_avx2;
        im.tile = fmt == QL_Q4K ? q4k_tile_avx2 : q6k_tile_avx2;
        return im;
    default:
        return im;
    }
}

static size_t ql_block_bytes(ql_format fmt) {
    return fmt == QL_Q4K ? sizeof(v8_block_q4_k)
           : fmt == QL_Q5K ? sizeof(v8_block_q5_k) : sizeof(v8_block_q6_k);
}

/* ---- argument checks (all before any write) --------------------------- */

static v8_status ql_check(int contract, int expected, float *y, const void *w, const float *x,
                          int64_t m, int64_t n, int64_t k, void *scratch, size_t scratch_bytes,
                          size_t need) {
    V8_REQUIRE(contract == expected, V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && w != NULL && x != NULL && scratch != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(m > 0 && n > 0 && k > 0 && k % V8_QK_K == 0, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(need > 0 && scratch_bytes >= need, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(((uintptr_t)scratch & 3u) == 0, V8_ERR_BAD_DIMENSION);
    return V8_OK;
}

/* ---- one tile: rows [r0, r1) x tokens [t0, t1) ------------------------ */

typedef struct {
    ql_format fmt;
    ql_impl im;
    float *y;
    const uint8_t *w;
    const float *x;
    const float *bias;
    const v8_block_q8_k *a;
    int64_t m, n, nb;
    size_t row_bytes;
    int64_t row_tile, tok_tile, n_row_tiles;
} ql_job;

static void ql_tile(const ql_job *j, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    const uint8_t *w = j->w + (size_t)r0 * j->row_bytes;
    if (j->im.tile != NULL && t1 - t0 > 1) {
        j->im.tile(j->y + t0 * j->n + r0, j->n, w, j->row_bytes, 0, j->nb, j->a + t0 * j->nb,
                   j->nb, t1 - t0, r1 - r0);
    } else {
        for (int64_t t = t0; t < t1; ++t) {
            j->im.rows(j->y + t * j->n + r0, w, j->row_bytes, 0, j->nb, j->a + t * j->nb, r1 - r0);
        }
    }
    if (j->bias != NULL) {
        for (int64_t t = t0; t < t1; ++t) {
            for (int64_t r = r0; r < r1; ++r) {
                j->y[t * j->n + r] += j->bias[r]; /* after the complete dot */
            }
        }
    }
}

static void ql_run_serial(const ql_job *j) {
    /* Walk weight-row tiles outermost so a tile stays in cache across tokens;
     * the order of independent outputs does not affect any bits. */
    for (int64_t r0 = 0; r0 < j->n; r0 += j->row_tile) {
        int64_t r1 = r0 + j->row_tile < j->n ? r0 + j->row_tile : j->n;
        ql_tile(j, r0, r1, 0, j->m);
    }
}

static void ql_tile_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const ql_job *j = (const ql_job *)ctx;
    int64_t rt = task % j->n_row_tiles, tt = task / j->n_row_tiles;
    int64_t r0 = rt * j->row_tile, r1 = r0 + j->row_tile < j->n ? r0 + j->row_tile : j->n;
    int64_t t0 = tt * j->tok_tile, t1 = t0 + j->tok_tile < j->m ? t0 + j->tok_tile : j->m;
    ql_tile(j, r0, r1, t0, t1);
}

typedef struct {
    const ql_impl *im;
    const float *x;
    v8_block_q8_k *a;
    int64_t k, nb;
} ql_quant_job;

static void ql_quant_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const ql_quant_job *q = (const ql_quant_job *)ctx;
    q->im->quant(q->x + task * q->k, q->a + task * q->nb, 1, q->k, q->im->q4k_order);
}

static v8_status ql_linear(v8_threadpool *pool, int use_ref, ql_format fmt, int contract,
                           float *y, const void *w, const float *x, const float *bias,
                           int64_t m, int64_t n, int64_t k, void *scratch, size_t scratch_bytes) {
    const int expected = fmt == QL_Q4K   ? V8_QL_Q4_K_X_Q8_K_FP32_BLOCK_ORDER
                         : fmt == QL_Q5K ? V8_QL_Q5_K_X_Q8_K_FP32_BLOCK_ORDER
                                         : V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER;
    v8_status st = ql_check(contract, expected, y, w, x, m, n, k, scratch, scratch_bytes,
                            v8_ql_gemm_scratch_bytes(m, k));
    V8_REQUIRE(st == V8_OK, st);
    ql_job j;
    j.fmt = fmt;
    j.im = ql_impl_for(fmt, use_ref);
    j.y = y;
    j.w = (const uint8_t *)w;
    j.x = x;
    j.bias = bias;
    j.a = (const v8_block_q8_k *)scratch;
    j.m = m;
    j.n = n;
    j.nb = k / V8_QK_K;
    j.row_bytes = (size_t)j.nb * ql_block_bytes(fmt);
    j.row_tile = 16;
    j.tok_tile = m;
    j.n_row_tiles = (n + j.row_tile - 1) / j.row_tile;
    if (pool == NULL) {
        j.im.quant(x, (v8_block_q8_k *)scratch, m, k, j.im.q4k_order);
        ql_run_serial(&j);
        return V8_OK;
    }
    /* Quantize each token's activation row as its own task (independent
     * rows).  The vectorized quantizer does ~4 elements per ns, so below
     * QL_QUANT_SERIAL elements one more pool round trip (a wake-up and a
     * completion wait) costs more than it saves: quantize on the caller. */
    ql_quant_job qj = {&j.im, x, (v8_block_q8_k *)scratch, k, j.nb};
    const int64_t QL_QUANT_SERIAL = (int64_t)1 << 18;
    if (m == 1 || (j.im.quant != ql_quant_scalar && m * k <= QL_QUANT_SERIAL)) {
        j.im.quant(x, (v8_block_q8_k *)scratch, m, k, j.im.q4k_order);
    } else {
        st = v8_parallel_for(pool, m, ql_quant_task, &qj);
        V8_REQUIRE(st == V8_OK, st);
    }
    /* Output tiles: 32 weight rows x up to 32 tokens; with one token-tile this
     * is the independent-rows partition of GEMV. */
    j.row_tile = 32;
    j.tok_tile = m < 32 ? m : 32;
    j.n_row_tiles = (n + j.row_tile - 1) / j.row_tile;
    int64_t n_tok_tiles = (m + j.tok_tile - 1) / j.tok_tile;
    return v8_parallel_for(pool, j.n_row_tiles * n_tok_tiles, ql_tile_task, &j);
}

/* ---- public: GEMV ----------------------------------------------------- */

v8_status v8_q4_k_gemv_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes) {
    return ql_linear(NULL, 1, QL_Q4K, contract, y, w, x, bias, 1, n, k, scratch, scratch_bytes);
}

v8_status v8_q4_k_gemv(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes) {
    return ql_linear(NULL, 0, QL_Q4K, contract, y, w, x, bias, 1, n, k, scratch, scratch_bytes);
}

v8_status v8_q4_k_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x, const float *bias,
                                         int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes) {
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    return ql_linear(pool, 0, QL_Q4K, contract, y, w, x, bias, 1, n, k, scratch, scratch_bytes);
}

v8_status v8_q6_k_gemv_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes) {
    return ql_linear(NULL, 1, QL_Q6K, contract, y, w, x, bias, 1, n, k, scratch, scratch_bytes);
}

v8_status v8_q6_k_gemv(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes) {
    return ql_linear(NULL, 0, QL_Q6K, contract, y, w, x, bias, 1, n, k, scratch, scratch_bytes);
}

v8_status v8_q6_k_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x, const float *bias,
                                         int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes) {
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    return ql_linear(pool, 0, QL_Q6K, contract, y, w, x, bias, 1, n, k, scratch, scratch_bytes);
}

v8_status v8_q5_k_gemv_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes) {
    return ql_linear(NULL, 1, QL_Q5K, contract, y, w, x, bias, 1, n, k, scratch, scratch_bytes);
}

v8_status v8_q5_k_gemv(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes) {
    return ql_linear(NULL, 0, QL_Q5K, contract, y, w, x, bias, 1, n, k, scratch, scratch_bytes);
}

v8_status v8_q5_k_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x, const float *bias,
                                         int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes) {
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    return ql_linear(pool, 0, QL_Q5K, contract, y, w, x, bias, 1, n, k, scratch, scratch_bytes);
}

/* ---- public: GEMM ----------------------------------------------------- */

v8_status v8_q4_k_gemm_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t m, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes) {
    return ql_linear(NULL, 1, QL_Q4K, contract, y, w, x, bias, m, n, k, scratch, scratch_bytes);
}

v8_status v8_q4_k_gemm(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t m, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes) {
    return ql_linear(NULL, 0, QL_Q4K, contract, y, w, x, bias, m, n, k, scratch, scratch_bytes);
}

v8_status v8_q4_k_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x, const float *bias,
                                         int64_t m, int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes) {
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    return ql_linear(pool, 0, QL_Q4K, contract, y, w, x, bias, m, n, k, scratch, scratch_bytes);
}

v8_status v8_q6_k_gemm_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t m, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes) {
    return ql_linear(NULL, 1, QL_Q6K, contract, y, w, x, bias, m, n, k, scratch, scratch_bytes);
}

v8_status v8_q6_k_gemm(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t m, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes) {
    return ql_linear(NULL, 0, QL_Q6K, contract, y, w, x, bias, m, n, k, scratch, scratch_bytes);
}

v8_status v8_q6_k_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x, const float *bias,
                                         int64_t m, int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes) {
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    return ql_linear(pool, 0, QL_Q6K, contract, y, w, x, bias, m, n, k, scratch, scratch_bytes);
}

v8_status v8_q5_k_gemm_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t m, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes) {
    return ql_linear(NULL, 1, QL_Q5K, contract, y, w, x, bias, m, n, k, scratch, scratch_bytes);
}

v8_status v8_q5_k_gemm(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t m, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes) {
    return ql_linear(NULL, 0, QL_Q5K, contract, y, w, x, bias, m, n, k, scratch, scratch_bytes);
}

v8_status v8_q5_k_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x, const float *bias,
                                         int64_t m, int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes) {
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    return ql_linear(pool, 0, QL_Q5K, contract, y, w, x, bias, m, n, k, scratch, scratch_bytes);
}

/* ---- split-K GEMV ----------------------------------------------------- */

typedef struct {
    ql_rows_fn rows;
    float *partials; /* [parts][n] */
    const uint8_t *w;
    const v8_block_q8_k *a;
    int64_t n, nb, parts, chunk, row_tile, n_row_tiles;
    size_t row_bytes;
} ql_split_job;

static void ql_split_piece(const ql_split_job *s, int64_t c, int64_t r0, int64_t r1) {
    int64_t b0 = c * s->chunk;
    int64_t b1 = b0 + s->chunk < s->nb ? b0 + s->chunk : s->nb;
    int64_t len = b1 > b0 ? b1 - b0 : 0;
    if (b0 > s->nb) {
        b0 = s->nb;
    }
    /* an empty chunk yields the tree of zero lanes, +0.0 */
    s->rows(s->partials + c * s->n + r0, s->w + (size_t)r0 * s->row_bytes, s->row_bytes, b0, len,
            s->a, r1 - r0);
}

static void ql_split_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const ql_split_job *s = (const ql_split_job *)ctx;
    int64_t rt = task % s->n_row_tiles, c = task / s->n_row_tiles;
    int64_t r0 = rt * s->row_tile, r1 = r0 + s->row_tile < s->n ? r0 + s->row_tile : s->n;
    ql_split_piece(s, c, r0, r1);
}

static v8_status ql_split_k(v8_threadpool *pool, int use_ref, int contract, float *y,
                            const void *w, const float *x, const float *bias, int64_t n,
                            int64_t k, int64_t parts, void *scratch, size_t scratch_bytes) {
    V8_REQUIRE(contract == V8_QL_Q4_K_X_Q8_K_FP32_SPLIT_K_ASCENDING_MERGE, V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && w != NULL && x != NULL && scratch != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(n > 0 && k > 0 && k % V8_QK_K == 0, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(parts >= 1 && parts <= V8_MAX_WORKERS, V8_ERR_BAD_THREADING);
    size_t need = v8_ql_split_k_scratch_bytes(n, k, parts);
    V8_REQUIRE(need > 0 && scratch_bytes >= need, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(((uintptr_t)scratch & 3u) == 0, V8_ERR_BAD_DIMENSION);

    ql_split_job s;
    const ql_impl im = ql_impl_for(QL_Q4K, use_ref);
    s.rows = im.rows;
    s.nb = k / V8_QK_K;
    s.a = (const v8_block_q8_k *)scratch;
    s.partials = (float *)((uint8_t *)scratch + v8_ql_gemv_scratch_bytes(k));
    s.w = (const uint8_t *)w;
    s.n = n;
    s.parts = parts;
    s.chunk = (s.nb + parts - 1) / parts;
    s.row_bytes = (size_t)s.nb * sizeof(v8_block_q4_k);
    s.row_tile = 64;
    s.n_row_tiles = (n + s.row_tile - 1) / s.row_tile;
    im.quant(x, (v8_block_q8_k *)scratch, 1, k, im.q4k_order);
    if (pool == NULL) {
        for (int64_t c = 0; c < parts; ++c) {
            ql_split_piece(&s, c, 0, n);
        }
    } else {
        v8_status st = v8_parallel_for(pool, s.n_row_tiles * parts, ql_split_task, &s);
        V8_REQUIRE(st == V8_OK, st);
    }
    /* merge: fp32, ascending chunk order, starting from chunk 0's partial */
    for (int64_t r = 0; r < n; ++r) {
        float acc = s.partials[r];
        for (int64_t c = 1; c < parts; ++c) {
            acc += s.partials[c * n + r];
        }
        y[r] = bias != NULL ? acc + bias[r] : acc;
    }
    return V8_OK;
}

v8_status v8_q4_k_gemv_split_k_ref(int contract, float *y, const void *w, const float *x,
                                   const float *bias, int64_t n, int64_t k, int64_t parts,
                                   void *scratch, size_t scratch_bytes) {
    return ql_split_k(NULL, 1, contract, y, w, x, bias, n, k, parts, scratch, scratch_bytes);
}

v8_status v8_q4_k_gemv_split_k(int contract, float *y, const void *w, const float *x,
                               const float *bias, int64_t n, int64_t k, int64_t parts,
                               void *scratch, size_t scratch_bytes) {
    return ql_split_k(NULL, 0, contract, y, w, x, bias, n, k, parts, scratch, scratch_bytes);
}

v8_status v8_q4_k_gemv_split_k_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                                 const void *w, const float *x,
                                                 const float *bias, int64_t n, int64_t k,
                                                 int64_t parts,
                                                 void *scratch, size_t scratch_bytes) {
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    return ql_split_k(pool, 0, contract, y, w, x, bias, n, k, parts, scratch, scratch_bytes);
}
