/* The integer lane mapping of the quantized kernels whose vector lane is one
 * token (quant_tiled, quant_repacked's token kernels) or one weight row
 * (quant_repacked's Q4_0 tiles), over the variant core/simd.h has selected:
 * include it after core/simd.h (no include guard: once per variant).
 *
 *   V8_SIMD_AVX512 + V8_SIMD_VNNI   16 lanes, the 4-byte dot is dpbusd
 *   V8_SIMD_AVX512                  16 lanes, dpbusd as maddubs + madd with ones
 *   V8_SIMD_AVX2                     8 lanes, the same pair with 256-bit vectors
 *
 * Every variant computes the same integers: TL_DOT4 adds to each int32 lane
 * the dot of four u8 weight codes (w, broadcast) with four s8 activation
 * bytes (a); the u8 x s8 pair sums of maddubs stay inside int16 for codes
 * below 64 (2*63*128 < 2^15), so no variant saturates.  The lane-wise
 * operations are core/simd.h's names; the float ones are single
 * instructions, one rounding each.
 *
 * A group dot (TL_GDOT4 steps from TL_ZERO_I, or after a first TL_GDOT4_FIRST
 * step, which adds no zero accumulator; then TL_GSCALE) yields per
 * int32 lane scale * sum of the steps' 4-byte dots.  Without VNNI the steps
 * stay in the int16 pair sums of maddubs and one madd applies the scale
 * (the multiply and the widening in one instruction, instead of a madd per
 * step and a 32-bit multiply): exact while the steps' pair sums fit int16,
 * i.e. at most 8 steps of 4-bit codes (8 * 2 * 15 * 128 < 2^15), 4 of
 * 5-bit and 2 of 6-bit ones.  With VNNI
 * the steps are dpbusd into int32 and the scale a 32-bit multiply.
 * TL_GSCALE_SUM(a, b, s) is s*a + s*b, two group dots under one scale: with
 * VNNI one multiply of the int32 sum (the 32-bit multiply is two uops on
 * Intel's vector port 0, which the dpbusd steps also need), otherwise a
 * madd each, as the int16 pair sums cannot be added first.  The
 * scale, |s| < 2^15, is broadcast from TL_GSCALE_CONST(s).  TL_PAIR16 packs
 * two int32 lanes of magnitude below 2^15 into one int16 pair, so
 * TL_MADD16 with a pair of constants gives lo * c_lo + hi * c_hi exactly. */
#ifndef V8_SIMD_OPEN
#error "quant/token_lane_simd.h: include core/simd.h first"
#endif
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
#undef TL_GDOT4
#undef TL_GDOT4_FIRST
#undef TL_GSCALE
#undef TL_GSCALE_SUM
#undef TL_GSCALE_CONST
#undef TL_PAIR16
#undef TL_PACK16
#undef TL_MADD16
#undef TL_CVT
#undef TL_SET1_F
#undef TL_LOADU_F
#undef TL_STOREU_F
#undef TL_MUL_F
#undef TL_SUB_F
#undef TL_FNMADD
#undef TL_FMADD
#undef TL_KEEP_CHAIN

#define TL_LANES V8F_W
#define TL_VI v8i
#define TL_VF v8f
#define TL_ZERO_F() v8f_zero()
#define TL_SET1_I(v) v8i_set1(v)
#define TL_LOADU_I(p) v8i_load(p)
#define TL_ADD_I(a, b) v8i_add(a, b)
#define TL_SUB_I(a, b) v8i_sub(a, b)
#define TL_SLLI5(a) v8i_slli(a, 5)
#define TL_SET1_F(v) v8f_set1(v)
#define TL_LOADU_F(p) v8f_load(p)
#define TL_STOREU_F(p, v) v8f_store(p, v)
#define TL_MUL_F(a, b) v8f_mul(a, b)
#define TL_SUB_F(a, b) v8f_sub(a, b)
#define TL_FNMADD(a, b, c) v8f_fnma(a, b, c)
#define TL_FMADD(a, b, c) v8f_fma(a, b, c)
/* AVX2: an empty asm that takes and returns v in its register, so an integer group dot
 * stays the chain the source writes.  Integer adds are exact, so GCC may reassociate an
 * unrolled chain into a tree and hoist every step's maddubs ahead of the adds, which
 * spills 16 vector registers: the repacked Q4_K token-lane step ran 12% slower, and the
 * tiled Q6_K GEMM took 5% more time than with the chains kept.  It emits no instruction.
 * With 32 registers GCC's own order measured as fast or 1-5% faster: no barrier there. */
