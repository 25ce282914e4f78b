/* Repacked-weight quantized linear (see v8_quant_repacked.h for the contract).
 *
 * Three functions per shape (GEMV, GEMM) with one argument list each: the
 * scalar contract oracle (*_ref: one output at a time, straight from the Q8_K
 * blocks and the plain Q4_K rows), the production function (runtime ISA
 * dispatch) and *_parallel_dispatch (16-row weight tiles over the pool).
 * Every output is computed whole by one tile, so neither the ISA variant, the
 * tile shape nor the worker count can change a bit.
 *
 * Scratch: [m x nb Q8_K blocks] of the quantized activation, then (GEMM)
 * their interleaved 16-token groups (quant/q8k_groups.h) for the token-lane
 * half-pair form. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "core/prefetch.h"
#include "quant/q8k_groups.h"
#include "quant_repacked/v8_quant_repacked.h"

#define QR_ROWS 16      /* weight rows per tile (AVX-512: one vector; AVX2: two) */
#define QR_TOKS 64      /* tokens per tile (a multiple of the 16-token group) */
#define QR_QUANT_ROWS V8_Q8K_GROUP /* activation rows per quantization task: one group */

typedef struct {
    float *y;
    const uint8_t *w;
    const float *x;
    const float *bias;
    v8_block_q8_k *a;   /* [m][nb] */
    v8_q8k_group *groups; /* [ceil(m/16)][nb] interleaved, when m4 > 0 */
    int64_t m, n, k, nb;
    int64_t m4;         /* rows [0, m4) take the half-pair (4-row GEMM) form */
    size_t row_bytes;
    int64_t n_row_tiles, n_tok_tiles;
} qr_job;

/* ---- weight decoding ------------------------------------------------------ */

static void qr_scales_mins(const uint8_t s[12], int32_t sc[8], int32_t mn[8]) {
    for (int g = 0; g < 4; ++g) {
        sc[g] = s[g] & 63;
        mn[g] = s[g + 4] & 63;
        sc[g + 4] = (s[g + 8] & 15) | ((s[g] >> 6) << 4);
        mn[g + 4] = (s[g + 8] >> 4) | ((s[g + 4] >> 6) << 4);
    }
}

/* Element e of a Q4_K super-block: 64-element chunk c = e / 64 holds in byte
 * l of qs[32c .. 32c+31] element 64c + l (low nibble) and 64c + 32 + l (high). */
static void qr_codes(const v8_block_q4_k *blk, uint8_t q[V8_QK_K]) {
    for (int c = 0; c < 4; ++c) {
        for (int l = 0; l < 32; ++l) {
            q[64 * c + l] = blk->qs[32 * c + l] & 15;
            q[64 * c + 32 + l] = blk->qs[32 * c + l] >> 4;
        }
    }
}

/* Output r of a finished chain: the bias (when given) is added after it. */
static inline float qr_biased(const qr_job *j, float v, int64_t r) {
    return j->bias != NULL ? v + j->bias[r] : v;
}

static void qr_store_row(const qr_job *j, const float *out, int64_t t, int64_t r0, int64_t r1) {
    float *yrow = j->y + t * j->n;
    for (int64_t r = r0; r < r1; ++r) {
        yrow[r] = qr_biased(j, out[r - r0], r);
    }
}

/* ---- scalar oracle -------------------------------------------------------- */

static float qr_dot_ref(const uint8_t *wrow, const v8_block_q8_k *a, int64_t nb, int halves) {
    float acc = 0.0f, accm = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        const v8_block_q4_k *blk = (const v8_block_q4_k *)wrow + b;
        const v8_block_q8_k *ab = a + b;
        uint8_t q[V8_QK_K];
        int32_t sc[8], mn[8], p[8], mp[8];
        qr_codes(blk, q);
        qr_scales_mins(blk->scales, sc, mn);
        for (int g = 0; g < 8; ++g) {
            int32_t dot = 0;
            for (int e = 32 * g; e < 32 * g + 32; ++e) {
                dot += (int32_t)q[e] * (int32_t)ab->qs[e];
            }
            p[g] = sc[g] * dot;
            mp[g] = mn[g] * ((int32_t)ab->bsums[2 * g] + (int32_t)ab->bsums[2 * g + 1]);
        }
        const float ds = v8_f16_to_f32(blk->d) * ab->d;      /* one rounding each */
        const float dm = v8_f16_to_f32(blk->dmin) * ab->d;
        if (halves) {
            for (int h = 0; h < 4; ++h) {
                acc = fmaf((float)(p[2 * h] + p[2 * h + 1]), ds, acc);
                accm = fmaf((float)(mp[2 * h] + mp[2 * h + 1]), dm, accm);
            }
        } else {
            int32_t s1 = 0, s2 = 0;
            for (int g = 0; g < 8; ++g) {
                s1 += p[g];
                s2 += mp[g];
            }
            acc = fmaf((float)s1, ds, acc);
            accm = fmaf((float)s2, dm, accm);
        }
    }
    return acc - accm;
}

