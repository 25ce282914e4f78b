/* K-quant block formats: the Q8_K activation quantizer, reference weight
 * quantizers for Q4_K and Q6_K (byte-identical to ggml's reference ones, so
 * test models built here equal models ggml would write), dequantizers and
 * scratch sizes.  Compiled with baseline flags and ISO C, so no FMA
 * contraction changes the quantizers' fp32 arithmetic. */
#include <float.h>
#include <immintrin.h>
#include <math.h>

#include "quant/ql_internal.h"

/* Below this magnitude a Q6_K sub-block counts as all zero. */
#define QL_GROUP_EPS 1e-15f

/* ---- Q8_K ------------------------------------------------------------- */

static void q8k_block(const float *x, v8_block_q8_k *y) {
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < V8_QK_K; ++j) {
        float ax = fabsf(x[j]);
        if (ax > amax) { /* strict: the first value of largest magnitude wins */
            amax = ax;
            max = x[j];
        }
    }
    if (amax == 0.0f) {
        memset(y, 0, sizeof(*y));
        return;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < V8_QK_K; ++j) {
        int v = ql_round_even(iscale * x[j]);
        y->qs[j] = (int8_t)(v > 127 ? 127 : v);
    }
    for (int g = 0; g < V8_QK_K / 16; ++g) {
        int s = 0;
        for (int l = 0; l < 16; ++l) {
            s += y->qs[16 * g + l];
        }
        y->bsums[g] = (int16_t)s;
    }
    y->d = 1.0f / iscale;
}

/* iscale of a vector block; 0 when it overflows (a block so small that the
 * scalar block's conversions must handle it). */
static inline int q8k_iscale(float max, float *iscale) {
    *iscale = -127.0f / max;
    return fabsf(*iscale) <= FLT_MAX;
}

/* The same block on AVX-512 when every value and iscale are finite (any other
 * block takes the scalar path; returns 0 before writing): the largest magnitude by a max reduction, its first
 * occurrence by compare masks, then iscale * x rounded to nearest even by
 * the conversion (what the magic-number add does for |v| < 2^22), capped at
 * 127, and the 16-value sums in int32. */
__attribute__((target("avx512f,avx512bw"))) static int q8k_block_avx512(const float *x,
                                                                        v8_block_q8_k *y) {
    __m512 vmax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int j = 0; j < V8_QK_K; j += 16) {
        const __m512 v = _mm512_loadu_ps(x + j);
        bad |= _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
        vmax = _mm512_max_ps(vmax, _mm512_abs_ps(v));
    }
    if (bad) {
        return 0;
    }
    const float amax = _mm512_reduce_max_ps(vmax);
    if (amax == 0.0f) {
        memset(y, 0, sizeof(*y));
        return 1;
    }
    float max = 0.0f;
    for (int j = 0; j < V8_QK_K; j += 16) {
        const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + j)),
                                                 _mm512_set1_ps(amax), _CMP_EQ_OQ);
        if (hit) {
            max = x[j + __builtin_ctz((unsigned)hit)];
            break;
        }
    }
    float iscale;
    if (!q8k_iscale(max, &iscale)) {
        return 0;
    }
    const __m512 vs = _mm512_set1_ps(iscale);
    for (int g = 0; g < V8_QK_K / 16; ++g) {
        __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(vs, _mm512_loadu_ps(x + 16 * g)));
        q = _mm512_min_epi32(q, _mm512_set1_epi32(127));
        _mm_storeu_si128((__m128i *)(void *)(y->qs + 16 * g), _mm512_cvtsepi32_epi8(q));
        y->bsums[g] = (int16_t)_mm512_reduce_add_epi32(q);
    }
    y->d = 1.0f / iscale;
    return 1;
}

/* q8k_block_avx512 with 8 lanes, for AVX2 hosts: the same steps (largest
 * magnitude, its first occurrence, iscale * x rounded to nearest even by the
 * conversion, capped at 127, 16-value sums), so the same bytes. */
