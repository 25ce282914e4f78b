/* f16 / bf16 linear and logits with llama.cpp's CPU mul_mat arithmetic, for
 * its AVX-512 build (16 lanes, AVX512-FP16 and AVX512-BF16) and its AVX2 build
 * (8 lanes): the contracts are spelled out in
 * linear_ggml_half/v8_linear_ggml_half.h.  One algorithm per route, with the
 * lane count (and the AVX2 build's trees) a parameter of the call.
 *
 * Multiplies and adds fuse exactly where the contract says fma (fmaf in the
 * scalar oracle, vfmadd / vdpbf16ps in the SIMD variants); contraction is off
 * for this file otherwise (ops_internal.h).  The activations are rounded to
 * the weight's type as they are loaded (in registers), never stored.
 *
 * The AVX-512 build's bf16 on a CPU without AVX512-BF16 (and on AVX2) emulates
 * VDPBF16PS per lane with two fused multiply-adds, inputs and results with
 * subnormals flushed.  The AVX2 build's contracts run one 8-lane AVX2 code
 * (F16C or shifted bf16 loads, plain fma) on every SIMD host. */
#include <immintrin.h>
#include <math.h>

#include "ops/ops_internal.h"
#include "linear_ggml_half/v8_linear_ggml_half.h"

#define LH_LANES 16 /* the AVX-512 build's lanes; the AVX2 build's are LH_LANES8 */
#define LH_LANES8 8
#define LH_ROW_UNIT 16 /* threadpool tasks own whole multiples of this many rows */
#define LH_TILE_TOKENS 6
#define LH_TOKEN_BLOCK 48 /* a multiple of LH_TILE_TOKENS (and of 2) */

typedef struct lh_args {
    float *y;
    const uint16_t *w;
    const float *x;
    const float *bias;
    int64_t m, n, k;
    int bf16;
    int lanes; /* 16: the AVX-512 build's contracts, 8: the AVX2 build's */
    int lane_route;
} lh_args;

static v8_status prepare(int contract, lh_args *a, float *y, const uint16_t *w, const float *x,
                         const float *bias, int64_t m, int64_t n, int64_t k) {
    const int f16 = contract == V8_LINEAR_F16_GGML_MUL_MAT ||
                    contract == V8_LOGITS_F16_GGML_MUL_MAT;
    const int bf16 = contract == V8_LINEAR_BF16_GGML_MUL_MAT_DPBF16 ||
                     contract == V8_LOGITS_BF16_GGML_MUL_MAT_DPBF16;
    const int f16_8 = contract == V8_LINEAR_F16_GGML_8_LANE_MUL_MAT ||
                      contract == V8_LOGITS_F16_GGML_8_LANE_MUL_MAT;
    const int bf16_8 = contract == V8_LINEAR_BF16_GGML_8_LANE_MUL_MAT ||
                       contract == V8_LOGITS_BF16_GGML_8_LANE_MUL_MAT;
    V8_REQUIRE(f16 || bf16 || f16_8 || bf16_8, V8_ERR_UNKNOWN_SELECTOR);
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
    a->bf16 = bf16 || bf16_8;
    a->lanes = f16_8 || bf16_8 ? LH_LANES8 : LH_LANES;
    /* tinyBLAS's step: the lane count, a bf16 pair per lane with VDPBF16PS */
    const int64_t step = a->lanes == LH_LANES8 ? LH_LANES8 : bf16 ? 32 : LH_LANES;
    a->lane_route = m >= 2 && k % step == 0 && n % 4 == 0;
    return V8_OK;
}

static inline void put(const lh_args *a, int64_t mi, int64_t ni, float dot) {
    a->y[mi * a->n + ni] = a->bias != NULL ? dot + a->bias[ni] : dot;
}

/* ---- scalar: the oracle, and the production fallback ---------------------- */

static inline float x_f16(float x) { return v8_round_f16(x); }
static inline float x_bf16(float x) { return v8_bf16_to_f32(v8_f32_to_bf16(x)); }

/* VDPBF16PS's denormal handling: subnormal inputs read as zero, subnormal
 * results written as zero, the sign kept. */
static inline float flush(float v) { return fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v; }

