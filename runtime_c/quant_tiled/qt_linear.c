/* Tiled-prefill quantized linear (see v8_quant_tiled.h for the contract).
 *
 * Three functions per weight format with one argument list: the scalar
 * contract oracle (*_ref: one output at a time, straight from the Q8_K
 * blocks), the production function (runtime ISA dispatch) and
 * *_parallel_dispatch (output tiles over the threadpool).  Every output is
 * computed whole by one tile, as one sequential chain over its super-blocks,
 * so neither the ISA variant, the tile shape nor the worker count can change
 * a bit.
 *
 * Scratch: [m x nb Q8_K blocks][ceil(m/16) x nb interleaved activation
 * blocks].  An interleaved block holds 16 tokens' codes of one super-block as
 * [4-element group kg][token][4 bytes] (so one vector load gives one 4-byte
 * group for 16 tokens), their fp32 scales and their 16-element sums; tokens
 * past m are zero codes with scale 0 and are never stored. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "core/prefetch.h"
#include "quant/q8k_groups.h"
#include "quant_tiled/v8_quant_tiled.h"

#define QT_GROUP V8_Q8K_GROUP /* tokens per interleaved activation block */
#define QT_ROW_TILE 16  /* weight rows per output tile */
#define QT_TOK_TILE 64  /* tokens per output tile (a multiple of QT_GROUP) */

typedef enum { QT_Q4K = 0, QT_Q5K = 1, QT_Q6K = 2 } qt_format;

typedef v8_q8k_group qt_actblock;

/* One super-block of up to 16 weight rows, decoded: unsigned codes in element
 * order (Q4_K [0,15], Q5_K [0,31], Q6_K [0,63] before its -32 offset), the
 * integer group scales (and mins) and the widened fp16 scales. */
typedef struct {
    uint8_t q[QT_ROW_TILE][V8_QK_K];
    int32_t sc[QT_ROW_TILE][16];
    int32_t mn[QT_ROW_TILE][8];
    float d[QT_ROW_TILE];
    float dmin[QT_ROW_TILE];
} qt_wtile;

typedef struct {
    qt_format fmt;
    float *y;
    const uint8_t *w;
    const float *x;
    const float *bias;
    v8_block_q8_k *a;      /* [m][nb] */
    qt_actblock *ab;       /* [ceil(m/16)][nb] */
    int64_t m, n, k, nb;
    size_t row_bytes;
    int64_t n_row_tiles, n_tok_tiles;
} qt_job;

static const qt_actblock *qt_act(const qt_job *j, int64_t g, int64_t b) {
    return j->ab + g * j->nb + b;
}

static size_t qt_block_bytes(qt_format fmt) {
    return fmt == QT_Q4K ? sizeof(v8_block_q4_k)
           : fmt == QT_Q5K ? sizeof(v8_qlt_block_q5_k) : sizeof(v8_block_q6_k);
}

static int qt_selector(qt_format fmt) {
    return fmt == QT_Q4K ? V8_QL_Q4_K_X_Q8_K_FP32_SUPER_BLOCK_FMA_CHAIN
           : fmt == QT_Q5K ? V8_QL_Q5_K_X_Q8_K_FP32_SUPER_BLOCK_FMA_CHAIN
                           : V8_QL_Q6_K_X_Q8_K_FP32_SUPER_BLOCK_FMA_CHAIN;
}

/* ---- weight decoding ------------------------------------------------------ */

/* The eight 6-bit scales and mins packed in 12 bytes (Q4_K and Q5_K). */
static void qt_scales_mins(const uint8_t s[12], int32_t sc[8], int32_t mn[8]) {
    for (int g = 0; g < 4; ++g) {
        sc[g] = s[g] & 63;
        mn[g] = s[g + 4] & 63;
        sc[g + 4] = (s[g + 8] & 15) | ((s[g] >> 6) << 4);
        mn[g + 4] = (s[g + 8] >> 4) | ((s[g + 4] >> 6) << 4);
    }
}

