/* The AVX-512 intrinsics of the integer (quantized) kernels, emulated lane by lane (Intel's
 * documented semantics), so that their AVX-512 variants - plain and VNNI - run on an AVX2 host.
 * Include first in a translation unit compiled with -mavx2 -mfma -mf16c and ISO C (-std=c11: no
 * fp contraction), then #include the kernel's .c file: the 128/256-bit intrinsics stay native,
 * every _mm512 name the kernels use maps to an emu_ function over one union type, and
 * V8_SIMD_EMULATED makes core/simd.h open no AVX-512 target.  (The attention kernels' float
 * paths have their own emulation, attention/avx512_emulation.h.)
 *
 * Integer lanes wrap where the instruction wraps and saturate where it saturates (maddubs);
 * every fp32 lane operation is one IEEE operation rounded once (nearest-even), fma is fmaf. */
#ifndef V8_AVX512_INT_EMULATION_H
#define V8_AVX512_INT_EMULATION_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "v8_runtime.h"

/* core/simd.h's own AVX-512 helpers, defined (never called) over the real types before the
 * names below are mapped to the emulation. */
#define V8_SIMD_EMULATED 1
#define V8_SIMD_AVX512
#include "core/simd.h"
#include "core/simd_end.h"

typedef struct {
    union {
        int8_t i8[64];
        uint8_t u8[64];
        int16_t i16[32];
        uint16_t u16[32];
        int32_t i32[16];
        uint32_t u32[16];
        uint64_t u64[8];
        float f[16];
    };
} emu512;

#define EMU_MAP(op, expr)                                             \
    emu512 r;                                                         \
    for (int i = 0; i < (int)(sizeof(r.op) / sizeof(r.op[0])); ++i) { \
        r.op[i] = (expr);                                             \
    }                                                                 \
    return r

/* ---- set, load, store, casts ------------------------------------------------------------ */
static inline emu512 emu_set1_epi8(char v) { EMU_MAP(i8, (int8_t)v); }
static inline emu512 emu_set1_epi16(short v) { EMU_MAP(i16, (int16_t)v); }
static inline emu512 emu_set1_epi32(int v) { EMU_MAP(i32, v); }
static inline emu512 emu_set1_ps(float v) { EMU_MAP(f, v); }
static inline emu512 emu_setzero(void) { EMU_MAP(u32, 0u); }
static inline emu512 emu_loadu(const void *p) {
    emu512 r;
    memcpy(&r, p, 64);
    return r;
}
static inline void emu_storeu(void *p, emu512 a) { memcpy(p, &a, 64); }
/* the four 32-bit lanes of v in every 128-bit lane */
static inline emu512 emu_broadcast_i32x4(__m128i v) {
    uint32_t w[4];
    memcpy(w, &v, 16);
    EMU_MAP(u32, w[i & 3]);
}
/* the eight 32-bit lanes of v in both 256-bit halves */
static inline emu512 emu_broadcast_i64x4(__m256i v) {
    uint32_t w[8];
    memcpy(w, &v, 32);
    EMU_MAP(u32, w[i & 7]);
}
/* 256-bit half hi & 1 */
static inline __m256i emu_extracti64x4_epi64(emu512 a, int hi) {
    __m256i r;
    memcpy(&r, a.u8 + 32 * (hi & 1), 32);
    return r;
}
static inline __m256i emu_castsi512_si256(emu512 a) { return emu_extracti64x4_epi64(a, 0); }
static inline emu512 emu_inserti64x4(emu512 a, __m256i b, int hi) {
    memcpy(a.u8 + 32 * (hi & 1), &b, 32);
    return a;
}

