/* Entry points of the online providers' AVX-512 score block (online_simd.inc's scores_avx512,
 * the F32X16X4 tree) on the intrinsic emulation: the including source
 * (test_tile_task_avx512_emulated.py) takes scores_avx512 from the file's text.  Also the tree
 * as the contract states it, in C. */

/* out[j] = scale * (float)(tree of key j's products + the exact tail past the last 64) */
void emu_online_scores(const uint16_t *k0, int64_t n, const uint16_t *q16, int64_t d, float scale,
                       float *out);
void emu_online_scores(const uint16_t *k0, int64_t n, const uint16_t *q16, int64_t d, float scale,
                       float *out) {
    scores_avx512(k0, n, q16, d, scale, out);
}

/* V8_ATTN_TREE_AVX512_F32X16X4 (attention/v8_attention.h), one scalar operation at a time:
 * lane l of accumulator x is the fma chain over i (step 64) of k[i + 16x + l] * q[...],
 * then (a0 + a2) + (a1 + a3) per lane, the halving tree over the 16 lanes, and the elements
 * past the last full step as exact fp32 products added in double. */
void emu_online_scores_ref(const uint16_t *k0, int64_t n, const uint16_t *q16, int64_t d,
                           float scale, float *out);
void emu_online_scores_ref(const uint16_t *k0, int64_t n, const uint16_t *q16, int64_t d,
                           float scale, float *out) {
    const int64_t np = d - d % 64;
    for (int64_t j = 0; j < n; ++j) {
        const uint16_t *k = k0 + j * d;
        float acc[4][16] = {{0}}, a[16];
        for (int64_t i = 0; i < np; i += 64) {
            for (int x = 0; x < 4; ++x) {
                for (int l = 0; l < 16; ++l) {
                    const int64_t e = i + 16 * x + l;
                    acc[x][l] = fmaf(v8_f16_to_f32(k[e]), v8_f16_to_f32(q16[e]), acc[x][l]);
                }
            }
        }
        for (int l = 0; l < 16; ++l) {
            a[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
        }
        double tot = np ? (double)v8_hsum_halves_ref(a, 16) : 0.0;
        for (int64_t i = np; i < d; ++i) {
            tot += (double)(v8_f16_to_f32(k[i]) * v8_f16_to_f32(q16[i]));
        }
        out[j] = (float)tot * scale;
    }
}
