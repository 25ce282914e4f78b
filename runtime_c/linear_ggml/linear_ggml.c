/* fp32 linear / logits with llama.cpp's CPU mul_mat arithmetic, AVX-512
 * build (16 lanes) or AVX2 build (8 lanes): the contracts are spelled out in
 * linear_ggml/v8_linear_ggml.h.  The selector fixes the lane count L; the
 * scalar oracle below is written once for both.
 *
 * Unlike runtime_c/ops, this provider multiplies and adds in one rounding
 * wherever the contract says fma: the scalar oracle calls fmaf, the SIMD
 * variants use vfmadd.  Products that the contract rounds on their own (the
 * first part of the block route's tail) stay separate: contraction is off
 * for this file (ops_internal.h).
 *
 * For L = 16 both SIMD variants carry the same sixteen lanes per output:
 * AVX-512 as one zmm register, AVX2 as a pair of ymm registers (lanes 0-7,
 * 8-15), whose sum is the halving tree's first level.  For L = 8 an output's
 * lanes are one ymm register; an AVX-512 host runs the AVX2 variant for it.
 * Every variant gives the oracle's bits. */
/* Outside every target region, so each intrinsic keeps its own ISA. */
#include <immintrin.h>
#include <math.h>

#include "core/prefetch.h"
#include "ops/ops_internal.h"
#include "linear_ggml/v8_linear_ggml.h"

#define LG_LANES 16 /* the widest contract's lanes: the scalar arrays' size */
#define LG_ROW_UNIT 16 /* threadpool tasks own whole multiples of this many rows */
/* Weight bytes a threadpool task reads at most.  With four tasks per worker the lm head
 * (32768 x 1024 fp32) went in 16 MiB tasks, and at the end of each decode step's head the
 * caller waited for the helper's last one: 134 us a token at 2 threads (AMD EPYC Zen 4,
 * Qwen3-0.6B shape, timed per job); with 1 MiB tasks 14 us. */
#define LG_TASK_BYTES ((int64_t)1 << 20)

typedef struct lg_args {
    float *y;
    const float *w;
    const float *x;
    const float *bias;
    int64_t m, n, k;
    int lanes; /* L: 16 (AVX-512 build) or 8 (AVX2 build) */
    int tail_block; /* T: the block route's tail rounds products down to its last < T */
    int lane_route;
    int line_prefetch; /* the block route prefetches its stream (V8_CPU_LINE_PREFETCH) */
} lg_args;

/* L and T of a contract; L = 0 for a selector this provider does not deliver. */
static int contract_lanes(int contract, int *tail_block) {
    switch (contract) {
    case V8_LINEAR_FP32_GGML_16_LANE_MUL_MAT:
    case V8_LOGITS_FP32_GGML_16_LANE_MUL_MAT:
        *tail_block = 8;
        return 16;
    case V8_LINEAR_FP32_GGML_16_LANE_MUL_MAT_4_LANE_TAIL:
    case V8_LOGITS_FP32_GGML_16_LANE_MUL_MAT_4_LANE_TAIL:
        *tail_block = 4;
        return 16;
    case V8_LINEAR_FP32_GGML_8_LANE_MUL_MAT:
    case V8_LOGITS_FP32_GGML_8_LANE_MUL_MAT:
        *tail_block = 4;
        return 8;
    default:
        return 0;
    }
}