static inline float dp_scalar(float c, float a0, float a1, float b0, float b1) {
    c = flush(fmaf(flush(a1), flush(b1), flush(c)));
    return flush(fmaf(flush(a0), flush(b0), c));
}

static float halving(float *v, int lanes) {
    for (int h = lanes / 2; h >= 1; h /= 2) {
        for (int i = 0; i < h; ++i) {
            v[i] = v[i] + v[i + h];
        }
    }
    return v[0];
}

static float halving16(float v[LH_LANES]) { return halving(v, LH_LANES); }

/* The AVX2 build's ggml_vec_dot_f16 fold of 8 lanes: the two halves added,
 * then adjacent pairs twice (two HADDPS). */
static float hadd_tree8(const float v[LH_LANES8]) {
    float u[4];
    for (int i = 0; i < 4; ++i) {
        u[i] = v[i] + v[i + 4];
    }
    return (u[0] + u[1]) + (u[2] + u[3]);
}

static inline float w_at(const uint16_t *w, int64_t i, int bf16) {
    return bf16 ? v8_bf16_to_f32(w[i]) : v8_f16_to_f32(w[i]);
}

static inline float x_at(const float *x, int64_t i, int bf16) {
    return bf16 ? x_bf16(x[i]) : x_f16(x[i]);
}

/* The vec routes' tail: fp32 products (exact for f16) summed in double. */
static float tail_f64(double s, const uint16_t *w, const float *x, int64_t i, int64_t k,
                      int bf16) {
    for (; i < k; ++i) {
        const float p = bf16 ? v8_bf16_to_f32(w[i]) * x_bf16(x[i])
                             : v8_f16_to_f32(w[i]) * x_f16(x[i]);
        s += (double)p;
    }
    return (float)s;
}

/* The lane route with fma lanes (f16 of both builds, bf16 of the AVX2 build). */
static float fma_lanes_scalar(const uint16_t *w, const float *x, int64_t k, int lanes, int bf16) {
    float acc[LH_LANES] = {0};
    for (int64_t l = 0; l < k; l += lanes) {
        for (int p = 0; p < lanes; ++p) {
            acc[p] = fmaf(w_at(w, l + p, bf16), x_at(x, l + p, bf16), acc[p]);
        }
    }
    return halving(acc, lanes);
}

/* The vec route with four fma accumulators of `lanes` lanes (ggml_vec_dot_f16
 * of both builds, ggml_vec_dot_bf16 of the AVX2 build). */
static float fma_vec_scalar(const uint16_t *w, const float *x, int64_t k, int lanes, int bf16) {
    float acc[4][LH_LANES] = {{0}};
    const int64_t block = 4 * (int64_t)lanes;
    const int64_t k0 = k - k % block;
    for (int64_t i = 0; i < k0; i += block) {
        for (int j = 0; j < 4; ++j) {
            for (int p = 0; p < lanes; ++p) {
                const int64_t e = i + j * lanes + p;
                acc[j][p] = fmaf(w_at(w, e, bf16), x_at(x, e, bf16), acc[j][p]);
            }
        }
    }
    for (int p = 0; p < lanes; ++p) {
        acc[0][p] = acc[0][p] + acc[2][p];
        acc[1][p] = acc[1][p] + acc[3][p];
        acc[0][p] = acc[0][p] + acc[1][p];
    }
    if (lanes == LH_LANES8 && !bf16) {
        return tail_f64((double)hadd_tree8(acc[0]), w, x, k0, k, 0);
    }
    /* bf16 adds the tree to a double 0.0 (a -0.0 tree becomes +0.0); f16 assigns it */
    const double t = (double)halving(acc[0], lanes);
    return tail_f64(bf16 ? 0.0 + t : t, w, x, k0, k, bf16);
}

/* lane p of one dot step over the 32 elements at e: the pair e+2p, e+2p+1 */
static inline float bf16_pair_scalar(float c, const uint16_t *w, const float *x, int64_t e) {
    return dp_scalar(c, v8_bf16_to_f32(w[e]), v8_bf16_to_f32(w[e + 1]), x_bf16(x[e]),
                     x_bf16(x[e + 1]));
}

static float bf16_lanes_scalar(const uint16_t *w, const float *x, int64_t k) {
    float acc[LH_LANES] = {0};
    for (int64_t l = 0; l < k; l += 32) {
        for (int p = 0; p < LH_LANES; ++p) {
            acc[p] = bf16_pair_scalar(acc[p], w, x, l + 2 * p);
        }
    }
    return halving16(acc);
}

