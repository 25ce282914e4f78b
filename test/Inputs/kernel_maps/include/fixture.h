/* Declarations the fixture kernel maps bind; never compiled. */
#include <stdint.h>
typedef int v8_status;
typedef struct v8_threadpool v8_threadpool;
enum {
    V8_FIXTURE_F16_ONLINE_FP32_MERGE = 1, V8_FIXTURE_FLASH_AUTO = 2,
    V8_FIXTURE_Q4_K_BLOCK_ORDER = 3, V8_FIXTURE_Q6_K_BLOCK_ORDER = 4,
    V8_FIXTURE_RMSNORM = 5, V8_FIXTURE_QK_NORM = 6, V8_FIXTURE_EMBEDDING = 7, V8_FIXTURE_ROPE = 8,
    V8_FIXTURE_INLINE = 9, V8_FIXTURE_KV_STORE = 10
};
v8_status fixture_attn_split_kv_ref(int contract, float *out, const float *q, const void *k, const void *v, int64_t n_q);
v8_status fixture_attn_split_kv(int contract, float *out, const float *q, const void *k, const void *v, int64_t n_q);
v8_status fixture_attn_split_kv_parallel_dispatch(v8_threadpool *pool, int contract, float *out, const float *q, const void *k, const void *v, int64_t n_q);
v8_status fixture_attn_auto_ref(int contract, float *out, const float *q, const void *k, const void *v, int64_t n_q);
v8_status fixture_attn_auto(int contract, float *out, const float *q, const void *k, const void *v, int64_t n_q);
v8_status fixture_attn_auto_parallel_dispatch(v8_threadpool *pool, int contract, float *out, const float *q, const void *k, const void *v, int64_t n_q);
v8_status fixture_q4_k_gemv_ref(int contract, float *y, const void *w, const float *x, int64_t n, int64_t k);
v8_status fixture_q4_k_gemv(int contract, float *y, const void *w, const float *x, int64_t n, int64_t k);
v8_status fixture_q4_k_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y, const void *w, const float *x, int64_t n, int64_t k);
v8_status fixture_q4_k_gemm_ref(int contract, float *y, const void *w, const float *x, int64_t n, int64_t k);
v8_status fixture_q4_k_gemm(int contract, float *y, const void *w, const float *x, int64_t n, int64_t k);
v8_status fixture_q4_k_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y, const void *w, const float *x, int64_t n, int64_t k);
v8_status fixture_q6_k_gemv_ref(int contract, float *y, const void *w, const float *x, int64_t n, int64_t k);
v8_status fixture_q6_k_gemv(int contract, float *y, const void *w, const float *x, int64_t n, int64_t k);
v8_status fixture_q6_k_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y, const void *w, const float *x, int64_t n, int64_t k);
v8_status fixture_q6_k_gemm_ref(int contract, float *y, const void *w, const float *x, int64_t n, int64_t k);
v8_status fixture_q6_k_gemm(int contract, float *y, const void *w, const float *x, int64_t n, int64_t k);
v8_status fixture_q6_k_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y, const void *w, const float *x, int64_t n, int64_t k);
v8_status fixture_rmsnorm_ref(int contract, float *y, const float *x, int64_t n);
v8_status fixture_rmsnorm(int contract, float *y, const float *x, int64_t n);
v8_status fixture_rmsnorm_parallel_dispatch(v8_threadpool *pool, int contract, float *y, const float *x, int64_t n);
v8_status fixture_qk_norm_ref(int contract, float *y, const float *x, int64_t n);
v8_status fixture_qk_norm(int contract, float *y, const float *x, int64_t n);
v8_status fixture_qk_norm_parallel_dispatch(v8_threadpool *pool, int contract, float *y, const float *x, int64_t n);
v8_status fixture_embedding_ref(int contract, float *y, const float *x, int64_t n);
v8_status fixture_embedding(int contract, float *y, const float *x, int64_t n);
v8_status fixture_embedding_parallel_dispatch(v8_threadpool *pool, int contract, float *y, const float *x, int64_t n);
v8_status fixture_rope_ref(int contract, float *y, const float *x, int64_t n);
v8_status fixture_rope(int contract, float *y, const float *x, int64_t n);
v8_status fixture_rope_parallel_dispatch(v8_threadpool *pool, int contract, float *y, const float *x, int64_t n);
v8_status fixture_kv_store_ref(int contract, float *y, const float *x, int64_t n);
v8_status fixture_kv_store(int contract, float *y, const float *x, int64_t n);
