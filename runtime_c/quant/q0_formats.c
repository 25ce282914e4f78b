/* 32-element block formats (Q8_0, Q5_0, Q4_0, Q4_1, Q5_1): the Q8_0 and
 * Q8_1 activation quantizers, reference weight quantizers byte-identical to
 * ggml's, the dequantizers and the scratch sizes.  Baseline flags and ISO C: no FMA
 * contraction changes the quantizers' fp32 arithmetic. */
#include <math.h>

#include "quant/ql_internal.h"

/* float -> int32 as the x86 conversion instructions do it under the default
 * rounding mode: nearest, ties to even; out of range or NaN gives INT32_MIN
 * (the "integer indefinite"), which the int8 saturation then maps to -128. */
static int32_t ql0_cvt_even(float v) {
    if (!(fabsf(v) < 4194304.0f)) { /* 2^22: beyond it the magic-number add is not exact */
        if (fabsf(v) < 2147483648.0f) {
            return (int32_t)v; /* already an integer */
        }
        return INT32_MIN;
    }
    return ql_round_even(v);
}

static int8_t ql0_sat8(int32_t v) {
    return (int8_t)(v > 127 ? 127 : (v < -128 ? -128 : v));
}

/* ---- Q8_0 activation (ggml's x86 SIMD quantizer) ---------------------- */

/* levels and the fp32 d of one block; returns the int32 sum of the levels
 * before their int8 saturation (wrapping, as the SIMD integer adds do) */
static int32_t q8x_act_levels(const float *x, int8_t q[V8_QK8_0], float *d32) {
    float amax = 0.0f;
    for (int j = 0; j < V8_QK8_0; ++j) {
        const float a = fabsf(x[j]);
        amax = a > amax ? a : amax; /* max is exact: order does not matter */
    }
    *d32 = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    uint32_t sum = 0;
    for (int j = 0; j < V8_QK8_0; ++j) {
        const int32_t v = ql0_cvt_even(x[j] * id);
        sum += (uint32_t)v;
        q[j] = ql0_sat8(v);
    }
    return (int32_t)sum;
}

static void q80_act_block(const float *x, v8_block_q8_0 *y) {
    float d;
    (void)q8x_act_levels(x, y->qs, &d);
    y->d = v8_f32_to_f16(d);
}

static void q81_act_block(const float *x, v8_block_q8_1 *y) {
    float d;
    const int32_t sum = q8x_act_levels(x, y->qs, &d);
    y->d = v8_f32_to_f16(d);
    y->s = v8_f32_to_f16(d * (float)sum);
}

v8_status v8_quantize_q8_0(const float *x, void *y, int64_t rows, int64_t k) {
    V8_REQUIRE(x != NULL && y != NULL, V8_ERR_NULL_ARGUMENT);
    int64_t nb;
    v8_status st = ql0_check_k(k, &nb);
    V8_REQUIRE(st == V8_OK, st);
    V8_REQUIRE(rows > 0, V8_ERR_BAD_DIMENSION);
    v8_block_q8_0 *out = (v8_block_q8_0 *)y;
    for (int64_t i = 0; i < rows * nb; ++i) {
        q80_act_block(x + i * V8_QK8_0, out + i);
    }
    return V8_OK;
}

v8_status v8_quantize_q8_1(const float *x, void *y, int64_t rows, int64_t k) {
    V8_REQUIRE(x != NULL && y != NULL, V8_ERR_NULL_ARGUMENT);
    int64_t nb;
    v8_status st = ql0_check_k(k, &nb);
    V8_REQUIRE(st == V8_OK, st);
    V8_REQUIRE(rows > 0, V8_ERR_BAD_DIMENSION);
    v8_block_q8_1 *out = (v8_block_q8_1 *)y;
    for (int64_t i = 0; i < rows * nb; ++i) {
        q81_act_block(x + i * V8_QK8_0, out + i);
    }
    return V8_OK;
}

/* ---- reference weight quantizers --------------------------------------- */

