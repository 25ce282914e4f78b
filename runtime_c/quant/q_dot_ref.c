/* Scalar contract oracles for the K-quant dots: a lane-by-lane model of the
 * named fp32 structure (8 FMA lanes, Q4_K's 4 min lanes, the fixed
 * horizontal tree).  Integer sums are exact, so only the fp32 steps below
 * decide the bits; they are written one operation at a time, in ISO C
 * without contraction, with fmaf for the fused steps. */
#include <math.h>

#include "quant/ql_internal.h"

static float tree8(const float a[8]) {
    float r[4];
    for (int i = 0; i < 4; ++i) {
        r[i] = a[i + 4] + a[i];
    }
    float s0 = r[0] + r[2];
    float s1 = r[1] + r[3];
    return s0 + s1;
}

static float tree4(const float m[4]) {
    float s0 = m[0] + m[2];
    float s1 = m[1] + m[3];
    return s0 + s1;
}

float ql_q4k_dot_ref(const v8_block_q4_k *w, const v8_block_q8_k *a, int64_t nblk) {
    float acc[8] = {0}, accm[4] = {0};
    for (int64_t i = 0; i < nblk; ++i) {
        const v8_block_q4_k *b = w + i;
        const v8_block_q8_k *q = a + i;
        const float d = q->d * v8_f16_to_f32(b->d);
        const float dmin = -q->d * v8_f16_to_f32(b->dmin);
        uint8_t sc[8], mn[8];
        ql_q4k_scales(b->scales, sc, mn);
        int32_t lane[8] = {0};
        for (int h = 0; h < 4; ++h) {           /* 64-weight halves */
            const uint8_t *qs = b->qs + 32 * h;
            const int8_t *q8 = q->qs + 64 * h;
            for (int u = 0; u < 8; ++u) {
                int32_t lo = 0, hi = 0;
                for (int e = 4 * u; e < 4 * u + 4; ++e) {
                    lo += (qs[e] & 15) * q8[e];
                    hi += (qs[e] >> 4) * q8[32 + e];
                }
                lane[u] += sc[2 * h] * lo + sc[2 * h + 1] * hi;
            }
        }
        for (int u = 0; u < 8; ++u) {
            acc[u] = fmaf(d, (float)lane[u], acc[u]);
        }
        /* min lane v covers sub-blocks 2v and 2v+1 (bsums pairs per sub-block) */
        for (int v = 0; v < 4; ++v) {
            const int16_t *bs = q->bsums + 4 * v;
            int32_t p = mn[2 * v] * (bs[0] + bs[1]) + mn[2 * v + 1] * (bs[2] + bs[3]);
            accm[v] = fmaf(dmin, (float)p, accm[v]);
        }
    }
    return tree8(acc) + tree4(accm);
}

float ql_q6k_dot_ref(const v8_block_q6_k *w, const v8_block_q8_k *a, int64_t nblk) {
    float acc[8] = {0};
    for (int64_t i = 0; i < nblk; ++i) {
        const v8_block_q6_k *b = w + i;
        const v8_block_q8_k *q = a + i;
        const float d = q->d * v8_f16_to_f32(b->d);
        int32_t lane[8] = {0};
        for (int h = 0; h < 2; ++h) {           /* 128-weight halves */
            const uint8_t *ql = b->ql + 64 * h;
            const uint8_t *qh = b->qh + 32 * h;
            for (int c = 0; c < 4; ++c) {       /* 32-weight groups */
                const int8_t *q8 = q->qs + 128 * h + 32 * c;
                for (int u = 0; u < 8; ++u) {
                    int32_t s = 0;
                    for (int e = 4 * u; e < 4 * u + 4; ++e) {
                        const uint8_t lo = ql[32 * (c & 1) + e];
                        const int lev = (c < 2 ? lo & 15 : lo >> 4) | (((qh[e] >> (2 * c)) & 3) << 4);
                        s += lev * q8[e];
                    }
                    lane[u] += b->scales[8 * h + 2 * c + u / 4] * s;
                }
            }
        }
        /* the -32 offset as an integer correction from the activation sums */
        for (int u = 0; u < 8; ++u) {
            lane[u] -= 32 * (q->bsums[2 * u] * b->scales[2 * u] + q->bsums[2 * u + 1] * b->scales[2 * u + 1]);
            acc[u] = fmaf(d, (float)lane[u], acc[u]);
        }
    }
    return tree8(acc);
}

/* Q5_K: Q4_K's lanes and scales with 5-bit levels; the mins go into one
 * fp32 running sum by FMA (not 4 lanes), added after the tree. */
float ql_q5k_dot_ref(const v8_block_q5_k *w, const v8_block_q8_k *a, int64_t nblk) {
    float acc[8] = {0};
    float mins = 0.0f;
    for (int64_t i = 0; i < nblk; ++i) {
        const v8_block_q5_k *b = w + i;
        const v8_block_q8_k *q = a + i;
        const float d = q->d * v8_f16_to_f32(b->d);
        const float dmin = -q->d * v8_f16_to_f32(b->dmin);
        uint8_t sc[8], mn[8];
        ql_q4k_scales(b->scales, sc, mn);
        int32_t lane[8] = {0};
        for (int j = 0; j < 8; ++j) {           /* 32-weight sub-blocks */
            for (int u = 0; u < 8; ++u) {
                int32_t s = 0;
                for (int e = 32 * j + 4 * u; e < 32 * j + 4 * u + 4; ++e) {
                    s += ql_q5k_level(b, e) * q->qs[e];
                }
                lane[u] += sc[j] * s;
            }
        }
        for (int u = 0; u < 8; ++u) {
            acc[u] = fmaf(d, (float)lane[u], acc[u]);
        }
        mins = fmaf(dmin, (float)ql_q5k_min_sum(mn, q->bsums), mins);
    }
    return tree8(acc) + mins;
}

/* 32-element blocks x Q8_0 / Q8_1: per block the exact int32 lane sums
 * (lane u: elements [4u, 4u+4)), the block factor as one fp32 product of the
 * two widened fp16 scales, one FMA per lane, blocks ascending, then tree8;
 * Q4_1 / Q5_1 also fold m * s of every block into one fp32 sum by FMA,
 * added after the tree. */
float ql0_dot_ref(ql0_format fmt, const uint8_t *w, const uint8_t *a, int64_t nblk) {
    const size_t bytes = ql0_block_bytes(fmt), abytes = ql0_act_bytes(fmt);
    const size_t qs = ql0_act_qs(fmt);
    float acc[8] = {0};
    float mins = 0.0f;
    for (int64_t i = 0; i < nblk; ++i) {
        const uint8_t *wb = w + (size_t)i * bytes, *ab = a + (size_t)i * abytes;
        int8_t q[V8_QK8_0];
        const uint16_t dw = ql0_levels(fmt, wb, q);
        uint16_t da, sa;
        memcpy(&da, ab, 2);
        const int8_t *x = (const int8_t *)(ab + qs);
        const float d = v8_f16_to_f32(dw) * v8_f16_to_f32(da);
        for (int u = 0; u < 8; ++u) {
            int32_t s = 0;
            for (int e = 4 * u; e < 4 * u + 4; ++e) {
                s += q[e] * x[e];
            }
            acc[u] = fmaf(d, (float)s, acc[u]);
        }
        if (ql0_has_min(fmt)) {
            memcpy(&sa, ab + 2, 2);
            mins = fmaf(v8_f16_to_f32(ql0_min(wb)), v8_f16_to_f32(sa), mins);
        }
    }
    return ql0_has_min(fmt) ? tree8(acc) + mins : tree8(acc);
}
