/* The runtime's one scheme for ISA variants, and its mapping from generic fp32 vector
 * operations to each variant.  Every ISA-specific body in runtime_c is compiled between this
 * file and core/simd_end.h; no other file opens a target region.
 *
 * Select the variant with exactly one of V8_SIMD_AVX512, V8_SIMD_AVX2, V8_SIMD_SCALAR, then
 * include this file: it opens a `#pragma GCC target` region for that variant (the build uses
 * baseline flags, and runtime dispatch through v8_cpu_best_isa() / v8_cpu_features() enters the
 * code only on a CPU that has the ISA) and defines the names below.  Include "core/simd_end.h"
 * to close the region and release the selection, so one translation unit can hold one body per
 * variant:
 *
 *     #define V8_SIMD_AVX2
 *     #include "core/simd.h"
 *     #include "kernel_body.inc"      (written once over the names below)
 *     #include "core/simd_end.h"
 *
 * With V8_SIMD_AVX512, at most one sub-feature knob widens (or, F_ONLY, narrows) the target and
 * names the variant; the generic names are the same in all of them:
 *   V8_SIMD_VNNI    + avx512vnni   V8_SIMD_FN(name) -> name_avx512vnni (int8 dots: VPDPBUSD/WSSD)
 *   V8_SIMD_FP16    + avx512fp16   V8_SIMD_FN(name) -> name_avx512fp16 (fp16 lane arithmetic)
 *   V8_SIMD_BF16    + avx512bf16   V8_SIMD_FN(name) -> name_avx512bf16 (VDPBF16PS)
 *   V8_SIMD_F_ONLY  avx512f only   V8_SIMD_FN(name) -> name_avx512 (bodies that mirror an
 *                   AVX512F-only build: BW/VL/DQ would let the compiler pick other instructions)
 * With V8_SIMD_AVX2, the knob V8_SIMD_VL keeps the 8 lanes and their instructions but targets an
 * AVX-512 host (+ avx512f, avx512vl): V8F_NREGS is 32 (ymm16-31), V8_SIMD_FN(name) ->
 * name_avx2vl, and v8_simd_clean() clears zmm16-31 as well.  For bodies where a 256-bit
 * instruction beats its 512-bit form on some AVX-512 cores (V8_CPU_WIDE_F16_NARROWING).
 * Integer kernels may use ISA intrinsics inside their bodies where no generic name fits; they are
 * still selected, named and targeted here.  The helper functions below (trees, scalef) are
 * defined by the first plain selection of their variant; a sub-feature region (a superset
 * target) may call them after that.  V8_SIMD_EMULATED (test builds that map _mm512 names to a
 * lane-by-lane emulation on an AVX2 host) opens no AVX-512 target.
 *
 * Names (v8f: V8F_W fp32 lanes; v8d: V8F_W / 2 fp64 lanes; v8i: V8F_W int32 lanes; v8m: a lane
 * mask, an __mmask16 on AVX-512 and an all-ones/all-zeros vector elsewhere):
 *   V8F_W, V8F_NREGS (architectural vector registers), V8_SIMD_FN(name) -> name_<variant>
 *   v8f_zero, v8f_set1, v8f_load, v8f_store, v8f_load_part / v8f_store_part (first n lanes)
 *   v8f_add, v8f_sub, v8f_mul, v8f_max, v8f_abs, v8f_fma(a, b, c) = a*b + c rounded once,
 *   v8f_fnma(a, b, c) = c - a*b rounded once
 *   v8f_load_f16 (W fp16 values widened, exact), v8f_round_f16 (to fp16 and back, nearest-even),
 *   v8f_store_f16(p, x) (W lanes narrowed to fp16, nearest-even, and stored)
 *   v8f_lt/gt/le/ne (ordered compares -> v8m), v8m_bits (one bit per lane), v8m_any,
 *   v8f_blend(m, f, t) = m ? t : f per lane, v8f_keep(m, x) = m ? x : 0
 *   v8f_bits / v8i_as_f (reinterpret), v8i_set1, v8i_load, v8i_add, v8i_sub, v8i_slli,
 *   v8i_lt (-> v8m), v8i_keep(m, x) = m ? x : 0
 *   v8d_zero, v8d_add, v8d_load, v8d_store, v8f_lo_d / v8f_hi_d (lanes [0, W/2) and [W/2, W) widened),
 *   v8f_of_d(lo, hi) (both narrowed, nearest-even, and joined)
 *   AVX2 and AVX-512 only (v8q: V8F_W / 2 int64 lanes): v8d_set1, v8d_sub, v8d_mul,
 *   v8d_fma(a, b, c) = a*b + c and v8d_fms(a, b, c) = a*b - c (each rounded once), v8d_bits /
 *   v8q_as_d (reinterpret), v8q_set1, v8q_and, v8q_add, v8q_slli, v8q_gather(table, index)
 *   (table[index] per lane, int64 entries), v8q_between_bits(q, lo, hi) (one bit per lane:
 *   lo < q < hi, signed)
 *   v8f_scalef(j, n) = j * 2^n rounded once, for integral n in [-192, 192]
 *   v8_simd_clean() before returning to baseline code (AVX-512: zmm16-31 and upper halves)
 *
 * Horizontal reductions, with the lane order each contract pins (the scalar variant reduces an
 * array of lanes in the same order, so an oracle can name the tree it follows):
 *   v8f_hsum_halves(x): halve until four lanes remain, h_i = x_i + x_(i+W/2), then
 *       (u0 + u2) + (u1 + u3).  W = 16: the F32X16 tree of _mm512_reduce_add_ps and of the
 *       attention contracts' AVX512_F32X16X4; W = 8: the F32X8 tree (ggml_vec_soft_max_f32's
 *       AVX2 step, the fp32 online contracts' dot).
 *   v8f_hsum_pairs(x) (AVX2 only): u_i = x_i + x_(i+4), then (u0 + u1) + (u2 + u3) - the two
 *       hadd steps of ggml's AVX2 GGML_F32x8_REDUCE (the AVX2_F32X8X4 tree's last stage).
 *   v8_hsum_halves_ref(p, n) / v8_hsum_pairs_ref(p): the same trees over n floats, in C. */

