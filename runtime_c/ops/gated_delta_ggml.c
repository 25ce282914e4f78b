/* Gated DeltaNet mixer with llama.cpp's CPU arithmetic (provider gated_delta_net_fp32_ggml,
 * contracts gated_delta_rule_fp32_ggml_16_lane_chain for its AVX-512 build and
 * gated_delta_rule_fp32_ggml_8_lane_chain for its AVX2 build); see ops/v8_ops.h for the
 * arithmetic.
 *
 * llama.cpp computes the mixer as a chain of ggml ops (SSM_CONV, SILU, RMS_NORM + SCALE as
 * the l2 norm, ADD/SOFTPLUS/MUL for the gate, SIGMOID, GATED_DELTA_NET, RMS_NORM + MUL,
 * SILU, MUL).  Its x86 builds fuse some products into FMAs (the exp polynomial, the
 * dot-product lanes, the state update, some conv taps), so this source writes those fusions
 * explicitly with fmaf; every other operation is rounded on its own (contraction stays off,
 * ops_internal.h).  What depends on the build is described by one gdng_build value: the
 * vector width (16 or 8 fp32 lanes: the SiLU blocks from a row's first element, the four
 * accumulators of ggml_vec_dot_f32 and GCC's vectorized tails), the exp polynomial's form
 * (ops/ggml_vexp.h), the last two levels of the dot's lane fold, and the conv taps (all
 * fused at 16 lanes; at 8 lanes GCC vectorizes the 4 taps into one rounded-product block).
 * The oracle emulates the lanes one at a time; production runs the dot's accumulator lanes,
 * the state's row updates, the conv + SiLU of eight channels and the gated output in AVX2
 * registers where the CPU has AVX2 and FMA (either build's exp form, ops/ggml_vexp.h), each
 * lane with the oracle's operations, so the bits do not depend on the CPU running this code.
 *
 * The oracle walks tokens in the outer loop; production and threadpool walk value heads
 * (grouped by key head, whose query and key rows each token makes once for the group; each
 * value head owns its state and output columns; the conv window is read from
 * [conv_state, inputs] and the conv state is shifted once at the end), so the split
 * changes no bit. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/ops_internal.h"
#include "ops/ggml_vexp.h"

/* What the arithmetic of one llama.cpp x86 build depends on. */
typedef struct gdng_build {
    int lanes;              /* fp32 lanes of one vector register: 16 (AVX-512), 8 (AVX2) */
    float (*vexp)(float);   /* ggml_v_expf of that register width, one lane */
    int hadd_fold;          /* last fold of the dot's 4 lanes: (0+1)+(2+3) by two HADDPS;
                               otherwise (0+2)+(1+3) */
    int conv_rounded_taps;  /* the conv's 4 taps: products rounded and added in order from
                               +0 (GCC's 4-wide vectorized loop); otherwise fused from t0 */
    int tail_block;         /* the smallest vector GCC's leftover loops use (8 or 4 lanes):
                               the dot's tail rounds products down to its last < tail_block */
} gdng_build;

static const gdng_build BUILD_AVX512 = {16, vexp_lane_avx512, 0, 0, 8};
static const gdng_build BUILD_AVX2 = {8, vexp_lane_avx2, 1, 1, 4};
/* The AVX-512 build whose compiler tuning (e.g. -march=native resolving to rocketlake) also
 * vectorizes small loops with 4-lane vectors: SSM_CONV's 4 taps become one rounded-product
 * vector and ggml_vec_dot_f32's leftover loop rounds down to its last < 4. */
static const gdng_build BUILD_AVX512_4_LANE_TAILS = {16, vexp_lane_avx512, 0, 1, 4};

typedef struct gdng_args {
    const gdng_build *build;
    float *y;
    const float *qkv, *z, *alpha, *beta;
    const float *conv_w, *ssm_a, *dt_bias, *norm_w;
    float *conv_state, *ssm_state;
    int64_t n_tokens, n_k_heads, n_v_heads, dk, dv, kernel;
    int64_t channels;
    float eps;
} gdng_args;

/* ggml_vec_silu_f32 at position i of a row of n: the first n - n % lanes elements take the
 * vector form x / (1 + vexp(0 - x)), the rest x / (1 + expf(-x)). */
static inline __attribute__((always_inline)) float silu_at(const gdng_build *b, float x, int64_t i,
                                                          int64_t n) {
    if (i < n - n % b->lanes) {
        /* called by name, not through the pointer, so the AVX2+FMA walk inlines it */
        const float e = b->vexp == vexp_lane_avx512 ? vexp_lane_avx512(0.0f - x)
                                                     : vexp_lane_avx2(0.0f - x);
        return x / (1.0f + e);
    }
    return x / (1.0f + expf(-x));
}

/* ggml_vec_dot_f32 with w = lanes: four w-lane FMA accumulators A0..A3 over steps of 4w
 * elements (element i + j*w + l in lane l of A_j), for the first n - n % 4w elements;
 * v_l = (A0_l + A2_l) + (A1_l + A3_l); halved v_l = v_{l+h} + v_l for h = w/2 .. 4; the last
 * four lanes by the build's fold.  The remaining elements in order, s = s + x*y with the
 * product rounded (GCC's vectorized leftover loop: blocks of w, w/2, ... down to the build's
 * tail_block), the last < tail_block fused one by one. */
