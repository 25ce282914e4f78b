/* The AVX-512 intrinsics of the attention kernels, emulated lane by lane (Intel's documented
 * semantics), so their AVX-512 variants run on an AVX2 host.  Include after <immintrin.h> and
 * before the kernel source, in a translation unit compiled with -mavx2 -mfma -mf16c and ISO C
 * (-std=c11: no fp contraction), and define V8_SIMD_EMULATED so that no AVX-512 target pragma is
 * active (core/simd.h and the pre-simd.h copies in avx512_before_simd_map/ honour it).
 *
 * Every fp32/fp64 lane operation is one IEEE operation rounded once (nearest-even, the default
 * MXCSR the kernels run under); fma is fmaf.  The fp16 conversions use the host's F16C
 * instructions on each 256-bit half (vcvtph2ps / vcvtps2ph, the same per-lane operation as the
 * 512-bit form); only round-to-nearest-even is accepted.  __m512, __m512d and __m512i all name
 * the one union below (the casts between them are free), __mmask16 stays GCC's. */
#ifndef V8_AVX512_EMULATION_H
#define V8_AVX512_EMULATION_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef V8_SIMD_EMULATED
#error "define V8_SIMD_EMULATED before including avx512_emulation.h"
#endif

typedef struct {
    union {
        float f[16];
        double d[8];
        int32_t i32[16];
        uint32_t u32[16];
        uint16_t u16[32];
    };
} emu512;

#define EMU_MAP(field, n, expr)                                                              \
    emu512 r;                                                                                \
    for (int i = 0; i < (n); ++i) {                                                          \
        r.field[i] = (expr);                                                                 \
    }                                                                                        \
    return r

static inline int emu_bit(__mmask16 k, int i) { return (k >> i) & 1; }

/* ---- set, load, store --------------------------------------------------------------- */
static inline emu512 emu_setzero(void) { EMU_MAP(u32, 16, 0u); }
static inline emu512 emu_set1_ps(float v) { EMU_MAP(f, 16, v); }
static inline emu512 emu_set1_epi32(int v) { EMU_MAP(i32, 16, (int32_t)v); }
static inline emu512 emu_loadu(const void *p) {
    emu512 r;
    memcpy(&r, p, 64);
    return r;
}
static inline void emu_storeu(void *p, emu512 a) { memcpy(p, &a, 64); }
/* masked lanes only are read / written (the others may lie past the buffer) */
static inline emu512 emu_maskz_loadu_ps(__mmask16 k, const float *p) {
    EMU_MAP(f, 16, emu_bit(k, i) ? p[i] : 0.0f);
}
static inline void emu_mask_storeu_ps(float *p, __mmask16 k, emu512 a) {
    for (int i = 0; i < 16; ++i) {
        if (emu_bit(k, i)) {
            p[i] = a.f[i];
        }
    }
}

/* ---- fp32 arithmetic ------------------------------------------------------------------ */
static inline emu512 emu_add_ps(emu512 a, emu512 b) { EMU_MAP(f, 16, a.f[i] + b.f[i]); }
static inline emu512 emu_sub_ps(emu512 a, emu512 b) { EMU_MAP(f, 16, a.f[i] - b.f[i]); }
static inline emu512 emu_mul_ps(emu512 a, emu512 b) { EMU_MAP(f, 16, a.f[i] * b.f[i]); }
/* vmaxps: the first operand if it is greater, else the second (NaN, equal zeros) */
static inline emu512 emu_max_ps(emu512 a, emu512 b) { EMU_MAP(f, 16, a.f[i] > b.f[i] ? a.f[i] : b.f[i]); }
static inline emu512 emu_abs_ps(emu512 a) { EMU_MAP(u32, 16, a.u32[i] & 0x7fffffffu); }
static inline emu512 emu_fmadd_ps(emu512 a, emu512 b, emu512 c) { EMU_MAP(f, 16, fmaf(a.f[i], b.f[i], c.f[i])); }
/* -(a*b) + c, rounded once */
static inline emu512 emu_fnmadd_ps(emu512 a, emu512 b, emu512 c) { EMU_MAP(f, 16, fmaf(-a.f[i], b.f[i], c.f[i])); }

/* vscalefps: a * 2^floor(b), rounded once (into the subnormal range too); NaN in, NaN out;
 * 0 * 2^+inf and inf * 2^-inf are NaN. */