/* ---- bitwise, shifts, shuffles, blends ------------------------------------------------------ */
static inline emu512 emu_and(emu512 a, emu512 b) { EMU_MAP(u32, a.u32[i] & b.u32[i]); }
static inline emu512 emu_or(emu512 a, emu512 b) { EMU_MAP(u32, a.u32[i] | b.u32[i]); }
static inline emu512 emu_srli_epi16(emu512 a, unsigned c) { EMU_MAP(u16, c > 15 ? 0 : (uint16_t)(a.u16[i] >> c)); }
static inline emu512 emu_slli_epi16(emu512 a, unsigned c) { EMU_MAP(u16, c > 15 ? 0 : (uint16_t)(a.u16[i] << c)); }
static inline emu512 emu_slli_epi32(emu512 a, unsigned c) { EMU_MAP(u32, c > 31 ? 0 : a.u32[i] << c); }
/* each 16-bit lane shifted right by the count in the same lane of c (>= 16: zero) */
static inline emu512 emu_srlv_epi16(emu512 a, emu512 c) {
    EMU_MAP(u16, c.u16[i] > 15 ? 0 : (uint16_t)(a.u16[i] >> c.u16[i]));
}
/* bytes of a picked within each 128-bit lane by b's low 4 bits; zero where b's bit 7 is set */
static inline emu512 emu_shuffle_epi8(emu512 a, emu512 b) {
    EMU_MAP(u8, (b.u8[i] & 0x80) ? 0 : a.u8[(i & ~15) + (b.u8[i] & 15)]);
}
/* 16-bit lane i: k bit i ? b : a */
static inline emu512 emu_mask_blend_epi16(__mmask32 k, emu512 a, emu512 b) {
    EMU_MAP(u16, ((k >> i) & 1) ? b.u16[i] : a.u16[i]);
}

/* ---- integer arithmetic ------------------------------------------------------------------- */
static inline emu512 emu_cvtepi8_epi16(__m256i v) {
    int8_t b[32];
    memcpy(b, &v, 32);
    EMU_MAP(i16, b[i]);
}
static inline emu512 emu_cvtepu8_epi16(__m256i v) {
    uint8_t b[32];
    memcpy(b, &v, 32);
    EMU_MAP(i16, b[i]);
}
static inline emu512 emu_cvtepu8_epi32(__m128i v) {
    uint8_t b[16];
    memcpy(b, &v, 16);
    EMU_MAP(i32, b[i]);
}
static inline emu512 emu_add_epi16(emu512 a, emu512 b) { EMU_MAP(u16, (uint16_t)(a.u16[i] + b.u16[i])); }
static inline emu512 emu_add_epi32(emu512 a, emu512 b) { EMU_MAP(u32, a.u32[i] + b.u32[i]); }
static inline emu512 emu_sub_epi32(emu512 a, emu512 b) { EMU_MAP(u32, a.u32[i] - b.u32[i]); }
/* the low 32 bits of the product */
static inline emu512 emu_mullo_epi32(emu512 a, emu512 b) { EMU_MAP(u32, a.u32[i] * b.u32[i]); }
static inline int16_t emu_sat16(int32_t v) { return (int16_t)(v > 32767 ? 32767 : v < -32768 ? -32768 : v); }
/* u8 (a) x s8 (b), adjacent pairs summed with signed saturation */
static inline emu512 emu_maddubs_epi16(emu512 a, emu512 b) {
    EMU_MAP(i16, emu_sat16((int32_t)a.u8[2 * i] * b.i8[2 * i] + (int32_t)a.u8[2 * i + 1] * b.i8[2 * i + 1]));
}
/* s16 x s16, adjacent pairs summed into int32 (wrapping: only -2^15 * -2^15 twice overflows) */
static inline uint32_t emu_pair16(emu512 a, emu512 b, int i) {
    return (uint32_t)((int32_t)a.i16[2 * i] * b.i16[2 * i]) + (uint32_t)((int32_t)a.i16[2 * i + 1] * b.i16[2 * i + 1]);
}
static inline emu512 emu_madd_epi16(emu512 a, emu512 b) { EMU_MAP(u32, emu_pair16(a, b, i)); }
/* src + sum of 4 u8 (a) x s8 (b) products per int32 lane, wrapping */
static inline emu512 emu_dpbusd_epi32(emu512 src, emu512 a, emu512 b) {
    EMU_MAP(u32, src.u32[i] + (uint32_t)((int32_t)a.u8[4 * i] * b.i8[4 * i] + (int32_t)a.u8[4 * i + 1] * b.i8[4 * i + 1] +
                                          (int32_t)a.u8[4 * i + 2] * b.i8[4 * i + 2] + (int32_t)a.u8[4 * i + 3] * b.i8[4 * i + 3]));
}
/* src + the s16 x s16 pair sum per int32 lane, wrapping */
static inline emu512 emu_dpwssd_epi32(emu512 src, emu512 a, emu512 b) { EMU_MAP(u32, src.u32[i] + emu_pair16(a, b, i)); }
/* the sum of the 16 int32 lanes, wrapping (any order: integer addition is associative) */
static inline int emu_reduce_add_epi32(emu512 a) {
    uint32_t s = 0;
    for (int i = 0; i < 16; ++i) {
        s += a.u32[i];
    }
    return (int)(int32_t)s;
}