/* The dot from its first four halved lanes v[0..3] on: the build's fold, then the tail. */
static inline __attribute__((always_inline)) float dot_fold_tail(const gdng_build *b,
                                                                const float *v, const float *x,
                                                                const float *y, int64_t np,
                                                                int64_t n) {
    float sum;
    if (b->hadd_fold) {
        const float v01 = v[0] + v[1];
        const float v23 = v[2] + v[3];
        sum = v01 + v23;
    } else {
        const float v02 = v[0] + v[2];
        const float v13 = v[1] + v[3];
        sum = v02 + v13;
    }
    const int64_t rounded_end = n - (n - np) % b->tail_block;
    int64_t i = np;
    for (; i < rounded_end; ++i) {
        const float p = x[i] * y[i];
        sum = sum + p;
    }
    for (; i < n; ++i) {
        sum = fmaf(x[i], y[i], sum);
    }
    return sum;
}

static inline __attribute__((always_inline)) float dot_finish(const gdng_build *b,
                                                             const float *acc, const float *x,
                                                             const float *y, int64_t np,
                                                             int64_t n) {
    const int w = b->lanes;
    float v[16];
    for (int l = 0; l < w; ++l) {
        const float a02 = acc[l] + acc[l + 2 * w];
        const float a13 = acc[l + w] + acc[l + 3 * w];
        v[l] = a02 + a13;
    }
    for (int h = w / 2; h >= 4; h /= 2) {
        for (int l = 0; l < h; ++l) {
            v[l] = v[l + h] + v[l];
        }
    }
    return dot_fold_tail(b, v, x, y, np, n);
}

static inline __attribute__((always_inline)) float ggml_dot(const gdng_build *b, const float *x,
                                                           const float *y, int64_t n) {
    float acc[64];
    const int step = 4 * b->lanes;
    const int64_t np = n - n % step;
    for (int l = 0; l < step; ++l) {
        acc[l] = 0.0f;
    }
    for (int64_t i = 0; i < np; i += step) {
        for (int l = 0; l < step; ++l) {
            acc[l] = fmaf(x[i + l], y[i + l], acc[l]);
        }
    }
    return dot_finish(b, acc, x, y, np, n);
}

/* What row_lanes_avx2 does to each element of the row before its dot reads it. */
enum { ROW_READ, ROW_DECAY, ROW_UPDATE };

/* The dot's first np elements (np % 4w == 0) of x against y in `regs` = 4w / 8 registers
 * (with w = 16 register 2j holds lanes 0-7 of A_j and 2j + 1 lanes 8-15; with w = 8
 * register j is A_j), returning its eight halved lanes: v = (A0 + A2) + (A1 + A3) lane by
 * lane, with w = 16 already halved once (lanes 8-15 added to 0-7).  ROW_DECAY stores
 * x[i] * c and ROW_UPDATE fmaf(k[i], c, x[i]) into `row` (x itself) first, and the dot reads
 * that: each element is loaded once for its update and its dot. */
static inline __attribute__((target("avx2,fma"), always_inline)) __m256
row_lanes_avx2(const float *x, float *row, const int mode, const float *k, float c,
               const float *y, int64_t np, const int regs) {
    const __m256 cv = _mm256_set1_ps(c);
    __m256 r[8];
#pragma GCC unroll 8
    for (int j = 0; j < regs; ++j) {
        r[j] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < np; i += 8 * regs) {
#pragma GCC unroll 8
        for (int j = 0; j < regs; ++j) {
            __m256 e = _mm256_loadu_ps(x + i + 8 * j);
            if (mode != ROW_READ) {
                e = mode == ROW_DECAY ? _mm256_mul_ps(e, cv)
                                      : _mm256_fmadd_ps(_mm256_loadu_ps(k + i + 8 * j), cv, e);
                _mm256_storeu_ps(row + i + 8 * j, e);
            }
            r[j] = _mm256_fmadd_ps(e, _mm256_loadu_ps(y + i + 8 * j), r[j]);
        }
    }
    if (regs == 8) {
        const __m256 lo = _mm256_add_ps(_mm256_add_ps(r[0], r[4]), _mm256_add_ps(r[2], r[6]));
        const __m256 hi = _mm256_add_ps(_mm256_add_ps(r[1], r[5]), _mm256_add_ps(r[3], r[7]));
        return _mm256_add_ps(hi, lo);
    }
    return _mm256_add_ps(_mm256_add_ps(r[0], r[2]), _mm256_add_ps(r[1], r[3]));
}

static inline __attribute__((target("avx2,fma"), always_inline)) float
dot_lanes_avx2(const gdng_build *b, const int regs, const float *x, const float *y, int64_t n) {
    const int64_t np = n - n % (8 * regs);
    const __m256 v8 = row_lanes_avx2(x, NULL, ROW_READ, NULL, 0.0f, y, np, regs);
    float v[4]; /* halved down to four lanes */
    _mm_storeu_ps(v, _mm_add_ps(_mm256_extractf128_ps(v8, 1), _mm256_castps256_ps128(v8)));
    return dot_fold_tail(b, v, x, y, np, n);
}

/* ggml_dot with the 4w accumulator lanes in 4w / 8 AVX2 registers (lane l of register k is
 * acc[8k + l]) and the lane folds done on the registers: every lane's fmaf and every add
 * of the oracle's tree, the same values. */
