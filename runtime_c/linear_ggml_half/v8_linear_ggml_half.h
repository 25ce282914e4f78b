/* f16 and bf16 linear and logits with the arithmetic of llama.cpp's CPU
 * matrix multiply, weights stored as f16 / bf16 (what llama.cpp's quantizer
 * writes for ftype F16 / BF16), activations f32: provider linear_ggml_half
 * (kernel maps linear_ggml_f16, linear_ggml_bf16).  Two x86 builds of ggml
 * compute differently; each has its own contracts (selector `ggml_build`):
 * the AVX-512 build (16 fp32 lanes, AVX512-FP16 / AVX512-BF16) and the AVX2
 * build (-mavx2 -mfma -mf16c, 8 fp32 lanes).
 *
 * y[m][n] = x[m][k] . w[n][k] (+ bias[n]); weight rows are output features.
 * ggml first converts the activations to the weight's vec_dot type, so every
 * product below reads xr = round(x): fp16 round-to-nearest-even (F16C
 * VCVTPS2PH imm 0) for f16, bf16 round-to-nearest-even with NaN quieted
 * (ggml_compute_fp32_to_bf16; subnormals kept) for bf16.  Weights widen
 * exactly.  Each output is one of two dot products, chosen per call.  The
 * halving tree of L lanes: v[i] += v[i + L/2], ... , v[0] + v[1].
 *
 * ---- AVX-512 build -------------------------------------------------------
 *
 * f16 (contracts linear_f16_ggml_mul_mat, logits_f16_ggml_mul_mat):
 *   lane route (tinyBLAS<16>) when m >= 2, k % 16 == 0 and n % 4 == 0:
 *     acc[p] = 0 (p < 16); for l = 0, 16, ...: acc[p] = fma(w[l+p], xr[l+p], acc[p])
 *     dot = halving tree of acc (16 lanes)
 *   vec route (ggml_vec_dot_f16, fp32 lanes also on AVX512-FP16) otherwise, always at m == 1:
 *     four 16-lane fma accumulators a_j over blocks of 64 (element i + 16j + p),
 *     a0 += a2, a1 += a3, a0 += a1, t = halving tree of a0;
 *     s = (double)t; tail k0 = k - k % 64 .. k-1 ascending: s += (double)(w*xr)
 *     (the fp32 product of two fp16 values is exact); dot = (float)s
 *
 * bf16 (contracts linear_bf16_ggml_mul_mat_dpbf16, logits_bf16_ggml_mul_mat_dpbf16):
 *   dp(c, a0, a1, b0, b1) = VDPBF16PS on one lane: c = ftz(fma(a1, b1, c)),
 *     then c = ftz(fma(a0, b0, c)) -- the odd element first, bf16 subnormal
 *     inputs read as zero, subnormal results flushed to zero (sign kept)
 *   lane route (tinyBLAS<32, __m512bh>) when m >= 2, k % 32 == 0 and n % 4 == 0:
 *     acc[p] = 0 (p < 16); for l = 0, 32, ...: acc[p] = dp(acc[p], pair l+2p, l+2p+1)
 *     dot = halving tree of acc
 *   vec route (ggml_vec_dot_bf16 with AVX512-BF16) otherwise, always at m == 1:
 *     c1, c2 16 lanes; for i = 0, 64, ... while i + 64 <= k:
 *       c1[p] = dp(c1[p], pair i+2p), c2[p] = dp(c2[p], pair i+32+2p)
 *     s = 0.0 (double); s += tree(c1); s += tree(c2);
 *     tail ascending: s += (double)(w*xr) (fp32 product, IEEE); dot = (float)s
 *
 * ---- AVX2 build (no AVX-512; AVX2 + FMA + F16C) ----------------------------
 *
 * f16 (contracts linear_f16_ggml_8_lane_mul_mat, logits_f16_ggml_8_lane_mul_mat) and
 * bf16 (contracts linear_bf16_ggml_8_lane_mul_mat, logits_bf16_ggml_8_lane_mul_mat)
 * share one arithmetic; only xr's rounding and the vec route's final tree differ:
 *   lane route (tinyBLAS<8, __m256>, F16C / shifted bf16 loads) when m >= 2,
 *   k % 8 == 0 and n % 4 == 0 (also for bf16: there is no dot-pair instruction):
 *     acc[p] = 0 (p < 8); for l = 0, 8, ...: acc[p] = fma(w[l+p], xr[l+p], acc[p])
 *     dot = halving tree of acc (8 lanes)
 *   vec route (ggml_vec_dot_f16 / ggml_vec_dot_bf16, AVX2 form) otherwise, always at m == 1:
 *     four 8-lane fma accumulators a_j over blocks of 32 (element i + 8j + p)
 *     (ggml_vec_dot_bf16 spells a multiply then an add; GCC fuses them: fma),
 *     a0 += a2, a1 += a3, a0 += a1, then
 *       f16:  u[i] = a0[i] + a0[i+4] (i < 4), t = (u0 + u1) + (u2 + u3)  (two HADDPS)
 *             s = (double)t
 *       bf16: t = halving tree of a0 (8 lanes); s = 0.0 (double); s += (double)t
 *     tail k0 = k - k % 32 .. k-1 ascending: s += (double)(w*xr), the product rounded
 *     to fp32 (exact for f16; for bf16 only an underflowing product rounds);
 *     dot = (float)s
 *   No subnormal is flushed anywhere in the AVX2 build.
 *
 *   y = dot + bias[n]   (bias may be NULL = none)
 *
 * Every ISA variant (AVX-512 with or without AVX512-BF16, AVX2 + FMA + F16C,
 * scalar) gives each contract's bits on any host; the AVX2-build contracts run
 * the 8-lane AVX2 code on AVX-512 hosts too.
 *
 * Output rows are independent (partition independent_rows, effect none).  All
 * three functions check the selector, pointers and sizes before the first
 * write; on error the output is untouched.  y must not alias w, x or bias. */
#ifndef V8_LINEAR_GGML_HALF_H
#define V8_LINEAR_GGML_HALF_H

#include "v8_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    V8_LINEAR_F16_GGML_MUL_MAT = 0x531,
    V8_LOGITS_F16_GGML_MUL_MAT = 0x532,
    V8_LINEAR_BF16_GGML_MUL_MAT_DPBF16 = 0x533,
    V8_LOGITS_BF16_GGML_MUL_MAT_DPBF16 = 0x534,
    V8_LINEAR_F16_GGML_8_LANE_MUL_MAT = 0x535,
    V8_LOGITS_F16_GGML_8_LANE_MUL_MAT = 0x536,
    V8_LINEAR_BF16_GGML_8_LANE_MUL_MAT = 0x537,
    V8_LOGITS_BF16_GGML_8_LANE_MUL_MAT = 0x538
};

v8_status v8_linear_half_ggml_ref(int contract, float *y, const uint16_t *w, const float *x,
                                  const float *bias, int64_t m, int64_t n, int64_t k);
v8_status v8_linear_half_ggml(int contract, float *y, const uint16_t *w, const float *x,
                              const float *bias, int64_t m, int64_t n, int64_t k);
v8_status v8_linear_half_ggml_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                                const uint16_t *w, const float *x,
                                                const float *bias, int64_t m, int64_t n,
                                                int64_t k);

#ifdef __cplusplus
}
#endif

#endif /* V8_LINEAR_GGML_HALF_H */
