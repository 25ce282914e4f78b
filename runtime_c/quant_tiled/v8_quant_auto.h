/* K-quant linear as llama.cpp's CPU mul_mat computes it at any activation
 * row count (contracts/quantized_linear_auto.json): one call of m activation
 * rows runs
 *
 *   m <  8   the block-order contract (per-row vec_dot arithmetic;
 *            runtime_c/quant, v8_<fmt>_gemm*)
 *   m >= 8   the super-block FMA-chain contract (tiled GEMM arithmetic;
 *            runtime_c/quant_tiled, v8_<fmt>_tiled_gemm*)
 *
 * the rule of ggml-cpu's mul_mat for weights outside a repack buffer.  The
 * oracle routes to the parts' oracles, the production function to their
 * production functions and the threadpool dispatch to their threadpool
 * dispatches (output tiles, both parts), so every variant computes the
 * bits of the part the row count selects.  Scratch: the larger of the two
 * parts' needs. */
#ifndef V8_QUANT_AUTO_H
#define V8_QUANT_AUTO_H

#include "quant/v8_quant.h"
#include "quant_tiled/v8_quant_tiled.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Contract selectors (registry ids upper-cased). */
enum {
    V8_QL_Q4_K_X_Q8_K_LLAMACPP_AUTO_ROWS8 = 111,
    V8_QL_Q6_K_X_Q8_K_LLAMACPP_AUTO_ROWS8 = 112,
    V8_QL_Q5_K_X_Q8_K_LLAMACPP_AUTO_ROWS8 = 113
};

/* Rows from which the tiled part runs (llama.cpp's threshold). */
#define V8_QLA_TILED_MIN_ROWS 8

/* Scratch for m activation rows of k elements: the larger of the block-order
 * and the tiled GEMM's needs (0 for an invalid m or k). */
size_t v8_qla_gemm_scratch_bytes(int64_t m, int64_t k);

/* Y[m,n] = X[m,k] . W[n,k]^T (+ bias[n]), token-major, arguments as the
 * parts' GEMMs; the contract selector must be this format's auto selector. */
v8_status v8_q4_k_auto_gemm_ref(int contract, float *y, const void *w, const float *x,
                                const float *bias, int64_t m, int64_t n, int64_t k,
                                void *scratch, size_t scratch_bytes);
v8_status v8_q4_k_auto_gemm(int contract, float *y, const void *w, const float *x,
                            const float *bias, int64_t m, int64_t n, int64_t k,
                            void *scratch, size_t scratch_bytes);
v8_status v8_q4_k_auto_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                              const void *w, const float *x,
                                              const float *bias, int64_t m, int64_t n,
                                              int64_t k, void *scratch, size_t scratch_bytes);

v8_status v8_q5_k_auto_gemm_ref(int contract, float *y, const void *w, const float *x,
                                const float *bias, int64_t m, int64_t n, int64_t k,
                                void *scratch, size_t scratch_bytes);
v8_status v8_q5_k_auto_gemm(int contract, float *y, const void *w, const float *x,
                            const float *bias, int64_t m, int64_t n, int64_t k,
                            void *scratch, size_t scratch_bytes);
v8_status v8_q5_k_auto_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                              const void *w, const float *x,
                                              const float *bias, int64_t m, int64_t n,
                                              int64_t k, void *scratch, size_t scratch_bytes);

v8_status v8_q6_k_auto_gemm_ref(int contract, float *y, const void *w, const float *x,
                                const float *bias, int64_t m, int64_t n, int64_t k,
                                void *scratch, size_t scratch_bytes);
v8_status v8_q6_k_auto_gemm(int contract, float *y, const void *w, const float *x,
                            const float *bias, int64_t m, int64_t n, int64_t k,
                            void *scratch, size_t scratch_bytes);
v8_status v8_q6_k_auto_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                              const void *w, const float *x,
                                              const float *bias, int64_t m, int64_t n,
                                              int64_t k, void *scratch, size_t scratch_bytes);

#ifdef __cplusplus
}
#endif

#endif /* V8_QUANT_AUTO_H */