static void qr_tile_scalar(const qr_job *j, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
        float out[QR_ROWS];
        for (int64_t r = r0; r < r1; ++r) {
            out[r - r0] = qr_dot_ref(j->w + (size_t)r * j->row_bytes, j->a + t * j->nb, j->nb,
                                     t < j->m4);
        }
        qr_store_row(j, out, t, r0, r1);
    }
}

/* ---- ISA variants ------------------------------------------------------------ */

/* The SIMD mapping: one 64-element chunk c of a super-block is 32 code bytes
 * (low nibbles: group 2c, high nibbles: group 2c+1) against 64 activation
 * bytes.  maddubs pairs u8 codes with s8 activations (|pair| <= 2*15*128,
 * exact in int16), madd multiplies the pairs by the group's 6-bit scale
 * into int32 (exact). */

/* byte pair (2i, 2i+1) in every 16-bit lane: selects int16 lane i */
#define QR_PAIR(i) ((short)(((2 * (i) + 1) << 8) | (2 * (i))))

/* The AVX-512 mapping, shared by the variants with and without VNNI. */
#define QR_VI __m512i
#define QR_CODES __m512i
#define QR_SCALES __m512i
#define QR_ADD_I(a, b) _mm512_add_epi32(a, b)
#define QR_HSUM(v) _mm512_reduce_add_epi32(v)
#define QR_ZERO_I() _mm512_setzero_si512()
#define QR_TO256(v) _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1))

#define V8_SIMD_AVX512
#include "core/simd.h"
#define QR_DOT_ACC(acc, codes, a, scale) _mm512_add_epi32(acc, qr_chunk_dot_avx512(codes, a, scale))

static inline __m512i qr_chunk_codes_avx512(const uint8_t *qs) {
    const __m512i raw = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)qs));
    const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    return _mm512_and_si512(_mm512_srlv_epi16(raw, shift), _mm512_set1_epi8(15));
}

static inline __m512i qr_chunk_scales_avx512(__m128i scmn, int c) {
    const __m512i sc16 = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(scmn));
    const __m512i pick = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16(QR_PAIR(2 * c)),
                                                 _mm512_set1_epi16(QR_PAIR(2 * c + 1)));
    return _mm512_shuffle_epi8(sc16, pick);
}

static inline __m512i qr_chunk_dot_avx512(__m512i codes, const int8_t *a, __m512i scale) {
    const __m512i p = _mm512_maddubs_epi16(codes, _mm512_loadu_si512((const void *)a));
    return _mm512_madd_epi16(p, scale);
}


#include "quant_repacked/qr_kernels.inc"

#define QRT_SCALES_MINS qr_scales_mins_int_avx512
#include "quant/token_lane_simd.h"
#include "quant_repacked/qr_token_kernels.inc"

#undef QR_DOT_ACC
#include "core/simd_end.h"

/* AVX-512 with VNNI: the same chunk decoding; each chunk's scaled pair sums
 * accumulate with dpwssd (madd and add in one instruction, exact in int32),
 * and the token-lane GEMM takes dpbusd.  Measured on AMD EPYC, 1 thread,
 * repacked Q4_K GEMV with the matrix in cache: 10-14 GB/s with madd + add,
 * 14-19 GB/s with dpwssd. */
