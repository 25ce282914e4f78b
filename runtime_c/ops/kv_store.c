/* KV cache store, contract kv_store_f16_round_nearest_even: new fp32 K or V
 * rows enter the head-major fp16 cache at the next positions. */
#include "ops/ops_internal.h"

static v8_status check(int contract, int expected, const float *rows, const void *cache,
                       int64_t n_tokens, int64_t n_head_kv, int64_t head_dim, int64_t capacity,
                       int64_t pos0) {
    V8_REQUIRE(contract == expected, V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(rows != NULL && cache != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(n_tokens > 0 && n_head_kv > 0 && head_dim > 0 && pos0 >= 0, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(v8_ops_product_ok(n_head_kv, capacity) && v8_ops_product_ok(n_head_kv * capacity, head_dim),
               V8_ERR_BAD_DIMENSION);
    /* every new position must fit: nothing is written otherwise */
    V8_REQUIRE(capacity > 0 && n_tokens <= capacity - pos0 && pos0 <= capacity, V8_ERR_BAD_DIMENSION);
    return V8_OK;
}

typedef void (*convert_fn)(const float *src, uint16_t *dst, size_t n);

static void convert_scalar(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        dst[i] = v8_f32_to_f16(src[i]);
    }
}

static v8_status store(convert_fn convert, int contract, const float *rows, uint16_t *cache,
                       int64_t n_tokens, int64_t n_head_kv, int64_t head_dim, int64_t capacity,
                       int64_t pos0) {
    v8_status st = check(contract, V8_KV_STORE_F16_ROUND_NEAREST_EVEN, rows, cache, n_tokens,
                         n_head_kv, head_dim, capacity, pos0);
    if (st != V8_OK) {
        return st;
    }
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t h = 0; h < n_head_kv; ++h) {
            const float *src = rows + (t * n_head_kv + h) * head_dim;
            uint16_t *dst = cache + (h * capacity + pos0 + t) * head_dim;
            convert(src, dst, (size_t)head_dim);
        }
    }
    return V8_OK;
}

v8_status v8_kv_store_f16_ref(int contract, const float *rows, uint16_t *cache, int64_t n_tokens,
                              int64_t n_head_kv, int64_t head_dim, int64_t capacity, int64_t pos0) {
    return store(convert_scalar, contract, rows, cache, n_tokens, n_head_kv, head_dim, capacity, pos0);
}

v8_status v8_kv_store_f16(int contract, const float *rows, uint16_t *cache, int64_t n_tokens,
                          int64_t n_head_kv, int64_t head_dim, int64_t capacity, int64_t pos0) {
    /* the array helper converts with F16C where the CPU has it (same bits) */
    return store(v8_f32_to_f16_array, contract, rows, cache, n_tokens, n_head_kv, head_dim, capacity,
                 pos0);
}

/* fp32 cache: an exact copy of each row; the oracle copies element by element,
 * production by row (same bits: a copy has no arithmetic). */
static v8_status store_f32(int by_row, int contract, const float *rows, float *cache, int64_t n_tokens,
                           int64_t n_head_kv, int64_t head_dim, int64_t capacity, int64_t pos0) {
    v8_status st = check(contract, V8_KV_STORE_FP32_COPY, rows, cache, n_tokens, n_head_kv, head_dim,
                         capacity, pos0);
    if (st != V8_OK) {
        return st;
    }
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t h = 0; h < n_head_kv; ++h) {
            const float *src = rows + (t * n_head_kv + h) * head_dim;
            float *dst = cache + (h * capacity + pos0 + t) * head_dim;
            if (by_row) {
                memcpy(dst, src, (size_t)head_dim * sizeof *dst);
            } else {
                for (int64_t d = 0; d < head_dim; ++d) {
                    dst[d] = src[d];
                }
            }
        }
    }
    return V8_OK;
}

v8_status v8_kv_store_f32_ref(int contract, const float *rows, float *cache, int64_t n_tokens,
                              int64_t n_head_kv, int64_t head_dim, int64_t capacity, int64_t pos0) {
    return store_f32(0, contract, rows, cache, n_tokens, n_head_kv, head_dim, capacity, pos0);
}

v8_status v8_kv_store_f32(int contract, const float *rows, float *cache, int64_t n_tokens,
                          int64_t n_head_kv, int64_t head_dim, int64_t capacity, int64_t pos0) {
    return store_f32(1, contract, rows, cache, n_tokens, n_head_kv, head_dim, capacity, pos0);
}