static float bf16_vec_scalar(const uint16_t *w, const float *x, int64_t k) {
    float c1[LH_LANES] = {0}, c2[LH_LANES] = {0};
    int64_t i = 0;
    for (; i + 64 <= k; i += 64) {
        for (int p = 0; p < LH_LANES; ++p) {
            c1[p] = bf16_pair_scalar(c1[p], w, x, i + 2 * p);
            c2[p] = bf16_pair_scalar(c2[p], w, x, i + 32 + 2 * p);
        }
    }
    double s = 0.0;
    s += (double)halving16(c1);
    s += (double)halving16(c2);
    return tail_f64(s, w, x, i, k, 1);
}

static void rows_scalar(const lh_args *a, int64_t n0, int64_t n1) {
    for (int64_t mi = 0; mi < a->m; ++mi) {
        const float *x = a->x + mi * a->k;
        for (int64_t ni = n0; ni < n1; ++ni) {
            const uint16_t *w = a->w + ni * a->k;
            float dot;
            if (a->bf16 && a->lanes == LH_LANES) {
                dot = a->lane_route ? bf16_lanes_scalar(w, x, a->k) : bf16_vec_scalar(w, x, a->k);
            } else if (a->lane_route) {
                dot = fma_lanes_scalar(w, x, a->k, a->lanes, a->bf16);
            } else {
                dot = fma_vec_scalar(w, x, a->k, a->lanes, a->bf16);
            }
            put(a, mi, ni, dot);
        }
    }
}

/* ---- AVX-512 ------------------------------------------------------------------ */

#define V8_SIMD_AVX512
#include "core/simd.h"

static inline float V8_SIMD_FN(tree16)(__m512 v) {
    __m256 lo = _mm512_castps512_ps256(v);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

static inline __m512 w16_f16(const uint16_t *w) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)w));
}

static inline __m512 x16_f16(const float *x) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(x), _MM_FROUND_TO_NEAREST_INT));
}