__attribute__((target("avx2"))) static int q8k_block_avx2(const float *x, v8_block_q8_k *y) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 vmax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int j = 0; j < V8_QK_K; j += 8) {
        const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j));
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, _mm256_set1_ps(FLT_MAX), _CMP_NLE_UQ));
        vmax = _mm256_max_ps(vmax, a);
    }
    if (_mm256_movemask_ps(bad)) {
        return 0;
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float amax = _mm_cvtss_f32(m);
    if (amax == 0.0f) {
        memset(y, 0, sizeof(*y));
        return 1;
    }
    float max = 0.0f;
    for (int j = 0; j < V8_QK_K; j += 8) {
        const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j));
        const int hit = _mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(amax), _CMP_EQ_OQ));
        if (hit) {
            max = x[j + __builtin_ctz((unsigned)hit)];
            break;
        }
    }
    float iscale;
    if (!q8k_iscale(max, &iscale)) {
        return 0;
    }
    const __m256 vs = _mm256_set1_ps(iscale);
    const __m256i cap = _mm256_set1_epi32(127);
    for (int g = 0; g < V8_QK_K / 16; ++g) {
        const __m256i q0 = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + 16 * g))), cap);
        const __m256i q1 = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + 16 * g + 8))), cap);
        /* |q| <= 127: the saturating packs are exact; packs interleaves the
         * 128-bit halves, the permute restores element order */
        const __m256i p16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xD8);
        _mm_storeu_si128((__m128i *)(void *)(y->qs + 16 * g),
                         _mm_packs_epi16(_mm256_castsi256_si128(p16), _mm256_extracti128_si256(p16, 1)));
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(_mm256_add_epi32(q0, q1)),
                                  _mm256_extracti128_si256(_mm256_add_epi32(q0, q1), 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
        y->bsums[g] = (int16_t)_mm_cvtsi128_si32(s);
    }
    y->d = 1.0f / iscale;
    return 1;
}

v8_status v8_quantize_q8_k(const float *x, void *y, int64_t rows, int64_t k) {
    V8_REQUIRE(x != NULL && y != NULL, V8_ERR_NULL_ARGUMENT);
    int64_t nb;
    v8_status st = ql_check_k(k, &nb);
    V8_REQUIRE(st == V8_OK, st);
    V8_REQUIRE(rows > 0, V8_ERR_BAD_DIMENSION);
    v8_block_q8_k *out = (v8_block_q8_k *)y;
    const v8_isa isa = v8_cpu_best_isa();
    for (int64_t i = 0; i < rows * nb; ++i) {
        const float *xb = x + i * V8_QK_K;
        const int done = isa == V8_ISA_AVX512 ? q8k_block_avx512(xb, out + i)
                         : isa == V8_ISA_AVX2 ? q8k_block_avx2(xb, out + i) : 0;
        if (!done) {
            q8k_block(xb, out + i);
        }
    }
    return V8_OK;
}

/* ---- Q4_K reference quantizer ------------------------------------------
 * Per 32-weight sub-block an asymmetric fit (scale, min) of 4-bit levels by
 * a weighted least-squares search over 21 candidate inverse scales; then the
 * sub-block scales and mins are themselves quantized to 6 bits against the
 * super-block maxima, and the weights re-quantized with the stored values.
 * The order of every fp32 operation follows ggml's reference so that the
 * bytes agree. */

