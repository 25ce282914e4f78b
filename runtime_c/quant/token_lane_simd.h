/* The SIMD mapping of the token-lane quantized kernels: one vector lane is
 * one token.  Included once per ISA variant (no include guard), after
 * defining exactly one of
 *
 *   V8_TL_AVX512VNNI   16 lanes, the 4-byte dot is dpbusd
 *   V8_TL_AVX512       16 lanes, dpbusd as maddubs + madd with ones
 *   V8_TL_AVX2          8 lanes, the same pair with 256-bit vectors
 *
 * inside the matching `#pragma GCC target` region.  Every variant computes
 * the same integers: TL_DOT4 adds to each int32 lane the dot of four u8
 * weight codes (w, broadcast) with four s8 activation bytes (a); the u8 x s8
 * pair sums of maddubs stay inside int16 for codes below 64 (2*63*128 <
 * 2^15), so no variant saturates.  The float operations are single
 * instructions, one rounding each. */
#undef TL_LANES
#undef TL_VI
#undef TL_VF
#undef TL_ZERO_I
#undef TL_ZERO_F
#undef TL_SET1_I
#undef TL_LOADU_I
#undef TL_ADD_I
#undef TL_SUB_I
#undef TL_MULLO
#undef TL_SLLI5
#undef TL_DOT4
#undef TL_CVT
#undef TL_SET1_F
#undef TL_LOADU_F
#undef TL_STOREU_F
#undef TL_MUL_F
#undef TL_SUB_F
#undef TL_FNMADD
#undef TL_FMADD

#if defined(V8_TL_AVX512VNNI) || defined(V8_TL_AVX512)
#define TL_LANES 16
#define TL_VI __m512i
#define TL_VF __m512
#define TL_ZERO_I() _mm512_setzero_si512()
#define TL_ZERO_F() _mm512_setzero_ps()
#define TL_SET1_I(v) _mm512_set1_epi32(v)
#define TL_LOADU_I(p) _mm512_loadu_si512((const void *)(p))
#define TL_ADD_I(a, b) _mm512_add_epi32(a, b)
#define TL_SUB_I(a, b) _mm512_sub_epi32(a, b)
#define TL_MULLO(a, b) _mm512_mullo_epi32(a, b)
#define TL_SLLI5(a) _mm512_slli_epi32(a, 5)
#if defined(V8_TL_AVX512VNNI)
#define TL_DOT4(acc, w, a) _mm512_dpbusd_epi32(acc, w, a)
#else
#define TL_DOT4(acc, w, a) \
    _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(w, a), _mm512_set1_epi16(1)))
#endif
#define TL_CVT(a) _mm512_cvtepi32_ps(a)
#define TL_SET1_F(v) _mm512_set1_ps(v)
#define TL_LOADU_F(p) _mm512_loadu_ps(p)
#define TL_STOREU_F(p, v) _mm512_storeu_ps(p, v)
#define TL_MUL_F(a, b) _mm512_mul_ps(a, b)
#define TL_SUB_F(a, b) _mm512_sub_ps(a, b)
#define TL_FNMADD(a, b, c) _mm512_fnmadd_ps(a, b, c)
#define TL_FMADD(a, b, c) _mm512_fmadd_ps(a, b, c)
#elif defined(V8_TL_AVX2)
#define TL_LANES 8
#define TL_VI __m256i
#define TL_VF __m256
#define TL_ZERO_I() _mm256_setzero_si256()
#define TL_ZERO_F() _mm256_setzero_ps()
#define TL_SET1_I(v) _mm256_set1_epi32(v)
#define TL_LOADU_I(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define TL_ADD_I(a, b) _mm256_add_epi32(a, b)
#define TL_SUB_I(a, b) _mm256_sub_epi32(a, b)
#define TL_MULLO(a, b) _mm256_mullo_epi32(a, b)
#define TL_SLLI5(a) _mm256_slli_epi32(a, 5)
#define TL_DOT4(acc, w, a) \
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1)))
#define TL_CVT(a) _mm256_cvtepi32_ps(a)
#define TL_SET1_F(v) _mm256_set1_ps(v)
#define TL_LOADU_F(p) _mm256_loadu_ps(p)
#define TL_STOREU_F(p, v) _mm256_storeu_ps(p, v)
#define TL_MUL_F(a, b) _mm256_mul_ps(a, b)
#define TL_SUB_F(a, b) _mm256_sub_ps(a, b)
#define TL_FNMADD(a, b, c) _mm256_fnmadd_ps(a, b, c)
#define TL_FMADD(a, b, c) _mm256_fmadd_ps(a, b, c)
#else
#error "token_lane_simd.h: define V8_TL_AVX512VNNI, V8_TL_AVX512 or V8_TL_AVX2"
#endif

#undef V8_TL_AVX512VNNI
#undef V8_TL_AVX512
#undef V8_TL_AVX2
