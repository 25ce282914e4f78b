/* Repacked-weight Q4_0 x Q8_0 linear (see v8_quant_repacked_q4_0.h for the
 * contract).
 *
 * Three functions per shape (GEMV, GEMM) with one argument list each: the
 * scalar contract oracle (*_ref: one output at a time, straight from the Q8_0
 * activation blocks and the plain Q4_0 rows), the production function (runtime
 * ISA dispatch) and *_parallel_dispatch (16-row weight tiles over the pool).
 * Every output is one fp32 chain computed whole by one tile, so neither the ISA
 * variant, the tile shape nor the worker count can change a bit.
 *
 * Scratch: [m x nb Q8_0 blocks] of the quantized activation. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "quant_repacked/v8_quant_repacked_q4_0.h"

#define QR0_ROWS 16       /* weight rows per tile (AVX-512: one vector; AVX2: two) */
#define QR0_TOKS 16       /* tokens per tile */
#define QR0_QUANT_ROWS 16 /* activation rows per quantization task */

typedef struct {
    float *y;
    const uint8_t *w;
    const float *x;
    const float *bias;
    v8_block_q8_0 *a; /* [m][nb] */
    int64_t m, n, k, nb;
    size_t row_bytes;
    int64_t n_row_tiles, n_tok_tiles;
} qr0_job;

/* One 32-element block of up to QR0_ROWS weight rows, transposed so one vector
 * load gives a 4-code group for consecutive rows: unsigned codes [group kg of
 * elements 4kg..4kg+3][row][4] and the widened fp16 d per row.  Rows past the
 * tile are zero. */
typedef struct {
    uint8_t q[8][QR0_ROWS][4];
    float d[QR0_ROWS];
} qr0_wtile;

/* ---- weight decoding ------------------------------------------------------ */

/* Element e of a Q4_0 block: byte e (e < 16) low nibble, byte e - 16 high nibble. */
static void qr0_codes(const v8_block_q4_0 *blk, uint8_t q[V8_QK8_0]) {
    for (int l = 0; l < V8_QK8_0 / 2; ++l) {
        q[l] = blk->qs[l] & 15;
        q[l + V8_QK8_0 / 2] = blk->qs[l] >> 4;
    }
}

static void qr0_decode_tile(const qr0_job *j, int64_t r0, int nrows, int64_t b, qr0_wtile *t) {
    memset(t, 0, sizeof(*t));
    for (int r = 0; r < nrows; ++r) {
        const v8_block_q4_0 *blk =
            (const v8_block_q4_0 *)(const void *)(j->w + (size_t)(r0 + r) * j->row_bytes) + b;
        uint8_t q[V8_QK8_0];
        qr0_codes(blk, q);
        for (int kg = 0; kg < 8; ++kg) {
            memcpy(t->q[kg][r], &q[4 * kg], 4);
        }
        t->d[r] = v8_f16_to_f32(blk->d);
    }
}

static void qr0_store_row(const qr0_job *j, const float *out, int64_t t, int64_t r0, int64_t r1) {
    float *yrow = j->y + t * j->n;
    for (int64_t r = r0; r < r1; ++r) {
        const float v = out[r - r0];
        yrow[r] = j->bias != NULL ? v + j->bias[r] : v; /* after the chain */
    }
}

/* ---- scalar oracle -------------------------------------------------------- */

static float qr0_dot_ref(const uint8_t *wrow, const v8_block_q8_0 *a, int64_t nb) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        const v8_block_q4_0 *blk = (const v8_block_q4_0 *)(const void *)wrow + b;
        uint8_t q[V8_QK8_0];
        qr0_codes(blk, q);
        int32_t dot = 0;
        for (int e = 0; e < V8_QK8_0; ++e) {
            dot += ((int32_t)q[e] - 8) * (int32_t)a[b].qs[e];
        }
        const float s = v8_f16_to_f32(blk->d) * v8_f16_to_f32(a[b].d); /* one rounding */
        acc = fmaf((float)dot, s, acc);
    }
    return acc;
}

static void qr0_tile_scalar(const qr0_job *j, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
        float out[QR0_ROWS];
        for (int64_t r = r0; r < r1; ++r) {
            out[r - r0] = qr0_dot_ref(j->w + (size_t)r * j->row_bytes, j->a + t * j->nb, j->nb);
        }
        qr0_store_row(j, out, t, r0, r1);
    }
}

