/* ggml_v_expf, one lane at a time, in the two forms llama.cpp's x86 builds compute
 * (shared by the providers that reproduce them; static inline, header only). */
#ifndef V8_OPS_GGML_VEXP_H
#define V8_OPS_GGML_VEXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define VEXP_SHIFT 0x1.8p23f
#define VEXP_LOG2E 0x1.715476p+0f
#define VEXP_LN2_HI 0x1.62e4p-1f
#define VEXP_LN2_LO 0x1.7f7d1cp-20f
#define VEXP_C1 0x1.ffffecp-1f
#define VEXP_C2 0x1.fffdb6p-2f
#define VEXP_C3 0x1.555e66p-3f
#define VEXP_C4 0x1.573e2ep-5f
#define VEXP_C5 0x1.0e4020p-7f

static inline uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* j * 2^n rounded once (|n| <= 192), as _mm512_scalef_ps computes it: the product is exact
 * in double, so the conversion to float is its only rounding -- scalbnf's result, without a
 * library call per lane (5% of a small Qwen3.5 decode step went to it). */
static inline float scale_by_pow2(float j, int n) {
    const uint64_t e = (uint64_t)(n + 1023) << 52;
    double p;
    memcpy(&p, &e, sizeof p);
    return (float)((double)j * p);
}

/* The AVX-512 form: p(b) = 1 + c1 b + ... with the 1 inside, then p * 2^n rounded once. */
static inline float vexp_lane_avx512(float x) {
    const float z = fmaf(x, VEXP_LOG2E, VEXP_SHIFT);
    const float n = z - VEXP_SHIFT;
    const float b = fmaf(-n, VEXP_LN2_LO, fmaf(-n, VEXP_LN2_HI, x));
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(VEXP_C5, b, VEXP_C4), u, fmaf(VEXP_C3, b, VEXP_C2)), u,
                         fmaf(VEXP_C1, b, 1.0f));
    if (n != n) {
        return j;
    }
    if (fabsf(n) > 192.0f) {
        return n <= 0.0f ? 0.0f : INFINITY;
    }
    return scale_by_pow2(j, (int)n);
}

/* The AVX2 form: p(b) = c1 b + ... without the 1, k = 2^n from the exponent bits, result
 * k + k p; |n| > 126 splits the scale in two factors, |n| > 192 saturates. */
static inline float vexp_lane_avx2(float x) {
    const float z = fmaf(x, VEXP_LOG2E, VEXP_SHIFT);
    const float n = z - VEXP_SHIFT;
    const float b = fmaf(-n, VEXP_LN2_LO, fmaf(-n, VEXP_LN2_HI, x));
    const uint32_t e = bits_of(z) << 23;
    const float k = float_of(e + bits_of(1.0f));
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(VEXP_C5, b, VEXP_C4), u, fmaf(VEXP_C3, b, VEXP_C2)), u,
                         VEXP_C1 * b);
    if (!(fabsf(n) > 126.0f)) {
        return fmaf(k, j, k);
    }
    const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
    const float s1 = float_of(g + 0x7f000000u);
    const float s2 = float_of(e - g);
    if (fabsf(n) > 192.0f) {
        return s1 * s1;
    }
    return fmaf(s2, j, s2) * s1;
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/* ---- the same forms over eight lanes (AVX2 + FMA), each lane the functions above ---- */

