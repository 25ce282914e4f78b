/* Q8_K activations of 16 tokens interleaved for token-lane kernels.
 *
 * A token-lane kernel puts one token in each vector lane and broadcasts four
 * weight codes to every lane, so the 4-byte dot instruction (dpbusd, or
 * maddubs + madd) yields one partial sum per token with no horizontal
 * reduction.  It needs the activation codes as [4-element group][token][4
 * bytes]: one vector load gives one 4-element group of 16 (or, from half the
 * block, 8) tokens.  The block also holds the tokens' fp32 scales and their
 * 16-element code sums.  Tokens past the end of the activation are zero codes
 * with scale 0; kernels never store them.  Shared by the tiled and the
 * repacked-arithmetic GEMMs, which differ only in their fp32 chains. */
#ifndef V8_Q8K_GROUPS_H
#define V8_Q8K_GROUPS_H

#include <stdint.h>
#include <string.h>

#include "quant/v8_quant.h"

#define V8_Q8K_GROUP 16 /* tokens per interleaved block */

typedef struct {
    int8_t q[V8_QK_K / 4][V8_Q8K_GROUP][4]; /* 4096 bytes */
    float d[V8_Q8K_GROUP];
    int32_t bsums[V8_QK_K / 16][V8_Q8K_GROUP];
} v8_q8k_group;

/* Bytes of the interleaved copy of m tokens of nb super-blocks (0 on overflow). */
static inline uint64_t v8_q8k_groups_bytes(uint64_t m, uint64_t nb) {
    const uint64_t groups = (m + V8_Q8K_GROUP - 1) / V8_Q8K_GROUP;
    const uint64_t bytes = groups * nb * sizeof(v8_q8k_group);
    return nb != 0 && bytes / nb != groups * sizeof(v8_q8k_group) ? 0 : bytes;
}

/* Interleave tokens [t0, t1) (t1 - t0 <= 16) of `a` ([token][nb] blocks) into
 * out[0..nb): the group of those tokens, block by block. */
static inline void v8_q8k_group_pack(const v8_block_q8_k *a, int64_t nb, int64_t t0, int64_t t1,
                                     v8_q8k_group *out) {
    for (int64_t b = 0; b < nb; ++b) {
        v8_q8k_group *g = out + b;
        memset(g, 0, sizeof(*g));
        for (int64_t t = t0; t < t1; ++t) {
            const v8_block_q8_k *src = a + t * nb + b;
            const int lane = (int)(t - t0);
            for (int kg = 0; kg < V8_QK_K / 4; ++kg) {
                memcpy(g->q[kg][lane], &src->qs[4 * kg], 4);
            }
            g->d[lane] = src->d;
            for (int s = 0; s < V8_QK_K / 16; ++s) {
                g->bsums[s][lane] = src->bsums[s];
            }
        }
    }
}

#endif