/* ---- fp32 ------------------------------------------------------------------------------------ */
static inline emu512 emu_cvtph_ps(__m256i v) {
    uint16_t h[16];
    memcpy(h, &v, 32);
    EMU_MAP(f, v8_f16_to_f32(h[i]));
}
/* nearest-even (the default MXCSR) */
static inline emu512 emu_cvtepi32_ps(emu512 a) { EMU_MAP(f, (float)a.i32[i]); }
static inline emu512 emu_add_ps(emu512 a, emu512 b) { EMU_MAP(f, a.f[i] + b.f[i]); }
static inline emu512 emu_sub_ps(emu512 a, emu512 b) { EMU_MAP(f, a.f[i] - b.f[i]); }
static inline emu512 emu_mul_ps(emu512 a, emu512 b) { EMU_MAP(f, a.f[i] * b.f[i]); }
static inline emu512 emu_fmadd_ps(emu512 a, emu512 b, emu512 c) { EMU_MAP(f, fmaf(a.f[i], b.f[i], c.f[i])); }
/* -(a*b) + c, rounded once */
static inline emu512 emu_fnmadd_ps(emu512 a, emu512 b, emu512 c) { EMU_MAP(f, fmaf(-a.f[i], b.f[i], c.f[i])); }

#undef EMU_MAP

#define __m512i emu512
#define __m512 emu512
#define _mm512_set1_epi8 emu_set1_epi8
#define _mm512_set1_epi16 emu_set1_epi16
#define _mm512_set1_epi32 emu_set1_epi32
#define _mm512_set1_ps emu_set1_ps
#define _mm512_setzero_si512 emu_setzero
#define _mm512_setzero_ps emu_setzero
#define _mm512_loadu_si512 emu_loadu
#define _mm512_loadu_ps emu_loadu
#define _mm512_storeu_ps emu_storeu
#define _mm512_broadcast_i32x4 emu_broadcast_i32x4
#define _mm512_broadcast_i64x4 emu_broadcast_i64x4
#define _mm512_castsi512_si256 emu_castsi512_si256
#define _mm512_extracti64x4_epi64 emu_extracti64x4_epi64
#define _mm512_inserti64x4 emu_inserti64x4
#define _mm512_and_si512 emu_and
#define _mm512_or_si512 emu_or
#define _mm512_srli_epi16 emu_srli_epi16
#define _mm512_slli_epi16 emu_slli_epi16
#define _mm512_slli_epi32 emu_slli_epi32
#define _mm512_srlv_epi16 emu_srlv_epi16
#define _mm512_shuffle_epi8 emu_shuffle_epi8
#define _mm512_mask_blend_epi16 emu_mask_blend_epi16
#define _mm512_cvtepi8_epi16 emu_cvtepi8_epi16
#define _mm512_cvtepu8_epi16 emu_cvtepu8_epi16
#define _mm512_cvtepu8_epi32 emu_cvtepu8_epi32
#define _mm512_add_epi16 emu_add_epi16
#define _mm512_add_epi32 emu_add_epi32
#define _mm512_sub_epi32 emu_sub_epi32
#define _mm512_mullo_epi32 emu_mullo_epi32
#define _mm512_maddubs_epi16 emu_maddubs_epi16
#define _mm512_madd_epi16 emu_madd_epi16
#define _mm512_dpbusd_epi32 emu_dpbusd_epi32
#define _mm512_dpwssd_epi32 emu_dpwssd_epi32
#define _mm512_reduce_add_epi32 emu_reduce_add_epi32
#define _mm512_cvtph_ps emu_cvtph_ps
#define _mm512_cvtepi32_ps emu_cvtepi32_ps
#define _mm512_add_ps emu_add_ps
#define _mm512_sub_ps emu_sub_ps
#define _mm512_mul_ps emu_mul_ps
#define _mm512_fmadd_ps emu_fmadd_ps
#define _mm512_fnmadd_ps emu_fnmadd_ps

#endif