#define V8_SIMD_AVX512
#define V8_SIMD_VNNI
#include "core/simd.h"
#define qr_chunk_codes_avx512vnni qr_chunk_codes_avx512
#define qr_chunk_scales_avx512vnni qr_chunk_scales_avx512
#define qr_chunk_dot_avx512vnni qr_chunk_dot_avx512
#define QR_DOT_ACC(acc, codes, a, scale) \
    _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(codes, _mm512_loadu_si512((const void *)(a))), scale)
#include "quant_repacked/qr_kernels.inc"
#include "quant/token_lane_simd.h"
#include "quant_repacked/qr_token_kernels.inc"
#undef QR_DOT_ACC
#undef qr_chunk_codes_avx512vnni
#undef qr_chunk_scales_avx512vnni
#undef qr_chunk_dot_avx512vnni
#undef QRT_SCALES_MINS
#undef QR_VI
#undef QR_CODES
#undef QR_SCALES
#undef QR_ADD_I
#undef QR_HSUM
#undef QR_ZERO_I
#undef QR_TO256
#include "core/simd_end.h"

typedef struct {
    __m256i lo, hi;
} qr_pair256;

#define V8_SIMD_AVX2
#include "core/simd.h"
#define QR_VI __m256i
#define QR_CODES qr_pair256
#define QR_SCALES qr_pair256
#define QR_ADD_I(a, b) _mm256_add_epi32(a, b)
#define QR_HSUM(v) V8_SIMD_FN(qr_hsum8)(v)
#define QR_ZERO_I() _mm256_setzero_si256()
#define QR_TO256(v) (v)
#define QR_DOT_ACC(acc, codes, a, scale) _mm256_add_epi32(acc, qr_chunk_dot_avx2(codes, a, scale))

static inline qr_pair256 qr_chunk_codes_avx2(const uint8_t *qs) {
    const __m256i raw = _mm256_loadu_si256((const __m256i *)(const void *)qs);
    const __m256i m4 = _mm256_set1_epi8(15);
    qr_pair256 c = {_mm256_and_si256(raw, m4), _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4)};
    return c;
}

static inline qr_pair256 qr_chunk_scales_avx2(__m128i scmn, int c) {
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scmn));
    qr_pair256 s = {_mm256_shuffle_epi8(sc16, _mm256_set1_epi16(QR_PAIR(2 * c))),
                    _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(QR_PAIR(2 * c + 1)))};
    return s;
}

static inline __m256i qr_chunk_dot_avx2(qr_pair256 codes, const int8_t *a, qr_pair256 scale) {
    const __m256i lo = _mm256_maddubs_epi16(codes.lo, _mm256_loadu_si256((const __m256i *)(const void *)a));
    const __m256i hi =
        _mm256_maddubs_epi16(codes.hi, _mm256_loadu_si256((const __m256i *)(const void *)(a + 32)));
    return _mm256_add_epi32(_mm256_madd_epi16(lo, scale.lo), _mm256_madd_epi16(hi, scale.hi));
}


#include "quant_repacked/qr_kernels.inc"
#undef QRT_SCALES_MINS
#define QRT_SCALES_MINS qr_scales_mins_int_avx2
#include "quant/token_lane_simd.h"
#include "quant_repacked/qr_token_kernels.inc"
#include "core/simd_end.h"