static void qt_decode_one(qt_format fmt, const uint8_t *blk, uint8_t q[V8_QK_K], int32_t sc[16],
                          int32_t mn[8], float *d, float *dmin) {
    if (fmt == QT_Q6K) {
        const v8_block_q6_k *b = (const v8_block_q6_k *)blk;
        for (int h = 0; h < 2; ++h) {
            const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            uint8_t *o = q + 128 * h;
            for (int l = 0; l < 32; ++l) {
                o[l] = (uint8_t)((ql[l] & 15) | ((qh[l] & 3) << 4));
                o[l + 32] = (uint8_t)((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4));
                o[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
                o[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
            }
        }
        for (int s = 0; s < 16; ++s) {
            sc[s] = b->scales[s];
        }
        *d = v8_f16_to_f32(b->d);
        *dmin = 0.0f;
        return;
    }
    const uint8_t *scales, *qs, *qh = NULL;
    uint16_t d16, dmin16;
    if (fmt == QT_Q4K) {
        const v8_block_q4_k *b = (const v8_block_q4_k *)blk;
        d16 = b->d, dmin16 = b->dmin, scales = b->scales, qs = b->qs;
    } else {
        const v8_qlt_block_q5_k *b = (const v8_qlt_block_q5_k *)blk;
        d16 = b->d, dmin16 = b->dmin, scales = b->scales, qs = b->qs, qh = b->qh;
    }
    for (int c = 0; c < 4; ++c) {           /* 64-element chunks: low nibbles, then high */
        for (int l = 0; l < 32; ++l) {
            q[64 * c + l] = qs[32 * c + l] & 15;
            q[64 * c + 32 + l] = qs[32 * c + l] >> 4;
        }
    }
    if (qh != NULL) {                       /* fifth bit of element 32g + l: bit g of qh[l] */
        for (int g = 0; g < 8; ++g) {
            for (int l = 0; l < 32; ++l) {
                q[32 * g + l] |= (uint8_t)(((qh[l] >> g) & 1) << 4);
            }
        }
    }
    qt_scales_mins(scales, sc, mn);
    *d = v8_f16_to_f32(d16);
    *dmin = v8_f16_to_f32(dmin16);
}

/* ---- scalar oracle -------------------------------------------------------- */

static float qt_dot_ref(qt_format fmt, const uint8_t *wrow, const v8_block_q8_k *a, int64_t nb) {
    const size_t bb = qt_block_bytes(fmt);
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        uint8_t q[V8_QK_K];
        int32_t sc[16], mn[8];
        float d, dmin;
        qt_decode_one(fmt, wrow + (size_t)b * bb, q, sc, mn, &d, &dmin);
        const v8_block_q8_k *ab = a + b;
        float v;
        if (fmt == QT_Q6K) {
            int32_t s1 = 0;
            for (int s = 0; s < 16; ++s) {
                int32_t raw = 0;
                for (int e = 16 * s; e < 16 * s + 16; ++e) {
                    raw += ((int32_t)q[e] - 32) * ab->qs[e];
                }
                s1 += sc[s] * raw;
            }
            v = (float)s1 * d;
        } else {
            int32_t s1 = 0, s2 = 0;
            for (int g = 0; g < 8; ++g) {
                int32_t raw = 0;
                for (int e = 32 * g; e < 32 * g + 32; ++e) {
                    raw += (int32_t)q[e] * ab->qs[e];
                }
                s1 += sc[g] * raw;
                s2 += mn[g] * (ab->bsums[2 * g] + ab->bsums[2 * g + 1]);
            }
            const float prod = (float)s1 * d;
            v = fmaf(-dmin, (float)s2, prod);
        }
        acc = fmaf(v, ab->d, acc);
    }
    return acc;
}

/* ---- activation: Q8_K blocks, then the interleaved copy ---------------------- */

static void qt_prepare_group(const qt_job *j, int64_t g) {
    const int64_t t0 = g * QT_GROUP;
    const int64_t t1 = t0 + QT_GROUP < j->m ? t0 + QT_GROUP : j->m;
    (void)v8_quantize_q8_k(j->x + t0 * j->k, j->a + t0 * j->nb, t1 - t0, j->k);
    v8_q8k_group_pack(j->a, j->nb, t0, t1, j->ab + g * j->nb);
}

/* acc is [QT_ROW_TILE][QT_TOK_TILE], token column 0 = token g0 * QT_GROUP. */
static void qt_store(const qt_job *j, const float *acc, int64_t r0, int64_t r1, int64_t t0,
                     int64_t t1, int64_t g0) {
    for (int64_t t = t0; t < t1; ++t) {
        const int64_t col = t - g0 * QT_GROUP;
        for (int64_t r = r0; r < r1; ++r) {
            const float v = acc[(r - r0) * QT_TOK_TILE + col];
            j->y[t * j->n + r] = j->bias != NULL ? v + j->bias[r] : v;  /* after the chain */
        }
    }
}

/* ---- ISA variants ------------------------------------------------------------ */

/* One algorithm (qt_kernels.inc) per core/simd.h variant, over the token-lane mapping. */
#define V8_SIMD_AVX512
#define V8_SIMD_VNNI
#include "core/simd.h"
#include "quant/token_lane_simd.h"
#include "quant_tiled/qt_kernels.inc"
#include "core/simd_end.h"

#define V8_SIMD_AVX512
#include "core/simd.h"
#include "quant/token_lane_simd.h"
#include "quant_tiled/qt_kernels.inc"
#include "core/simd_end.h"

#define V8_SIMD_AVX2
#include "core/simd.h"
#include "quant/token_lane_simd.h"
#include "quant_tiled/qt_kernels.inc"
#include "core/simd_end.h"

/* Scalar variant: the oracle's chain, output by output. */
static void qt_tile_scalar(const qt_job *j, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
        for (int64_t r = r0; r < r1; ++r) {
            const float v = qt_dot_ref(j->fmt, j->w + (size_t)r * j->row_bytes,
                                       j->a + t * j->nb, j->nb);
            j->y[t * j->n + r] = j->bias != NULL ? v + j->bias[r] : v;
        }
    }
}