static inline __attribute__((target("avx2,fma"))) float ggml_dot_avx2(const gdng_build *b,
                                                                       const float *x,
                                                                       const float *y,
                                                                       int64_t n) {
    /* 4w lanes: 8 registers for the 16-lane builds, 4 for the 8-lane one */
    return b->lanes == 16 ? dot_lanes_avx2(b, 8, x, y, n) : dot_lanes_avx2(b, 4, x, y, n);
}

/* The lane folds of eight rows at once from their eight halved lanes, lane r of the result
 * row r's dot (no tail): u_l = v_{l+4} + v_l (the high half added to the low one, two rows
 * per register), then the build's fold of u by two HADDPS over the four such registers;
 * for the (0 + 2) + (1 + 3) fold each row's u is first ordered 0 2 1 3.  The HADDPS leave
 * the rows in lanes 0 2 4 6 1 3 5 7.  Every add is one of dot_finish's, on the same values,
 * where row by row each dot's short chain of dependent folds ran alone. */
static inline __attribute__((target("avx2,fma"), always_inline)) __m256
fold_rows8_avx2(const gdng_build *b, const __m256 v[8]) {
    __m256 u[4];
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
        u[p] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * p], v[2 * p + 1], 0x31),
                             _mm256_permute2f128_ps(v[2 * p], v[2 * p + 1], 0x20));
        if (!b->hadd_fold) {
            u[p] = _mm256_permute_ps(u[p], 0xD8);
        }
    }
    const __m256 sums = _mm256_hadd_ps(_mm256_hadd_ps(u[0], u[1]), _mm256_hadd_ps(u[2], u[3]));
    return _mm256_permutevar8x32_ps(sums, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* The 8 x 4 block at x (rows stride apart) as its four columns: lane r of col[c] is
 * x[r * stride + c].  Rows r and r + 4 share a register (one 16-byte load each half), so the
 * transpose is two unpack levels and no cross-lane shuffle. */
static inline __attribute__((target("avx2,fma"), always_inline)) void
columns4_avx2(const float *x, int64_t stride, __m256 *col) {
    __m256 t[4];
    for (int r = 0; r < 4; ++r) {
        t[r] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(x + r * stride)),
                                    _mm_loadu_ps(x + (r + 4) * stride), 1);
    }
    const __m256 lo01 = _mm256_unpacklo_ps(t[0], t[1]); /* r0c0 r1c0 r0c1 r1c1 | r4.. r5.. */
    const __m256 lo23 = _mm256_unpacklo_ps(t[2], t[3]);
    const __m256 hi01 = _mm256_unpackhi_ps(t[0], t[1]); /* columns 2 and 3 alike */
    const __m256 hi23 = _mm256_unpackhi_ps(t[2], t[3]);
    col[0] = _mm256_shuffle_ps(lo01, lo23, 0x44);
    col[1] = _mm256_shuffle_ps(lo01, lo23, 0xEE);
    col[2] = _mm256_shuffle_ps(hi01, hi23, 0x44);
    col[3] = _mm256_shuffle_ps(hi01, hi23, 0xEE);
}

/* ggml_dot of a short head's rows (n < 4w: no accumulator body, all tail) against y for
 * `blocks` blocks of eight rows x + r * stride, lane r of sum[k] carrying row 8k + r through
 * exactly ggml_dot's sequence: the folded lanes are all +0, then the tail, s = s + x*y with
 * the product rounded up to n - n % tail_block, fused after.  The rows are independent, so
 * 8 * blocks dots run at once instead of one latency-bound chain after another.  Whole
 * eight-column steps read two 8 x 4 blocks and transpose them (each such step ends at a
 * multiple of 8 <= n, so inside the rounded part); the last n % 8 columns are gathered. */
static inline __attribute__((target("avx2,fma"), always_inline)) void
tail_rows_avx2(const gdng_build *b, const float *x, int64_t stride, const float *y, int64_t n,
               const int blocks, __m256 *sum) {
    const __m256i rows = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                            _mm256_set1_epi32((int)stride));
    for (int k = 0; k < blocks; ++k) {
        sum[k] = _mm256_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 col[2][8];
        for (int k = 0; k < blocks; ++k) {
            columns4_avx2(x + 8 * k * stride + i, stride, col[k]);
            columns4_avx2(x + 8 * k * stride + i + 4, stride, col[k] + 4);
        }
        for (int c = 0; c < 8; ++c) {
            const __m256 yc = _mm256_set1_ps(y[i + c]);
            for (int k = 0; k < blocks; ++k) {
                sum[k] = _mm256_add_ps(sum[k], _mm256_mul_ps(col[k][c], yc));
            }
        }
    }
    const int64_t rounded_end = n - n % b->tail_block;
    for (; i < n; ++i) {
        const __m256 yi = _mm256_set1_ps(y[i]);
        for (int k = 0; k < blocks; ++k) {
            const __m256 xi = _mm256_i32gather_ps(x + 8 * k * stride + i, rows, 4);
            sum[k] = i < rounded_end ? _mm256_add_ps(sum[k], _mm256_mul_ps(xi, yi))
                                     : _mm256_fmadd_ps(xi, yi, sum[k]);
        }
    }
}

