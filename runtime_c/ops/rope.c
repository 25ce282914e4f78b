/* RoPE (neox and normal pairs) and multi-section RoPE, contracts
 * rope_{neox,normal}_fp32_iterative_theta and
 * mrope_fp32_iterative_theta_sections and
 * imrope_fp32_iterative_theta_interleaved_sections (see ops/v8_ops.h).
 *
 * This is ggml's rope arithmetic in its plain case (freq_scale 1, no YaRN
 * ramp, attn_factor 1): the angle of pair i is built by multiplying the fp32
 * position by theta_scale i times, each product rounded, and cosf/sinf of
 * that angle rotate the pair with separately rounded products.  The
 * iteration is part of the contract: powf(theta_scale, i) would give other
 * angles. */
#include <math.h>
#include <string.h>

#include "ops/ops_internal.h"

typedef struct rope_args {
    int neox;             /* pair (i, i + n_rot/2) instead of (2i, 2i+1) */
    int fused;            /* ggml's compiled rotation: one product of each output fused */
    float *y;
    const float *x;
    const int32_t *pos;   /* [n_tokens], or [4][n_tokens] for mrope */
    int64_t n_tokens, n_head, head_dim, n_rot;
    float theta_scale;
    const int32_t *sections; /* NULL for plain rope */
    int interleaved;      /* imrope: streams interleaved t, h, w, t, h, w, ... */
} rope_args;