typedef void (*qt_tile_fn)(const qt_job *j, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

static qt_tile_fn qt_tile_for(int use_ref) {
    if (use_ref) {
        return qt_tile_scalar;
    }
    switch (v8_cpu_best_isa()) {
    case V8_ISA_AVX512:
        return (v8_cpu_features() & V8_CPU_AVX512VNNI) ? qt_tile_avx512vnni : qt_tile_avx512;
    case V8_ISA_AVX2:
        return qt_tile_avx2;
    default:
        return qt_tile_scalar;
    }
}

/* ---- scratch, checks, driver ---------------------------------------------------- */

size_t v8_qlt_gemm_scratch_bytes(int64_t m, int64_t k) {
    if (m <= 0 || k <= 0 || k % V8_QK_K != 0 || m > ((int64_t)1 << 32) || k > ((int64_t)1 << 32)) {
        return 0;
    }
    const uint64_t nb = (uint64_t)(k / V8_QK_K);
    const uint64_t q8 = (uint64_t)m * nb * sizeof(v8_block_q8_k);
    const uint64_t il = v8_q8k_groups_bytes((uint64_t)m, nb);
    if (q8 / nb / sizeof(v8_block_q8_k) != (uint64_t)m || il == 0 || q8 + il < q8 ||
        q8 + il > (uint64_t)SIZE_MAX) {
        return 0;
    }
    return (size_t)(q8 + il);
}

typedef struct {
    const qt_job *j;
    qt_tile_fn tile;
} qt_task_ctx;

static void qt_prepare_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    qt_prepare_group(((const qt_task_ctx *)ctx)->j, task);
}

static void qt_tile_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const qt_task_ctx *c = (const qt_task_ctx *)ctx;
    const qt_job *j = c->j;
    const int64_t rt = task % j->n_row_tiles, tt = task / j->n_row_tiles;
    const int64_t r0 = rt * QT_ROW_TILE, r1 = r0 + QT_ROW_TILE < j->n ? r0 + QT_ROW_TILE : j->n;
    const int64_t t0 = tt * QT_TOK_TILE, t1 = t0 + QT_TOK_TILE < j->m ? t0 + QT_TOK_TILE : j->m;
    c->tile(j, r0, r1, t0, t1);
}