static v8_status prepare(int contract, lg_args *a, float *y, const float *w, const float *x,
                         const float *bias, int64_t m, int64_t n, int64_t k) {
    int tail_block = 0;
    const int lanes = contract_lanes(contract, &tail_block);
    V8_REQUIRE(lanes != 0, V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && w != NULL && x != NULL, V8_ERR_NULL_ARGUMENT); /* bias optional */
    V8_REQUIRE(v8_ops_product_ok(n, k), V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(v8_ops_product_ok(m, k), V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(v8_ops_product_ok(m, n), V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(k <= INT32_MAX, V8_ERR_BAD_DIMENSION); /* ggml's dot length is an int */
    a->y = y;
    a->w = w;
    a->x = x;
    a->bias = bias;
    a->m = m;
    a->n = n;
    a->k = k;
    a->lanes = lanes;
    a->tail_block = tail_block;
    a->lane_route = m >= 2 && k % lanes == 0 && n % 4 == 0;
    a->line_prefetch = (v8_cpu_features() & V8_CPU_LINE_PREFETCH) != 0;
    return V8_OK;
}

static inline void put(const lg_args *a, int64_t mi, int64_t ni, float dot) {
    a->y[mi * a->n + ni] = a->bias != NULL ? dot + a->bias[ni] : dot;
}

/* Elements of the block route's tail summed as product-then-add (whole
 * groups of T, the smallest vector of GCC's leftover loop); the rest are fused. */
static inline int64_t tail_plain(int64_t r, int tail_block) {
    return r - r % tail_block;
}

/* ---- scalar: the oracle, and the production fallback ---------------------- */

/* v[i] += v[i+h] for h = L/2, ..., 1: the lane route's fold (both builds) and
 * the 16-lane block route's. */
static float fold_halving(float v[LG_LANES], int lanes) {
    for (int h = lanes / 2; h >= 1; h /= 2) {
        for (int i = 0; i < h; ++i) {
            v[i] = v[i] + v[i + h];
        }
    }
    return v[0];
}

/* The block route's fold: the halving tree at L = 16; at L = 8 the first
 * level is the same, then adjacent pairs (t0 + t1) + (t2 + t3). */
static float fold_block(float v[LG_LANES], int lanes) {
    if (lanes == 16) {
        return fold_halving(v, lanes);
    }
    float t[4];
    for (int i = 0; i < 4; ++i) {
        t[i] = v[i] + v[i + 4];
    }
    const float lo = t[0] + t[1];
    const float hi = t[2] + t[3];
    return lo + hi;
}

static float dot_lanes_scalar(const float *w, const float *x, int64_t k, int lanes) {
    float acc[LG_LANES] = {0};
    for (int64_t l = 0; l < k; l += lanes) {
        for (int p = 0; p < lanes; ++p) {
            acc[p] = fmaf(w[l + p], x[l + p], acc[p]);
        }
    }
    return fold_halving(acc, lanes);
}

static float tail_scalar(float s, const float *w, const float *x, int64_t k0, int64_t k,
                         int tail_block) {
    const int64_t plain = k0 + tail_plain(k - k0, tail_block);
    for (int64_t i = k0; i < k; ++i) {
        if (i < plain) {
            const float p = w[i] * x[i];
            s = s + p;
        } else {
            s = fmaf(w[i], x[i], s);
        }
    }
    return s;
}

static float dot_blocks_scalar(const float *w, const float *x, int64_t k, int lanes,
                               int tail_block) {
    float acc[4][LG_LANES] = {{0}};
    const int64_t block = 4 * (int64_t)lanes;
    const int64_t k0 = k - k % block;
    for (int64_t i = 0; i < k0; i += block) {
        for (int j = 0; j < 4; ++j) {
            for (int p = 0; p < lanes; ++p) {
                const int64_t e = i + j * lanes + p;
                acc[j][p] = fmaf(w[e], x[e], acc[j][p]);
            }
        }
    }
    for (int p = 0; p < lanes; ++p) {
        acc[0][p] = acc[0][p] + acc[2][p];
        acc[1][p] = acc[1][p] + acc[3][p];
        acc[0][p] = acc[0][p] + acc[1][p];
    }
    return tail_scalar(fold_block(acc[0], lanes), w, x, k0, k, tail_block);
}

static void rows_scalar(const lg_args *a, int64_t n0, int64_t n1) {
    for (int64_t mi = 0; mi < a->m; ++mi) {
        const float *x = a->x + mi * a->k;
        for (int64_t ni = n0; ni < n1; ++ni) {
            const float *w = a->w + ni * a->k;
            put(a, mi, ni, a->lane_route ? dot_lanes_scalar(w, x, a->k, a->lanes)
                                         : dot_blocks_scalar(w, x, a->k, a->lanes, a->tail_block));
        }
    }
}

/* The block route (every variant's dot_blocks*) reads its rows one after another: a
 * single sequential stream.  Where the CPU has V8_CPU_LINE_PREFETCH it prefetches every
 * line V8_PREFETCH_BYTES ahead along that stream: on Intel Xeon (Emerald Rapids) the
 * decode head (32768 x 1024 fp32, cold, 1 thread) then took 7-10% less time, as each
 * 4 KiB row is a page the hardware streamer starts afresh.  On AMD EPYC the same
 * prefetches took ~10% of its bandwidth (1 and 2 threads), so there it issues none. */
static inline void lg_prefetch_block(const float *w, int64_t i, size_t bytes, const int prefetch) {
    if (prefetch) {
        v8_prefetch_lines((uintptr_t)(w + i) + V8_PREFETCH_BYTES, bytes);
    }
}

/* ---- AVX-512: sixteen lanes in one register --------------------------------- */

/* Tokens per block: as many as keep the block's rows of x within LG_BLOCK_BYTES (a
 * multiple of 6, so of every tile's token count: 6, 3 and 2; at least 6; outside the
 * variant regions, as the AVX2 variant calls it too), so the weight rows
 * stream past them once per block.  48 tokens whatever k made a 64-token prefill
 * read the 128 MiB f32 head twice (a Qwen3-0.6B shape; one pass gave 1.5% on the
 * whole prefill, Intel Xeon, 1 thread). */
#define LG_BLOCK_BYTES (384 * 1024)
static int64_t lg_token_block(int64_t k) {
    const int64_t fit = LG_BLOCK_BYTES / (k * (int64_t)sizeof(float));
    return fit < 6 ? 6 : fit - fit % 6;
}

#define V8_SIMD_AVX512
#define V8_SIMD_F_ONLY
#include "core/simd.h"

/* Sixteen lanes as eight: v[i] + v[i+8]; then the shared 8 -> 1 tree. */
static inline float tree8_avx(__m256 s8) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

static inline float V8_SIMD_FN(tree16)(__m512 v) {
    __m256 lo = _mm512_castps512_ps256(v);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return tree8_avx(_mm256_add_ps(lo, hi));
}

static inline float tail_fused_avx(float s, const float *w, const float *x, int64_t k0,
                                   int64_t k, int tail_block) {
    const int64_t plain = k0 + tail_plain(k - k0, tail_block);
    for (int64_t i = k0; i < k; ++i) {
        if (i < plain) {
            const float p = w[i] * x[i];
            s = s + p;
        } else {
            s = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(w[i]), _mm_set_ss(x[i]), _mm_set_ss(s)));
        }
    }
    return s;
}

static float V8_SIMD_FN(dot_blocks)(const float *w, const float *x, int64_t k, int tail_block,
                                    const int prefetch) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const int64_t k0 = k - k % 64;
    for (int64_t i = 0; i < k0; i += 64) {
        lg_prefetch_block(w, i, 64 * sizeof(float), prefetch);
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 32), _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 48), _mm512_loadu_ps(x + i + 48), a3);
    }
    a0 = _mm512_add_ps(a0, a2);
    a1 = _mm512_add_ps(a1, a3);
    a0 = _mm512_add_ps(a0, a1);
    return tail_fused_avx(V8_SIMD_FN(tree16)(a0), w, x, k0, k, tail_block);
}

