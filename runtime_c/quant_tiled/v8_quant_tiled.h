/* Tiled-prefill quantized linear: Q4_K / Q5_K / Q6_K weights times Q8_K
 * activations with the per-super-block arithmetic of the tiled K-quant GEMM
 * that llama.cpp's CPU backend runs for a batch of 8 or more activation rows
 * (contracts/quantized_linear_tiled.json).
 *
 * Per output (token t, weight row r), super-blocks b ascending:
 *
 *   integer part (exact int32, any evaluation order gives the same integers)
 *     Q4_K/Q5_K  S1 = sum over 32-element groups g of sc_g * sum_e q*a
 *                S2 = sum over g of mn_g * (bsum_2g + bsum_2g+1)
 *     Q6_K       S1 = sum over 16-element groups s of sc_s * sum_e (q-32)*a
 *   float part (this pins the bits)
 *     Q4_K/Q5_K  v = fma(-dmin, (float)S2, fl((float)S1 * d))
 *     Q6_K       v = fl((float)S1 * d)
 *     acc = fma(v, a_b.d, acc), acc starting at +0.0, one fp32 accumulator
 *     per output; bias (when given) added after the last super-block.
 *
 * d, dmin are the block's fp16 values widened exactly; (float) of an int32
 * rounds to nearest even; a_b.d is the Q8_K block's fp32 scale.  No value
 * depends on tile shapes, token count, chunking or worker count: every output
 * is one sequential chain over its own super-blocks.
 *
 * The activation is quantized to Q8_K with v8_quantize_q8_k (ggml's reference
 * quantizer, round half to even) into caller-provided scratch, followed by a
 * token-interleaved copy the production kernels read. */
#ifndef V8_QUANT_TILED_H
#define V8_QUANT_TILED_H

#include "quant/v8_quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Contract selectors (registry ids upper-cased). */
enum {
    V8_QL_Q4_K_X_Q8_K_FP32_SUPER_BLOCK_FMA_CHAIN = 101,
    V8_QL_Q6_K_X_Q8_K_FP32_SUPER_BLOCK_FMA_CHAIN = 102,
    V8_QL_Q5_K_X_Q8_K_FP32_SUPER_BLOCK_FMA_CHAIN = 103
};

/* 176 bytes, ggml's block_q5_K: fp16 d and dmin, 6-bit scales and mins packed
 * as in Q4_K, 32 bytes of fifth bits (bit g of byte l belongs to element
 * 32g + l), then the low nibbles laid out as Q4_K's. */
typedef struct v8_qlt_block_q5_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[V8_QK_K / 8];
    uint8_t qs[V8_QK_K / 2];
} v8_qlt_block_q5_k;

/* Scratch for m activation rows of k elements (0 for an invalid m or k). */
size_t v8_qlt_gemm_scratch_bytes(int64_t m, int64_t k);

/* Y[m,n] = X[m,k] . W[n,k]^T (+ bias[n]), token-major; w holds n rows of
 * k/256 blocks; bias may be NULL.  *_ref is the scalar contract oracle; the
 * production function dispatches on v8_cpu_best_isa / v8_cpu_features
 * (AVX-512 with or without VNNI, AVX2, scalar); *_parallel_dispatch splits
 * the work into output tiles (16 weight rows x 64 tokens) over the pool. */
v8_status v8_q4_k_tiled_gemm_ref(int contract, float *y, const void *w, const float *x,
                                 const float *bias, int64_t m, int64_t n, int64_t k,
                                 void *scratch, size_t scratch_bytes);
v8_status v8_q4_k_tiled_gemm(int contract, float *y, const void *w, const float *x,
                             const float *bias, int64_t m, int64_t n, int64_t k,
                             void *scratch, size_t scratch_bytes);
v8_status v8_q4_k_tiled_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                               const void *w, const float *x,
                                               const float *bias, int64_t m, int64_t n,
                                               int64_t k, void *scratch, size_t scratch_bytes);

v8_status v8_q5_k_tiled_gemm_ref(int contract, float *y, const void *w, const float *x,
                                 const float *bias, int64_t m, int64_t n, int64_t k,
                                 void *scratch, size_t scratch_bytes);
v8_status v8_q5_k_tiled_gemm(int contract, float *y, const void *w, const float *x,
                             const float *bias, int64_t m, int64_t n, int64_t k,
                             void *scratch, size_t scratch_bytes);
v8_status v8_q5_k_tiled_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                               const void *w, const float *x,
                                               const float *bias, int64_t m, int64_t n,
                                               int64_t k, void *scratch, size_t scratch_bytes);

v8_status v8_q6_k_tiled_gemm_ref(int contract, float *y, const void *w, const float *x,
                                 const float *bias, int64_t m, int64_t n, int64_t k,
                                 void *scratch, size_t scratch_bytes);
v8_status v8_q6_k_tiled_gemm(int contract, float *y, const void *w, const float *x,
                             const float *bias, int64_t m, int64_t n, int64_t k,
                             void *scratch, size_t scratch_bytes);
v8_status v8_q6_k_tiled_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                               const void *w, const float *x,
                                               const float *bias, int64_t m, int64_t n,
                                               int64_t k, void *scratch, size_t scratch_bytes);

#ifdef __cplusplus
}
#endif

#endif /* V8_QUANT_TILED_H */
