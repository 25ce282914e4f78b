/* fp16 and bf16 conversions.  The scalar routines are exact (they are the
 * reference); the array helpers use F16C when the CPU has it, which gives the
 * same bits, only faster. */
#include "v8_runtime.h"

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float v8_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1fu) {
        /* inf, or NaN with its payload kept and the quiet bit set: F16C's
         * VCVTPH2PS quiets signalling NaNs, and the array helper must give
         * the same bits on either path. */
        uint32_t quiet = man != 0 ? 0x400000u : 0u;
        return bits_f32(sign | 0x7f800000u | quiet | (man << 13));
    }
    if (exp == 0) {
        if (man == 0) {
            return bits_f32(sign);
        }
        /* subnormal: value = man * 2^-24, exact in fp32 */
        float v = (float)man * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t v8_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t absu = u & 0x7fffffffu;
    if (absu >= 0x7f800000u) {               /* inf / nan (quiet, keep payload top bits) */
        uint16_t man = absu > 0x7f800000u ? (uint16_t)(0x200u | ((absu >> 13) & 0x3ffu)) : 0;
        return (uint16_t)(sign | 0x7c00u | man);
    }
    if (absu >= 0x477ff000u) {               /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00u);
    }
    if (absu < 0x38800000u) {                /* below 2^-14: subnormal or zero */
        if (absu < 0x33000000u) {            /* below 2^-25: rounds to zero */
            return sign;
        }
        uint32_t exp = absu >> 23;
        uint32_t man = (absu & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - exp;         /* 14..24 */
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u);
        uint32_t mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (half & 1u))) {
            half += 1u;
        }
        return (uint16_t)(sign | half);
    }
    uint32_t rounded = absu - 0x38000000u;   /* rebias exponent 127 -> 15 */
    uint32_t rem = rounded & 0x1fffu;
    uint32_t h = rounded >> 13;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) {
        h += 1u;                             /* may carry into the exponent: correct */
    }
    return (uint16_t)(sign | h);
}

float v8_round_f16(float f) { return v8_f16_to_f32(v8_f32_to_f16(f)); }

float v8_bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }

uint16_t v8_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t)((u >> 16) | 0x40u);
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#define V8_SIMD_AVX2
#include "core/simd.h"
#include <immintrin.h>

static void f16_to_f32_f16c(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; ++i) {
        dst[i] = v8_f16_to_f32(src[i]);
    }
}

static void f32_to_f16_f16c(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(dst + i), h);
    }
    for (; i < n; ++i) {
        dst[i] = v8_f32_to_f16(src[i]);
    }
}
#include "core/simd_end.h"

static int has_f16c(void) {
    unsigned need = V8_CPU_AVX2 | V8_CPU_F16C;
    return (v8_cpu_features() & need) == need;
}

void v8_f16_to_f32_array(const uint16_t *src, float *dst, size_t n) {
    if (has_f16c()) {
        f16_to_f32_f16c(src, dst, n);
        return;
    }
    for (size_t i = 0; i < n; ++i) {
        dst[i] = v8_f16_to_f32(src[i]);
    }
}

void v8_f32_to_f16_array(const float *src, uint16_t *dst, size_t n) {
    if (has_f16c()) {
        f32_to_f16_f16c(src, dst, n);
        return;
    }
    for (size_t i = 0; i < n; ++i) {
        dst[i] = v8_f32_to_f16(src[i]);
    }
}
