/* fp32 linear and logits with the arithmetic of llama.cpp's CPU matrix
 * multiply (weights f32, activations f32) on either x86 build of ggml:
 * provider linear_ggml_fp32, one algorithm parameterized by the build's
 * vector width L (fp32 lanes per register):
 *
 *   L = 16, AVX-512 build: linear_fp32_ggml_16_lane_mul_mat and
 *           logits_fp32_ggml_16_lane_mul_mat (identical arithmetic);
 *   L = 8,  AVX2 build:    linear_fp32_ggml_8_lane_mul_mat and
 *           logits_fp32_ggml_8_lane_mul_mat (identical arithmetic);
 *   L = 16, AVX-512 build whose compiler also vectorizes small loops in 4 lanes
 *           (ggml_loop_vectors min_4_lanes): linear_fp32_ggml_16_lane_mul_mat_4_lane_tail
 *           and logits_fp32_ggml_16_lane_mul_mat_4_lane_tail.
 *
 * y[m][n] = x[m][k] . w[n][k] (+ bias[n]); weight rows are output features.
 * Every output is one of two dot products, chosen per call:
 *
 *   lane route  when m >= 2, k % L == 0 and n % 4 == 0 (llamafile tinyBLAS<L>):
 *     acc[p] = 0 (p < L);  for l = 0, L, ..., k-L:
 *         acc[p] = fma(w[n][l+p], x[m][l+p], acc[p])            (one rounding)
 *     dot = halving tree of acc: v[i] += v[i+h] (i < h) for h = L/2, ..., 2,
 *           then v[0] + v[1]
 *
 *   block route otherwise (always at m == 1; ggml_vec_dot_f32):
 *     four L-lane accumulators a_j, B = 4L, k0 = k - k % B; for i = 0, B, ..., k0-B:
 *         a_j[p] = fma(w[n][i+Lj+p], x[m][i+Lj+p], a_j[p])
 *     a0 += a2; a1 += a3; a0 += a1 (lane-wise); then s =
 *         L = 16: the halving tree of a0 (as above)
 *         L = 8:  t[i] = a0[i] + a0[i+4] (i < 4), s = (t[0] + t[1]) + (t[2] + t[3])
 *     tail t = 0 .. r-1 (r = k - k0), ascending, with plain = r - r % T, T the
 *     smallest vector of GCC's leftover loop (T = L/2 = 8 for the 16-lane contracts, 4 for
 *     the 8-lane and the _4_lane_tail ones):
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
    V8_LOGITS_FP32_GGML_16_LANE_MUL_MAT = 0x512,
    V8_LINEAR_FP32_GGML_8_LANE_MUL_MAT = 0x513,
    V8_LOGITS_FP32_GGML_8_LANE_MUL_MAT = 0x514,
    V8_LINEAR_FP32_GGML_16_LANE_MUL_MAT_4_LANE_TAIL = 0x515,
    V8_LOGITS_FP32_GGML_16_LANE_MUL_MAT_4_LANE_TAIL = 0x516
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
