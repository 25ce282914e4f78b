/* Repacked-weight quantized linear: Q4_K weights times Q8_K activations with
 * the arithmetic of llama.cpp's repacked CPU kernels (the q4_K_8x8 repack
 * traits its model loader selects by default for Q4_K weights whose row count
 * is a multiple of 8; contracts/quantized_linear_repacked.json).
 *
 * The providers read the plain GGUF block layout (no repacked copy); only the
 * arithmetic is llama.cpp's.  Per output (activation row t, weight row r),
 * super-blocks b ascending, with ds = fl(d * a_b.d), dm = fl(dmin * a_b.d)
 * (fp16 d, dmin widened exactly) and two fp32 chains acc, accm from +0.0:
 *
 *   super-block form (ggml_gemv_q4_K_8x8_q8_K)
 *     S1 = sum_g sc_g * sum_e q*a,  S2 = sum_g mn_g * (bsum_2g + bsum_2g+1)
 *     acc = fma((float)S1, ds, acc);  accm = fma((float)S2, dm, accm)
 *   half-pair form (ggml_gemm_q4_K_8x8_q8_K), for h = 0..3 ascending
 *     P_h = sc_2h*dot_2h + sc_2h+1*dot_2h+1
 *     M_h = mn_2h*(bsum_4h + bsum_4h+1) + mn_2h+1*(bsum_4h+2 + bsum_4h+3)
 *     acc = fma((float)P_h, ds, acc); accm = fma((float)M_h, dm, accm)
 *   y = fl(acc - accm), then fl(y + bias[r]) when a bias is given.
 *
 * The GEMV takes the super-block form.  The GEMM over m rows takes the
 * half-pair form for rows t < 4*floor(m/4) and the super-block form for the
 * remaining m mod 4 rows, as llama.cpp routes them.  Integer sums are exact
 * int32; (float) of an int32 rounds to nearest even.  Nothing depends on the
 * ISA variant, the worker count or the tiling: each output is computed whole.
 *
 * Activations are quantized to Q8_K with v8_quantize_q8_k (the reference
 * quantizer; llama.cpp's 4-row packer can only negate a whole block, which
 * changes no output bit) into caller-provided scratch. */
#ifndef V8_QUANT_REPACKED_H
#define V8_QUANT_REPACKED_H

#include "quant/v8_quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Contract selectors (registry ids upper-cased). */
enum {
    V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN = 121,
    V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_4_ROW_GROUPS = 122
};

/* Scratch bytes (0 for an invalid m or k). */
size_t v8_qlr_gemv_scratch_bytes(int64_t k);
size_t v8_qlr_gemm_scratch_bytes(int64_t m, int64_t k);

/* y[n] = W[n,k] . x[k] (+ bias[n]); contract: ..._REPACKED_SUPER_BLOCK_CHAIN. */
v8_status v8_q4_k_repacked_gemv_ref(int contract, float *y, const void *w, const float *x,
                                    const float *bias, int64_t n, int64_t k, void *scratch,
                                    size_t scratch_bytes);
v8_status v8_q4_k_repacked_gemv(int contract, float *y, const void *w, const float *x,
                                const float *bias, int64_t n, int64_t k, void *scratch,
                                size_t scratch_bytes);
v8_status v8_q4_k_repacked_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                                  const void *w, const float *x,
                                                  const float *bias, int64_t n, int64_t k,
                                                  void *scratch, size_t scratch_bytes);

/* Y[m,n] = X[m,k] . W[n,k]^T (+ bias[n]), token-major; contract:
 * ..._REPACKED_4_ROW_GROUPS.  *_ref is the scalar contract oracle; the
 * production function dispatches on v8_cpu_best_isa / v8_cpu_features
 * (AVX-512 with or without VNNI, AVX2, scalar); *_parallel_dispatch splits the
 * weight rows into 16-row tiles over the pool (independent rows). */
v8_status v8_q4_k_repacked_gemm_ref(int contract, float *y, const void *w, const float *x,
                                    const float *bias, int64_t m, int64_t n, int64_t k,
                                    void *scratch, size_t scratch_bytes);
v8_status v8_q4_k_repacked_gemm(int contract, float *y, const void *w, const float *x,
                                const float *bias, int64_t m, int64_t n, int64_t k,
                                void *scratch, size_t scratch_bytes);
v8_status v8_q4_k_repacked_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                                  const void *w, const float *x,
                                                  const float *bias, int64_t m, int64_t n,
                                                  int64_t k, void *scratch, size_t scratch_bytes);

#ifdef __cplusplus
}
#endif

#endif /* V8_QUANT_REPACKED_H */