#if defined(V8_SIMD_AVX512) + defined(V8_SIMD_AVX2) + defined(V8_SIMD_SCALAR) != 1
#error "define exactly one of V8_SIMD_AVX512, V8_SIMD_AVX2, V8_SIMD_SCALAR before core/simd.h"
#endif
#if defined(V8_SIMD_VNNI) + defined(V8_SIMD_FP16) + defined(V8_SIMD_BF16) + defined(V8_SIMD_F_ONLY) > 1
#error "core/simd.h: at most one of V8_SIMD_VNNI, V8_SIMD_FP16, V8_SIMD_BF16, V8_SIMD_F_ONLY"
#endif
#if (defined(V8_SIMD_VNNI) || defined(V8_SIMD_FP16) || defined(V8_SIMD_BF16) ||               \
     defined(V8_SIMD_F_ONLY)) && !defined(V8_SIMD_AVX512)
#error "core/simd.h: the AVX-512 sub-feature knobs go with V8_SIMD_AVX512 only"
#endif
#if defined(V8_SIMD_VL) && !defined(V8_SIMD_AVX2)
#error "core/simd.h: V8_SIMD_VL goes with V8_SIMD_AVX2 only"
#endif
#ifdef V8_SIMD_OPEN
#error "core/simd.h included twice without core/simd_end.h between"
#endif
#define V8_SIMD_OPEN 1

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