/* Four weight rows by RN <= 6 tokens (24 accumulators, 4 weight vectors, one token
 * vector: 29 of the 32 zmm registers); RN is a constant at every call site, and
 * the loops over rows and tokens are unrolled so the accumulators stay in
 * registers (GCC -O2 left them in memory: 29 GFLOP/s for the 32768-row head). */
#define LG_TILE_TOKENS 6
static inline __attribute__((always_inline)) void V8_SIMD_FN(tile)(const lg_args *a, int64_t n0,
                                                              int64_t m0, const int rn,
                                                              const int prefetch) {
    const int64_t k = a->k;
    __m512 acc[4][LG_TILE_TOKENS];
    #pragma GCC unroll 8
    for (int i = 0; i < 4; ++i) {
        #pragma GCC unroll 8
        for (int j = 0; j < LG_TILE_TOKENS; ++j) {
            acc[i][j] = _mm512_setzero_ps();
        }
    }
    const float *w = a->w + n0 * k;
    const float *x = a->x + m0 * k;
    const size_t ahead = v8_prefetch_rows_offset((size_t)k * sizeof(float), 4); /* a division:
                                                                         * once, not per step */
    for (int64_t l = 0; l < k; l += 16) {
        __m512 wv[4];
        #pragma GCC unroll 8
        for (int i = 0; i < 4; ++i) {
            if (prefetch) {
                v8_prefetch_line((uintptr_t)(w + i * k + l) + ahead);
            }
            wv[i] = _mm512_loadu_ps(w + i * k + l);
        }
        #pragma GCC unroll 8
        for (int j = 0; j < rn; ++j) {
            const __m512 xv = _mm512_loadu_ps(x + j * k + l);
            #pragma GCC unroll 8
            for (int i = 0; i < 4; ++i) {
                acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
            }
        }
    }
    #pragma GCC unroll 8
    for (int j = 0; j < rn; ++j) {
        #pragma GCC unroll 8
        for (int i = 0; i < 4; ++i) {
            put(a, m0 + j, n0 + i, V8_SIMD_FN(tree16)(acc[i][j]));
        }
    }
}

