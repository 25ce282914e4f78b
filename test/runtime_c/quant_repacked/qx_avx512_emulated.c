/* Test build of runtime_c/quant_repacked/qr_x16.c whose AVX-512 variants run
 * on any AVX2 host: each _mm512 intrinsic they use is mapped to a portable
 * lane-by-lane emulation (Intel's documented semantics), and the file is
 * included with V8_SIMD_EMULATED so that core/simd.h opens no AVX-512 target.  Compiled with -mavx2 -mfma -mf16c (the AVX2 variant and the
 * 128/256-bit loads stay native) and ISO C (no fp contraction). */
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
        float f[16];
    };
} emu512;

#define EMU_MAP(op, expr)                          \
    emu512 r;                                      \
    for (int i = 0; i < (int)(sizeof(r.op) / sizeof(r.op[0])); ++i) { \
        r.op[i] = (expr);                          \
    }                                              \
    return r

static inline emu512 emu_set1_epi8(char v) { EMU_MAP(i8, (int8_t)v); }
static inline emu512 emu_set1_epi32(int v) { EMU_MAP(i32, v); }
static inline emu512 emu_set1_ps(float v) { EMU_MAP(f, v); }
static inline emu512 emu_setzero(void) { EMU_MAP(u32, 0u); }
static inline emu512 emu_loadu(const void *p) {
    emu512 r;
    memcpy(&r, p, 64);
    return r;
}
static inline void emu_storeu_ps(float *p, emu512 a) { memcpy(p, a.f, 64); }
static inline emu512 emu_and(emu512 a, emu512 b) { EMU_MAP(u32, a.u32[i] & b.u32[i]); }
static inline emu512 emu_or(emu512 a, emu512 b) { EMU_MAP(u32, a.u32[i] | b.u32[i]); }
static inline emu512 emu_srli_epi16(emu512 a, unsigned c) { EMU_MAP(u16, c > 15 ? 0 : (uint16_t)(a.u16[i] >> c)); }
static inline emu512 emu_slli_epi32(emu512 a, unsigned c) { EMU_MAP(u32, c > 31 ? 0 : a.u32[i] << c); }
static inline emu512 emu_slli_epi16(emu512 a, unsigned c) { EMU_MAP(u16, c > 15 ? 0 : (uint16_t)(a.u16[i] << c)); }
static inline emu512 emu_sub_epi32(emu512 a, emu512 b) { EMU_MAP(u32, a.u32[i] - b.u32[i]); }
static inline emu512 emu_add_ps(emu512 a, emu512 b) { EMU_MAP(f, a.f[i] + b.f[i]); }
/* bytes of a picked within each 128-bit lane by b's low 4 bits; zero where b's bit 7 is set */
static inline emu512 emu_shuffle_epi8(emu512 a, emu512 b) {
    EMU_MAP(u8, (b.u8[i] & 0x80) ? 0 : a.u8[(i & ~15) + (b.u8[i] & 15)]);
}
static inline emu512 emu_cvtepi8_epi16(__m256i v) {
    int8_t b[32];
    memcpy(b, &v, 32);
    EMU_MAP(i16, b[i]);
}
static inline emu512 emu_add_epi16(emu512 a, emu512 b) { EMU_MAP(u16, (uint16_t)(a.u16[i] + b.u16[i])); }
static inline emu512 emu_add_epi32(emu512 a, emu512 b) { EMU_MAP(u32, a.u32[i] + b.u32[i]); }
static inline emu512 emu_mullo_epi32(emu512 a, emu512 b) { EMU_MAP(u32, a.u32[i] * b.u32[i]); }
static inline int16_t emu_sat16(int32_t v) { return (int16_t)(v > 32767 ? 32767 : v < -32768 ? -32768 : v); }
/* u8 (a) x s8 (b), adjacent pairs summed with signed saturation */
static inline emu512 emu_maddubs_epi16(emu512 a, emu512 b) {
    EMU_MAP(i16, emu_sat16((int32_t)a.u8[2 * i] * b.i8[2 * i] + (int32_t)a.u8[2 * i + 1] * b.i8[2 * i + 1]));
}
static inline emu512 emu_madd_epi16(emu512 a, emu512 b) {
    EMU_MAP(u32, (uint32_t)((int32_t)a.i16[2 * i] * b.i16[2 * i]) + (uint32_t)((int32_t)a.i16[2 * i + 1] * b.i16[2 * i + 1]));
}
/* src + sum of 4 u8 (a) x s8 (b) products per int32 lane, wrapping */
static inline emu512 emu_dpbusd_epi32(emu512 src, emu512 a, emu512 b) {
    EMU_MAP(u32, src.u32[i] + (uint32_t)((int32_t)a.u8[4 * i] * b.i8[4 * i] + (int32_t)a.u8[4 * i + 1] * b.i8[4 * i + 1] +
                                          (int32_t)a.u8[4 * i + 2] * b.i8[4 * i + 2] + (int32_t)a.u8[4 * i + 3] * b.i8[4 * i + 3]));
}
static inline emu512 emu_cvtepu8_epi32(__m128i v) {
    uint8_t b[16];
    memcpy(b, &v, 16);
    EMU_MAP(i32, b[i]);
}
static inline emu512 emu_cvtepu8_epi16(__m256i v) {
    uint8_t b[32];
    memcpy(b, &v, 32);
    EMU_MAP(i16, b[i]);
}
static inline emu512 emu_cvtph_ps(__m256i v) {
    uint16_t h[16];
    memcpy(h, &v, 32);
    EMU_MAP(f, v8_f16_to_f32(h[i]));
}
static inline emu512 emu_cvtepi32_ps(emu512 a) { EMU_MAP(f, (float)a.i32[i]); }
static inline emu512 emu_mul_ps(emu512 a, emu512 b) { EMU_MAP(f, a.f[i] * b.f[i]); }
static inline emu512 emu_sub_ps(emu512 a, emu512 b) { EMU_MAP(f, a.f[i] - b.f[i]); }
static inline emu512 emu_fmadd_ps(emu512 a, emu512 b, emu512 c) { EMU_MAP(f, fmaf(a.f[i], b.f[i], c.f[i])); }

