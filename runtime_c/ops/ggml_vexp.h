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

#endif /* V8_OPS_GGML_VEXP_H */