/* The 16-lane contracts only (rows_best). */
static void V8_SIMD_FN(rows)(const lg_args *a, int64_t n0, int64_t n1) {
    if (a->lane_route) { /* n0, n1 are multiples of four here */
        /* token blocks stay cache-resident while the rows stream past them */
        const int64_t block = lg_token_block(a->k);
        for (int64_t mb = 0; mb < a->m; mb += block) {
            const int64_t me = mb + block < a->m ? mb + block : a->m;
            for (int64_t nb = n0; nb < n1; nb += 4) {
                int64_t m0 = mb;
                for (; m0 + LG_TILE_TOKENS <= me; m0 += LG_TILE_TOKENS) {
                    V8_SIMD_FN(tile)(a, nb, m0, LG_TILE_TOKENS, m0 == mb); /* see rows8 */
                }
                const int first = m0 == mb;
                switch (me - m0) {
                case 5: V8_SIMD_FN(tile)(a, nb, m0, 5, first); break;
                case 4: V8_SIMD_FN(tile)(a, nb, m0, 4, first); break;
                case 3: V8_SIMD_FN(tile)(a, nb, m0, 3, first); break;
                case 2: V8_SIMD_FN(tile)(a, nb, m0, 2, first); break;
                case 1: V8_SIMD_FN(tile)(a, nb, m0, 1, first); break;
                default: break;
                }
            }
        }
        return;
    }
    for (int64_t mi = 0; mi < a->m; ++mi) {
        const float *x = a->x + mi * a->k;
        for (int64_t ni = n0; ni < n1; ++ni) {
            put(a, mi, ni, V8_SIMD_FN(dot_blocks)(a->w + ni * a->k, x, a->k, a->tail_block, a->line_prefetch));
        }
    }
}
#include "core/simd_end.h"

/* ---- AVX2: sixteen lanes in two registers, or eight in one ------------------ */

#define V8_SIMD_AVX2
#include "core/simd.h"

typedef struct lanes16 {
    __m256 lo, hi; /* lanes 0-7, 8-15 */
} lanes16;

static inline lanes16 fma16(const float *w, const float *x, lanes16 c) {
    c.lo = _mm256_fmadd_ps(_mm256_loadu_ps(w), _mm256_loadu_ps(x), c.lo);
    c.hi = _mm256_fmadd_ps(_mm256_loadu_ps(w + 8), _mm256_loadu_ps(x + 8), c.hi);
    return c;
}