static float V8_SIMD_FN(f16_vec)(const uint16_t *w, const float *x, int64_t k) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const int64_t k0 = k - k % 64;
    for (int64_t i = 0; i < k0; i += 64) {
        a0 = _mm512_fmadd_ps(w16_f16(w + i), x16_f16(x + i), a0);
        a1 = _mm512_fmadd_ps(w16_f16(w + i + 16), x16_f16(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(w16_f16(w + i + 32), x16_f16(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(w16_f16(w + i + 48), x16_f16(x + i + 48), a3);
    }
    a0 = _mm512_add_ps(a0, a2);
    a1 = _mm512_add_ps(a1, a3);
    a0 = _mm512_add_ps(a0, a1);
    return tail_f64((double)V8_SIMD_FN(tree16)(a0), w, x, k0, k, 0);
}

/* Four weight rows by RN <= 6 tokens: 24 accumulators. */
static inline __attribute__((always_inline)) void V8_SIMD_FN(f16_tile)(const lh_args *a, int64_t n0,
                                                                  int64_t m0, const int rn) {
    const int64_t k = a->k;
    __m512 acc[4][LH_TILE_TOKENS];
    #pragma GCC unroll 8
    for (int i = 0; i < 4; ++i) {
        #pragma GCC unroll 8
        for (int j = 0; j < LH_TILE_TOKENS; ++j) {
            acc[i][j] = _mm512_setzero_ps();
        }
    }
    const uint16_t *w = a->w + n0 * k;
    const float *x = a->x + m0 * k;
    for (int64_t l = 0; l < k; l += LH_LANES) {
        __m512 wv[4];
        #pragma GCC unroll 8
        for (int i = 0; i < 4; ++i) {
            wv[i] = w16_f16(w + i * k + l);
        }
        #pragma GCC unroll 8
        for (int j = 0; j < rn; ++j) {
            const __m512 xv = x16_f16(x + j * k + l);
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

static void V8_SIMD_FN(f16_rows)(const lh_args *a, int64_t n0, int64_t n1) {
    if (a->lane_route) { /* n0, n1 are multiples of four here */
        for (int64_t mb = 0; mb < a->m; mb += LH_TOKEN_BLOCK) {
            const int64_t me = mb + LH_TOKEN_BLOCK < a->m ? mb + LH_TOKEN_BLOCK : a->m;
            for (int64_t nb = n0; nb < n1; nb += 4) {
                int64_t m0 = mb;
                for (; m0 + LH_TILE_TOKENS <= me; m0 += LH_TILE_TOKENS) {
                    V8_SIMD_FN(f16_tile)(a, nb, m0, LH_TILE_TOKENS);
                }
                switch (me - m0) {
                case 5: V8_SIMD_FN(f16_tile)(a, nb, m0, 5); break;
                case 4: V8_SIMD_FN(f16_tile)(a, nb, m0, 4); break;
                case 3: V8_SIMD_FN(f16_tile)(a, nb, m0, 3); break;
                case 2: V8_SIMD_FN(f16_tile)(a, nb, m0, 2); break;
                case 1: V8_SIMD_FN(f16_tile)(a, nb, m0, 1); break;
                default: break;
                }
            }
        }
        return;
    }
    for (int64_t mi = 0; mi < a->m; ++mi) {
        const float *x = a->x + mi * a->k;
        for (int64_t ni = n0; ni < n1; ++ni) {
            put(a, mi, ni, V8_SIMD_FN(f16_vec)(a->w + ni * a->k, x, a->k));
        }
    }
}
#include "core/simd_end.h"

/* ---- AVX-512 with AVX512-BF16: VDPBF16PS ---------------------------------------- */

#define V8_SIMD_AVX512
#define V8_SIMD_BF16
#include "core/simd.h"

/* The sixteen-lane tree is the plain AVX-512 variant's tree16_avx512 (a subset target, so it
 * inlines here). */

/* sixteen floats to sixteen bf16, as ggml_compute_fp32_to_bf16 (RNE, NaN quieted) */
static inline __m256i bf16_round16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}

static inline __m512bh x32_bf16(const float *x) {
    const __m256i lo = bf16_round16(_mm512_loadu_ps(x));
    const __m256i hi = bf16_round16(_mm512_loadu_ps(x + 16));
    return (__m512bh)_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

static inline __m512bh w32_bf16(const uint16_t *w) {
    return (__m512bh)_mm512_loadu_si512((const void *)w);
}

static float V8_SIMD_FN(bf16_vec)(const uint16_t *w, const float *x, int64_t k) {
    __m512 c1 = _mm512_setzero_ps(), c2 = c1;
    int64_t i = 0;
    for (; i + 64 <= k; i += 64) {
        c1 = _mm512_dpbf16_ps(c1, w32_bf16(w + i), x32_bf16(x + i));
        c2 = _mm512_dpbf16_ps(c2, w32_bf16(w + i + 32), x32_bf16(x + i + 32));
    }
    double s = 0.0;
    s += (double)tree16_avx512(c1);
    s += (double)tree16_avx512(c2);
    return tail_f64(s, w, x, i, k, 1);
}

static inline __attribute__((always_inline)) void V8_SIMD_FN(bf16_tile)(const lh_args *a, int64_t n0,
                                                                   int64_t m0, const int rn) {
    const int64_t k = a->k;
    __m512 acc[4][LH_TILE_TOKENS];
    #pragma GCC unroll 8
    for (int i = 0; i < 4; ++i) {
        #pragma GCC unroll 8
        for (int j = 0; j < LH_TILE_TOKENS; ++j) {
            acc[i][j] = _mm512_setzero_ps();
        }
    }
    const uint16_t *w = a->w + n0 * k;
    const float *x = a->x + m0 * k;
    for (int64_t l = 0; l < k; l += 32) {
        __m512bh wv[4];
        #pragma GCC unroll 8
        for (int i = 0; i < 4; ++i) {
            wv[i] = w32_bf16(w + i * k + l);
        }
        #pragma GCC unroll 8
        for (int j = 0; j < rn; ++j) {
            const __m512bh xv = x32_bf16(x + j * k + l);
            #pragma GCC unroll 8
            for (int i = 0; i < 4; ++i) {
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], wv[i], xv);
            }
        }
    }
    #pragma GCC unroll 8
    for (int j = 0; j < rn; ++j) {
        #pragma GCC unroll 8
        for (int i = 0; i < 4; ++i) {
            put(a, m0 + j, n0 + i, tree16_avx512(acc[i][j]));
        }
    }
}

static void V8_SIMD_FN(bf16_rows)(const lh_args *a, int64_t n0, int64_t n1) {
    if (a->lane_route) {
        for (int64_t mb = 0; mb < a->m; mb += LH_TOKEN_BLOCK) {
            const int64_t me = mb + LH_TOKEN_BLOCK < a->m ? mb + LH_TOKEN_BLOCK : a->m;
            for (int64_t nb = n0; nb < n1; nb += 4) {
                int64_t m0 = mb;
                for (; m0 + LH_TILE_TOKENS <= me; m0 += LH_TILE_TOKENS) {
                    V8_SIMD_FN(bf16_tile)(a, nb, m0, LH_TILE_TOKENS);
                }
                switch (me - m0) {
                case 5: V8_SIMD_FN(bf16_tile)(a, nb, m0, 5); break;
                case 4: V8_SIMD_FN(bf16_tile)(a, nb, m0, 4); break;
                case 3: V8_SIMD_FN(bf16_tile)(a, nb, m0, 3); break;
                case 2: V8_SIMD_FN(bf16_tile)(a, nb, m0, 2); break;
                case 1: V8_SIMD_FN(bf16_tile)(a, nb, m0, 1); break;
                default: break;
                }
            }
        }
        return;
    }
    for (int64_t mi = 0; mi < a->m; ++mi) {
        const float *x = a->x + mi * a->k;
        for (int64_t ni = n0; ni < n1; ++ni) {
            put(a, mi, ni, V8_SIMD_FN(bf16_vec)(a->w + ni * a->k, x, a->k));
        }
    }
}
#include "core/simd_end.h"

/* ---- AVX2: sixteen lanes as two registers ------------------------------------------ */

#define V8_SIMD_AVX2
#include "core/simd.h"

typedef struct lanes16 {
    __m256 lo, hi; /* lanes 0-7, 8-15 */
} lanes16;

static inline float V8_SIMD_FN(tree16)(lanes16 v) {
    __m256 s8 = _mm256_add_ps(v.lo, v.hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

static inline lanes16 add16(lanes16 a, lanes16 b) {
    a.lo = _mm256_add_ps(a.lo, b.lo);
    a.hi = _mm256_add_ps(a.hi, b.hi);
    return a;
}

static inline __m256 w8_f16(const uint16_t *w) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
}

static inline __m256 x8_f16(const float *x) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x), _MM_FROUND_TO_NEAREST_INT));
}

static inline lanes16 f16_fma16(const uint16_t *w, const float *x, lanes16 c) {
    c.lo = _mm256_fmadd_ps(w8_f16(w), x8_f16(x), c.lo);
    c.hi = _mm256_fmadd_ps(w8_f16(w + 8), x8_f16(x + 8), c.hi);
    return c;
}

static float V8_SIMD_FN(f16_vec)(const uint16_t *w, const float *x, int64_t k) {
    const __m256 z = _mm256_setzero_ps();
    lanes16 a0 = {z, z}, a1 = a0, a2 = a0, a3 = a0;
    const int64_t k0 = k - k % 64;
    for (int64_t i = 0; i < k0; i += 64) {
        a0 = f16_fma16(w + i, x + i, a0);
        a1 = f16_fma16(w + i + 16, x + i + 16, a1);
        a2 = f16_fma16(w + i + 32, x + i + 32, a2);
        a3 = f16_fma16(w + i + 48, x + i + 48, a3);
    }
    a0 = add16(a0, a2);
    a1 = add16(a1, a3);
    a0 = add16(a0, a1);
    return tail_f64((double)V8_SIMD_FN(tree16)(a0), w, x, k0, k, 0);
}

/* bf16 as VDPBF16PS computes it, eight lanes: each 32-bit word holds the
 * pair (even element low, odd element high). */
static inline __m256 flush8(__m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i tiny = _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7f800000)),
                                            _mm256_setzero_si256());
    return _mm256_castsi256_ps(
        _mm256_andnot_si256(_mm256_and_si256(tiny, _mm256_set1_epi32(0x7fffffff)), u));
}