/* Q8_0: d = amax / 127, id = 1 / d, q = round half away from zero. */
static void q80_ref_block(const float *x, v8_block_q8_0 *y) {
    float amax = 0.0f;
    for (int j = 0; j < V8_QK8_0; ++j) {
        amax = fmaxf(amax, fabsf(x[j]));
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = v8_f32_to_f16(d);
    for (int j = 0; j < V8_QK8_0; ++j) {
        y->qs[j] = (int8_t)roundf(x[j] * id);
    }
}

/* Q4_0 / Q5_0: the signed value of largest magnitude (first on ties) maps
 * to the most negative level: d = max / -half, id = 1 / d, level =
 * min(top, trunc(x * id + half + 0.5)) (truncation through int8, as ggml). */
static float q0_signed_max(const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < V8_QK8_0; ++j) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static uint8_t q0_level(float v, float bias, int top) {
    const int8_t t = (int8_t)(v + bias);
    return (uint8_t)(t < top ? t : top);
}

static void q40_ref_block(const float *x, v8_block_q4_0 *y) {
    const float d = q0_signed_max(x) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = v8_f32_to_f16(d);
    for (int j = 0; j < V8_QK8_0 / 2; ++j) {
        const uint8_t lo = q0_level(x[j] * id, 8.5f, 15);
        const uint8_t hi = q0_level(x[j + 16] * id, 8.5f, 15);
        y->qs[j] = (uint8_t)(lo | (hi << 4));
    }
}

static void q50_ref_block(const float *x, v8_block_q5_0 *y) {
    const float d = q0_signed_max(x) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = v8_f32_to_f16(d);
    uint32_t qh = 0;
    for (int j = 0; j < V8_QK8_0 / 2; ++j) {
        const uint8_t lo = q0_level(x[j] * id, 16.5f, 31);
        const uint8_t hi = q0_level(x[j + 16] * id, 16.5f, 31);
        y->qs[j] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
        qh |= (uint32_t)(lo >> 4) << j;
        qh |= (uint32_t)(hi >> 4) << (j + 16);
    }
    memcpy(y->qh, &qh, 4);
}

/* Q4_1 / Q5_1: d = (max - min) / top, m = min, id = 1 / d, level =
 * trunc((x - min) * id + 0.5); Q4_1 caps it at 15 through int8, Q5_1 only
 * converts to uint8 (ggml keeps no cap there; 32 would wrap its fifth bit). */
static float q1_range(const float *x, float *min) {
    float lo = 3.402823466e+38f, hi = -3.402823466e+38f;
    for (int j = 0; j < V8_QK8_0; ++j) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *min = lo;
    return hi;
}

static void q41_ref_block(const float *x, v8_block_q4_1 *y) {
    float min;
    const float max = q1_range(x, &min);
    const float d = (max - min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = v8_f32_to_f16(d);
    y->m = v8_f32_to_f16(min);
    for (int j = 0; j < V8_QK8_0 / 2; ++j) {
        const uint8_t lo = q0_level((x[j] - min) * id, 0.5f, 15);
        const uint8_t hi = q0_level((x[j + 16] - min) * id, 0.5f, 15);
        y->qs[j] = (uint8_t)(lo | (hi << 4));
    }
}

static void q51_ref_block(const float *x, v8_block_q5_1 *y) {
    float min;
    const float max = q1_range(x, &min);
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = v8_f32_to_f16(d);
    y->m = v8_f32_to_f16(min);
    uint32_t qh = 0;
    for (int j = 0; j < V8_QK8_0 / 2; ++j) {
        const uint8_t lo = (uint8_t)((x[j] - min) * id + 0.5f);
        const uint8_t hi = (uint8_t)((x[j + 16] - min) * id + 0.5f);
        y->qs[j] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
        qh |= (uint32_t)((lo & 0x10u) >> 4) << j;
        qh |= (uint32_t)((hi & 0x10u) >> 4) << (j + 16);
    }
    memcpy(y->qh, &qh, 4);
}

static v8_status q0_quantize(ql0_format fmt, const float *x, void *y, int64_t rows, int64_t k) {
    V8_REQUIRE(x != NULL && y != NULL, V8_ERR_NULL_ARGUMENT);
    int64_t nb;
    v8_status st = ql0_check_k(k, &nb);
    V8_REQUIRE(st == V8_OK, st);
    V8_REQUIRE(rows > 0, V8_ERR_BAD_DIMENSION);
    uint8_t *out = (uint8_t *)y;
    const size_t bytes = ql0_block_bytes(fmt);
    for (int64_t i = 0; i < rows * nb; ++i) {
        const float *xb = x + i * V8_QK8_0;
        uint8_t *blk = out + (size_t)i * bytes;
        switch (fmt) {
        case QL0_Q8_0: {
            v8_block_q8_0 b;
            q80_ref_block(xb, &b);
            memcpy(blk, &b, sizeof(b));
            break;
        }
        case QL0_Q5_0: {
            v8_block_q5_0 b;
            q50_ref_block(xb, &b);
            memcpy(blk, &b, sizeof(b));
            break;
        }
        case QL0_Q4_0: {
            v8_block_q4_0 b;
            q40_ref_block(xb, &b);
            memcpy(blk, &b, sizeof(b));
            break;
        }
        case QL0_Q4_1: {
            v8_block_q4_1 b;
            q41_ref_block(xb, &b);
            memcpy(blk, &b, sizeof(b));
            break;
        }
        case QL0_Q5_1: {
            v8_block_q5_1 b;
            q51_ref_block(xb, &b);
            memcpy(blk, &b, sizeof(b));
            break;
        }
        }
    }
    return V8_OK;
}

v8_status v8_quantize_q8_0_ref(const float *x, void *y, int64_t rows, int64_t k) {
    return q0_quantize(QL0_Q8_0, x, y, rows, k);
}

v8_status v8_quantize_q5_0_ref(const float *x, void *y, int64_t rows, int64_t k) {
    return q0_quantize(QL0_Q5_0, x, y, rows, k);
}

v8_status v8_quantize_q4_0_ref(const float *x, void *y, int64_t rows, int64_t k) {
    return q0_quantize(QL0_Q4_0, x, y, rows, k);
}

v8_status v8_quantize_q4_1_ref(const float *x, void *y, int64_t rows, int64_t k) {
    return q0_quantize(QL0_Q4_1, x, y, rows, k);
}

v8_status v8_quantize_q5_1_ref(const float *x, void *y, int64_t rows, int64_t k) {
    return q0_quantize(QL0_Q5_1, x, y, rows, k);
}

/* ---- dequantizers ------------------------------------------------------- */

static v8_status q0_dequantize(ql0_format fmt, const void *w, float *x, int64_t rows, int64_t k) {
    V8_REQUIRE(x != NULL && w != NULL, V8_ERR_NULL_ARGUMENT);
    int64_t nb;
    v8_status st = ql0_check_k(k, &nb);
    V8_REQUIRE(st == V8_OK, st);
    V8_REQUIRE(rows > 0, V8_ERR_BAD_DIMENSION);
    const uint8_t *in = (const uint8_t *)w;
    const size_t bytes = ql0_block_bytes(fmt);
    for (int64_t i = 0; i < rows * nb; ++i, x += V8_QK8_0) {
        int8_t q[V8_QK8_0];
        const uint8_t *blk = in + (size_t)i * bytes;
        const float d = v8_f16_to_f32(ql0_levels(fmt, blk, q));
        const float m = ql0_has_min(fmt) ? v8_f16_to_f32(ql0_min(blk)) : 0.0f;
        for (int j = 0; j < V8_QK8_0; ++j) {
            x[j] = ql0_has_min(fmt) ? (float)q[j] * d + m : (float)q[j] * d;
        }
    }
    return V8_OK;
}

v8_status v8_dequantize_q8_0(const void *w, float *x, int64_t rows, int64_t k) {
    return q0_dequantize(QL0_Q8_0, w, x, rows, k);
}

v8_status v8_dequantize_q5_0(const void *w, float *x, int64_t rows, int64_t k) {
    return q0_dequantize(QL0_Q5_0, w, x, rows, k);
}

v8_status v8_dequantize_q4_0(const void *w, float *x, int64_t rows, int64_t k) {
    return q0_dequantize(QL0_Q4_0, w, x, rows, k);
}

v8_status v8_dequantize_q4_1(const void *w, float *x, int64_t rows, int64_t k) {
    return q0_dequantize(QL0_Q4_1, w, x, rows, k);
}

v8_status v8_dequantize_q5_1(const void *w, float *x, int64_t rows, int64_t k) {
    return q0_dequantize(QL0_Q5_1, w, x, rows, k);
}

/* ---- scratch sizes ------------------------------------------------------ */

size_t v8_ql0_gemv_scratch_bytes(int64_t k) {
    return v8_ql0_gemm_scratch_bytes(1, k);
}

size_t v8_ql0_gemm_scratch_bytes(int64_t m, int64_t k) {
    if (m <= 0 || k <= 0 || k % V8_QK8_0 != 0) {
        return 0;
    }
    return (size_t)m * (size_t)(k / V8_QK8_0) * sizeof(v8_block_q8_0);
}

size_t v8_ql1_gemv_scratch_bytes(int64_t k) {
    return v8_ql1_gemm_scratch_bytes(1, k);
}

size_t v8_ql1_gemm_scratch_bytes(int64_t m, int64_t k) {
    if (m <= 0 || k <= 0 || k % V8_QK8_0 != 0) {
        return 0;
    }
    return (size_t)m * (size_t)(k / V8_QK8_0) * sizeof(v8_block_q8_1);
}