/* nmax / rmin / nstep: 15 / -1 / 20 for Q4_K, 31 / -0.5 / 15 for Q5_K */
static float q4k_fit(const float *x, const float *wt, uint8_t *L, float *neg_min,
                     uint8_t *Laux, int nmax, float rmin, int nstep) {
    const int n = 32;
    const float rdelta = 0.1f;
    float lo = x[0], hi = x[0];
    float sum_w = wt[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
        sum_w += wt[i];
        sum_x += wt[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (hi == lo) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *neg_min = -lo;
        return 0.0f;
    }
    float iscale = nmax / (hi - lo);
    float scale = 1 / iscale;
    float best = 0;
    for (int i = 0; i < n; ++i) {
        int l = ql_round_even(iscale * (x[i] - lo));
        l = l < 0 ? 0 : (l > nmax ? nmax : l);
        L[i] = (uint8_t)l;
        float diff = scale * L[i] + lo - x[i];
        diff = diff * diff;
        best += wt[i] * diff;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (hi - lo);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = ql_round_even(iscale * (x[i] - lo));
            l = l < 0 ? 0 : (l > nmax ? nmax : l);
            Laux[i] = (uint8_t)l;
            float w = wt[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float s = (sum_w * sum_xl - sum_x * sum_l) / D;
            float m = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (m > 0) {
                m = 0;
                s = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; ++i) {
                float diff = s * Laux[i] + m - x[i];
                diff = diff * diff;
                err += wt[i] * diff;
            }
            if (err < best) {
                memcpy(L, Laux, (size_t)n);
                best = err;
                scale = s;
                lo = m;
            }
        }
    }
    *neg_min = -lo;
    return scale;
}

/* The shared part of the Q4_K and Q5_K reference quantizers: the 6-bit
 * scales and mins (into `scales`, d and dmin) and the levels L of the
 * 256 weights, clamped to [0, nmax]. */
static void qk_fit_block(const float *x, int nmax, float rmin, int nstep, uint8_t scales12[12],
                         uint16_t *d16, uint16_t *dmin16, uint8_t L[V8_QK_K]) {
    uint8_t Laux[32];
    float wt[32], scales[8], mins[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) wt[l] = av_x + fabsf(xs[l]);
        scales[j] = q4k_fit(xs, wt, L + 32 * j, &mins[j], Laux, nmax, rmin, nstep);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(scales12, 0, 12);
    for (int j = 0; j < 8; ++j) {
        uint8_t ls = (uint8_t)ql_round_even(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)ql_round_even(inv_min * mins[j]);
        ls = ls > 63 ? 63 : ls;
        lm = lm > 63 ? 63 : lm;
        if (j < 4) {
            scales12[j] = ls;
            scales12[j + 4] = lm;
        } else {
            scales12[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            scales12[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales12[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d16 = v8_f32_to_f16(max_scale / 63.f);
    *dmin16 = v8_f32_to_f16(max_min / 63.f);
    uint8_t sc[8], mn[8];
    ql_q4k_scales(scales12, sc, mn);
    for (int j = 0; j < 8; ++j) {
        const float d = v8_f16_to_f32(*d16) * sc[j];
        if (d == 0.0f) {
            continue; /* keeps the levels of the fit, as ggml does */
        }
        const float dm = v8_f16_to_f32(*dmin16) * mn[j];
        for (int i = 0; i < 32; ++i) {
            int l = ql_round_even((x[32 * j + i] + dm) / d);
            L[32 * j + i] = (uint8_t)(l < 0 ? 0 : (l > nmax ? nmax : l));
        }
    }
}

static void q4k_block(const float *x, v8_block_q4_k *y) {
    uint8_t L[V8_QK_K];
    qk_fit_block(x, 15, -1.0f, 20, y->scales, &y->d, &y->dmin, L);
    for (int h = 0; h < 4; ++h) {
        for (int l = 0; l < 32; ++l) {
            y->qs[32 * h + l] = (uint8_t)(L[64 * h + l] | (L[64 * h + 32 + l] << 4));
        }
    }
}

/* Q5_K: the Q4_K fit with 31 levels; low nibbles as Q4_K, fifth bits in qh */
static void q5k_block(const float *x, v8_block_q5_k *y) {
    uint8_t L[V8_QK_K];
    qk_fit_block(x, 31, -0.5f, 15, y->scales, &y->d, &y->dmin, L);
    memset(y->qh, 0, sizeof(y->qh));
    for (int h = 0; h < 4; ++h) {
        for (int l = 0; l < 32; ++l) {
            const uint8_t a = L[64 * h + l], b = L[64 * h + 32 + l];
            y->qs[32 * h + l] = (uint8_t)((a & 15) | ((b & 15) << 4));
            y->qh[l] |= (uint8_t)(((a >> 4) << (2 * h)) | ((b >> 4) << (2 * h + 1)));
        }
    }
}

v8_status v8_quantize_q5_k_ref(const float *x, void *y, int64_t rows, int64_t k) {
    V8_REQUIRE(x != NULL && y != NULL, V8_ERR_NULL_ARGUMENT);
    int64_t nb;
    v8_status st = ql_check_k(k, &nb);
    V8_REQUIRE(st == V8_OK, st);
    V8_REQUIRE(rows > 0, V8_ERR_BAD_DIMENSION);
    v8_block_q5_k *out = (v8_block_q5_k *)y;
    for (int64_t i = 0; i < rows * nb; ++i) {
        q5k_block(x + i * V8_QK_K, out + i);
    }
    return V8_OK;
}

v8_status v8_quantize_q4_k_ref(const float *x, void *y, int64_t rows, int64_t k) {
    V8_REQUIRE(x != NULL && y != NULL, V8_ERR_NULL_ARGUMENT);
    int64_t nb;
    v8_status st = ql_check_k(k, &nb);
    V8_REQUIRE(st == V8_OK, st);
    V8_REQUIRE(rows > 0, V8_ERR_BAD_DIMENSION);
    v8_block_q4_k *out = (v8_block_q4_k *)y;
    for (int64_t i = 0; i < rows * nb; ++i) {
        q4k_block(x + i * V8_QK_K, out + i);
    }
    return V8_OK;
}

/* ---- Q6_K reference quantizer ------------------------------------------
 * Per 16-weight sub-block a symmetric fit of levels in [-32, 31] weighted by
 * x^2, trying 19 inverse scales around the max; the sub-block scales are
 * quantized to int8 against the largest-magnitude one. */

static float q6k_fit(const float *x, int8_t *L) {
    const int n = 16, nmax = 32;
    float amax = 0, max = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < QL_GROUP_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = ql_round_even(iscale * x[i]);
        l = l < -nmax ? -nmax : (l > nmax - 1 ? nmax - 1 : l);
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = ql_round_even(iscale * x[i]);
            l = l < -nmax ? -nmax : (l > nmax - 1 ? nmax - 1 : l);
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                int l = ql_round_even(iscale * x[i]);
                l = l < -nmax ? -nmax : (l > nmax - 1 ? nmax - 1 : l);
                L[i] = (int8_t)(l + nmax);
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static void q6k_block(const float *x, v8_block_q6_k *y) {
    int8_t L[V8_QK_K];
    float scales[16];
    float max_scale = 0, max_abs = 0;
    for (int ib = 0; ib < 16; ++ib) {
        scales[ib] = q6k_fit(x + 16 * ib, L + 16 * ib);
        float a = fabsf(scales[ib]);
        if (a > max_abs) {
            max_abs = a;
            max_scale = scales[ib];
        }
    }
    if (max_abs < QL_GROUP_EPS) {
        memset(y, 0, sizeof(*y));
        return;
    }
    float iscale = -128.f / max_scale;
    y->d = v8_f32_to_f16(1 / iscale);
    for (int ib = 0; ib < 16; ++ib) {
        int v = ql_round_even(iscale * scales[ib]);
        y->scales[ib] = (int8_t)(v > 127 ? 127 : v);
    }
    for (int j = 0; j < 16; ++j) {
        float d = v8_f16_to_f32(y->d) * y->scales[j];
        if (d == 0.0f) {
            continue;
        }
        for (int i = 0; i < 16; ++i) {
            int l = ql_round_even(x[16 * j + i] / d);
            l = l < -32 ? -32 : (l > 31 ? 31 : l);
            L[16 * j + i] = (int8_t)(l + 32);
        }
    }
    for (int h = 0; h < 2; ++h) {
        uint8_t *ql = y->ql + 64 * h;
        uint8_t *qh = y->qh + 32 * h;
        const int8_t *Lh = L + 128 * h;
        for (int l = 0; l < 32; ++l) {
            uint8_t q0 = (uint8_t)Lh[l], q1 = (uint8_t)Lh[l + 32];
            uint8_t q2 = (uint8_t)Lh[l + 64], q3 = (uint8_t)Lh[l + 96];
            ql[l] = (uint8_t)((q0 & 0xF) | ((q2 & 0xF) << 4));
            ql[l + 32] = (uint8_t)((q1 & 0xF) | ((q3 & 0xF) << 4));
            qh[l] = (uint8_t)((q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) | ((q3 >> 4) << 6));
        }
    }
}

v8_status v8_quantize_q6_k_ref(const float *x, void *y, int64_t rows, int64_t k) {
    V8_REQUIRE(x != NULL && y != NULL, V8_ERR_NULL_ARGUMENT);
    int64_t nb;
    v8_status st = ql_check_k(k, &nb);
    V8_REQUIRE(st == V8_OK, st);
    V8_REQUIRE(rows > 0, V8_ERR_BAD_DIMENSION);
    v8_block_q6_k *out = (v8_block_q6_k *)y;
    for (int64_t i = 0; i < rows * nb; ++i) {
        q6k_block(x + i * V8_QK_K, out + i);
    }
    return V8_OK;
}

/* ---- dequantizers ----------------------------------------------------- */

v8_status v8_dequantize_q4_k(const void *w, float *x, int64_t rows, int64_t k) {
    V8_REQUIRE(x != NULL && w != NULL, V8_ERR_NULL_ARGUMENT);
    int64_t nb;
    v8_status st = ql_check_k(k, &nb);
    V8_REQUIRE(st == V8_OK, st);
    V8_REQUIRE(rows > 0, V8_ERR_BAD_DIMENSION);
    const v8_block_q4_k *b = (const v8_block_q4_k *)w;
    for (int64_t i = 0; i < rows * nb; ++i, x += V8_QK_K) {
        uint8_t sc[8], mn[8];
        ql_q4k_scales(b[i].scales, sc, mn);
        const float d = v8_f16_to_f32(b[i].d), dmin = v8_f16_to_f32(b[i].dmin);
        for (int j = 0; j < 8; ++j) {
            const float s = d * sc[j], m = dmin * mn[j];
            const uint8_t *q = b[i].qs + 32 * (j / 2);
            for (int l = 0; l < 32; ++l) {
                int v = (j & 1) ? (q[l] >> 4) : (q[l] & 15);
                x[32 * j + l] = s * v - m;
            }
        }
    }
    return V8_OK;
}

v8_status v8_dequantize_q5_k(const void *w, float *x, int64_t rows, int64_t k) {
    V8_REQUIRE(x != NULL && w != NULL, V8_ERR_NULL_ARGUMENT);
    int64_t nb;
    v8_status st = ql_check_k(k, &nb);
    V8_REQUIRE(st == V8_OK, st);
    V8_REQUIRE(rows > 0, V8_ERR_BAD_DIMENSION);
    const v8_block_q5_k *b = (const v8_block_q5_k *)w;
    for (int64_t i = 0; i < rows * nb; ++i, x += V8_QK_K) {
        uint8_t sc[8], mn[8];
        ql_q4k_scales(b[i].scales, sc, mn);
        const float d = v8_f16_to_f32(b[i].d), dmin = v8_f16_to_f32(b[i].dmin);
        for (int e = 0; e < V8_QK_K; ++e) {
            const float s = d * sc[e / 32], m = dmin * mn[e / 32];
            x[e] = s * ql_q5k_level(&b[i], e) - m;
        }
    }
    return V8_OK;
}

static inline int q6k_level(const v8_block_q6_k *b, int e) {
    const int h = e / 128, c = (e % 128) / 32, l = e % 32;
    const uint8_t lo = b->ql[64 * h + 32 * (c & 1) + l];
    const uint8_t hi = b->qh[32 * h + l];
    return ((c < 2 ? lo & 15 : lo >> 4) | (((hi >> (2 * c)) & 3) << 4));
}

v8_status v8_dequantize_q6_k(const void *w, float *x, int64_t rows, int64_t k) {
    V8_REQUIRE(x != NULL && w != NULL, V8_ERR_NULL_ARGUMENT);
    int64_t nb;
    v8_status st = ql_check_k(k, &nb);
    V8_REQUIRE(st == V8_OK, st);
    V8_REQUIRE(rows > 0, V8_ERR_BAD_DIMENSION);
    const v8_block_q6_k *b = (const v8_block_q6_k *)w;
    for (int64_t i = 0; i < rows * nb; ++i, x += V8_QK_K) {
        const float d = v8_f16_to_f32(b[i].d);
        for (int e = 0; e < V8_QK_K; ++e) {
            x[e] = (d * b[i].scales[e / 16]) * (q6k_level(&b[i], e) - 32);
        }
    }
    return V8_OK;
}

v8_status v8_dequantize_q8_k(const void *a, float *x, int64_t rows, int64_t k) {
    V8_REQUIRE(x != NULL && a != NULL, V8_ERR_NULL_ARGUMENT);
    int64_t nb;
    v8_status st = ql_check_k(k, &nb);
    V8_REQUIRE(st == V8_OK, st);
    V8_REQUIRE(rows > 0, V8_ERR_BAD_DIMENSION);
    const v8_block_q8_k *b = (const v8_block_q8_k *)a;
    for (int64_t i = 0; i < rows * nb; ++i, x += V8_QK_K) {
        for (int e = 0; e < V8_QK_K; ++e) {
            x[e] = b[i].d * b[i].qs[e];
        }
    }
    return V8_OK;
}

/* ---- scratch sizes ---------------------------------------------------- */

size_t v8_ql_gemv_scratch_bytes(int64_t k) {
    return v8_ql_gemm_scratch_bytes(1, k);
}

size_t v8_ql_gemm_scratch_bytes(int64_t m, int64_t k) {
    if (m <= 0 || k <= 0 || k % V8_QK_K != 0) {
        return 0;
    }
    return (size_t)m * (size_t)(k / V8_QK_K) * sizeof(v8_block_q8_k);
}

size_t v8_ql_split_k_scratch_bytes(int64_t n, int64_t k, int64_t parts) {
    if (n <= 0 || parts <= 0 || parts > V8_MAX_WORKERS) {
        return 0;
    }
    size_t act = v8_ql_gemv_scratch_bytes(k);
    if (act == 0) {
        return 0;
    }
    return act + (size_t)n * (size_t)parts * sizeof(float);
}