#if V8F_NREGS >= 32
#define TL_KEEP_CHAIN(v) ((void)0)
#else
#define TL_KEEP_CHAIN(v) __asm__("" : "+v"(v))
#endif
/* two int32 scalars of magnitude below 2^15 as one int16 pair (lo, hi), the
 * broadcast constant of a TL_MADD16 */
#define TL_PACK16(lo, hi) ((int32_t)(((uint32_t)(lo) & 0xffffu) | ((uint32_t)(hi) << 16)))

#if defined(V8_SIMD_AVX512)
#define TL_ZERO_I() _mm512_setzero_si512()
#define TL_MULLO(a, b) _mm512_mullo_epi32(a, b)
#if defined(V8_SIMD_VNNI)
#define TL_DOT4(acc, w, a) _mm512_dpbusd_epi32(acc, w, a)
#define TL_GDOT4(acc, w, a) _mm512_dpbusd_epi32(acc, w, a)
#define TL_GDOT4_FIRST(w, a) _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, a)
#define TL_GSCALE(acc, s) _mm512_mullo_epi32(acc, s)
#define TL_GSCALE_SUM(a, b, s) _mm512_mullo_epi32(_mm512_add_epi32(a, b), s)
#define TL_GSCALE_CONST(s) ((int32_t)(s))
#else
#define TL_GDOT4(acc, w, a) _mm512_add_epi16(acc, _mm512_maddubs_epi16(w, a))
#define TL_GDOT4_FIRST(w, a) _mm512_maddubs_epi16(w, a)
#define TL_GSCALE(acc, s) _mm512_madd_epi16(acc, s)
#define TL_GSCALE_SUM(a, b, s) _mm512_add_epi32(_mm512_madd_epi16(a, s), _mm512_madd_epi16(b, s))
#define TL_GSCALE_CONST(s) TL_PACK16(s, s)
#define TL_DOT4(acc, w, a) \
    _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(w, a), _mm512_set1_epi16(1)))
#endif
#define TL_CVT(a) _mm512_cvtepi32_ps(a)
#define TL_MADD16(a, b) _mm512_madd_epi16(a, b)
#define TL_PAIR16(lo, hi) _mm512_mask_blend_epi16(0xAAAAAAAAu, lo, _mm512_slli_epi32(hi, 16))
#elif defined(V8_SIMD_AVX2)
#define TL_ZERO_I() _mm256_setzero_si256()
#define TL_MULLO(a, b) _mm256_mullo_epi32(a, b)
#define TL_DOT4(acc, w, a) \
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1)))
#define TL_GDOT4(acc, w, a) _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, a))
#define TL_GDOT4_FIRST(w, a) _mm256_maddubs_epi16(w, a)
#define TL_GSCALE(acc, s) _mm256_madd_epi16(acc, s)
#define TL_GSCALE_SUM(a, b, s) _mm256_add_epi32(_mm256_madd_epi16(a, s), _mm256_madd_epi16(b, s))
#define TL_GSCALE_CONST(s) TL_PACK16(s, s)
#define TL_CVT(a) _mm256_cvtepi32_ps(a)
#define TL_MADD16(a, b) _mm256_madd_epi16(a, b)
#define TL_PAIR16(lo, hi) _mm256_blend_epi16(lo, _mm256_slli_epi32(hi, 16), 0xAA)
#else
#error "quant/token_lane_simd.h: a vector variant (V8_SIMD_AVX512 or V8_SIMD_AVX2)"
#endif
