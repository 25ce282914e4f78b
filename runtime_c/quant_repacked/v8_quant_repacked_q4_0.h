/* Repacked-weight quantized linear: Q4_0 weights times Q8_0 activations with
 * the arithmetic of llama.cpp's q4_0_8x8 repacked CPU kernels (the repack
 * traits its model loader selects on AVX2 / AVX-512 hosts for Q4_0 weights
 * whose row count is a multiple of 8; contracts/quantized_linear_repacked_q4_0.json).
 *
 * The providers read the plain GGUF block layout (no repacked copy); only the
 * arithmetic is llama.cpp's.  Per output (activation row t, weight row r),
 * 32-element blocks b ascending, one fp32 chain acc from +0.0:
 *
 *   D_b   = sum_{e < 32} (nibble_e - 8) * a_b.q_e          exact int32
 *   s_b   = fl(fp32(w_b.d) * fp32(a_b.d))                  fp16 scales widened exactly
 *   acc   = fma(fl32(D_b), s_b, acc)
 *   y     = acc, then fl(y + bias[r]) when a bias is given.
 *
 * llama.cpp's GEMV (ggml_gemv_q4_0_8x8_q8_0, every row of a matmul with fewer
 * than 4 activation rows and the last M mod 4 rows otherwise) and its GEMM
 * (ggml_gemm_q4_0_8x8_q8_0, rows in groups of 4; AVX-512 16-column and AVX2
 * 8-column blocks) take exactly these per-output steps, so one contract covers
 * both routes, every row count, thread count and ISA.  Activations are
 * quantized to Q8_0 with v8_quantize_q8_0 (ggml's x86 quantizer; its 4-row
 * interleaving packer ggml_quantize_mat_q8_0_4x8 computes the same levels and
 * scales) into caller-provided scratch.
 *
 * Domain: k a positive multiple of 32 and n a positive multiple of 8 (llama.cpp
 * does not repack a weight whose row count is not, and multiplies it with the
 * plain contract instead); anything else is refused before any write. */
#ifndef V8_QUANT_REPACKED_Q4_0_H
#define V8_QUANT_REPACKED_Q4_0_H

#include "quant/v8_quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Contract selector (registry id upper-cased). */
enum {
    V8_QL_Q4_0_X_Q8_0_FP32_REPACKED_BLOCK_CHAIN = 123
};

/* Scratch bytes (0 for an invalid m or k): m x k/32 Q8_0 blocks. */
size_t v8_qlr0_gemv_scratch_bytes(int64_t k);
size_t v8_qlr0_gemm_scratch_bytes(int64_t m, int64_t k);

/* y[n] = W[n,k] . x[k] (+ bias[n]). */
v8_status v8_q4_0_repacked_gemv_ref(int contract, float *y, const void *w, const float *x,
                                    const float *bias, int64_t n, int64_t k, void *scratch,
                                    size_t scratch_bytes);
v8_status v8_q4_0_repacked_gemv(int contract, float *y, const void *w, const float *x,
                                const float *bias, int64_t n, int64_t k, void *scratch,
                                size_t scratch_bytes);
v8_status v8_q4_0_repacked_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                                  const void *w, const float *x,
                                                  const float *bias, int64_t n, int64_t k,
                                                  void *scratch, size_t scratch_bytes);

/* Y[m,n] = X[m,k] . W[n,k]^T (+ bias[n]), token-major.  *_ref is the scalar
 * contract oracle; the production function dispatches on v8_cpu_best_isa /
 * v8_cpu_features (AVX-512 with or without VNNI, AVX2, scalar);
 * *_parallel_dispatch quantizes the activation in 16-row tasks, then splits the
 * weight rows into 16-row tiles over the pool (independent rows). */
v8_status v8_q4_0_repacked_gemm_ref(int contract, float *y, const void *w, const float *x,
                                    const float *bias, int64_t m, int64_t n, int64_t k,
                                    void *scratch, size_t scratch_bytes);
v8_status v8_q4_0_repacked_gemm(int contract, float *y, const void *w, const float *x,
                                const float *bias, int64_t m, int64_t n, int64_t k,
                                void *scratch, size_t scratch_bytes);
v8_status v8_q4_0_repacked_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                                  const void *w, const float *x,
                                                  const float *bias, int64_t m, int64_t n,
                                                  int64_t k, void *scratch, size_t scratch_bytes);

#ifdef __cplusplus
}
#endif

#endif /* V8_QUANT_REPACKED_Q4_0_H */