static inline __m256i bf16_round8(__m256 v) { /* eight floats -> bf16 bits in 32-bit lanes */
    const __m256i u = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(r, q, nan);
}

static inline __m256i x16_pairs(const float *x) { /* 16 floats -> 8 words of bf16 pairs */
    const __m256i p = _mm256_packus_epi32(bf16_round8(_mm256_loadu_ps(x)),
                                          bf16_round8(_mm256_loadu_ps(x + 8)));
    return _mm256_permute4x64_epi64(p, 0xD8); /* 128-bit lane interleave back to order */
}

static inline __m256 dp8(__m256 c, __m256i wp, __m256i xp) {
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    const __m256 w1 = flush8(_mm256_castsi256_ps(_mm256_and_si256(wp, hi)));
    const __m256 x1 = flush8(_mm256_castsi256_ps(_mm256_and_si256(xp, hi)));
    const __m256 w0 = flush8(_mm256_castsi256_ps(_mm256_slli_epi32(wp, 16)));
    const __m256 x0 = flush8(_mm256_castsi256_ps(_mm256_slli_epi32(xp, 16)));
    c = flush8(_mm256_fmadd_ps(w1, x1, c));
    return flush8(_mm256_fmadd_ps(w0, x0, c));
}

/* one dot step over 32 elements at e: lanes 0-7 from e .. e+15, 8-15 from e+16 .. e+31 */
static inline lanes16 bf16_dp16(lanes16 c, const uint16_t *w, const float *x) {
    c.lo = dp8(c.lo, _mm256_loadu_si256((const __m256i *)w), x16_pairs(x));
    c.hi = dp8(c.hi, _mm256_loadu_si256((const __m256i *)(w + 16)), x16_pairs(x + 16));
    return c;
}