/* out[j] = ggml_dot(S row j, y) for the d rows of a d x d state.  A head narrower than the
 * dot's 4w accumulator lanes is all tail, and its rows go 16 or 8 at a time; a wider one
 * has a vector body, and row by row its 4w lanes are plain loads where a many-row form would
 * gather every element (d = 128, 64 tokens, 4 heads: 3.2 -> 1.6 ms for either build; Intel
 * Xeon).  The short heads' eight-row blocks once gathered every element: at d = 32 the
 * 16-lane build's dots took 19% of the small Qwen3.5 model's 64-token prefill on AMD EPYC
 * (Zen 4), the 8-lane build's row form 4%; transposed loads, two blocks at a time, 8%. */
static inline __attribute__((target("avx2,fma"))) void state_dots_avx2(const gdng_build *b,
                                                                         const float *S,
                                                                         const float *y, int64_t d,
                                                                         float *out) {
    int64_t j = 0;
    if (d < 4 * b->lanes) {
        __m256 sum[2];
        for (; j + 16 <= d; j += 16) {
            tail_rows_avx2(b, S + j * d, d, y, d, 2, sum);
            for (int k = 0; k < 2; ++k) {
                _mm256_storeu_ps(out + j + 8 * k, sum[k]);
            }
        }
        for (; j + 8 <= d; j += 8) {
            tail_rows_avx2(b, S + j * d, d, y, d, 1, sum);
            _mm256_storeu_ps(out + j, sum[0]);
        }
    }
    for (; j < d; ++j) {
        out[j] = ggml_dot_avx2(b, S + j * d, y, d);
    }
}

/* row[i] = fmaf(k[i], delta, row[i]) and row[i] = row[i] * decay, eight lanes at a time. */
static inline __attribute__((target("avx2,fma"))) void axpy_avx2(float *row, const float *k,
                                                                  float delta, int64_t n) {
    const __m256 dv = _mm256_set1_ps(delta);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(row + i, _mm256_fmadd_ps(_mm256_loadu_ps(k + i), dv,
                                                  _mm256_loadu_ps(row + i)));
    }
    for (; i < n; ++i) {
        row[i] = fmaf(k[i], delta, row[i]);
    }
}

static inline __attribute__((target("avx2,fma"))) void scale_avx2(float *x, float c, int64_t n) {
    const __m256 cv = _mm256_set1_ps(c);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), cv));
    }
    for (; i < n; ++i) {
        x[i] = x[i] * c;
    }
}

/* The state's steps of n tokens when d is a whole number of the dot's 4w-lane steps, rows
 * first: for eight rows at a time, token by token, decay and k dots, then the rows' deltas
 * (v - dot) * b, then update and q dots.  Token i's rows k, q, v and out (its q dots) are
 * d apart, its b and decay scalars.  Row j's values depend on row j and the tokens alone, so
 * these are the token-by-token passes' operations on the same values; the eight rows stay
 * in L1 over the tokens, where token by token the whole d x d state (64 KiB at d = 128)
 * went through L2 twice per token. */
static inline __attribute__((target("avx2,fma"))) void
state_steps_avx2(const gdng_build *bd, float *S, const float *k, const float *q, const float *v,
                 const float *b, const float *decay, int64_t d, int64_t n, float *out) {
    const int regs = bd->lanes / 2; /* the dot's 4w lanes in 8-lane registers */
    for (int64_t j = 0; j < d; j += 8) {
        for (int64_t i = 0; i < n; ++i) {
            const float *ki = k + i * d, *qi = q + i * d;
            __m256 lanes[8];
            float delta[8];
#pragma GCC unroll 8
            for (int r = 0; r < 8; ++r) {
                float *row = S + (j + r) * d;
                lanes[r] = regs == 8 ? row_lanes_avx2(row, row, ROW_DECAY, ki, decay[i], ki, d, 8)
                                     : row_lanes_avx2(row, row, ROW_DECAY, ki, decay[i], ki, d, 4);
            }
            const __m256 diff = _mm256_sub_ps(_mm256_loadu_ps(v + i * d + j),
                                              fold_rows8_avx2(bd, lanes));
            _mm256_storeu_ps(delta, _mm256_mul_ps(diff, _mm256_set1_ps(b[i])));
#pragma GCC unroll 8
            for (int r = 0; r < 8; ++r) {
                float *row = S + (j + r) * d;
                lanes[r] = regs == 8 ? row_lanes_avx2(row, row, ROW_UPDATE, ki, delta[r], qi, d, 8)
                                     : row_lanes_avx2(row, row, ROW_UPDATE, ki, delta[r], qi, d, 4);
            }
            _mm256_storeu_ps(out + i * d + j, fold_rows8_avx2(bd, lanes));
        }
    }
}

/* ggml_rms_norm: fp64 ascending sum of fp32 squares, mean rounded to fp32, the factor
 * 1 / sqrtf(mean + eps); returns that factor. */
static float rms_factor(const float *x, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const float sq = x[i] * x[i];
        sum += (double)sq;
    }
    const float mean = (float)(sum / (double)n);
    return 1.0f / sqrtf(mean + eps);
}

/* ---- the chain -------------------------------------------------------------------- */

static inline float conv_input(const gdng_args *a, int64_t t, int64_t m, int64_t c) {
    const int64_t u = t + m;
    if (u < a->kernel - 1) {
        return a->conv_state[c * (a->kernel - 1) + u];
    }
    return a->qkv[(u - (a->kernel - 1)) * a->channels + c];
}