static inline lanes16 add16(lanes16 a, lanes16 b) {
    a.lo = _mm256_add_ps(a.lo, b.lo);
    a.hi = _mm256_add_ps(a.hi, b.hi);
    return a;
}

static inline float V8_SIMD_FN(tree16)(lanes16 v) {
    __m256 s8 = _mm256_add_ps(v.lo, v.hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

static inline float V8_SIMD_FN(tail_fused)(float s, const float *w, const float *x, int64_t k0,
                                    int64_t k, int tail_block) {
    const int64_t plain = k0 + tail_plain(k - k0, tail_block);
    for (int64_t i = k0; i < k; ++i) {
        if (i < plain) {
            const float p = w[i] * x[i];
            s = s + p;
        } else {
            s = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(w[i]), _mm_set_ss(x[i]), _mm_set_ss(s)));
        }
    }
    return s;
}

static float V8_SIMD_FN(dot_blocks)(const float *w, const float *x, int64_t k, int tail_block,
                                    const int prefetch) {
    const __m256 z = _mm256_setzero_ps();
    lanes16 a0 = {z, z}, a1 = a0, a2 = a0, a3 = a0;
    const int64_t k0 = k - k % 64;
    for (int64_t i = 0; i < k0; i += 64) {
        lg_prefetch_block(w, i, 64 * sizeof(float), prefetch);
        a0 = fma16(w + i, x + i, a0);
        a1 = fma16(w + i + 16, x + i + 16, a1);
        a2 = fma16(w + i + 32, x + i + 32, a2);
        a3 = fma16(w + i + 48, x + i + 48, a3);
    }
    a0 = add16(a0, a2);
    a1 = add16(a1, a3);
    a0 = add16(a0, a1);
    return V8_SIMD_FN(tail_fused)(V8_SIMD_FN(tree16)(a0), w, x, k0, k, tail_block);
}

/* Two weight rows by RN (1 or 2) tokens: eight accumulator registers. */
static inline __attribute__((always_inline)) void V8_SIMD_FN(tile)(const lg_args *a, int64_t n0,
                                                            int64_t m0, const int rn) {
    const int64_t k = a->k;
    const __m256 z = _mm256_setzero_ps();
    lanes16 acc[2][2] = {{{z, z}, {z, z}}, {{z, z}, {z, z}}};
    const float *w = a->w + n0 * k;
    const float *x = a->x + m0 * k;
    const size_t ahead = v8_prefetch_rows_offset((size_t)k * sizeof(float), 2);
    for (int64_t l = 0; l < k; l += 16) {
        v8_prefetch_line((uintptr_t)(w + l) + ahead);
        v8_prefetch_line((uintptr_t)(w + k + l) + ahead);
        #pragma GCC unroll 8
        for (int j = 0; j < rn; ++j) {
            #pragma GCC unroll 8
            for (int i = 0; i < 2; ++i) {
                acc[i][j] = fma16(w + i * k + l, x + j * k + l, acc[i][j]);
            }
        }
    }
    #pragma GCC unroll 8
    for (int j = 0; j < rn; ++j) {
        #pragma GCC unroll 8
        for (int i = 0; i < 2; ++i) {
            put(a, m0 + j, n0 + i, V8_SIMD_FN(tree16)(acc[i][j]));
        }
    }
}



static float V8_SIMD_FN(dot_blocks8)(const float *w, const float *x, int64_t k, int tail_block,
                                     const int prefetch) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const int64_t k0 = k - k % 32;
    for (int64_t i = 0; i < k0; i += 32) {
        lg_prefetch_block(w, i, 32 * sizeof(float), prefetch);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    a0 = _mm256_add_ps(a0, a2);
    a1 = _mm256_add_ps(a1, a3);
    a0 = _mm256_add_ps(a0, a1);
    /* the 8-lane block route's tree: core/simd.h's pairs tree */
    return V8_SIMD_FN(tail_fused)(v8f_hsum_pairs(a0), w, x, k0, k, tail_block);
}