static float V8_SIMD_FN(bf16_vec)(const uint16_t *w, const float *x, int64_t k) {
    const __m256 z = _mm256_setzero_ps();
    lanes16 c1 = {z, z}, c2 = c1;
    int64_t i = 0;
    for (; i + 64 <= k; i += 64) {
        c1 = bf16_dp16(c1, w + i, x + i);
        c2 = bf16_dp16(c2, w + i + 32, x + i + 32);
    }
    double s = 0.0;
    s += (double)V8_SIMD_FN(tree16)(c1);
    s += (double)V8_SIMD_FN(tree16)(c2);
    return tail_f64(s, w, x, i, k, 1);
}

/* Two weight rows by RN (1 or 2) tokens. */
static inline __attribute__((always_inline)) void V8_SIMD_FN(tile)(const lh_args *a, int64_t n0,
                                                            int64_t m0, const int rn) {
    const int64_t k = a->k;
    const __m256 z = _mm256_setzero_ps();
    lanes16 acc[2][2] = {{{z, z}, {z, z}}, {{z, z}, {z, z}}};
    const uint16_t *w = a->w + n0 * k;
    const float *x = a->x + m0 * k;
    if (a->bf16) {
        for (int64_t l = 0; l < k; l += 32) {
            #pragma GCC unroll 8
            for (int j = 0; j < rn; ++j) {
                #pragma GCC unroll 8
                for (int i = 0; i < 2; ++i) {
                    acc[i][j] = bf16_dp16(acc[i][j], w + i * k + l, x + j * k + l);
                }
            }
        }
    } else {
        for (int64_t l = 0; l < k; l += LH_LANES) {
            #pragma GCC unroll 8
            for (int j = 0; j < rn; ++j) {
                #pragma GCC unroll 8
                for (int i = 0; i < 2; ++i) {
                    acc[i][j] = f16_fma16(w + i * k + l, x + j * k + l, acc[i][j]);
                }
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

static void V8_SIMD_FN(rows)(const lh_args *a, int64_t n0, int64_t n1) {
    if (a->lane_route) { /* n0, n1 are multiples of four here */
        for (int64_t mb = 0; mb < a->m; mb += LH_TOKEN_BLOCK) {
            const int64_t me = mb + LH_TOKEN_BLOCK < a->m ? mb + LH_TOKEN_BLOCK : a->m;
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
            const uint16_t *w = a->w + ni * a->k;
            put(a, mi, ni, a->bf16 ? V8_SIMD_FN(bf16_vec)(w, x, a->k) : V8_SIMD_FN(f16_vec)(w, x, a->k));
        }
    }
}
#include "core/simd_end.h"

/* ---- the AVX2 build's contracts: eight lanes, one ymm ------------------------------ */

#define V8_SIMD_AVX2
#include "core/simd.h"



static inline __m256 w8_bf16(const uint16_t *w) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)w));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static inline __m256 x8_bf16(const float *x) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(bf16_round8(_mm256_loadu_ps(x)), 16));
}