/* SSM_CONV then SILU of channel c (position c of the row of all channels) at token t. */
static inline __attribute__((always_inline)) float conv_silu_one(const gdng_args *a, int64_t t,
                                                                int64_t c) {
    const float *w = a->conv_w + c * a->kernel;
    float acc;
    if (a->build->conv_rounded_taps) {
        acc = 0.0f;
        for (int64_t m = 0; m < a->kernel; ++m) {
            const float p = conv_input(a, t, m, c) * w[m];
            acc = acc + p;
        }
    } else {
        acc = conv_input(a, t, 0, c) * w[0];
        for (int64_t m = 1; m < a->kernel; ++m) {
            acc = fmaf(conv_input(a, t, m, c), w[m], acc);
        }
    }
    return silu_at(a->build, acc, c, a->channels);
}

/* The same for channels [c0, c0 + n) of token t. */
static inline __attribute__((always_inline)) void conv_silu(const gdng_args *a, int64_t t, int64_t c0,
                                                           int64_t n, float *out) {
    for (int64_t i = 0; i < n; ++i) {
        out[i] = conv_silu_one(a, t, c0 + i);
    }
}

/* silu_at of eight lanes inside a row's vector blocks, in the build's exp form. */
static inline __attribute__((target("avx2,fma"), always_inline)) __m256
silu8_avx2(const gdng_build *b, __m256 x) {
    return vsilu8(x, b->vexp == vexp_lane_avx512);
}

/* conv_silu_one of channels c..c+7, lane l carrying channel c + l through the same taps:
 * the 4-tap kernel's weights (8 x 4 contiguous) transposed into one register per tap, the
 * conv state's entries gathered across channels, the inputs past the state one contiguous
 * load. */
static inline __attribute__((target("avx2,fma"), always_inline)) __m256
conv_silu8_avx2(const gdng_args *a, int64_t t, int64_t c) {
    const __m256i states = _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21); /* kernel == 4 */
    __m256 w[4];
    columns4_avx2(a->conv_w + c * 4, 4, w);
    __m256 acc = _mm256_setzero_ps();
    for (int m = 0; m < 4; ++m) {
        const int64_t u = t + m;
        const __m256 in = u < 3 ? _mm256_i32gather_ps(a->conv_state + c * 3 + u, states, 4)
                                : _mm256_loadu_ps(a->qkv + (u - 3) * a->channels + c);
        if (a->build->conv_rounded_taps) {
            acc = _mm256_add_ps(acc, _mm256_mul_ps(in, w[m]));   /* from +0, as the oracle */
        } else {
            acc = m == 0 ? _mm256_mul_ps(in, w[m]) : _mm256_fmadd_ps(in, w[m], acc);
        }
    }
    return silu8_avx2(a->build, acc);
}

/* conv_silu with whole blocks of eight inside the row's vector part in registers. */
static __attribute__((target("avx2,fma"))) void
conv_silu_avx2(const gdng_args *a, int64_t t, int64_t c0, int64_t n, float *out) {
    const int64_t vector_end = a->channels - a->channels % a->build->lanes;
    int64_t i = 0;
    for (; i + 8 <= n && c0 + i + 8 <= vector_end; i += 8) {
        _mm256_storeu_ps(out + i, conv_silu8_avx2(a, t, c0 + i));
    }
    for (; i < n; ++i) {
        out[i] = conv_silu_one(a, t, c0 + i);
    }
}

/* Element j of the head's output: rms-normed o times norm_w, gated by silu(z) (a row of d). */
static inline __attribute__((always_inline)) float gated_output_one(const gdng_build *b,
                                                                   const float *o, float r,
                                                                   const float *norm_w,
                                                                   const float *zr, int64_t j,
                                                                   int64_t d) {
    const float on = o[j] * r;
    const float normed = on * norm_w[j];
    return normed * silu_at(b, zr[j], j, d);
}

/* gated_output_one for a whole row, eight lanes at a time inside the row's vector part. */
static __attribute__((target("avx2,fma"))) void
gate_output_avx2(const gdng_build *b, const float *o, float r, const float *norm_w,
                 const float *zr, int64_t d, float *yr) {
    const int64_t vector_end = d - d % b->lanes;
    int64_t j = 0;
    for (; j + 8 <= vector_end; j += 8) {
        const __m256 normed = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(o + j), _mm256_set1_ps(r)),
                                            _mm256_loadu_ps(norm_w + j));
        _mm256_storeu_ps(yr + j, _mm256_mul_ps(normed, silu8_avx2(b, _mm256_loadu_ps(zr + j))));
    }
    for (; j < d; ++j) {
        yr[j] = gated_output_one(b, o, r, norm_w, zr, j, d);
    }
}

/* llama.cpp's l2 norm of a head: RMS_NORM with eps / n, then SCALE by 1 / sqrtf(n). */
static void l2_normalize(float *x, int64_t n, float eps) {
    const float nf = (float)n;
    const float r = rms_factor(x, n, eps / nf);
    const float s = 1.0f / sqrtf(nf);
    for (int64_t i = 0; i < n; ++i) {
        const float xr = x[i] * r;
        x[i] = xr * s;
    }
}

/* conv_silu of channels [c0, c0 + n) of token t, by the AVX2 walk where `simd`. */
static inline __attribute__((always_inline)) void conv_silu_rows(const gdng_args *a, int64_t t,
                                                                int64_t c0, int64_t n,
                                                                float *out, const int simd) {
    if (simd) {
        conv_silu_avx2(a, t, c0, n, out);
    } else {
        conv_silu(a, t, c0, n, out);
    }
}