static inline float emu_scalef1(float a, float b) {
    if (isnan(a) || isnan(b)) {
        return isnan(a) ? a + 0.0f : b + 0.0f;
    }
    if (isinf(b)) {
        if (b > 0) {
            return a == 0.0f ? NAN : a * INFINITY;
        }
        return isinf(a) ? NAN : copysignf(0.0f, a);
    }
    float e = floorf(b);
    e = e > 400.0f ? 400.0f : e < -400.0f ? -400.0f : e; /* past +-400: inf or 0 either way */
    /* exact in double (24-bit significand times a power of two within range), one rounding */
    return (float)((double)a * ldexp(1.0, (int)e));
}
static inline emu512 emu_scalef_ps(emu512 a, emu512 b) { EMU_MAP(f, 16, emu_scalef1(a.f[i], b.f[i])); }

/* ---- fp64 ---------------------------------------------------------------------------------- */
static inline emu512 emu_add_pd(emu512 a, emu512 b) { EMU_MAP(d, 8, a.d[i] + b.d[i]); }
static inline emu512 emu_cvtps_pd(__m256 x) {
    float f[8];
    memcpy(f, &x, 32);
    EMU_MAP(d, 8, (double)f[i]);
}
static inline __m256 emu_cvtpd_ps(emu512 a) {
    float f[8];
    for (int i = 0; i < 8; ++i) {
        f[i] = (float)a.d[i]; /* nearest-even */
    }
    __m256 r;
    memcpy(&r, f, 32);
    return r;
}

/* ---- compares and masks --------------------------------------------------------------- */
static inline __mmask16 emu_cmp_ps_mask(emu512 a, emu512 b, int pred) {
    unsigned k = 0;
    for (int i = 0; i < 16; ++i) {
        const float x = a.f[i], y = b.f[i];
        int t;
        switch (pred) {
        case _CMP_LT_OQ: t = x < y; break;
        case _CMP_LE_OQ: t = x <= y; break;
        case _CMP_GT_OQ: t = x > y; break;
        case _CMP_NEQ_OQ: t = !isnan(x) && !isnan(y) && x != y; break;
        default: abort(); /* a predicate the kernels do not use */
        }
        k |= (unsigned)t << i;
    }
    return (__mmask16)k;
}
static inline __mmask16 emu_cmp_epi32_mask(emu512 a, emu512 b, int pred) {
    if (pred != _MM_CMPINT_LT) {
        abort();
    }
    unsigned k = 0;
    for (int i = 0; i < 16; ++i) {
        k |= (unsigned)(a.i32[i] < b.i32[i]) << i;
    }
    return (__mmask16)k;
}
/* k ? b : a per lane */
static inline emu512 emu_mask_blend_ps(__mmask16 k, emu512 a, emu512 b) { EMU_MAP(u32, 16, emu_bit(k, i) ? b.u32[i] : a.u32[i]); }
static inline emu512 emu_maskz_mov(__mmask16 k, emu512 a) { EMU_MAP(u32, 16, emu_bit(k, i) ? a.u32[i] : 0u); }

/* ---- int32 ----------------------------------------------------------------------------- */
static inline emu512 emu_add_epi32(emu512 a, emu512 b) { EMU_MAP(u32, 16, a.u32[i] + b.u32[i]); }
static inline emu512 emu_sub_epi32(emu512 a, emu512 b) { EMU_MAP(u32, 16, a.u32[i] - b.u32[i]); }
static inline emu512 emu_slli_epi32(emu512 a, unsigned n) { EMU_MAP(u32, 16, n > 31 ? 0u : a.u32[i] << n); }

/* ---- casts, halves --------------------------------------------------------------------- */
static inline emu512 emu_cast(emu512 a) { return a; }
static inline __m256 emu_castps512_ps256(emu512 a) {
    __m256 r;
    memcpy(&r, a.f, 32);
    return r;
}
/* the upper half of a cast from 256 bits is undefined; zero here */
static inline emu512 emu_castpd256_pd512(__m256d x) {
    emu512 r = emu_setzero();
    memcpy(r.d, &x, 32);
    return r;
}
static inline __m256d emu_extractf64x4_pd(emu512 a, int hi) {
    __m256d r;
    memcpy(&r, a.d + 4 * (hi & 1), 32);
    return r;
}
static inline __m256 emu_extractf32x8_ps(emu512 a, int hi) {
    __m256 r;
    memcpy(&r, a.f + 8 * (hi & 1), 32);
    return r;
}
static inline emu512 emu_insertf64x4(emu512 a, __m256d b, int hi) {
    memcpy(a.d + 4 * (hi & 1), &b, 32);
    return a;
}