typedef void (*qr_tile_fn)(const qr_job *j, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

/* The variant's two tile functions: `lanes` for tokens in the half-pair form
 * (token lanes over an interleaved activation group), `rows` for the
 * super-block form (the GEMV and the GEMM's last m mod 4 tokens). */
typedef struct {
    qr_tile_fn lanes, rows;
} qr_variant;

static qr_variant qr_variant_for(int use_ref) {
    const qr_variant scalar = {qr_tile_scalar, qr_tile_scalar};
    if (use_ref) {
        return scalar;
    }
    switch (v8_cpu_best_isa()) {
    case V8_ISA_AVX512: {
        const int vnni = (v8_cpu_features() & V8_CPU_AVX512VNNI) != 0;
        const qr_variant v = {vnni ? qrt_tile_avx512vnni : qrt_tile_avx512,
                              vnni ? qr_tile_avx512vnni : qr_tile_avx512};
        return v;
    }
    case V8_ISA_AVX2: {
        const qr_variant v = {qrt_tile_avx2, qr_tile_avx2};
        return v;
    }
    default:
        return scalar;
    }
}

/* ---- scratch, checks, driver ---------------------------------------------------- */

/* Q8_K blocks of m tokens, then (GEMM only) their interleaved groups. */
static size_t qr_scratch_bytes(int64_t m, int64_t k, int groups) {
    if (m <= 0 || k <= 0 || k % V8_QK_K != 0 || m > ((int64_t)1 << 32) || k > ((int64_t)1 << 32)) {
        return 0;
    }
    const uint64_t nb = (uint64_t)(k / V8_QK_K);
    const uint64_t q8 = (uint64_t)m * nb * sizeof(v8_block_q8_k);
    const uint64_t il = groups ? v8_q8k_groups_bytes((uint64_t)m, nb) : 0;
    if (q8 / nb / sizeof(v8_block_q8_k) != (uint64_t)m || (groups && il == 0) || q8 + il < q8 ||
        q8 + il > (uint64_t)SIZE_MAX) {
        return 0;
    }
    return (size_t)(q8 + il);
}

size_t v8_qlr_gemm_scratch_bytes(int64_t m, int64_t k) {
    return qr_scratch_bytes(m, k, 1);
}

size_t v8_qlr_gemv_scratch_bytes(int64_t k) {
    return qr_scratch_bytes(1, k, 0);
}

typedef struct {
    const qr_job *j;
    qr_variant tile;
} qr_task_ctx;

static void qr_quant_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const qr_job *j = ((const qr_task_ctx *)ctx)->j;
    const int64_t t0 = task * QR_QUANT_ROWS;
    const int64_t t1 = t0 + QR_QUANT_ROWS < j->m ? t0 + QR_QUANT_ROWS : j->m;
    (void)v8_quantize_q8_k(j->x + t0 * j->k, j->a + t0 * j->nb, t1 - t0, j->k);
    if (j->groups != NULL && t0 < j->m4) {
        v8_q8k_group_pack(j->a, j->nb, t0, t1, j->groups + task * j->nb);
    }
}

/* Task = one 16-row weight tile over every token tile (rows are independent). */
static void qr_row_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const qr_task_ctx *c = (const qr_task_ctx *)ctx;
    const qr_job *j = c->j;
    const int64_t r0 = task * QR_ROWS, r1 = r0 + QR_ROWS < j->n ? r0 + QR_ROWS : j->n;
    for (int64_t tt = 0; tt < j->n_tok_tiles; ++tt) {
        const int64_t t0 = tt * QR_TOKS, t1 = t0 + QR_TOKS < j->m ? t0 + QR_TOKS : j->m;
        const int64_t th = t1 < j->m4 ? t1 : j->m4;    /* [t0, th): half-pair form */
        if (th > t0) {
            c->tile.lanes(j, r0, r1, t0, th);
        }
        if (t1 > (th > t0 ? th : t0)) {
            c->tile.rows(j, r0, r1, th > t0 ? th : t0, t1);
        }
    }
}