static inline __attribute__((always_inline)) __m256 w8_at(const uint16_t *w, const int bf16) {
    return bf16 ? w8_bf16(w) : w8_f16(w);
}

static inline __attribute__((always_inline)) __m256 x8_at(const float *x, const int bf16) {
    return bf16 ? x8_bf16(x) : x8_f16(x);
}

static inline __attribute__((always_inline)) float V8_SIMD_FN(vec8)(const uint16_t *w, const float *x,
                                                             int64_t k, const int bf16) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const int64_t k0 = k - k % 32;
    for (int64_t i = 0; i < k0; i += 32) {
        a0 = _mm256_fmadd_ps(w8_at(w + i, bf16), x8_at(x + i, bf16), a0);
        a1 = _mm256_fmadd_ps(w8_at(w + i + 8, bf16), x8_at(x + i + 8, bf16), a1);
        a2 = _mm256_fmadd_ps(w8_at(w + i + 16, bf16), x8_at(x + i + 16, bf16), a2);
        a3 = _mm256_fmadd_ps(w8_at(w + i + 24, bf16), x8_at(x + i + 24, bf16), a3);
    }
    a0 = _mm256_add_ps(a0, a2);
    a1 = _mm256_add_ps(a1, a3);
    a0 = _mm256_add_ps(a0, a1);
    if (!bf16) {
        return tail_f64((double)v8f_hsum_pairs(a0), w, x, k0, k, 0);
    }
    const double t = (double)v8f_hsum_halves(a0);
    return tail_f64(0.0 + t, w, x, k0, k, 1);
}

/* Four weight rows by RN <= 3 tokens: twelve accumulators. */
static inline __attribute__((always_inline)) void V8_SIMD_FN(tile8)(const lh_args *a, int64_t n0,
                                                             int64_t m0, const int rn,
                                                             const int bf16) {
    const int64_t k = a->k;
    __m256 acc[4][3];
    #pragma GCC unroll 8
    for (int i = 0; i < 4; ++i) {
        #pragma GCC unroll 8
        for (int j = 0; j < 3; ++j) {
            acc[i][j] = _mm256_setzero_ps();
        }
    }
    const uint16_t *w = a->w + n0 * k;
    const float *x = a->x + m0 * k;
    for (int64_t l = 0; l < k; l += LH_LANES8) {
        __m256 wv[4];
        #pragma GCC unroll 8
        for (int i = 0; i < 4; ++i) {
            wv[i] = w8_at(w + i * k + l, bf16);
        }
        #pragma GCC unroll 8
        for (int j = 0; j < rn; ++j) {
            const __m256 xv = x8_at(x + j * k + l, bf16);
            #pragma GCC unroll 8
            for (int i = 0; i < 4; ++i) {
                acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
            }
        }
    }
    #pragma GCC unroll 8
    for (int j = 0; j < rn; ++j) {
        #pragma GCC unroll 8
        for (int i = 0; i < 4; ++i) {
            put(a, m0 + j, n0 + i, v8f_hsum_halves(acc[i][j]));
        }
    }
}

static inline __attribute__((always_inline)) void rows8_avx2_of(const lh_args *a, int64_t n0,
                                                                int64_t n1, const int bf16) {
    if (a->lane_route) { /* n0, n1 are multiples of four here */
        for (int64_t mb = 0; mb < a->m; mb += LH_TOKEN_BLOCK) {
            const int64_t me = mb + LH_TOKEN_BLOCK < a->m ? mb + LH_TOKEN_BLOCK : a->m;
            for (int64_t nb = n0; nb < n1; nb += 4) {
                int64_t m0 = mb;
                for (; m0 + 3 <= me; m0 += 3) {
                    V8_SIMD_FN(tile8)(a, nb, m0, 3, bf16);
                }
                if (me - m0 == 2) {
                    V8_SIMD_FN(tile8)(a, nb, m0, 2, bf16);
                } else if (me - m0 == 1) {
                    V8_SIMD_FN(tile8)(a, nb, m0, 1, bf16);
                }
            }
        }
        return;
    }
    for (int64_t mi = 0; mi < a->m; ++mi) {
        const float *x = a->x + mi * a->k;
        for (int64_t ni = n0; ni < n1; ++ni) {
            put(a, mi, ni, V8_SIMD_FN(vec8)(a->w + ni * a->k, x, a->k, bf16));
        }
    }
}