/* ---- fp16 (F16C on each half) ---------------------------------------------------------- */
static inline emu512 emu_cvtph_ps(__m256i h) {
    emu512 r;
    _mm256_storeu_ps(r.f, _mm256_cvtph_ps(_mm256_castsi256_si128(h)));
    _mm256_storeu_ps(r.f + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
    return r;
}
static inline __m256i emu_cvtps_ph(emu512 a, int rounding) {
    if ((rounding & 7) != _MM_FROUND_TO_NEAREST_INT) {
        abort(); /* the kernels convert with round-to-nearest-even only */
    }
    const __m128i lo = _mm256_cvtps_ph(_mm256_loadu_ps(a.f), _MM_FROUND_TO_NEAREST_INT);
    const __m128i hi = _mm256_cvtps_ph(_mm256_loadu_ps(a.f + 8), _MM_FROUND_TO_NEAREST_INT);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

/* ---- horizontal ------------------------------------------------------------------------ */
/* GCC's avx512fintrin.h __MM512_REDUCE_OP(+) for floats: t = hi256 + lo256, u = hi128(t) +
 * lo128(t), w = u + u[2, 3, 0, 1], w0 + w1, i.e. (u0 + u2) + (u1 + u3). */
static inline float emu_reduce_add_ps(emu512 a) {
    float t[8], u[4];
    for (int i = 0; i < 8; ++i) {
        t[i] = a.f[i + 8] + a.f[i];
    }
    for (int i = 0; i < 4; ++i) {
        u[i] = t[i + 4] + t[i];
    }
    return (u[0] + u[2]) + (u[1] + u[3]);
}

#undef EMU_MAP

#define __m512 emu512
#define __m512d emu512
#define __m512i emu512
#define _mm512_setzero_ps emu_setzero
#define _mm512_setzero_pd emu_setzero
#define _mm512_setzero_si512 emu_setzero
#define _mm512_set1_ps emu_set1_ps
#define _mm512_set1_epi32 emu_set1_epi32
#define _mm512_loadu_ps emu_loadu
#define _mm512_loadu_pd emu_loadu
#define _mm512_loadu_si512 emu_loadu
#define _mm512_storeu_ps emu_storeu
#define _mm512_storeu_pd emu_storeu
#define _mm512_maskz_loadu_ps emu_maskz_loadu_ps
#define _mm512_mask_storeu_ps emu_mask_storeu_ps
#define _mm512_add_ps emu_add_ps
#define _mm512_sub_ps emu_sub_ps
#define _mm512_mul_ps emu_mul_ps
#define _mm512_max_ps emu_max_ps
#define _mm512_abs_ps emu_abs_ps
#define _mm512_fmadd_ps emu_fmadd_ps
#define _mm512_fnmadd_ps emu_fnmadd_ps
#define _mm512_scalef_ps emu_scalef_ps
#define _mm512_add_pd emu_add_pd
#define _mm512_cvtps_pd emu_cvtps_pd
#define _mm512_cvtpd_ps emu_cvtpd_ps
#define _mm512_cmp_ps_mask emu_cmp_ps_mask
#define _mm512_cmp_epi32_mask emu_cmp_epi32_mask
#define _mm512_mask_blend_ps emu_mask_blend_ps
#define _mm512_maskz_mov_ps emu_maskz_mov
#define _mm512_maskz_mov_epi32 emu_maskz_mov
#define _mm512_add_epi32 emu_add_epi32
#define _mm512_sub_epi32 emu_sub_epi32
#define _mm512_slli_epi32 emu_slli_epi32
#define _mm512_castps_pd emu_cast
#define _mm512_castpd_ps emu_cast
#define _mm512_castps_si512 emu_cast
#define _mm512_castsi512_ps emu_cast
#define _mm512_castps512_ps256 emu_castps512_ps256
#define _mm512_castpd256_pd512 emu_castpd256_pd512
#define _mm512_extractf64x4_pd emu_extractf64x4_pd
#define _mm512_extractf32x8_ps emu_extractf32x8_ps
#define _mm512_insertf64x4 emu_insertf64x4
#define _mm512_cvtph_ps emu_cvtph_ps
#define _mm512_cvtps_ph emu_cvtps_ph
#define _mm512_reduce_add_ps emu_reduce_add_ps

#endif