/* variant: the tile functions, NULL for qr_variant_for's (test builds pass one). */
static v8_status qr_linear(v8_threadpool *pool, int use_ref, const qr_variant *variant,
                           int expected, int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t m, int64_t n, int64_t k, void *scratch,
                           size_t scratch_bytes) {
    V8_REQUIRE(contract == expected, V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && w != NULL && x != NULL && scratch != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(m > 0 && n > 0 && k > 0 && k % V8_QK_K == 0, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(n <= ((int64_t)1 << 40), V8_ERR_BAD_DIMENSION);
    const int gemm = expected == V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_4_ROW_GROUPS;
    const size_t need = gemm ? v8_qlr_gemm_scratch_bytes(m, k) : v8_qlr_gemv_scratch_bytes(k);
    V8_REQUIRE(need > 0 && scratch_bytes >= need, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(((uintptr_t)scratch & 3u) == 0, V8_ERR_BAD_DIMENSION);
    qr_job j;
    j.y = y;
    j.w = (const uint8_t *)w;
    j.x = x;
    j.bias = bias;
    j.a = (v8_block_q8_k *)scratch;
    j.m = m;
    j.n = n;
    j.k = k;
    j.nb = k / V8_QK_K;
    /* llama.cpp: the GEMM takes 4*floor(m/4) rows (only when m > 3), the GEMV the rest */
    j.m4 = gemm ? m - m % 4 : 0;
    j.groups = j.m4 > 0 ? (v8_q8k_group *)((uint8_t *)scratch +
                                           (size_t)m * (size_t)j.nb * sizeof(v8_block_q8_k))
                        : NULL;
    j.row_bytes = (size_t)j.nb * sizeof(v8_block_q4_k);
    j.n_row_tiles = (n + QR_ROWS - 1) / QR_ROWS;
    j.n_tok_tiles = (m + QR_TOKS - 1) / QR_TOKS;
    qr_task_ctx c = {&j, variant != NULL ? *variant : qr_variant_for(use_ref)};
    if (use_ref) {
        (void)v8_quantize_q8_k(x, j.a, m, k);
        for (int64_t t = 0; t < m; ++t) {
            for (int64_t r = 0; r < n; ++r) {
                y[t * n + r] = qr_biased(&j, qr_dot_ref(j.w + (size_t)r * j.row_bytes,
                                                        j.a + t * j.nb, j.nb, t < j.m4), r);
            }
        }
        return V8_OK;
    }
    const int64_t quant_tasks = (m + QR_QUANT_ROWS - 1) / QR_QUANT_ROWS;
    if (pool == NULL) {
        for (int64_t task = 0; task < quant_tasks; ++task) {
            qr_quant_task(&c, task, 0);
        }
        for (int64_t task = 0; task < j.n_row_tiles; ++task) {
            qr_row_task(&c, task, 0);
        }
        return V8_OK;
    }
    v8_status st = v8_parallel_for(pool, quant_tasks, qr_quant_task, &c);
    V8_REQUIRE(st == V8_OK, st);
    return v8_parallel_for(pool, j.n_row_tiles, qr_row_task, &c);
}

/* ---- public entry points ------------------------------------------------------- */

#define QR_GEMV V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN
#define QR_GEMM V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_4_ROW_GROUPS

v8_status v8_q4_k_repacked_gemv_ref(int contract, float *y, const void *w, const float *x,
                                    const float *bias, int64_t n, int64_t k, void *scratch,
                                    size_t scratch_bytes) {
    return qr_linear(NULL, 1, NULL, QR_GEMV, contract, y, w, x, bias, 1, n, k, scratch,
                     scratch_bytes);
}

v8_status v8_q4_k_repacked_gemv(int contract, float *y, const void *w, const float *x,
                                const float *bias, int64_t n, int64_t k, void *scratch,
                                size_t scratch_bytes) {
    return qr_linear(NULL, 0, NULL, QR_GEMV, contract, y, w, x, bias, 1, n, k, scratch,
                     scratch_bytes);
}

v8_status v8_q4_k_repacked_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                                  const void *w, const float *x,
                                                  const float *bias, int64_t n, int64_t k,
                                                  void *scratch, size_t scratch_bytes) {
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    return qr_linear(pool, 0, NULL, QR_GEMV, contract, y, w, x, bias, 1, n, k, scratch,
                     scratch_bytes);
}

v8_status v8_q4_k_repacked_gemm_ref(int contract, float *y, const void *w, const float *x,
                                    const float *bias, int64_t m, int64_t n, int64_t k,
                                    void *scratch, size_t scratch_bytes) {
    return qr_linear(NULL, 1, NULL, QR_GEMM, contract, y, w, x, bias, m, n, k, scratch,
                     scratch_bytes);
}

v8_status v8_q4_k_repacked_gemm(int contract, float *y, const void *w, const float *x,
                                const float *bias, int64_t m, int64_t n, int64_t k,
                                void *scratch, size_t scratch_bytes) {
    return qr_linear(NULL, 0, NULL, QR_GEMM, contract, y, w, x, bias, m, n, k, scratch,
                     scratch_bytes);
}

v8_status v8_q4_k_repacked_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                                  const void *w, const float *x,
                                                  const float *bias, int64_t m, int64_t n,
                                                  int64_t k, void *scratch, size_t scratch_bytes) {
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    return qr_linear(pool, 0, NULL, QR_GEMM, contract, y, w, x, bias, m, n, k, scratch,
                     scratch_bytes);
}