/* Token t's query and key rows of key head kh: conv, SiLU and the l2 norm. */
static inline __attribute__((always_inline)) void token_keys(const gdng_args *a, int64_t t,
                                                            int64_t kh, const int simd, float *q,
                                                            float *k) {
    const int64_t d = a->dk;
    const int64_t key_width = a->n_k_heads * d;
    conv_silu_rows(a, t, kh * d, d, q, simd);
    conv_silu_rows(a, t, key_width + kh * d, d, k, simd);
    l2_normalize(q, d, a->eps);
    l2_normalize(k, d, a->eps);
}

/* Value head h's gate b and decay at token t (llama.cpp's SIGMOID of beta, and exp of
 * SOFTPLUS(alpha + dt_bias) * ssm_a). */
static inline __attribute__((always_inline)) void head_gates(const gdng_args *a, int64_t t,
                                                            int64_t h, float *b, float *decay) {
    *b = 1.0f / (1.0f + expf(-a->beta[t * a->n_v_heads + h]));
    const float pre = a->alpha[t * a->n_v_heads + h] + a->dt_bias[h];
    const float sp = (pre > 20.0f) ? pre : logf(1.0f + expf(pre));
    const float g = sp * a->ssm_a[h];
    *decay = expf(g);
}

/* Value head h's output row at token t from its state's q dots: scaled, rms-normed, times
 * norm_w, gated by silu(z). */
static inline __attribute__((always_inline)) void head_output(const gdng_args *a, int64_t t,
                                                             int64_t h, const float *dots,
                                                             const int simd) {
    float o[V8_GDN_MAX_HEAD_DIM];
    const int64_t d = a->dv;
    const float scale = 1.0f / sqrtf((float)d);
    for (int64_t j = 0; j < d; ++j) {
        o[j] = dots[j] * scale;
    }
    const float r = rms_factor(o, d, a->eps);
    const float *zr = a->z + t * a->n_v_heads * d + h * d;
    float *yr = a->y + t * a->n_v_heads * d + h * d;
    if (simd) {
        gate_output_avx2(a->build, o, r, a->norm_w, zr, d, yr);
        return;
    }
    for (int64_t j = 0; j < d; ++j) {
        yr[j] = gated_output_one(a->build, o, r, a->norm_w, zr, j, d);
    }
}

/* Value head h's v row at token t: conv and SiLU of its channels, after the q and k ones. */
static inline __attribute__((always_inline)) void head_values(const gdng_args *a, int64_t t,
                                                             int64_t h, const int simd,
                                                             float *v) {
    const int64_t d = a->dv;
    conv_silu_rows(a, t, 2 * a->n_k_heads * d + h * d, d, v, simd);
}

/* Whether the AVX2 walk takes the state eight rows at a time (state_steps_avx2): d a whole
 * number of the dot's 4w-lane steps. */
static int rows_in_blocks(const gdng_args *a) {
    return a->dk % (4 * a->build->lanes) == 0;
}

/* Token t through value head h, whose key head's rows q and k token_keys made. */
static inline __attribute__((always_inline)) void token_head(const gdng_args *a, int64_t t,
                                                            int64_t h, const float *q,
                                                            const float *k, const int simd) {
    float v[V8_GDN_MAX_HEAD_DIM], dots[V8_GDN_MAX_HEAD_DIM];
    const int64_t d = a->dv; /* = dk */
    head_values(a, t, h, simd, v);
    float b, decay;
    head_gates(a, t, h, &b, &decay);

    float *S = a->ssm_state + h * d * d;
    if (simd) { /* the same steps: row j's dots read row j alone, so all rows' k dots may come
                 * first, then the updates, then the q dots (where rows_in_blocks, the AVX2
                 * walk is key_slice_chunks_avx2 instead) */
        scale_avx2(S, decay, d * d);
        state_dots_avx2(a->build, S, k, d, dots);
        for (int64_t j = 0; j < d; ++j) {
            const float diff = v[j] - dots[j];
            const float delta = diff * b;
            axpy_avx2(S + j * d, k, delta, d);
        }
        state_dots_avx2(a->build, S, q, d, dots);
    } else {
        for (int64_t e = 0; e < d * d; ++e) {
            S[e] = S[e] * decay;
        }
        for (int64_t j = 0; j < d; ++j) {
            float *row = S + j * d;
            const float diff = v[j] - ggml_dot(a->build, row, k, d);
            const float delta = diff * b;
            for (int64_t i = 0; i < d; ++i) {
                row[i] = fmaf(k[i], delta, row[i]);
            }
        }
        for (int64_t j = 0; j < d; ++j) {
            dots[j] = ggml_dot(a->build, S + j * d, q, d);
        }
    }
    head_output(a, t, h, dots, simd);
}

static void shift_conv_state(const gdng_args *a) {
    const int64_t keep = a->kernel - 1;
    for (int64_t c = 0; c < a->channels; ++c) {
        float *st = a->conv_state + c * keep;
        for (int64_t m = 0; m < keep; ++m) {
            st[m] = conv_input(a, a->n_tokens, m, c); /* reads only entries not yet written */
        }
    }
}