#define __m512i emu512
#define __m512 emu512
#define _mm512_set1_epi8 emu_set1_epi8
#define _mm512_set1_epi32 emu_set1_epi32
#define _mm512_set1_ps emu_set1_ps
#define _mm512_setzero_si512 emu_setzero
#define _mm512_setzero_ps emu_setzero
#define _mm512_loadu_si512 emu_loadu
#define _mm512_storeu_ps emu_storeu_ps
#define _mm512_and_si512 emu_and
#define _mm512_or_si512 emu_or
#define _mm512_srli_epi16 emu_srli_epi16
#define _mm512_slli_epi32 emu_slli_epi32
#define _mm512_add_epi16 emu_add_epi16
#define _mm512_slli_epi16 emu_slli_epi16
#define _mm512_sub_epi32 emu_sub_epi32
#define _mm512_add_ps emu_add_ps
#define _mm512_shuffle_epi8 emu_shuffle_epi8
#define _mm512_cvtepi8_epi16 emu_cvtepi8_epi16
#define _mm512_add_epi32 emu_add_epi32
#define _mm512_mullo_epi32 emu_mullo_epi32
#define _mm512_maddubs_epi16 emu_maddubs_epi16
#define _mm512_madd_epi16 emu_madd_epi16
#define _mm512_dpbusd_epi32 emu_dpbusd_epi32
#define _mm512_cvtepu8_epi32 emu_cvtepu8_epi32
#define _mm512_cvtepu8_epi16 emu_cvtepu8_epi16
#define _mm512_cvtph_ps emu_cvtph_ps
#define _mm512_cvtepi32_ps emu_cvtepi32_ps
#define _mm512_mul_ps emu_mul_ps
#define _mm512_sub_ps emu_sub_ps
#define _mm512_fmadd_ps emu_fmadd_ps

#include "quant_repacked/qr_x16.c"

/* The Q6_K GEMV through the emulated AVX-512 variant. */
v8_status q6x_emulated_avx512_gemv(float *y, const void *w, const float *x, const float *bias,
                                   int64_t n, int64_t k, void *scratch, size_t scratch_bytes) {
    return qx_gemv(NULL, 1, q6x_group_avx512, V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER, y, w, x, bias, n,
                   k, scratch, scratch_bytes);
}

/* The GEMV through one emulated AVX-512 variant (vnni: the dpbusd one). */
v8_status qx_emulated_avx512_gemv(int vnni, float *y, const void *w, const float *x,
                                  const float *bias, int64_t n, int64_t k, void *scratch,
                                  size_t scratch_bytes) {
    return qx_gemv(NULL, 0, vnni ? qx_group_avx512vnni : qx_group_avx512,
                   V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN, y, w, x, bias, n, k,
                   scratch, scratch_bytes);
}
