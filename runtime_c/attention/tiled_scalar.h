/* Scalar pieces shared by the tiled and llama-regular oracles (internal).
 * Both AVX-512-build contracts name ggml's AVX-512 vector expf and the 16-lane
 * sum tree, so one definition serves both; tree8 is the AVX2 build's tree (the
 * tiled 8-lane contract; its exp is ops/ggml_vexp.h's vexp_lane_avx2). */
#ifndef V8_ATTN_TILED_SCALAR_H
#define V8_ATTN_TILED_SCALAR_H

#include <math.h>

/* ggml_v_expf (AVX-512 form) for one value: n = round(x / ln 2) by the 1.5*2^23
 * shift, two-step Cody-Waite reduction, polynomial j ~ exp(b) including the
 * leading 1, then j * 2^n with a single rounding (vscalefps).  |n| > 192 gives
 * 0 (n <= 0) or +inf. */
static inline float exp16_scalar(float x) {
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                              fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                         u, fmaf(0x1.ffffecp-1f, b, 1.0f));
    if (fabsf(n) > 192.0f) {
        return n <= 0.0f ? 0.0f : INFINITY;
    }
    /* j * 2^n is exact in double (|n| <= 192), so the narrowing is the one rounding */
    return (float)((double)j * ldexp(1.0, (int)n));
}

/* The 16-lane tree of _mm512_reduce_add_ps (GCC's avx512fintrin.h). */
static inline float tree16(const float *p) {
    float a[8], b[4];
    for (int i = 0; i < 8; ++i) {
        a[i] = p[i + 8] + p[i];
    }
    for (int i = 0; i < 4; ++i) {
        b[i] = a[i + 4] + a[i];
    }
    return (b[0] + b[2]) + (b[1] + b[3]);
}

/* The 8-lane tree of ggml_vec_soft_max_f32's AVX2 step (high half plus low half,
 * movehl, movehdup): a_i = p_{i+4} + p_i, then (a_0 + a_2) + (a_1 + a_3). */
static inline float tree8(const float *p) {
    float a[4];
    for (int i = 0; i < 4; ++i) {
        a[i] = p[i + 4] + p[i];
    }
    return (a[0] + a[2]) + (a[1] + a[3]);
}

/* A sliding window's part of a key tile's mask, after the scores are written: P[j][r]
 * (key t0 + j, query row r in lanes) is hidden (-inf, as ggml's mask entry) where the key
 * lies before the row's window begins, beginv[r]. */
static inline void v8_attn_tile_hide_before_window(float *P, int64_t t0, int64_t nkc,
                                                   const int32_t *beginv) {
    if (t0 >= beginv[V8_ATTN_TILE_Q - 1]) {
        return; /* rows begin in ascending order; the last row has the latest start */
    }
    for (int64_t j = 0; j < nkc; ++j) {
        for (int r = 0; r < V8_ATTN_TILE_Q; ++r) {
            if (t0 + j < beginv[r]) {
                P[j * V8_ATTN_TILE_Q + r] = -INFINITY;
            }
        }
    }
}

/* The first key tile (tiles start at key 0) that any row sees: every row hides all keys of
 * the tiles before it, so skipping them changes no bit. */
static inline int64_t v8_attn_first_tile(const int32_t *beginv) {
    return (int64_t)beginv[0] / V8_ATTN_TILE_KV * V8_ATTN_TILE_KV;
}

/* Window begins of up to 64 query rows from r0; rows past nr (which see nothing) repeat the
 * last real row's begin so the rows stay in ascending order. */
static inline void v8_attn_tile_begins(const v8_attn_args *a, int64_t r0, int64_t nr,
                                       int32_t *beginv) {
    for (int r = 0; r < V8_ATTN_TILE_Q; ++r) {
        beginv[r] = (int32_t)v8_attn_row_kv_begin(a, r0 + (r < nr ? r : nr - 1));
    }
}

#endif /* V8_ATTN_TILED_SCALAR_H */
