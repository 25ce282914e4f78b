/* Internal helpers shared by the quantized-linear sources (not public API). */
#ifndef V8_QL_INTERNAL_H
#define V8_QL_INTERNAL_H

#include "core/prefetch.h"
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
float ql_q5k_dot_ref(const v8_block_q5_k *w, const v8_block_q8_k *a, int64_t nblk);

/* Q5_K: the 5-bit level of weight e (0..255) of a super-block. */
static inline int ql_q5k_level(const v8_block_q5_k *b, int e) {
    const int h = e / 64, l = e % 32, upper = (e % 64) >= 32;
    const uint8_t q = b->qs[32 * h + l];
    const int lo = upper ? q >> 4 : q & 15;
    return lo | (((b->qh[l] >> (2 * h + upper)) & 1) << 4);
}

/* Q5_K min correction of one super-block: sum over the 8 sub-blocks of
 * min[j] times the 32-element activation sum (exact int32). */
static inline int32_t ql_q5k_min_sum(const uint8_t mn[8], const int16_t bsums[16]) {
    int32_t s = 0;
    for (int j = 0; j < 8; ++j) {
        s += mn[j] * (bsums[2 * j] + bsums[2 * j + 1]);
    }
    return s;
}

/* ---- 32-element block formats ------------------------------------------ */

/* Q8_0 / Q5_0 / Q4_0 pair with Q8_0 activations; Q4_1 / Q5_1 (an fp16 min
 * m beside the scale) with Q8_1 activations, whose block also carries
 * s = d * sum(q). */
typedef enum { QL0_Q8_0 = 0, QL0_Q5_0 = 1, QL0_Q4_0 = 2, QL0_Q4_1 = 3, QL0_Q5_1 = 4 } ql0_format;

static inline size_t ql0_block_bytes(ql0_format fmt) {
    switch (fmt) {
    case QL0_Q8_0:
        return sizeof(v8_block_q8_0);
    case QL0_Q5_0:
        return sizeof(v8_block_q5_0);
    case QL0_Q4_0:
        return sizeof(v8_block_q4_0);
    case QL0_Q4_1:
        return sizeof(v8_block_q4_1);
    default:
        return sizeof(v8_block_q5_1);
    }
}

/* formats with a min (x Q8_1 activations) */
static inline int ql0_has_min(ql0_format fmt) {
    return fmt == QL0_Q4_1 || fmt == QL0_Q5_1;
}

/* bytes of one activation block and the offset of its 32 levels */
static inline size_t ql0_act_bytes(ql0_format fmt) {
    return ql0_has_min(fmt) ? sizeof(v8_block_q8_1) : sizeof(v8_block_q8_0);
}

static inline size_t ql0_act_qs(ql0_format fmt) {
    return ql0_has_min(fmt) ? 4 : 2;
}

/* The levels of one weight block in element order and its fp16 scale
 * (Q4_0: nibble - 8; Q5_0: (nibble | fifth bit << 4) - 16; Q8_0: as stored;
 * Q4_1: nibble; Q5_1: nibble | fifth bit << 4).  Nibble layout: byte j holds
 * element j (low) and j + 16 (high); fifth bit j of the 32-bit word:
 * element j. */
static inline uint16_t ql0_levels(ql0_format fmt, const uint8_t *blk, int8_t q[V8_QK8_0]) {
    uint16_t d;
    memcpy(&d, blk, 2);
    if (fmt == QL0_Q8_0) {
        memcpy(q, blk + 2, V8_QK8_0);
        return d;
    }
    const int five = fmt == QL0_Q5_0 || fmt == QL0_Q5_1;
    const size_t head = ql0_has_min(fmt) ? 4 : 2; /* d (and m) */
    const uint8_t *qs = blk + head + (five ? 4 : 0);
    uint32_t qh = 0;
    if (five) {
        memcpy(&qh, blk + head, 4);
    }
    const int off = fmt == QL0_Q5_0 ? 16 : fmt == QL0_Q4_0 ? 8 : 0;
    for (int j = 0; j < V8_QK8_0 / 2; ++j) {
        const int lo = (qs[j] & 15) | (int)(((qh >> j) & 1u) << 4);
        const int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
        q[j] = (int8_t)(lo - off);
        q[j + 16] = (int8_t)(hi - off);
    }
    return d;
}

/* the fp16 min m of a Q4_1 / Q5_1 block */
static inline uint16_t ql0_min(const uint8_t *blk) {
    uint16_t m;
    memcpy(&m, blk + 2, 2);
    return m;
}

/* K % 32 == 0; `blocks` receives k / 32. */
static inline v8_status ql0_check_k(int64_t k, int64_t *blocks) {
    V8_REQUIRE(k > 0 && k % V8_QK8_0 == 0, V8_ERR_BAD_DIMENSION);
    *blocks = k / V8_QK8_0;
    return V8_OK;
}

/* Scalar lane-model dot (the contract oracle's arithmetic) of one weight row
 * of nblk blocks and one activation row (Q8_0 or Q8_1 blocks as fmt pairs). */
float ql0_dot_ref(ql0_format fmt, const uint8_t *w, const uint8_t *a, int64_t nblk);

#endif /* V8_QL_INTERNAL_H */