static v8_status prepare(int contract, gdng_args *a, float *y, const float *qkv, const float *z,
                         const float *alpha, const float *beta, const float *conv_w,
                         const float *ssm_a, const float *dt_bias, const float *norm_w,
                         float *conv_state, float *ssm_state, int64_t n_tokens,
                         int64_t n_k_heads, int64_t n_v_heads, int64_t head_k_dim,
                         int64_t head_v_dim, int64_t conv_kernel, float eps) {
    const gdng_build *build = NULL;
    if (contract == V8_GATED_DELTA_RULE_FP32_GGML_16_LANE_CHAIN) {
        build = &BUILD_AVX512;
    } else if (contract == V8_GATED_DELTA_RULE_FP32_GGML_8_LANE_CHAIN) {
        build = &BUILD_AVX2;
    } else if (contract == V8_GATED_DELTA_RULE_FP32_GGML_16_LANE_CHAIN_4_LANE_TAILS) {
        build = &BUILD_AVX512_4_LANE_TAILS;
    }
    V8_REQUIRE(build != NULL, V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && qkv != NULL && z != NULL && alpha != NULL && beta != NULL &&
                   conv_w != NULL && ssm_a != NULL && dt_bias != NULL && norm_w != NULL &&
                   conv_state != NULL && ssm_state != NULL,
               V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(n_tokens >= 1 && n_k_heads >= 1 && n_v_heads >= 1, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(n_v_heads <= (int64_t)1 << 20 && n_k_heads <= (int64_t)1 << 20,
               V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(n_v_heads % n_k_heads == 0, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(head_k_dim >= 1 && head_k_dim <= V8_GDN_MAX_HEAD_DIM, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(head_v_dim == head_k_dim, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(conv_kernel == 4, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(eps >= 0.0f && eps <= FLT_MAX, V8_ERR_BAD_DIMENSION);
    const int64_t channels = 2 * n_k_heads * head_k_dim + n_v_heads * head_v_dim;
    V8_REQUIRE(v8_ops_product_ok(n_tokens, channels), V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(v8_ops_product_ok(n_v_heads * head_v_dim, head_k_dim), V8_ERR_BAD_DIMENSION);
    a->build = build;
    a->y = y;
    a->qkv = qkv;
    a->z = z;
    a->alpha = alpha;
    a->beta = beta;
    a->conv_w = conv_w;
    a->ssm_a = ssm_a;
    a->dt_bias = dt_bias;
    a->norm_w = norm_w;
    a->conv_state = conv_state;
    a->ssm_state = ssm_state;
    a->n_tokens = n_tokens;
    a->n_k_heads = n_k_heads;
    a->n_v_heads = n_v_heads;
    a->dk = head_k_dim;
    a->dv = head_v_dim;
    a->kernel = conv_kernel;
    a->channels = channels;
    a->eps = eps;
    return V8_OK;
}

#define GDNG_PARAMS                                                                         \
    int contract, float *y, const float *qkv, const float *z, const float *alpha,           \
        const float *beta, const float *conv_w, const float *ssm_a, const float *dt_bias,   \
        const float *norm_w, float *conv_state, float *ssm_state, int64_t n_tokens,         \
        int64_t n_k_heads, int64_t n_v_heads, int64_t head_k_dim, int64_t head_v_dim,      \
        int64_t conv_kernel, float eps
#define GDNG_ARGS                                                                           \
    contract, &a, y, qkv, z, alpha, beta, conv_w, ssm_a, dt_bias, norm_w, conv_state,       \
        ssm_state, n_tokens, n_k_heads, n_v_heads, head_k_dim, head_v_dim, conv_kernel, eps

v8_status v8_gated_delta_net_ggml_f32_ref(GDNG_PARAMS) {
    gdng_args a;
    v8_status st = prepare(GDNG_ARGS);
    if (st != V8_OK) {
        return st;
    }
    for (int64_t t = 0; t < a.n_tokens; ++t) {
        for (int64_t h = 0; h < a.n_v_heads; ++h) {
            float q[V8_GDN_MAX_HEAD_DIM], k[V8_GDN_MAX_HEAD_DIM];
            token_keys(&a, t, h % a.n_k_heads, 0, q, k);
            token_head(&a, t, h, q, k, 0);
        }
    }
    shift_conv_state(&a);
    return V8_OK;
}

/* Slice [j0, j1) of key head kh's value heads (value head h reads key head h % n_k_heads,
 * so the slice is heads kh + j * n_k_heads): each token's query and key rows are made once
 * for the slice, not once per value head (the small Qwen3.5 model's 4 value heads per key
 * head ran its conv and SiLU 3 times too often).  A head's tokens stay in order; heads are
 * independent. */
static inline __attribute__((always_inline)) void key_slice_body(const gdng_args *a, int64_t kh,
                                                                int64_t j0, int64_t j1,
                                                                const int simd) {
    for (int64_t t = 0; t < a->n_tokens; ++t) {
        float q[V8_GDN_MAX_HEAD_DIM], k[V8_GDN_MAX_HEAD_DIM];
        token_keys(a, t, kh, simd, q, k);
        for (int64_t j = j0; j < j1; ++j) {
            token_head(a, t, kh + j * a->n_k_heads, q, k, simd);
        }
    }
}

/* Tokens per chunk of the rows-first walk: its q, k, v and dot rows of a chunk take
 * CHUNK_FLOATS floats each (on the stack), at most CHUNK_TOKENS tokens. */
#define CHUNK_FLOATS 4096
#define CHUNK_TOKENS 64

/* key_slice_body where rows_in_blocks: tokens in chunks, each chunk's query and key rows
 * made first (token_keys), then per value head its v rows and gates, the state's steps rows
 * first over the chunk (state_steps_avx2), and the outputs token by token.  Every value is
 * the token-by-token walk's. */
static inline __attribute__((target("avx2,fma"), always_inline)) void
key_slice_chunks_avx2(const gdng_args *a, int64_t kh, int64_t j0, int64_t j1) {
    float q[CHUNK_FLOATS], k[CHUNK_FLOATS], v[CHUNK_FLOATS], dots[CHUNK_FLOATS];
    float b[CHUNK_TOKENS], decay[CHUNK_TOKENS];
    const int64_t d = a->dk;
    const int64_t per = CHUNK_FLOATS / d < CHUNK_TOKENS ? CHUNK_FLOATS / d : CHUNK_TOKENS;
    for (int64_t t0 = 0; t0 < a->n_tokens; t0 += per) {
        const int64_t n = a->n_tokens - t0 < per ? a->n_tokens - t0 : per;
        for (int64_t i = 0; i < n; ++i) {
            token_keys(a, t0 + i, kh, 1, q + i * d, k + i * d);
        }
        for (int64_t j = j0; j < j1; ++j) {
            const int64_t h = kh + j * a->n_k_heads;
            for (int64_t i = 0; i < n; ++i) {
                head_values(a, t0 + i, h, 1, v + i * d);
                head_gates(a, t0 + i, h, &b[i], &decay[i]);
            }
            state_steps_avx2(a->build, a->ssm_state + h * d * d, k, q, v, b, decay, d, n, dots);
            for (int64_t i = 0; i < n; ++i) {
                head_output(a, t0 + i, h, dots + i * d, 1);
            }
        }
    }
}

/* The same walk compiled for AVX2 and FMA: each fmaf of the chain is one instruction instead
 * of a call into libm (fmaf is exactly rounded either way), and GCC may carry the emulated
 * lanes in vector registers, every lane's operations unchanged (contraction stays off).  The
 * 4-layer qwen35 test model's 64-token prefill, 1 thread, AMD EPYC: 2.3-2.5k -> 3.9-4.5k tok/s. */
__attribute__((target("avx2,fma"))) static void key_slice_avx2_fma(const gdng_args *a, int64_t kh,
                                                                    int64_t j0, int64_t j1) {
    if (rows_in_blocks(a)) {
        key_slice_chunks_avx2(a, kh, j0, j1);
        return;
    }
    key_slice_body(a, kh, j0, j1, 1);
}

static void key_slice(const gdng_args *a, int64_t kh, int64_t j0, int64_t j1) {
    const unsigned f = v8_cpu_features();
    if ((f & V8_CPU_AVX2) && (f & V8_CPU_FMA)) {
        key_slice_avx2_fma(a, kh, j0, j1);
    } else {
        key_slice_body(a, kh, j0, j1, 0);
    }
}

static int64_t value_heads_per_key(const gdng_args *a) {
    return a->n_v_heads / a->n_k_heads;
}

v8_status v8_gated_delta_net_ggml_f32(GDNG_PARAMS) {
    gdng_args a;
    v8_status st = prepare(GDNG_ARGS);
    if (st != V8_OK) {
        return st;
    }
    for (int64_t kh = 0; kh < a.n_k_heads; ++kh) {
        key_slice(&a, kh, 0, value_heads_per_key(&a));
    }
    shift_conv_state(&a);
    return V8_OK;
}

/* A task is a slice of one key head's value heads, never value heads of two key heads, so
 * no task makes a key head's rows another task makes too: with one value head per task the
 * small Qwen3.5 model's layer (2 key heads, 8 value heads, d 32, 64 tokens) made them 4x
 * over at 2 workers and 2x at 1.  AMD EPYC (Zen 4), that layer, best of 200 calls, old /
 * this split: 1 worker 290 / 224-230 us (223 without a pool), 2 workers 148-150 / 129-137
 * us; 16 key and 32 value heads of d 128: 9.6 / 9.2 ms and 4.9 / 4.6 ms.  A key head is
 * sliced only while there are fewer key heads than workers. */
typedef struct gdng_job {
    gdng_args args;
    v8_ops_chunks slices; /* of one key head's value heads */
} gdng_job;

static void key_slice_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const gdng_job *job = (const gdng_job *)ctx;
    int64_t j0, j1;
    v8_ops_chunk_range(&job->slices, task % job->slices.n_tasks, &j0, &j1);
    key_slice(&job->args, task / job->slices.n_tasks, j0, j1);
}

v8_status v8_gated_delta_net_ggml_f32_parallel_dispatch(v8_threadpool *pool, GDNG_PARAMS) {
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    gdng_job job;
    gdng_args a;
    v8_status st = prepare(GDNG_ARGS);
    if (st != V8_OK) {
        return st;
    }
    job.args = a;
    const int64_t group = value_heads_per_key(&a);
    const int64_t workers = v8_threadpool_workers(pool);
    const int64_t slices = (workers + a.n_k_heads - 1) / a.n_k_heads; /* >= 1 */
    const int64_t per_slice = (group + slices - 1) / slices;
    job.slices = (v8_ops_chunks){group, per_slice, (group + per_slice - 1) / per_slice};
    st = v8_parallel_for(pool, a.n_k_heads * job.slices.n_tasks, key_slice_task, &job);
    if (st != V8_OK) {
        return st;
    }
    shift_conv_state(&a);
    return V8_OK;
}