/* tile: the variant's tile function, NULL for qt_tile_for's (test builds pass one). */
static v8_status qt_linear(v8_threadpool *pool, int use_ref, qt_tile_fn tile, qt_format fmt,
                           int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t m, int64_t n, int64_t k, void *scratch,
                           size_t scratch_bytes) {
    V8_REQUIRE(contract == qt_selector(fmt), V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && w != NULL && x != NULL && scratch != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(m > 0 && n > 0 && k > 0 && k % V8_QK_K == 0, V8_ERR_BAD_DIMENSION);
    const size_t need = v8_qlt_gemm_scratch_bytes(m, k);
    V8_REQUIRE(need > 0 && scratch_bytes >= need, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(((uintptr_t)scratch & 3u) == 0, V8_ERR_BAD_DIMENSION);
    qt_job j;
    j.fmt = fmt;
    j.y = y;
    j.w = (const uint8_t *)w;
    j.x = x;
    j.bias = bias;
    j.m = m;
    j.n = n;
    j.k = k;
    j.nb = k / V8_QK_K;
    j.row_bytes = (size_t)j.nb * qt_block_bytes(fmt);
    j.a = (v8_block_q8_k *)scratch;
    j.ab = (qt_actblock *)((uint8_t *)scratch + (size_t)m * (size_t)j.nb * sizeof(v8_block_q8_k));
    j.n_row_tiles = (n + QT_ROW_TILE - 1) / QT_ROW_TILE;
    j.n_tok_tiles = (m + QT_TOK_TILE - 1) / QT_TOK_TILE;
    const int64_t groups = (m + QT_GROUP - 1) / QT_GROUP;
    qt_task_ctx c = {&j, tile != NULL ? tile : qt_tile_for(use_ref)};
    if (use_ref) {
        (void)v8_quantize_q8_k(x, j.a, m, k);
        for (int64_t t = 0; t < m; ++t) {
            for (int64_t r = 0; r < n; ++r) {
                const float v = qt_dot_ref(fmt, j.w + (size_t)r * j.row_bytes, j.a + t * j.nb, j.nb);
                y[t * n + r] = bias != NULL ? v + bias[r] : v;
            }
        }
        return V8_OK;
    }
    if (pool == NULL) {
        for (int64_t g = 0; g < groups; ++g) {
            qt_prepare_group(&j, g);
        }
        for (int64_t task = 0; task < j.n_row_tiles * j.n_tok_tiles; ++task) {
            qt_tile_task(&c, task, 0);
        }
        return V8_OK;
    }
    v8_status st = v8_parallel_for(pool, groups, qt_prepare_task, &c);
    V8_REQUIRE(st == V8_OK, st);
    return v8_parallel_for(pool, j.n_row_tiles * j.n_tok_tiles, qt_tile_task, &c);
}

/* ---- public entry points ------------------------------------------------------- */

#define QT_ENTRY(fmtname, FMT)                                                                   \
    v8_status v8_##fmtname##_tiled_gemm_ref(int contract, float *y, const void *w,              \
                                            const float *x, const float *bias, int64_t m,       \
                                            int64_t n, int64_t k, void *scratch,                \
                                            size_t scratch_bytes) {                             \
        return qt_linear(NULL, 1, NULL, FMT, contract, y, w, x, bias, m, n, k, scratch,         \
                         scratch_bytes);                                                        \
    }                                                                                           \
    v8_status v8_##fmtname##_tiled_gemm(int contract, float *y, const void *w, const float *x,  \
                                        const float *bias, int64_t m, int64_t n, int64_t k,     \
                                        void *scratch, size_t scratch_bytes) {                  \
        return qt_linear(NULL, 0, NULL, FMT, contract, y, w, x, bias, m, n, k, scratch,         \
                         scratch_bytes);                                                        \
    }                                                                                           \
    v8_status v8_##fmtname##_tiled_gemm_parallel_dispatch(                                      \
        v8_threadpool *pool, int contract, float *y, const void *w, const float *x,             \
        const float *bias, int64_t m, int64_t n, int64_t k, void *scratch,                      \
        size_t scratch_bytes) {                                                                 \
        V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);                                         \
        return qt_linear(pool, 0, NULL, FMT, contract, y, w, x, bias, m, n, k, scratch,         \
                         scratch_bytes);                                                        \
    }

QT_ENTRY(q4_k, QT_Q4K)
QT_ENTRY(q5_k, QT_Q5K)
QT_ENTRY(q6_k, QT_Q6K)