static v8_status check_rope(const float *y, const float *x, const int32_t *pos, int64_t n_tokens,
                            int64_t n_head, int64_t head_dim, int64_t n_rot, float freq_base) {
    V8_REQUIRE(y != NULL && x != NULL && pos != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(v8_ops_product_ok(n_tokens, n_head), V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(v8_ops_product_ok(n_tokens * n_head, head_dim), V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(n_rot >= 2 && n_rot % 2 == 0 && n_rot <= head_dim, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(freq_base > 0.0f && freq_base <= FLT_MAX, V8_ERR_BAD_DIMENSION);
    return V8_OK;
}

static float theta_scale_of(float freq_base, int64_t n_rot) {
    return powf(freq_base, -2.0f / (float)n_rot);
}

/* Pair i's two element offsets inside one head. */
static inline void pair_offsets(int neox, int64_t n_rot, int64_t i, int64_t *ia, int64_t *ib) {
    if (neox) {
        *ia = i;
        *ib = i + n_rot / 2;
    } else {
        *ia = 2 * i;
        *ib = 2 * i + 1;
    }
}

static inline void rotate(float *y, const float *x, int64_t ia, int64_t ib, float c, float s) {
    const float x0 = x[ia];
    const float x1 = x[ib];
    const float p00 = x0 * c, p01 = x1 * s;
    const float p10 = x0 * s, p11 = x1 * c;
    y[ia] = p00 - p01;
    y[ib] = p10 + p11;
}

/* ggml's rotation as its native build compiles it, for both pair layouts: the products of
 * x[a] are fused, those of x[b] rounded first (y[a] = fma(x0, c, -(x1 s)),
 * y[b] = fma(x0, s, x1 c)). */
static inline void rotate_fused(float *y, const float *x, int64_t ia, int64_t ib, float c, float s) {
    const float x0 = x[ia];
    const float x1 = x[ib];
    const float x1s = x1 * s, x1c = x1 * c;
    y[ia] = fmaf(x0, c, -x1s);
    y[ib] = fmaf(x0, s, x1c);
}

static inline void rotate_pair(const rope_args *a, float *y, const float *x, int64_t ia,
                               int64_t ib, float c, float s) {
    if (a->fused) {
        rotate_fused(y, x, ia, ib, c, s);
    } else {
        rotate(y, x, ia, ib, c, s);
    }
}

static void copy_tail(float *y, const float *x, int64_t from, int64_t to) {
    if (y != x) {
        for (int64_t i = from; i < to; ++i) {
            y[i] = x[i];
        }
    }
}

/* The stream (0 t, 1 h, 2 w, 3 e) that pair i of an mrope head uses. */
static inline int mrope_stream(const int32_t *sections, int64_t i) {
    const int64_t total = (int64_t)sections[0] + sections[1] + sections[2] + sections[3];
    const int64_t sector = i % total;
    if (sector < sections[0]) return 0;
    if (sector < (int64_t)sections[0] + sections[1]) return 1;
    if (sector < (int64_t)sections[0] + sections[1] + sections[2]) return 2;
    return 3;
}

/* The stream pair i of an imrope head uses (ggml's GGML_ROPE_TYPE_IMROPE):
 * sector = i % S; h when sector % 3 == 1 and sector < 3*s1, else w when
 * sector % 3 == 2 and sector < 3*s2, else t when sector % 3 == 0 and
 * sector < 3*s0, else e (checked in this order). */
static inline int imrope_stream(const int32_t *sections, int64_t i) {
    const int64_t total = (int64_t)sections[0] + sections[1] + sections[2] + sections[3];
    const int64_t sector = i % total;
    if (sector % 3 == 1 && sector < 3 * (int64_t)sections[1]) return 1;
    if (sector % 3 == 2 && sector < 3 * (int64_t)sections[2]) return 2;
    if (sector % 3 == 0 && sector < 3 * (int64_t)sections[0]) return 0;
    return 3;
}

static inline int stream_of(const rope_args *a, int64_t i) {
    if (a->sections == NULL) return 0;
    return a->interleaved ? imrope_stream(a->sections, i) : mrope_stream(a->sections, i);
}

/* ---- oracle: every (token, head) row builds its own angles ---------------- */

static void rope_oracle(const rope_args *a) {
    for (int64_t t = 0; t < a->n_tokens; ++t) {
        for (int64_t h = 0; h < a->n_head; ++h) {
            const int64_t row = (t * a->n_head + h) * a->head_dim;
            const float *x = a->x + row;
            float *y = a->y + row;
            float theta[4];
            for (int s = 0; s < 4; ++s) {
                /* plain rope reads one stream; the others are never used */
                const int32_t *stream = a->sections != NULL ? a->pos + (int64_t)s * a->n_tokens
                                                            : a->pos;
                theta[s] = (float)stream[t];
            }
            for (int64_t i = 0; i < a->n_rot / 2; ++i) {
                int stream = stream_of(a, i);
                float c = cosf(theta[stream]);
                float s = sinf(theta[stream]);
                int64_t ia, ib;
                pair_offsets(a->neox, a->n_rot, i, &ia, &ib);
                rotate_pair(a, y, x, ia, ib, c, s);
                for (int k = 0; k < 4; ++k) {
                    theta[k] = theta[k] * a->theta_scale;
                }
            }
            copy_tail(y, x, a->n_rot, a->head_dim);
        }
    }
}

/* ---- production: angles once per token, applied to every head ------------- */

/* Pairs rotated per batch of precomputed angles (any n_rot: the batches follow
 * one another with the angle iteration carried across). */
#define ROPE_PAIRS 64

/* Pairs [i0, i0 + np) of every head of one token. */
static inline __attribute__((always_inline)) void rotate_heads_body(const rope_args *a, float *y,
                                                                   const float *x, int64_t i0,
                                                                   int64_t np, const float *c,
                                                                   const float *s) {
    for (int64_t h = 0; h < a->n_head; ++h) {
        for (int64_t i = 0; i < np; ++i) {
            int64_t ia, ib;
            pair_offsets(a->neox, a->n_rot, i0 + i, &ia, &ib);
            rotate_pair(a, y + h * a->head_dim, x + h * a->head_dim, ia, ib, c[i], s[i]);
        }
    }
}

/* The same loop compiled for FMA, so the fused rotation's fmaf is one instruction instead of
 * a call into libm (fmaf is exactly rounded either way). */
__attribute__((target("fma"))) static void rotate_heads_fma(const rope_args *a, float *y,
                                                              const float *x, int64_t i0,
                                                              int64_t np, const float *c,
                                                              const float *s) {
    rotate_heads_body(a, y, x, i0, np, c, s);
}

/* Neox pairs (i, i + n_rot/2) of one batch are two contiguous runs, so eight
 * pairs rotate per AVX2 step with the scalar forms' roundings lane by lane;
 * the fused form's -(x1 s) is x1 (-s), the same value (negation flips the
 * sign bit only, and rounding is symmetric), zeros' signs included. */
#define V8_SIMD_AVX2
#include "core/simd.h"

static void V8_SIMD_FN(rotate_heads_neox)(const rope_args *a, float *y, const float *x,
                                          int64_t i0, int64_t np, const float *c,
                                          const float *s) {
    const int64_t half = a->n_rot / 2, v_end = np - np % V8F_W;
    const v8f sign = v8f_set1(-0.0f);
    for (int64_t h = 0; h < a->n_head; ++h) {
        const float *xa = x + h * a->head_dim + i0, *xb = xa + half;
        float *ya = y + h * a->head_dim + i0, *yb = ya + half;
        for (int64_t i = 0; i < v_end; i += V8F_W) {
            const v8f x0 = v8f_load(xa + i), x1 = v8f_load(xb + i);
            const v8f cv = v8f_load(c + i), sv = v8f_load(s + i);
            if (a->fused) {
                const v8f x1ns = v8f_mul(x1, _mm256_xor_ps(sv, sign));
                v8f_store(ya + i, v8f_fma(x0, cv, x1ns));
                v8f_store(yb + i, v8f_fma(x0, sv, v8f_mul(x1, cv)));
            } else {
                v8f_store(ya + i, v8f_sub(v8f_mul(x0, cv), v8f_mul(x1, sv)));
                v8f_store(yb + i, v8f_add(v8f_mul(x0, sv), v8f_mul(x1, cv)));
            }
        }
        for (int64_t i = v_end; i < np; ++i) {
            rotate_pair(a, y + h * a->head_dim, x + h * a->head_dim, i0 + i, i0 + i + half,
                        c[i], s[i]);
        }
    }
}
#include "core/simd_end.h"

static void rotate_heads(const rope_args *a, float *y, const float *x, int64_t i0, int64_t np,
                         const float *c, const float *s) {
    const unsigned f = v8_cpu_features();
    if (a->neox && (f & V8_CPU_AVX2) && (f & V8_CPU_FMA)) {
        rotate_heads_neox_avx2(a, y, x, i0, np, c, s);
    } else if (a->fused && (f & V8_CPU_FMA)) {
        rotate_heads_fma(a, y, x, i0, np, c, s);
    } else {
        rotate_heads_body(a, y, x, i0, np, c, s);
    }
}

/* The cos and sin of pairs [i0, i0 + np)'s angles, theta holding pair i0's starting angles
 * and left at pair i0 + np's (ggml's iteration: each angle the previous one times
 * theta_scale, rounded). */
static void angle_tables(const rope_args *a, int64_t i0, int64_t np, float theta[4],
                         float *restrict c, float *restrict s) {
    for (int64_t i = 0; i < np; ++i) {
        /* one load of the angle, so the two calls are seen to share it and become one
         * sincosf (a store to c may not be assumed to leave theta alone otherwise).  Two
         * calls cost 40% of a small model's prefill only while kernels left the vector
         * registers' upper halves in use (each libm call then paid the SSE/VEX switch);
         * with them clear the two forms time alike. */
        const float angle = theta[stream_of(a, i0 + i)];
        c[i] = cosf(angle);
        s[i] = sinf(angle);
        for (int k = 0; k < 4; ++k) {
            theta[k] *= a->theta_scale;
        }
    }
}

/* One token's angle tables, kept per thread for the next call.  A decode step rotates q and
 * k of every layer at one position, and the cosf/sinf of the same angles, recomputed per
 * call, took about 1% of the step (Qwen3-0.6B shape, 56 calls per token, Intel Xeon, 1
 * thread).  The tables are a function of the key alone, so a hit gives the very bits the
 * computation would; heads with more than ROPE_CACHED_PAIRS pairs are not kept. */
#define ROPE_CACHED_PAIRS 256
typedef struct rope_table {
    int valid;
    float theta[4];      /* the starting angles: the token's positions */
    float theta_scale;
    int64_t n_pairs;
    int32_t sections[4]; /* all zero for plain rope */
    int interleaved;
    float c[ROPE_CACHED_PAIRS], s[ROPE_CACHED_PAIRS];
} rope_table;

static _Thread_local rope_table last_table;

static int same_key(const rope_table *t, const rope_args *a, const float theta[4],
                    const int32_t sections[4]) {
    return t->valid && memcmp(t->theta, theta, sizeof t->theta) == 0 &&
           t->theta_scale == a->theta_scale && t->n_pairs == a->n_rot / 2 &&
           memcmp(t->sections, sections, sizeof t->sections) == 0 &&
           t->interleaved == a->interleaved;
}

/* The tables for starting angles theta: the thread's last ones where the key matches. */
static const rope_table *token_tables(const rope_args *a, const float theta[4]) {
    int32_t sections[4] = {0, 0, 0, 0};
    if (a->sections != NULL) {
        memcpy(sections, a->sections, sizeof sections);
    }
    rope_table *t = &last_table;
    if (!same_key(t, a, theta, sections)) {
        t->valid = 0;
        memcpy(t->theta, theta, sizeof t->theta);
        t->theta_scale = a->theta_scale;
        t->n_pairs = a->n_rot / 2;
        memcpy(t->sections, sections, sizeof sections);
        t->interleaved = a->interleaved;
        float angles[4];
        memcpy(angles, theta, sizeof angles);
        angle_tables(a, 0, t->n_pairs, angles, t->c, t->s);
        t->valid = 1;
    }
    return t;
}

static void rope_tokens(const rope_args *a, int64_t t0, int64_t t1) {
    const int64_t hd = a->head_dim;
    const int64_t row_stride = a->n_head * hd;
    const int64_t n_pairs = a->n_rot / 2;
    for (int64_t t = t0; t < t1; ++t) {
        const float *x = a->x + t * row_stride;
        float *y = a->y + t * row_stride;
        float theta[4];
        if (a->sections != NULL) {
            for (int s = 0; s < 4; ++s) {
                theta[s] = (float)a->pos[(int64_t)s * a->n_tokens + t];
            }
        } else {
            theta[0] = theta[1] = theta[2] = theta[3] = (float)a->pos[t];
        }
        const rope_table *table = n_pairs <= ROPE_CACHED_PAIRS ? token_tables(a, theta) : NULL;
        for (int64_t i0 = 0; i0 < n_pairs; i0 += ROPE_PAIRS) {
            const int64_t left = n_pairs - i0;
            const int64_t np = left < ROPE_PAIRS ? left : ROPE_PAIRS;
            if (table != NULL) {
                rotate_heads(a, y, x, i0, np, table->c + i0, table->s + i0);
            } else { /* a long head: its angles batch by batch */
                float c[ROPE_PAIRS], s[ROPE_PAIRS];
                angle_tables(a, i0, np, theta, c, s);
                rotate_heads(a, y, x, i0, np, c, s);
            }
        }
        if (a->n_rot < hd) {
            for (int64_t h = 0; h < a->n_head; ++h) {
                copy_tail(y + h * hd, x + h * hd, a->n_rot, hd);
            }
        }
    }
}

typedef struct rope_job {
    rope_args args;
    v8_ops_chunks chunks;
} rope_job;

static void rope_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const rope_job *job = (const rope_job *)ctx;
    int64_t t0, t1;
    v8_ops_chunk_range(&job->chunks, task, &t0, &t1);
    rope_tokens(&job->args, t0, t1);
}

static v8_status rope_parallel(v8_threadpool *pool, const rope_args *a) {
    rope_job job;
    job.args = *a;
    int64_t per_token = a->n_head * a->head_dim;
    job.chunks = v8_ops_split(a->n_tokens, v8_threadpool_workers(pool), (int64_t)8192 / per_token);
    return v8_parallel_for(pool, job.chunks.n_tasks, rope_task, &job);
}

/* ---- plain RoPE ------------------------------------------------------------ */

static v8_status prepare_rope(int contract, rope_args *a, float *y, const float *x,
                              const int32_t *pos, int64_t n_tokens, int64_t n_head,
                              int64_t head_dim, int64_t n_rot, float freq_base) {
    V8_REQUIRE(contract == V8_ROPE_NEOX_FP32_ITERATIVE_THETA ||
                   contract == V8_ROPE_NORMAL_FP32_ITERATIVE_THETA ||
                   contract == V8_ROPE_NEOX_FP32_GGML_FMA || contract == V8_ROPE_NORMAL_FP32_GGML_FMA,
               V8_ERR_UNKNOWN_SELECTOR);
    v8_status st = check_rope(y, x, pos, n_tokens, n_head, head_dim, n_rot, freq_base);
    if (st != V8_OK) {
        return st;
    }
    a->neox = contract == V8_ROPE_NEOX_FP32_ITERATIVE_THETA || contract == V8_ROPE_NEOX_FP32_GGML_FMA;
    a->fused = contract == V8_ROPE_NEOX_FP32_GGML_FMA || contract == V8_ROPE_NORMAL_FP32_GGML_FMA;
    a->y = y;
    a->x = x;
    a->pos = pos;
    a->n_tokens = n_tokens;
    a->n_head = n_head;
    a->head_dim = head_dim;
    a->n_rot = n_rot;
    a->theta_scale = theta_scale_of(freq_base, n_rot);
    a->sections = NULL;
    a->interleaved = 0;
    return V8_OK;
}

v8_status v8_rope_f32_ref(int contract, float *y, const float *x, const int32_t *pos,
                          int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t n_rot,
                          float freq_base) {
    rope_args a;
    v8_status st = prepare_rope(contract, &a, y, x, pos, n_tokens, n_head, head_dim, n_rot,
                                freq_base);
    if (st != V8_OK) {
        return st;
    }
    rope_oracle(&a);
    return V8_OK;
}

v8_status v8_rope_f32(int contract, float *y, const float *x, const int32_t *pos,
                      int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t n_rot,
                      float freq_base) {
    rope_args a;
    v8_status st = prepare_rope(contract, &a, y, x, pos, n_tokens, n_head, head_dim, n_rot,
                                freq_base);
    if (st != V8_OK) {
        return st;
    }
    rope_tokens(&a, 0, n_tokens);
    return V8_OK;
}

v8_status v8_rope_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                        const float *x, const int32_t *pos, int64_t n_tokens,
                                        int64_t n_head, int64_t head_dim, int64_t n_rot,
                                        float freq_base) {
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    rope_args a;
    v8_status st = prepare_rope(contract, &a, y, x, pos, n_tokens, n_head, head_dim, n_rot,
                                freq_base);
    if (st != V8_OK) {
        return st;
    }
    return rope_parallel(pool, &a);
}

/* ---- multi-section RoPE ---------------------------------------------------- */

static v8_status prepare_mrope(int contract, rope_args *a, float *y, const float *x,
                               const int32_t *pos, int64_t n_tokens, int64_t n_head,
                               int64_t head_dim, int64_t n_rot, float freq_base,
                               const int32_t *sections) {
    V8_REQUIRE(contract == V8_MROPE_FP32_ITERATIVE_THETA_SECTIONS ||
                   contract == V8_IMROPE_FP32_ITERATIVE_THETA_INTERLEAVED_SECTIONS ||
                   contract == V8_IMROPE_FP32_GGML_FMA,
               V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(sections != NULL, V8_ERR_NULL_ARGUMENT);
    v8_status st = check_rope(y, x, pos, n_tokens, n_head, head_dim, n_rot, freq_base);
    if (st != V8_OK) {
        return st;
    }
    int64_t total = 0;
    for (int s = 0; s < 4; ++s) {
        V8_REQUIRE(sections[s] >= 0, V8_ERR_BAD_DIMENSION);
        total += sections[s];
    }
    /* ggml: at least one of t, h, w has a section, and they fit the head */
    V8_REQUIRE(sections[0] > 0 || sections[1] > 0 || sections[2] > 0, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(total <= head_dim, V8_ERR_BAD_DIMENSION);
    /* pos holds four streams of n_tokens */
    V8_REQUIRE(n_tokens <= V8_OPS_MAX_ELEMENTS / 4, V8_ERR_BAD_DIMENSION);
    a->neox = 1;
    a->y = y;
    a->x = x;
    a->pos = pos;
    a->n_tokens = n_tokens;
    a->n_head = n_head;
    a->head_dim = head_dim;
    a->n_rot = n_rot;
    a->theta_scale = theta_scale_of(freq_base, n_rot);
    a->sections = sections;
    a->interleaved = contract == V8_IMROPE_FP32_ITERATIVE_THETA_INTERLEAVED_SECTIONS ||
                     contract == V8_IMROPE_FP32_GGML_FMA;
    a->fused = contract == V8_IMROPE_FP32_GGML_FMA;
    return V8_OK;
}

/* The three entry points of both multi-section providers; `accepts` is the
 * provider's own selector, so each provider rejects the other's. */
static v8_status multi_run(int accepts, int mode, v8_threadpool *pool, int contract, float *y,
                           const float *x, const int32_t *pos, int64_t n_tokens, int64_t n_head,
                           int64_t head_dim, int64_t n_rot, float freq_base,
                           const int32_t *sections) {
    const int fused_variant = accepts == V8_IMROPE_FP32_ITERATIVE_THETA_INTERLEAVED_SECTIONS
                                  ? V8_IMROPE_FP32_GGML_FMA : accepts;
    V8_REQUIRE(contract == accepts || contract == fused_variant, V8_ERR_UNKNOWN_SELECTOR);
    rope_args a;
    v8_status st = prepare_mrope(contract, &a, y, x, pos, n_tokens, n_head, head_dim, n_rot,
                                 freq_base, sections);
    if (st != V8_OK) {
        return st;
    }
    if (mode == 0) {
        rope_oracle(&a);
        return V8_OK;
    }
    if (mode == 1) {
        rope_tokens(&a, 0, n_tokens);
        return V8_OK;
    }
    return rope_parallel(pool, &a);
}

v8_status v8_mrope_f32_ref(int contract, float *y, const float *x, const int32_t *pos,
                           int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t n_rot,
                           float freq_base, const int32_t *sections) {
    return multi_run(V8_MROPE_FP32_ITERATIVE_THETA_SECTIONS, 0, NULL, contract, y, x, pos,
                     n_tokens, n_head, head_dim, n_rot, freq_base, sections);
}

v8_status v8_mrope_f32(int contract, float *y, const float *x, const int32_t *pos,
                       int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t n_rot,
                       float freq_base, const int32_t *sections) {
    return multi_run(V8_MROPE_FP32_ITERATIVE_THETA_SECTIONS, 1, NULL, contract, y, x, pos,
                     n_tokens, n_head, head_dim, n_rot, freq_base, sections);
}

v8_status v8_mrope_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const float *x, const int32_t *pos, int64_t n_tokens,
                                         int64_t n_head, int64_t head_dim, int64_t n_rot,
                                         float freq_base, const int32_t *sections) {
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    return multi_run(V8_MROPE_FP32_ITERATIVE_THETA_SECTIONS, 2, pool, contract, y, x, pos,
                     n_tokens, n_head, head_dim, n_rot, freq_base, sections);
}

/* ---- interleaved multi-section RoPE ---------------------------------------- */

v8_status v8_imrope_f32_ref(int contract, float *y, const float *x, const int32_t *pos,
                            int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t n_rot,
                            float freq_base, const int32_t *sections) {
    return multi_run(V8_IMROPE_FP32_ITERATIVE_THETA_INTERLEAVED_SECTIONS, 0, NULL, contract, y,
                     x, pos, n_tokens, n_head, head_dim, n_rot, freq_base, sections);
}

v8_status v8_imrope_f32(int contract, float *y, const float *x, const int32_t *pos,
                        int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t n_rot,
                        float freq_base, const int32_t *sections) {
    return multi_run(V8_IMROPE_FP32_ITERATIVE_THETA_INTERLEAVED_SECTIONS, 1, NULL, contract, y,
                     x, pos, n_tokens, n_head, head_dim, n_rot, freq_base, sections);
}

v8_status v8_imrope_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                          const float *x, const int32_t *pos, int64_t n_tokens,
                                          int64_t n_head, int64_t head_dim, int64_t n_rot,
                                          float freq_base, const int32_t *sections) {
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    return multi_run(V8_IMROPE_FP32_ITERATIVE_THETA_INTERLEAVED_SECTIONS, 2, pool, contract, y,
                     x, pos, n_tokens, n_head, head_dim, n_rot, freq_base, sections);
}