/* ---- the scalar trees: the reference order of every vector reduction below ---------- */
#ifndef V8_SIMD_REF_TREES
#define V8_SIMD_REF_TREES
static inline float v8_hsum_halves_ref(const float *p, int n) {
    float t[16];
    for (int i = 0; i < n; i++) t[i] = p[i];
    for (; n > 4; n /= 2)
        for (int i = 0; i < n / 2; i++) t[i] = t[i] + t[i + n / 2];
    return (t[0] + t[2]) + (t[1] + t[3]);
}
static inline float v8_hsum_pairs_ref(const float *p) {
    float u[4];
    for (int i = 0; i < 4; i++) u[i] = p[i] + p[i + 4];
    return (u[0] + u[1]) + (u[2] + u[3]);
}
#endif

/* ====================================================================================== */
#if defined(V8_SIMD_AVX512)
#pragma GCC push_options
#ifndef V8_SIMD_EMULATED /* test builds: the _mm512 names mapped to a lane-by-lane emulation */
#if defined(V8_SIMD_VNNI)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
#elif defined(V8_SIMD_FP16)
#pragma GCC target("avx512fp16,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#elif defined(V8_SIMD_BF16)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")
#elif defined(V8_SIMD_F_ONLY)
#pragma GCC target("avx512f,avx2,fma,f16c")
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#endif
#define v8_simd_clean() v8_clean_upper_avx512()
#else
#define v8_simd_clean() ((void)0)
#endif
#if defined(V8_SIMD_VNNI)
#define V8_SIMD_FN(name) name##_avx512vnni
#elif defined(V8_SIMD_FP16)
#define V8_SIMD_FN(name) name##_avx512fp16
#elif defined(V8_SIMD_BF16)
#define V8_SIMD_FN(name) name##_avx512bf16
#else
#define V8_SIMD_FN(name) name##_avx512
#endif
#define V8F_W 16
#define V8F_NREGS 32
#define v8f __m512
#define v8d __m512d
#define v8i __m512i
#define v8m __mmask16
#define v8f_zero() _mm512_setzero_ps()
#define v8f_set1(x) _mm512_set1_ps(x)
#define v8f_load(p) _mm512_loadu_ps(p)
#define v8f_store(p, x) _mm512_storeu_ps((p), (x))
#define v8f_load_part(p, n) _mm512_maskz_loadu_ps((__mmask16)((1u << (n)) - 1u), (p))
#define v8f_store_part(p, n, x) _mm512_mask_storeu_ps((p), (__mmask16)((1u << (n)) - 1u), (x))
#define v8f_add(a, b) _mm512_add_ps((a), (b))
#define v8f_sub(a, b) _mm512_sub_ps((a), (b))
#define v8f_mul(a, b) _mm512_mul_ps((a), (b))
#define v8f_max(a, b) _mm512_max_ps((a), (b))
#define v8f_abs(a) _mm512_abs_ps(a)
#define v8f_fma(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define v8f_fnma(a, b, c) _mm512_fnmadd_ps((a), (b), (c))
#define v8f_load_f16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define v8f_round_f16(x)                                                                     \
    _mm512_cvtph_ps(_mm512_cvtps_ph((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define v8f_store_f16(p, x)                                                                  \
    _mm256_storeu_si256((__m256i *)(p), _mm512_cvtps_ph((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define v8f_lt(a, b) _mm512_cmp_ps_mask((a), (b), _CMP_LT_OQ)
#define v8f_gt(a, b) _mm512_cmp_ps_mask((a), (b), _CMP_GT_OQ)
#define v8f_le(a, b) _mm512_cmp_ps_mask((a), (b), _CMP_LE_OQ)
#define v8f_ne(a, b) _mm512_cmp_ps_mask((a), (b), _CMP_NEQ_OQ)
#define v8m_bits(m) ((unsigned)(m))
#define v8m_any(m) ((m) != 0)
#define v8f_blend(m, f, t) _mm512_mask_blend_ps((m), (f), (t))
#define v8f_keep(m, x) _mm512_maskz_mov_ps((m), (x))
#define v8f_bits(x) _mm512_castps_si512(x)
#define v8i_as_f(x) _mm512_castsi512_ps(x)
#define v8i_set1(x) _mm512_set1_epi32(x)
#define v8i_load(p) _mm512_loadu_si512((const void *)(p))
#define v8i_add(a, b) _mm512_add_epi32((a), (b))
#define v8i_sub(a, b) _mm512_sub_epi32((a), (b))
#define v8i_slli(a, n) _mm512_slli_epi32((a), (n))
#define v8i_lt(a, b) _mm512_cmp_epi32_mask((a), (b), _MM_CMPINT_LT)
#define v8i_keep(m, x) _mm512_maskz_mov_epi32((m), (x))
#define v8d_zero() _mm512_setzero_pd()
#define v8d_add(a, b) _mm512_add_pd((a), (b))
#define v8d_load(p) _mm512_loadu_pd(p)
#define v8d_store(p, x) _mm512_storeu_pd((p), (x))
#define v8q __m512i
#define v8d_set1(x) _mm512_set1_pd(x)
#define v8d_sub(a, b) _mm512_sub_pd((a), (b))
#define v8d_mul(a, b) _mm512_mul_pd((a), (b))
#define v8d_fma(a, b, c) _mm512_fmadd_pd((a), (b), (c))
#define v8d_fms(a, b, c) _mm512_fmsub_pd((a), (b), (c))
#define v8d_bits(x) _mm512_castpd_si512(x)
#define v8q_as_d(q) _mm512_castsi512_pd(q)
#define v8q_set1(x) _mm512_set1_epi64(x)
#define v8q_and(a, b) _mm512_and_si512((a), (b))
#define v8q_add(a, b) _mm512_add_epi64((a), (b))
#define v8q_slli(a, n) _mm512_slli_epi64((a), (n))
#define v8q_gather(table, index) _mm512_i64gather_epi64((index), (const void *)(table), 8)
#define v8q_between_bits(q, lo, hi)                                                          \
    ((unsigned)(_mm512_cmpgt_epi64_mask((q), _mm512_set1_epi64(lo)) &                       \
                _mm512_cmplt_epi64_mask((q), _mm512_set1_epi64(hi))))
#define v8f_lo_d(x) _mm512_cvtps_pd(_mm512_castps512_ps256(x))
#define v8f_hi_d(x) _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))
#define v8f_of_d(lo, hi)                                                                     \
    _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm512_cvtpd_ps(lo))), \
                                        _mm256_castps_pd(_mm512_cvtpd_ps(hi)), 1))
#define v8f_scalef(j, n) _mm512_scalef_ps((j), (n))
#define v8f_hsum_halves(x) v8_hsum_halves_avx512(x)
/* The helpers take the plain AVX-512 target: defined in a sub-feature region they could not be
 * inlined into a plain one; a sub-feature region (a superset, except F_ONLY) may call them. */
#include "core/simd_clean512.h"
#if !defined(V8_SIMD_AVX512_DEFS) && !defined(V8_SIMD_VNNI) && !defined(V8_SIMD_FP16) &&        \
    !defined(V8_SIMD_BF16) && !defined(V8_SIMD_F_ONLY)
#define V8_SIMD_AVX512_DEFS
static inline float v8_hsum_halves_avx512(__m512 x) {
    __m256 t = _mm256_add_ps(_mm512_castps512_ps256(x), _mm512_extractf32x8_ps(x, 1));
    __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    __m128 w = _mm_add_ps(u, _mm_movehl_ps(u, u));          /* u0+u2, u1+u3 */
    return _mm_cvtss_f32(_mm_add_ss(w, _mm_movehdup_ps(w))); /* (u0+u2)+(u1+u3) */
}
#endif

/* ====================================================================================== */
#elif defined(V8_SIMD_AVX2)
#pragma GCC push_options
#ifdef V8_SIMD_VL
#pragma GCC target("avx512f,avx512vl,avx2,fma,f16c")
#include "core/simd_clean512.h"
#define V8_SIMD_FN(name) name##_avx2vl
#define V8F_NREGS 32
#else
#pragma GCC target("avx2,fma,f16c")
#define V8_SIMD_FN(name) name##_avx2
#define V8F_NREGS 16
#endif
#define V8F_W 8
#define v8f __m256
#define v8d __m256d
#define v8i __m256i
#define v8m __m256
#define v8f_zero() _mm256_setzero_ps()
#define v8f_set1(x) _mm256_set1_ps(x)
#define v8f_load(p) _mm256_loadu_ps(p)
#define v8f_store(p, x) _mm256_storeu_ps((p), (x))
#define v8f_load_part(p, n) _mm256_maskload_ps((p), v8_part_mask_avx2(n))
#define v8f_store_part(p, n, x) _mm256_maskstore_ps((p), v8_part_mask_avx2(n), (x))
#define v8f_add(a, b) _mm256_add_ps((a), (b))
#define v8f_sub(a, b) _mm256_sub_ps((a), (b))
#define v8f_mul(a, b) _mm256_mul_ps((a), (b))
#define v8f_max(a, b) _mm256_max_ps((a), (b))
#define v8f_abs(a) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), (a))
#define v8f_fma(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define v8f_fnma(a, b, c) _mm256_fnmadd_ps((a), (b), (c))
#define v8f_load_f16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define v8f_round_f16(x)                                                                     \
    _mm256_cvtph_ps(_mm256_cvtps_ph((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define v8f_store_f16(p, x)                                                                  \
    _mm_storeu_si128((__m128i *)(p), _mm256_cvtps_ph((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define v8f_lt(a, b) _mm256_cmp_ps((a), (b), _CMP_LT_OQ)
#define v8f_gt(a, b) _mm256_cmp_ps((a), (b), _CMP_GT_OQ)
#define v8f_le(a, b) _mm256_cmp_ps((a), (b), _CMP_LE_OQ)
#define v8f_ne(a, b) _mm256_cmp_ps((a), (b), _CMP_NEQ_OQ)
#define v8m_bits(m) ((unsigned)_mm256_movemask_ps(m))
#define v8m_any(m) (_mm256_movemask_ps(m) != 0)
#define v8f_blend(m, f, t) _mm256_blendv_ps((f), (t), (m))
#define v8f_keep(m, x) _mm256_and_ps((x), (m))
#define v8f_bits(x) _mm256_castps_si256(x)
#define v8i_as_f(x) _mm256_castsi256_ps(x)
#define v8i_set1(x) _mm256_set1_epi32(x)
#define v8i_load(p) _mm256_loadu_si256((const __m256i *)(p))
#define v8i_add(a, b) _mm256_add_epi32((a), (b))
#define v8i_sub(a, b) _mm256_sub_epi32((a), (b))
#define v8i_slli(a, n) _mm256_slli_epi32((a), (n))
#define v8i_lt(a, b) _mm256_castsi256_ps(_mm256_cmpgt_epi32((b), (a)))
#define v8i_keep(m, x) _mm256_and_si256(_mm256_castps_si256(m), (x))
#define v8d_zero() _mm256_setzero_pd()
#define v8d_add(a, b) _mm256_add_pd((a), (b))
#define v8d_load(p) _mm256_loadu_pd(p)
#define v8d_store(p, x) _mm256_storeu_pd((p), (x))
#define v8q __m256i
#define v8d_set1(x) _mm256_set1_pd(x)
#define v8d_sub(a, b) _mm256_sub_pd((a), (b))
#define v8d_mul(a, b) _mm256_mul_pd((a), (b))
#define v8d_fma(a, b, c) _mm256_fmadd_pd((a), (b), (c))
#define v8d_fms(a, b, c) _mm256_fmsub_pd((a), (b), (c))
#define v8d_bits(x) _mm256_castpd_si256(x)
#define v8q_as_d(q) _mm256_castsi256_pd(q)
#define v8q_set1(x) _mm256_set1_epi64x(x)
#define v8q_and(a, b) _mm256_and_si256((a), (b))
#define v8q_add(a, b) _mm256_add_epi64((a), (b))
#define v8q_slli(a, n) _mm256_slli_epi64((a), (n))
#define v8q_gather(table, index) _mm256_i64gather_epi64((const long long *)(table), (index), 8)
#define v8q_between_bits(q, lo, hi)                                                          \
    ((unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_and_si256(                     \
        _mm256_cmpgt_epi64((q), _mm256_set1_epi64x(lo)), _mm256_cmpgt_epi64(_mm256_set1_epi64x(hi), (q))))))
#define v8f_lo_d(x) _mm256_cvtps_pd(_mm256_castps256_ps128(x))
#define v8f_hi_d(x) _mm256_cvtps_pd(_mm256_extractf128_ps((x), 1))
#define v8f_of_d(lo, hi)                                                                     \
    _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1)
#define v8f_scalef(j, n) v8_scalef_avx2((j), (n))
#define v8f_hsum_halves(x) v8_hsum_halves_avx2(x)
#define v8f_hsum_pairs(x) v8_hsum_pairs_avx2(x)
/* GCC places its own vzeroupper before most returns and calls, but not all: GCC 12 left it out
 * before a tail call into baseline code and around a tiled GEMM's call of its baseline store */
#ifdef V8_SIMD_VL
#define v8_simd_clean() v8_clean_upper_avx512() /* ymm16-31 too */
#else
#define v8_simd_clean() _mm256_zeroupper()
#endif
#ifndef V8_SIMD_AVX2_DEFS
#define V8_SIMD_AVX2_DEFS
static inline __m256i v8_part_mask_avx2(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
/* 2^n for integral n in [-126, 127], built in the exponent field (exact) */
static inline __m256 v8_pow2_avx2(__m256 n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
/* vscalefps without AVX-512: j * 2^n by multiplications with powers of two that are exact
 * except the last, so the one rounding (into the subnormal range too) is vscalefps'.
 * Lanes with |n| > 192 give an unspecified finite value; callers blend them away. */
static inline __m256 v8_scalef_avx2(__m256 j, __m256 n) {
    const __m256 lo = _mm256_cmp_ps(n, _mm256_set1_ps(-126.0f), _CMP_LT_OQ);
    const __m256 hi = _mm256_cmp_ps(n, _mm256_set1_ps(127.0f), _CMP_GT_OQ);
    if (!_mm256_movemask_ps(_mm256_or_ps(lo, hi))) {
        return _mm256_mul_ps(j, v8_pow2_avx2(n));
    }
    const __m256 absn = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 big = _mm256_cmp_ps(absn, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    /* n in [-192, -127]: (j * 2^(n+100)) * 2^-100; n in [128, 192]: (j * 2^(n-100)) * 2^100 */
    __m256 n1 = _mm256_blendv_ps(n, _mm256_add_ps(n, _mm256_set1_ps(100.0f)), lo);
    n1 = _mm256_blendv_ps(n1, _mm256_sub_ps(n, _mm256_set1_ps(100.0f)), hi);
    n1 = _mm256_blendv_ps(n1, _mm256_setzero_ps(), big);
    __m256 f2 = _mm256_set1_ps(1.0f);
    f2 = _mm256_blendv_ps(f2, _mm256_set1_ps(0x1p-100f), lo);
    f2 = _mm256_blendv_ps(f2, _mm256_set1_ps(0x1p100f), hi);
    return _mm256_mul_ps(_mm256_mul_ps(j, v8_pow2_avx2(n1)), f2);
}
static inline float v8_hsum_halves_avx2(__m256 x) {
    __m128 u = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    __m128 w = _mm_add_ps(u, _mm_movehl_ps(u, u));          /* u0+u2, u1+u3 */
    return _mm_cvtss_f32(_mm_add_ss(w, _mm_movehdup_ps(w))); /* (u0+u2)+(u1+u3) */
}
static inline float v8_hsum_pairs_avx2(__m256 x) {
    __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    __m128 t1 = _mm_hadd_ps(t0, t0);            /* u0+u1, u2+u3 */
    return _mm_cvtss_f32(_mm_hadd_ps(t1, t1)); /* (u0+u1)+(u2+u3) */
}
#endif

/* ====================================================================================== */
#else /* V8_SIMD_SCALAR: one lane; the oracles' arithmetic, each operation rounded once */
#pragma GCC push_options
#define V8_SIMD_FN(name) name##_scalar
#define V8F_W 1
#define V8F_NREGS 16
#define v8f float
#define v8d double
#define v8i int32_t
#define v8m int
#define v8f_zero() 0.0f
#define v8f_set1(x) ((float)(x))
#define v8f_load(p) (*(p))
#define v8f_store(p, x) (*(p) = (x))
#define v8f_load_part(p, n) ((n) > 0 ? *(p) : 0.0f)
#define v8f_store_part(p, n, x) ((n) > 0 ? (void)(*(p) = (x)) : (void)0)
#define v8f_add(a, b) ((a) + (b))
#define v8f_sub(a, b) ((a) - (b))
#define v8f_mul(a, b) ((a) * (b))
#define v8f_max(a, b) ((a) > (b) ? (a) : (b)) /* maxps: the second operand unless a > b */
#define v8f_abs(a) fabsf(a)
#define v8f_fma(a, b, c) fmaf((a), (b), (c))
#define v8f_fnma(a, b, c) fmaf(-(a), (b), (c))
#define v8f_load_f16(p) v8_f16_to_f32(*(p))
#define v8f_round_f16(x) v8_round_f16(x)
#define v8f_store_f16(p, x) (*(p) = v8_f32_to_f16(x))
#define v8f_lt(a, b) ((a) < (b))
#define v8f_gt(a, b) ((a) > (b))
#define v8f_le(a, b) ((a) <= (b))
#define v8f_ne(a, b) ((a) < (b) || (a) > (b))
#define v8m_bits(m) ((unsigned)((m) != 0))
#define v8m_any(m) ((m) != 0)
#define v8f_blend(m, f, t) ((m) ? (t) : (f))
#define v8f_keep(m, x) ((m) ? (x) : 0.0f)
#define v8f_bits(x) v8_f32_bits_scalar(x)
#define v8i_as_f(x) v8_bits_f32_scalar(x)
#define v8i_set1(x) ((int32_t)(x))
#define v8i_load(p) (*(const int32_t *)(p))
#define v8i_add(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))
#define v8i_sub(a, b) ((int32_t)((uint32_t)(a) - (uint32_t)(b)))
#define v8i_slli(a, n) ((int32_t)((uint32_t)(a) << (n)))
#define v8i_lt(a, b) ((a) < (b))
#define v8i_keep(m, x) ((m) ? (x) : 0)
#define v8d_zero() 0.0
#define v8d_add(a, b) ((a) + (b))
#define v8d_load(p) (*(p))
#define v8d_store(p, x) (*(p) = (x))
#define v8f_lo_d(x) ((double)(x))
#define v8f_hi_d(x) 0.0 /* no upper half: W / 2 rounds to one lane only for W >= 2 */
#define v8f_of_d(lo, hi) ((float)(lo))
#define v8f_scalef(j, n) ((float)((double)(j) * ldexp(1.0, (int)(n)))) /* exact, then one rounding */
#define v8f_hsum_halves(x) (x)
#define v8_simd_clean() ((void)0)
#ifndef V8_SIMD_SCALAR_DEFS
#define V8_SIMD_SCALAR_DEFS
#include <string.h>
static inline int32_t v8_f32_bits_scalar(float x) {
    int32_t i;
    memcpy(&i, &x, sizeof i);
    return i;
}
static inline float v8_bits_f32_scalar(int32_t i) {
    float x;
    memcpy(&x, &i, sizeof x);
    return x;
}
#endif
#endif