/* vexp_lane_avx2 of each lane. */
static inline __attribute__((target("avx2,fma"))) __m256 vexp8_avx2_form(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(VEXP_LOG2E), _mm256_set1_ps(VEXP_SHIFT));
    const __m256 n = _mm256_sub_ps(z, _mm256_set1_ps(VEXP_SHIFT));
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(VEXP_LN2_LO),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(VEXP_LN2_HI), x));
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
    const __m256 absn = _mm256_andnot_ps(sign, n);
    const __m256 wide = _mm256_cmp_ps(absn, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 hi = _mm256_fmadd_ps(_mm256_set1_ps(VEXP_C5), b, _mm256_set1_ps(VEXP_C4));
    const __m256 mid = _mm256_fmadd_ps(_mm256_set1_ps(VEXP_C3), b, _mm256_set1_ps(VEXP_C2));
    const __m256 j = _mm256_fmadd_ps(_mm256_fmadd_ps(hi, u, mid), u,
                                     _mm256_mul_ps(_mm256_set1_ps(VEXP_C1), b));
    const __m256 plain = _mm256_fmadd_ps(k, j, k);
    if (!_mm256_movemask_ps(wide)) {
        return plain;
    }
    const __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                       _mm256_set1_epi32((int)0x82000000u));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    const __m256 huge = _mm256_cmp_ps(absn, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    const __m256 split = _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1);
    const __m256 not_huge = _mm256_blendv_ps(plain, split, wide);
    return _mm256_blendv_ps(not_huge, _mm256_mul_ps(s1, s1), huge);
}

/* scale_by_pow2 of four lanes: j * 2^n exact in double, then one conversion to float. */
static inline __attribute__((target("avx2,fma"))) __m128 vexp_scale4(__m128 j, __m128i n) {
    const __m256i e = _mm256_slli_epi64(_mm256_cvtepi32_epi64(_mm_add_epi32(n, _mm_set1_epi32(1023))), 52);
    return _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(j), _mm256_castsi256_pd(e)));
}

/* vexp_lane_avx512 of each lane: the polynomial with the 1 inside, j * 2^n rounded once, a
 * NaN n keeping j, |n| > 192 saturating. */
static inline __attribute__((target("avx2,fma"))) __m256 vexp8_avx512_form(__m256 x) {
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(VEXP_LOG2E), _mm256_set1_ps(VEXP_SHIFT));
    const __m256 n = _mm256_sub_ps(z, _mm256_set1_ps(VEXP_SHIFT));
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(VEXP_LN2_LO),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(VEXP_LN2_HI), x));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 hi = _mm256_fmadd_ps(_mm256_set1_ps(VEXP_C5), b, _mm256_set1_ps(VEXP_C4));
    const __m256 mid = _mm256_fmadd_ps(_mm256_set1_ps(VEXP_C3), b, _mm256_set1_ps(VEXP_C2));
    const __m256 lo = _mm256_fmadd_ps(_mm256_set1_ps(VEXP_C1), b, _mm256_set1_ps(1.0f));
    const __m256 j = _mm256_fmadd_ps(_mm256_fmadd_ps(hi, u, mid), u, lo);
    const __m256 big = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), n),
                                     _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    /* in-range lanes only: a big or NaN n converts to anything, and is replaced below */
    const __m256i ni = _mm256_cvttps_epi32(n);
    const __m256 scaled = _mm256_set_m128(
        vexp_scale4(_mm256_extractf128_ps(j, 1), _mm256_extracti128_si256(ni, 1)),
        vexp_scale4(_mm256_castps256_ps128(j), _mm256_castsi256_si128(ni)));
    const __m256 kept = _mm256_blendv_ps(scaled, j, _mm256_cmp_ps(n, n, _CMP_UNORD_Q));
    if (!_mm256_movemask_ps(big)) {
        return kept;
    }
    const __m256 saturated = _mm256_blendv_ps(_mm256_set1_ps(INFINITY), _mm256_setzero_ps(),
                                              _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ));
    return _mm256_blendv_ps(kept, saturated, big);
}

/* ggml's vector SiLU of eight lanes, x / (1 + vexp(0 - x)), in the AVX-512 build's exp form
 * (avx512_form) or the AVX2 build's. */
static inline __attribute__((target("avx2,fma"), always_inline)) __m256 vsilu8(__m256 x,
                                                                               int avx512_form) {
    const __m256 m = _mm256_sub_ps(_mm256_setzero_ps(), x);
    const __m256 e = avx512_form ? vexp8_avx512_form(m) : vexp8_avx2_form(m);
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}
#endif

#endif /* V8_OPS_GGML_VEXP_H */