static void V8_SIMD_FN(rows8)(const lh_args *a, int64_t n0, int64_t n1) {
    if (a->bf16) {
        rows8_avx2_of(a, n0, n1, 1);
    } else {
        rows8_avx2_of(a, n0, n1, 0);
    }
}
#include "core/simd_end.h"

static void rows_best(const lh_args *a, int64_t n0, int64_t n1) {
    const unsigned f = v8_cpu_features();
    const unsigned avx2 = V8_CPU_AVX2 | V8_CPU_FMA | V8_CPU_F16C;
    const unsigned avx512 = avx2 | V8_CPU_AVX512F | V8_CPU_AVX512BW | V8_CPU_AVX512VL |
                            V8_CPU_AVX512DQ;
    if (a->lanes == LH_LANES8) { /* the AVX2 build's contracts: ymm code on any SIMD host */
        if ((f & avx2) == avx2) {
            rows8_avx2(a, n0, n1);
        } else {
            rows_scalar(a, n0, n1);
        }
    } else if (!a->bf16 && (f & avx512) == avx512) {
        f16_rows_avx512(a, n0, n1);
    } else if (a->bf16 && (f & (avx512 | V8_CPU_AVX512BF16)) == (avx512 | V8_CPU_AVX512BF16)) {
        bf16_rows_avx512bf16(a, n0, n1);
    } else if ((f & avx2) == avx2) {
        rows_avx2(a, n0, n1);
    } else {
        rows_scalar(a, n0, n1);
    }
}

/* ---- public functions --------------------------------------------------------- */

v8_status v8_linear_half_ggml_ref(int contract, float *y, const uint16_t *w, const float *x,
                                  const float *bias, int64_t m, int64_t n, int64_t k) {
    lh_args a;
    v8_status st = prepare(contract, &a, y, w, x, bias, m, n, k);
    if (st != V8_OK) {
        return st;
    }
    rows_scalar(&a, 0, n);
    return V8_OK;
}

v8_status v8_linear_half_ggml(int contract, float *y, const uint16_t *w, const float *x,
                              const float *bias, int64_t m, int64_t n, int64_t k) {
    lh_args a;
    v8_status st = prepare(contract, &a, y, w, x, bias, m, n, k);
    if (st != V8_OK) {
        return st;
    }
    rows_best(&a, 0, n);
    return V8_OK;
}

typedef struct lh_job {
    lh_args args;
    v8_ops_chunks chunks; /* over units of LH_ROW_UNIT output rows */
} lh_job;

static void lh_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const lh_job *job = (const lh_job *)ctx;
    int64_t u0, u1;
    v8_ops_chunk_range(&job->chunks, task, &u0, &u1);
    const int64_t n1 = u1 * LH_ROW_UNIT < job->args.n ? u1 * LH_ROW_UNIT : job->args.n;
    rows_best(&job->args, u0 * LH_ROW_UNIT, n1);
}

v8_status v8_linear_half_ggml_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                                const uint16_t *w, const float *x,
                                                const float *bias, int64_t m, int64_t n,
                                                int64_t k) {
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    lh_job job;
    v8_status st = prepare(contract, &job.args, y, w, x, bias, m, n, k);
    if (st != V8_OK) {
        return st;
    }
    /* Each output is computed whole by one task with the same arithmetic
     * whichever rows share the task: the split changes no bit. */
    const int64_t units = (n + LH_ROW_UNIT - 1) / LH_ROW_UNIT;
    const int64_t macs_per_unit = LH_ROW_UNIT * m * k;
    job.chunks = v8_ops_split(units, v8_threadpool_workers(pool),
                              (int64_t)65536 / macs_per_unit);
    return v8_parallel_for(pool, job.chunks.n_tasks, lh_task, &job);
}