/* ---- ISA variants ------------------------------------------------------------ */

/* One body (qr_q4_0_kernels.inc) per core/simd.h variant over the lane mapping of
 * quant/token_lane_simd.h, here a lane per weight row.  Without VNNI the
 * four-byte dot is maddubs (u8 x s8 pairs, exact: |pair| <= 2*15*128 < 2^15)
 * then madd with ones: the same integers as dpbusd. */
#define V8_SIMD_AVX512
#define V8_SIMD_VNNI
#include "core/simd.h"
#include "quant/token_lane_simd.h"
#include "quant_repacked/qr_q4_0_kernels.inc"
#include "core/simd_end.h"

#define V8_SIMD_AVX512
#include "core/simd.h"
#include "quant/token_lane_simd.h"
#include "quant_repacked/qr_q4_0_kernels.inc"
#include "core/simd_end.h"

#define V8_SIMD_AVX2
#include "core/simd.h"
#include "quant/token_lane_simd.h"
#include "quant_repacked/qr_q4_0_kernels.inc"
#include "core/simd_end.h"

typedef void (*qr0_tile_fn)(const qr0_job *j, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

static qr0_tile_fn qr0_tile_for(void) {
    switch (v8_cpu_best_isa()) {
    case V8_ISA_AVX512:
        return (v8_cpu_features() & V8_CPU_AVX512VNNI) ? qr0_tile_avx512vnni : qr0_tile_avx512;
    case V8_ISA_AVX2:
        return qr0_tile_avx2;
    default:
        return qr0_tile_scalar;
    }
}

/* ---- scratch, checks, driver ---------------------------------------------------- */

size_t v8_qlr0_gemm_scratch_bytes(int64_t m, int64_t k) {
    if (m <= 0 || k <= 0 || k % V8_QK8_0 != 0 || m > ((int64_t)1 << 32) ||
        k > ((int64_t)1 << 32)) {
        return 0;
    }
    const uint64_t nb = (uint64_t)(k / V8_QK8_0);
    const uint64_t bytes = (uint64_t)m * nb * sizeof(v8_block_q8_0);
    if (bytes / nb / sizeof(v8_block_q8_0) != (uint64_t)m || bytes > (uint64_t)SIZE_MAX) {
        return 0;
    }
    return (size_t)bytes;
}

size_t v8_qlr0_gemv_scratch_bytes(int64_t k) {
    return v8_qlr0_gemm_scratch_bytes(1, k);
}

typedef struct {
    const qr0_job *j;
    qr0_tile_fn tile;
} qr0_task_ctx;

static void qr0_quant_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const qr0_job *j = ((const qr0_task_ctx *)ctx)->j;
    const int64_t t0 = task * QR0_QUANT_ROWS;
    const int64_t t1 = t0 + QR0_QUANT_ROWS < j->m ? t0 + QR0_QUANT_ROWS : j->m;
    (void)v8_quantize_q8_0(j->x + t0 * j->k, j->a + t0 * j->nb, t1 - t0, j->k);
}

/* Task = one 16-row weight tile over every token tile (rows are independent). */
static void qr0_row_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const qr0_task_ctx *c = (const qr0_task_ctx *)ctx;
    const qr0_job *j = c->j;
    const int64_t r0 = task * QR0_ROWS, r1 = r0 + QR0_ROWS < j->n ? r0 + QR0_ROWS : j->n;
    for (int64_t tt = 0; tt < j->n_tok_tiles; ++tt) {
        const int64_t t0 = tt * QR0_TOKS, t1 = t0 + QR0_TOKS < j->m ? t0 + QR0_TOKS : j->m;
        c->tile(j, r0, r1, t0, t1);
    }
}