/* Four weight rows by RN <= 3 tokens, one ymm register per output: twelve
 * accumulators, three token vectors and one weight vector fill the sixteen
 * ymm registers; RN is a constant at every call site. */
#define LG_TILE8_TOKENS 3
static inline __attribute__((always_inline)) void V8_SIMD_FN(tile8)(const lg_args *a, int64_t n0,
                                                             int64_t m0, const int rn,
                                                             const int prefetch) {
    const int64_t k = a->k;
    __m256 acc[4][LG_TILE8_TOKENS];
    #pragma GCC unroll 8
    for (int i = 0; i < 4; ++i) {
        #pragma GCC unroll 8
        for (int j = 0; j < LG_TILE8_TOKENS; ++j) {
            acc[i][j] = _mm256_setzero_ps();
        }
    }
    const float *w = a->w + n0 * k;
    const float *x = a->x + m0 * k;
    const size_t ahead = v8_prefetch_rows_offset((size_t)k * sizeof(float), 4);
    for (int64_t l = 0; l < k; l += 8) {
        __m256 xv[LG_TILE8_TOKENS];
        #pragma GCC unroll 8
        for (int j = 0; j < rn; ++j) {
            xv[j] = _mm256_loadu_ps(x + j * k + l);
        }
        #pragma GCC unroll 8
        for (int i = 0; i < 4; ++i) {
            if (prefetch && (l & 15) == 0) { /* one 64-byte line per row every other step */
                v8_prefetch_line((uintptr_t)(w + i * k + l) + ahead);
            }
            const __m256 wv = _mm256_loadu_ps(w + i * k + l);
            #pragma GCC unroll 8
            for (int j = 0; j < rn; ++j) {
                acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
            }
        }
    }
    #pragma GCC unroll 8
    for (int j = 0; j < rn; ++j) {
        #pragma GCC unroll 8
        for (int i = 0; i < 4; ++i) {
            put(a, m0 + j, n0 + i, v8f_hsum_halves(acc[i][j])); /* the lane route: halving tree */
        }
    }
}

static void V8_SIMD_FN(rows8)(const lg_args *a, int64_t n0, int64_t n1) {
    if (a->lane_route) { /* n0, n1 are multiples of four here */
        const int64_t block = lg_token_block(a->k);
        for (int64_t mb = 0; mb < a->m; mb += block) {
            const int64_t me = mb + block < a->m ? mb + block : a->m;
            for (int64_t nb = n0; nb < n1; nb += 4) {
                int64_t m0 = mb;
                /* only the block's first tile prefetches the next four rows: from
                 * every tile, the repeated prefetches kept pulling those rows into
                 * L1 over the current rows and tokens (the 32768-row head at 512
                 * tokens ran at half speed on AMD EPYC) */
                for (; m0 + LG_TILE8_TOKENS <= me; m0 += LG_TILE8_TOKENS) {
                    V8_SIMD_FN(tile8)(a, nb, m0, LG_TILE8_TOKENS, m0 == mb);
                }
                if (me - m0 == 2) {
                    V8_SIMD_FN(tile8)(a, nb, m0, 2, m0 == mb);
                } else if (me - m0 == 1) {
                    V8_SIMD_FN(tile8)(a, nb, m0, 1, m0 == mb);
                }
            }
        }
        return;
    }
    for (int64_t mi = 0; mi < a->m; ++mi) {
        const float *x = a->x + mi * a->k;
        for (int64_t ni = n0; ni < n1; ++ni) {
            put(a, mi, ni, V8_SIMD_FN(dot_blocks8)(a->w + ni * a->k, x, a->k, a->tail_block, a->line_prefetch));
        }
    }
}

