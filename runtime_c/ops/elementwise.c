/* Scalar references for the elementwise ops the C printer emits inline
 * (residual_add_fp32, swiglu_fp32_expf, geglu_fp32_tanh).  The printed
 * AVX-512 / AVX2 code is checked against these bit for bit. */
#include <math.h>

#include "ops/ops_internal.h"

static v8_status check(int contract, int expected, const float *y, const float *a,
                       const float *b, int64_t n) {
    V8_REQUIRE(contract == expected, V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && a != NULL && b != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(n >= 1 && n <= V8_OPS_MAX_ELEMENTS, V8_ERR_BAD_DIMENSION);
    return V8_OK;
}

v8_status v8_residual_add_f32_ref(int contract, float *y, const float *a, const float *b,
                                  int64_t n) {
    v8_status st = check(contract, V8_RESIDUAL_ADD_FP32, y, a, b, n);
    if (st != V8_OK) {
        return st;
    }
    for (int64_t i = 0; i < n; ++i) {
        y[i] = a[i] + b[i];
    }
    return V8_OK;
}

v8_status v8_swiglu_f32_ref(int contract, float *y, const float *g, const float *u, int64_t n) {
    v8_status st = check(contract, V8_SWIGLU_FP32_EXPF, y, g, u, n);
    if (st != V8_OK) {
        return st;
    }
    for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i];
        const float e = expf(-gi);
        const float silu = gi / (1.0f + e);
        y[i] = silu * u[i];
    }
    return V8_OK;
}

v8_status v8_geglu_f32_ref(int contract, float *y, const float *g, const float *u, int64_t n) {
    v8_status st = check(contract, V8_GEGLU_FP32_TANH, y, g, u, n);
    if (st != V8_OK) {
        return st;
    }
    for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i];
        const float inner = (V8_GELU_SQRT_2_OVER_PI * gi) * (1.0f + (V8_GELU_COEF_A * gi) * gi);
        const float gelu = (0.5f * gi) * (1.0f + tanhf(inner));
        y[i] = gelu * u[i];
    }
    return V8_OK;
}
