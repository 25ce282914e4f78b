/* Internal helpers shared by the quantized-linear sources (not public API). */
#ifndef V8_QL_INTERNAL_H
#define V8_QL_INTERNAL_H

#include "quant/v8_quant.h"

/* Round-half-even to int for |v| < 2^22: adding 1.5*2^23 leaves the integer
 * part in the mantissa, rounded by the FPU's default nearest-even mode.
 * This is the rounding ggml's reference quantizers use. */
static inline int ql_round_even(float v) {
    const float magic = 12582912.0f;
    float t = v + magic;
    return (int)(t - magic);
}

/* Q4_K: unpack the eight 6-bit scales and eight 6-bit mins. */
static inline void ql_q4k_scales(const uint8_t s[12], uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; ++j) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
    }
    for (int j = 4; j < 8; ++j) {
        sc[j] = (uint8_t)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        mn[j] = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Checks shared by every entry point; `blocks` receives k / 256. */
static inline v8_status ql_check_k(int64_t k, int64_t *blocks) {
    V8_REQUIRE(k > 0 && k % V8_QK_K == 0, V8_ERR_BAD_DIMENSION);
    *blocks = k / V8_QK_K;
    return V8_OK;
}

/* Scalar lane-model dots (the contract oracle's arithmetic), over super-blocks
 * [blk0, blk0 + nblk) of one weight row and one activation row. */
float ql_q4k_dot_ref(const v8_block_q4_k *w, const v8_block_q8_k *a, int64_t nblk);
float ql_q6k_dot_ref(const v8_block_q6_k *w, const v8_block_q8_k *a, int64_t nblk);

#endif /* V8_QL_INTERNAL_H */
