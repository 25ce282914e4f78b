/* fp32 linear and logits with the arithmetic of llama.cpp's CPU matrix
 * multiply on an x86 build with AVX-512 (weights f32, activations f32):
 * provider linear_ggml_fp32, contracts linear_fp32_ggml_16_lane_mul_mat and
 * logits_fp32_ggml_16_lane_mul_mat (identical arithmetic).
 *
 * y[m][n] = x[m][k] . w[n][k] (+ bias[n]); weight rows are output features.
 * Every output is one of two dot products, chosen per call:
 *
 *   lane route  when m >= 2, k % 16 == 0 and n % 4 == 0:
 *     acc[p] = 0 (p < 16);  for l = 0, 16, ..., k-16:
 *         acc[p] = fma(w[n][l+p], x[m][l+p], acc[p])            (one rounding)
 *     dot = halving tree of acc: v[i] += v[i+8] (i<8), v[i] += v[i+4] (i<4),
 *           v[i] += v[i+2] (i<2), v[0] + v[1]
 *
 *   block route otherwise (always at m == 1):
 *     four 16-lane accumulators a_j, k0 = k - k % 64; for i = 0, 64, ..., k0-64:
 *         a_j[p] = fma(w[n][i+16j+p], x[m][i+16j+p], a_j[p])
 *     a0 += a2; a1 += a3; a0 += a1 (lane-wise); s = halving tree of a0
 *     tail t = 0 .. r-1 (r = k - k0), ascending, with plain = 16*(r/16) + (r%16 >= 8 ? 8 : 0):
 *         t <  plain: s = s + w*x   (product rounded, then sum rounded)
 *         t >= plain: s = fma(w, x, s)
 *
 *   y = dot + bias[n]   (bias may be NULL = none)
 *
 * Output rows are independent (partition independent_rows, effect none):
 * neither the worker count nor the ISA variant changes any bit.  All three
 * functions check the selector, pointers and sizes before the first write;
 * on error the output is untouched.  y must not alias w, x or bias. */
#ifndef V8_LINEAR_GGML_H
#define V8_LINEAR_GGML_H

#include "v8_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    V8_LINEAR_FP32_GGML_16_LANE_MUL_MAT = 0x511,
    V8_LOGITS_FP32_GGML_16_LANE_MUL_MAT = 0x512
};

v8_status v8_linear_f32_ggml_ref(int contract, float *y, const float *w, const float *x,
                                 const float *bias, int64_t m, int64_t n, int64_t k);
v8_status v8_linear_f32_ggml(int contract, float *y, const float *w, const float *x,
                             const float *bias, int64_t m, int64_t n, int64_t k);
v8_status v8_linear_f32_ggml_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                               const float *w, const float *x,
                                               const float *bias, int64_t m, int64_t n,
                                               int64_t k);

#ifdef __cplusplus
}
#endif

#endif /* V8_LINEAR_GGML_H */
