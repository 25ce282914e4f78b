/* K-quant linear routed by activation rows (see v8_quant_auto.h).
 *
 * Each entry point checks its own selector, (for the threadpool dispatch)
 * the pool and the scratch against its own size function, then hands the
 * whole call to one part with that part's selector: the part checks every
 * other argument before its first write, so a call this function refuses
 * leaves y untouched.  m < 1 goes to the block-order part, which refuses it. */
#include "quant_tiled/v8_quant_auto.h"

size_t v8_qla_gemm_scratch_bytes(int64_t m, int64_t k) {
    const size_t block_order = v8_ql_gemm_scratch_bytes(m, k);
    const size_t tiled = v8_qlt_gemm_scratch_bytes(m, k);
    if (block_order == 0 || tiled == 0) {
        return 0;
    }
    return block_order > tiled ? block_order : tiled;
}

#define QLA_TILED(m) ((m) >= V8_QLA_TILED_MIN_ROWS)

/* Callers size the scratch by v8_qla_gemm_scratch_bytes (the kernel map's size
 * function); below the threshold the block-order part needs less and alone
 * would accept a scratch shorter than that.  Hold every call to the
 * composite's own size so the size function and the check agree.  An invalid
 * m or k (size 0) is left to the part, which refuses it with its own status. */
static int qla_scratch_short(int64_t m, int64_t k, size_t scratch_bytes) {
    const size_t need = v8_qla_gemm_scratch_bytes(m, k);
    return need > 0 && scratch_bytes < need;
}

#define QLA_ENTRY(fmt, FMT)                                                                     \
    v8_status v8_##fmt##_auto_gemm_ref(int contract, float *y, const void *w, const float *x,  \
                                       const float *bias, int64_t m, int64_t n, int64_t k,      \
                                       void *scratch, size_t scratch_bytes) {                  \
        V8_REQUIRE(contract == V8_QL_##FMT##_X_Q8_K_LLAMACPP_AUTO_ROWS8,                        \
                   V8_ERR_UNKNOWN_SELECTOR);                                                    \
        V8_REQUIRE(!qla_scratch_short(m, k, scratch_bytes), V8_ERR_BAD_DIMENSION);             \
        if (QLA_TILED(m)) {                                                                     \
            return v8_##fmt##_tiled_gemm_ref(V8_QL_##FMT##_X_Q8_K_FP32_SUPER_BLOCK_FMA_CHAIN,  \
                                             y, w, x, bias, m, n, k, scratch, scratch_bytes);  \
        }                                                                                       \
        return v8_##fmt##_gemm_ref(V8_QL_##FMT##_X_Q8_K_FP32_BLOCK_ORDER, y, w, x, bias, m, n, \
                                   k, scratch, scratch_bytes);                                  \
    }                                                                                           \
    v8_status v8_##fmt##_auto_gemm(int contract, float *y, const void *w, const float *x,      \
                                   const float *bias, int64_t m, int64_t n, int64_t k,          \
                                   void *scratch, size_t scratch_bytes) {                      \
        V8_REQUIRE(contract == V8_QL_##FMT##_X_Q8_K_LLAMACPP_AUTO_ROWS8,                        \
                   V8_ERR_UNKNOWN_SELECTOR);                                                    \
        V8_REQUIRE(!qla_scratch_short(m, k, scratch_bytes), V8_ERR_BAD_DIMENSION);             \
        if (QLA_TILED(m)) {                                                                     \
            return v8_##fmt##_tiled_gemm(V8_QL_##FMT##_X_Q8_K_FP32_SUPER_BLOCK_FMA_CHAIN, y,   \
                                         w, x, bias, m, n, k, scratch, scratch_bytes);         \
        }                                                                                       \
        return v8_##fmt##_gemm(V8_QL_##FMT##_X_Q8_K_FP32_BLOCK_ORDER, y, w, x, bias, m, n, k,  \
                               scratch, scratch_bytes);                                        \
    }                                                                                           \
    v8_status v8_##fmt##_auto_gemm_parallel_dispatch(                                          \
        v8_threadpool *pool, int contract, float *y, const void *w, const float *x,             \
        const float *bias, int64_t m, int64_t n, int64_t k, void *scratch,                      \
        size_t scratch_bytes) {                                                                 \
        V8_REQUIRE(contract == V8_QL_##FMT##_X_Q8_K_LLAMACPP_AUTO_ROWS8,                        \
                   V8_ERR_UNKNOWN_SELECTOR);                                                    \
        V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);                                         \
        V8_REQUIRE(!qla_scratch_short(m, k, scratch_bytes), V8_ERR_BAD_DIMENSION);             \
        if (QLA_TILED(m)) {                                                                     \
            return v8_##fmt##_tiled_gemm_parallel_dispatch(                                     \
                pool, V8_QL_##FMT##_X_Q8_K_FP32_SUPER_BLOCK_FMA_CHAIN, y, w, x, bias, m, n, k, \
                scratch, scratch_bytes);                                                        \
        }                                                                                       \
        return v8_##fmt##_gemm_parallel_dispatch(pool, V8_QL_##FMT##_X_Q8_K_FP32_BLOCK_ORDER,  \
                                                 y, w, x, bias, m, n, k, scratch,               \
                                                 scratch_bytes);                                \
    }

QLA_ENTRY(q4_k, Q4_K)
QLA_ENTRY(q5_k, Q5_K)
QLA_ENTRY(q6_k, Q6_K)