static v8_status qr0_linear(v8_threadpool *pool, int use_ref, int contract, float *y,
                            const void *w, const float *x, const float *bias, int64_t m,
                            int64_t n, int64_t k, void *scratch, size_t scratch_bytes) {
    V8_REQUIRE(contract == V8_QL_Q4_0_X_Q8_0_FP32_REPACKED_BLOCK_CHAIN, V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && w != NULL && x != NULL && scratch != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(m > 0 && n > 0 && k > 0 && k % V8_QK8_0 == 0, V8_ERR_BAD_DIMENSION);
    /* llama.cpp repacks only weights whose row count is a multiple of 8 */
    V8_REQUIRE(n % 8 == 0 && n <= ((int64_t)1 << 40), V8_ERR_BAD_DIMENSION);
    const size_t need = v8_qlr0_gemm_scratch_bytes(m, k);
    V8_REQUIRE(need > 0 && scratch_bytes >= need, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(((uintptr_t)scratch & 1u) == 0, V8_ERR_BAD_DIMENSION);
    qr0_job j;
    j.y = y;
    j.w = (const uint8_t *)w;
    j.x = x;
    j.bias = bias;
    j.a = (v8_block_q8_0 *)scratch;
    j.m = m;
    j.n = n;
    j.k = k;
    j.nb = k / V8_QK8_0;
    j.row_bytes = (size_t)j.nb * sizeof(v8_block_q4_0);
    j.n_row_tiles = (n + QR0_ROWS - 1) / QR0_ROWS;
    j.n_tok_tiles = (m + QR0_TOKS - 1) / QR0_TOKS;
    if (use_ref) {
        (void)v8_quantize_q8_0(x, j.a, m, k);
        for (int64_t t = 0; t < m; ++t) {
            for (int64_t r = 0; r < n; ++r) {
                const float v = qr0_dot_ref(j.w + (size_t)r * j.row_bytes, j.a + t * j.nb, j.nb);
                y[t * n + r] = bias != NULL ? v + bias[r] : v;
            }
        }
        return V8_OK;
    }
    qr0_task_ctx c = {&j, qr0_tile_for()};
    const int64_t quant_tasks = (m + QR0_QUANT_ROWS - 1) / QR0_QUANT_ROWS;
    if (pool == NULL) {
        for (int64_t task = 0; task < quant_tasks; ++task) {
            qr0_quant_task(&c, task, 0);
        }
        for (int64_t task = 0; task < j.n_row_tiles; ++task) {
            qr0_row_task(&c, task, 0);
        }
        return V8_OK;
    }
    v8_status st = v8_parallel_for(pool, quant_tasks, qr0_quant_task, &c);
    V8_REQUIRE(st == V8_OK, st);
    return v8_parallel_for(pool, j.n_row_tiles, qr0_row_task, &c);
}

/* ---- public entry points ------------------------------------------------------- */

v8_status v8_q4_0_repacked_gemv_ref(int contract, float *y, const void *w, const float *x,
                                    const float *bias, int64_t n, int64_t k, void *scratch,
                                    size_t scratch_bytes) {
    return qr0_linear(NULL, 1, contract, y, w, x, bias, 1, n, k, scratch, scratch_bytes);
}

v8_status v8_q4_0_repacked_gemv(int contract, float *y, const void *w, const float *x,
                                const float *bias, int64_t n, int64_t k, void *scratch,
                                size_t scratch_bytes) {
    return qr0_linear(NULL, 0, contract, y, w, x, bias, 1, n, k, scratch, scratch_bytes);
}

v8_status v8_q4_0_repacked_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                                  const void *w, const float *x,
                                                  const float *bias, int64_t n, int64_t k,
                                                  void *scratch, size_t scratch_bytes) {
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    return qr0_linear(pool, 0, contract, y, w, x, bias, 1, n, k, scratch, scratch_bytes);
}

v8_status v8_q4_0_repacked_gemm_ref(int contract, float *y, const void *w, const float *x,
                                    const float *bias, int64_t m, int64_t n, int64_t k,
                                    void *scratch, size_t scratch_bytes) {
    return qr0_linear(NULL, 1, contract, y, w, x, bias, m, n, k, scratch, scratch_bytes);
}

v8_status v8_q4_0_repacked_gemm(int contract, float *y, const void *w, const float *x,
                                const float *bias, int64_t m, int64_t n, int64_t k,
                                void *scratch, size_t scratch_bytes) {
    return qr0_linear(NULL, 0, contract, y, w, x, bias, m, n, k, scratch, scratch_bytes);
}

v8_status v8_q4_0_repacked_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                                  const void *w, const float *x,
                                                  const float *bias, int64_t m, int64_t n,
                                                  int64_t k, void *scratch, size_t scratch_bytes) {
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    return qr0_linear(pool, 0, contract, y, w, x, bias, m, n, k, scratch, scratch_bytes);
}