static void V8_SIMD_FN(rows)(const lg_args *a, int64_t n0, int64_t n1) {
    if (a->lanes == 8) {
        V8_SIMD_FN(rows8)(a, n0, n1);
        return;
    }
    if (a->lane_route) { /* n0, n1 are multiples of four here */
        const int64_t block = lg_token_block(a->k);
        for (int64_t mb = 0; mb < a->m; mb += block) {
            const int64_t me = mb + block < a->m ? mb + block : a->m;
            for (int64_t nb = n0; nb < n1; nb += 2) {
                int64_t m0 = mb;
                for (; m0 + 2 <= me; m0 += 2) {
                    V8_SIMD_FN(tile)(a, nb, m0, 2);
                }
                if (m0 < me) {
                    V8_SIMD_FN(tile)(a, nb, m0, 1);
                }
            }
        }
        return;
    }
    for (int64_t mi = 0; mi < a->m; ++mi) {
        const float *x = a->x + mi * a->k;
        for (int64_t ni = n0; ni < n1; ++ni) {
            put(a, mi, ni, V8_SIMD_FN(dot_blocks)(a->w + ni * a->k, x, a->k, a->tail_block, a->line_prefetch));
        }
    }
}
#include "core/simd_end.h"

static void rows_best(const lg_args *a, int64_t n0, int64_t n1) {
    const unsigned f = v8_cpu_features();
    if ((f & V8_CPU_AVX512F) && (f & V8_CPU_FMA) && a->lanes == 16) {
        rows_avx512(a, n0, n1);
    } else if ((f & V8_CPU_AVX2) && (f & V8_CPU_FMA)) {
        rows_avx2(a, n0, n1);
    } else {
        rows_scalar(a, n0, n1);
    }
}

/* ---- public functions --------------------------------------------------------- */

v8_status v8_linear_f32_ggml_ref(int contract, float *y, const float *w, const float *x,
                                 const float *bias, int64_t m, int64_t n, int64_t k) {
    lg_args a;
    v8_status st = prepare(contract, &a, y, w, x, bias, m, n, k);
    if (st != V8_OK) {
        return st;
    }
    rows_scalar(&a, 0, n);
    return V8_OK;
}

v8_status v8_linear_f32_ggml(int contract, float *y, const float *w, const float *x,
                             const float *bias, int64_t m, int64_t n, int64_t k) {
    lg_args a;
    v8_status st = prepare(contract, &a, y, w, x, bias, m, n, k);
    if (st != V8_OK) {
        return st;
    }
    rows_best(&a, 0, n);
    return V8_OK;
}

typedef struct lg_job {
    lg_args args;
    v8_ops_chunks chunks; /* over units of LG_ROW_UNIT output rows */
} lg_job;

static void lg_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const lg_job *job = (const lg_job *)ctx;
    int64_t u0, u1;
    v8_ops_chunk_range(&job->chunks, task, &u0, &u1);
    const int64_t n1 = u1 * LG_ROW_UNIT < job->args.n ? u1 * LG_ROW_UNIT : job->args.n;
    rows_best(&job->args, u0 * LG_ROW_UNIT, n1);
}

v8_status v8_linear_f32_ggml_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                               const float *w, const float *x,
                                               const float *bias, int64_t m, int64_t n,
                                               int64_t k) {
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    lg_job job;
    v8_status st = prepare(contract, &job.args, y, w, x, bias, m, n, k);
    if (st != V8_OK) {
        return st;
    }
    /* Each output is computed whole by one task, with the same per-output
     * arithmetic whichever rows share the task: the split changes no bit. */
    const int64_t units = (n + LG_ROW_UNIT - 1) / LG_ROW_UNIT;
    const int64_t macs_per_unit = LG_ROW_UNIT * m * k;
    const int64_t unit_bytes = LG_ROW_UNIT * k * (int64_t)sizeof(float);
    job.chunks = v8_ops_split_capped(units, v8_threadpool_workers(pool),
                                     (int64_t)65536 / macs_per_unit,
                                     LG_TASK_BYTES / unit_bytes);
    return v8_parallel_for(pool, job.chunks.n_tasks, lg_task, &job);
}
