/* Vision encoder ops: layer norm (layer_norm_fp32), GELU (gelu_fp32), 2-D vision
 * RoPE (vision_rope_fp32) and the 2x2 patch merge (patch_merge_fp32).  Each
 * provider has its scalar oracle (*_ref), a production function and a
 * threadpool dispatch over disjoint outputs; the contracts are stated in
 * ops/v8_ops.h.  Every check runs before the first write. */
#include <math.h>
#include <string.h>

#include "ops/ops_internal.h"

/* ---- layer norm ------------------------------------------------------------- */

static v8_status check_layer_norm(int contract, const float *y, const float *x, const float *w,
                                  const float *b, int64_t n_rows, int64_t n, float eps) {
    V8_REQUIRE(contract == V8_LAYER_NORM_FP32_FP64_SUM_ASCENDING_BIAS, V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && x != NULL && w != NULL && b != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(v8_ops_product_ok(n_rows, n), V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(eps >= 0.0f && isfinite(eps), V8_ERR_BAD_DIMENSION);
    return V8_OK;
}

/* One row; y may alias x exactly (each x[i] is read before y[i] is written
 * in the last loop, and the centred values are kept in y only after the two
 * reductions). */
static void layer_norm_row(float *y, const float *x, const float *w, const float *b, int64_t n,
                           float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        sum += (double)x[i];
    }
    const float mean = (float)sum / (float)n;
    double sq = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const float d = x[i] - mean;
        const float d2 = d * d;
        sq += (double)d2;
    }
    const float var = (float)(sq / (double)n);
    const float scale = 1.0f / sqrtf(var + eps);
    for (int64_t i = 0; i < n; ++i) {
        const float d = x[i] - mean;
        const float s = d * scale;
        const float sw = s * w[i];
        y[i] = sw + b[i];
    }
}

v8_status v8_layer_norm_f32_ref(int contract, float *y, const float *x, const float *w,
                                const float *bias, int64_t n_rows, int64_t n, float eps) {
    const float *b = bias;
    v8_status st = check_layer_norm(contract, y, x, w, b, n_rows, n, eps);
    if (st != V8_OK) {
        return st;
    }
    for (int64_t r = 0; r < n_rows; ++r) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        double sum = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            sum += (double)xr[i];
        }
        const float mean = (float)sum / (float)n;
        double sq = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            const float d = xr[i] - mean;
            sq += (double)(d * d);
        }
        const float var = (float)(sq / (double)n);
        const float scale = 1.0f / sqrtf(var + eps);
        for (int64_t i = 0; i < n; ++i) {
            yr[i] = ((xr[i] - mean) * scale) * w[i] + b[i];
        }
    }
    return V8_OK;
}

v8_status v8_layer_norm_f32(int contract, float *y, const float *x, const float *w,
                            const float *bias, int64_t n_rows, int64_t n, float eps) {
    const float *b = bias;
    v8_status st = check_layer_norm(contract, y, x, w, b, n_rows, n, eps);
    if (st != V8_OK) {
        return st;
    }
    for (int64_t r = 0; r < n_rows; ++r) {
        layer_norm_row(y + r * n, x + r * n, w, b, n, eps);
    }
    return V8_OK;
}

typedef struct layer_norm_job {
    float *y;
    const float *x, *w, *b;
    int64_t n;
    float eps;
    v8_ops_chunks chunks;
} layer_norm_job;

static void layer_norm_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const layer_norm_job *job = (const layer_norm_job *)ctx;
    int64_t r0, r1;
    v8_ops_chunk_range(&job->chunks, task, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r) {
        layer_norm_row(job->y + r * job->n, job->x + r * job->n, job->w, job->b, job->n, job->eps);
    }
}

v8_status v8_layer_norm_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                              const float *x, const float *w, const float *bias,
                                              int64_t n_rows, int64_t n, float eps) {
    const float *b = bias;
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    v8_status st = check_layer_norm(contract, y, x, w, b, n_rows, n, eps);
    if (st != V8_OK) {
        return st;
    }
    layer_norm_job job = {y, x, w, b, n, eps, {0, 0, 0}};
    job.chunks = v8_ops_split(n_rows, v8_threadpool_workers(pool), 1);
    return v8_parallel_for(pool, job.chunks.n_tasks, layer_norm_task, &job);
}

/* ---- GELU (tanh form) ---------------------------------------------------------- */

static v8_status check_gelu(int contract, const float *y, const float *x, int64_t n) {
    V8_REQUIRE(contract == V8_GELU_FP32_TANH, V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && x != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(n >= 1 && n <= V8_OPS_MAX_ELEMENTS, V8_ERR_BAD_DIMENSION);
    return V8_OK;
}

static inline float gelu_tanh(float x) {
    const float inner = (V8_GELU_SQRT_2_OVER_PI * x) * (1.0f + (V8_GELU_COEF_A * x) * x);
    return (0.5f * x) * (1.0f + tanhf(inner));
}

static void gelu_range(float *y, const float *x, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
        y[i] = gelu_tanh(x[i]);
    }
}

v8_status v8_gelu_f32_ref(int contract, float *y, const float *x, int64_t n) {
    v8_status st = check_gelu(contract, y, x, n);
    if (st != V8_OK) {
        return st;
    }
    for (int64_t i = 0; i < n; ++i) {
        const float xi = x[i];
        const float c = V8_GELU_SQRT_2_OVER_PI * xi;
        const float a = V8_GELU_COEF_A * xi;
        const float inner = c * (1.0f + a * xi);
        const float t = tanhf(inner);
        y[i] = (0.5f * xi) * (1.0f + t);
    }
    return V8_OK;
}

v8_status v8_gelu_f32(int contract, float *y, const float *x, int64_t n) {
    v8_status st = check_gelu(contract, y, x, n);
    if (st != V8_OK) {
        return st;
    }
    gelu_range(y, x, 0, n);
    return V8_OK;
}

typedef struct gelu_job {
    float *y;
    const float *x;
    v8_ops_chunks chunks;
} gelu_job;

static void gelu_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const gelu_job *job = (const gelu_job *)ctx;
    int64_t i0, i1;
    v8_ops_chunk_range(&job->chunks, task, &i0, &i1);
    gelu_range(job->y, job->x, i0, i1);
}

v8_status v8_gelu_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                        const float *x, int64_t n) {
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    v8_status st = check_gelu(contract, y, x, n);
    if (st != V8_OK) {
        return st;
    }
    gelu_job job = {y, x, {0, 0, 0}};
    job.chunks = v8_ops_split(n, v8_threadpool_workers(pool), 4096);
    return v8_parallel_for(pool, job.chunks.n_tasks, gelu_task, &job);
}

/* ---- 2-D vision RoPE ------------------------------------------------------------ */

static v8_status check_vision_rope(int contract, const float *y, const float *x,
                                   const int32_t *pos, int64_t n_tokens, int64_t n_head,
                                   int64_t head_dim, int64_t n_rot, float freq_base,
                                   const int32_t *sections) {
    V8_REQUIRE(contract == V8_VISION_ROPE_FP32_ITERATIVE_THETA_2D_SECTIONS,
               V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && x != NULL && pos != NULL && sections != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(n_tokens >= 1 && n_head >= 1 && head_dim >= 4 && head_dim % 4 == 0,
               V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(head_dim <= V8_VISION_ROPE_MAX_HEAD_DIM, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(v8_ops_product_ok(n_tokens, n_head * head_dim), V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(n_rot == head_dim, V8_ERR_BAD_DIMENSION); /* every dim rotates (ggml asserts it) */
    V8_REQUIRE(freq_base > 0.0f && isfinite(freq_base), V8_ERR_BAD_DIMENSION);
    int64_t total = 0;
    for (int s = 0; s < 4; ++s) {
        V8_REQUIRE(sections[s] >= 0, V8_ERR_BAD_DIMENSION);
        total += sections[s];
    }
    V8_REQUIRE(total > 0 && total <= head_dim, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(sections[0] > 0 || sections[1] > 0 || sections[2] > 0, V8_ERR_BAD_DIMENSION);
    return V8_OK;
}

/* cos/sin of every pair of one token: cs[2i] = cos, cs[2i+1] = sin. */
static void vision_angles(float *cs, const int32_t *pos, int64_t n_tokens, int64_t t,
                          int64_t n_pairs, float theta_scale, const int32_t *sec) {
    const float base_t = (float)pos[t], base_h = (float)pos[n_tokens + t];
    const float base_w = (float)pos[2 * n_tokens + t], base_e = (float)pos[3 * n_tokens + t];
    float th_t = base_t, th_h = base_h, th_w = base_w, th_e = base_e;
    const int64_t s0 = sec[0], s01 = (int64_t)sec[0] + sec[1], s012 = s01 + sec[2];
    const int64_t total = s012 + sec[3];
    for (int64_t i = 0; i < n_pairs; ++i) {
        const int64_t sector = i % total;
        if (sector == 0) {
            th_t = base_t;
        } else if (sector == s0) {
            th_h = base_h;
        } else if (sector == s01) {
            th_w = base_w;
        } else if (sector == s012) {
            th_e = base_e;
        }
        float theta = th_t;
        if (sector >= s0 && sector < s01) {
            theta = th_h;
        } else if (sector >= s01 && sector < s012) {
            theta = th_w;
        } else if (sector >= s012) {
            theta = th_e;
        }
        cs[2 * i] = cosf(theta);
        cs[2 * i + 1] = sinf(theta);
        th_t *= theta_scale;
        th_w *= theta_scale;
        th_h *= theta_scale;
        th_e *= theta_scale;
    }
}

static void vision_rope_tokens(float *y, const float *x, const int32_t *pos, int64_t n_tokens,
                               int64_t n_head, int64_t head_dim, float freq_base,
                               const int32_t *sec, int64_t t0, int64_t t1) {
    float cs[V8_VISION_ROPE_MAX_HEAD_DIM];
    const int64_t half = head_dim / 2;
    const float theta_scale = powf(freq_base, -2.0f / (float)half);
    for (int64_t t = t0; t < t1; ++t) {
        vision_angles(cs, pos, n_tokens, t, half, theta_scale, sec);
        for (int64_t h = 0; h < n_head; ++h) {
            const float *xr = x + (t * n_head + h) * head_dim;
            float *yr = y + (t * n_head + h) * head_dim;
            for (int64_t i = 0; i < half; ++i) {
                const float c = cs[2 * i], s = cs[2 * i + 1];
                const float a = xr[i], b = xr[i + half];
                const float ac = a * c, bs = b * s, as = a * s, bc = b * c;
                yr[i] = ac - bs;
                yr[i + half] = as + bc;
            }
        }
    }
}

v8_status v8_vision_rope_f32_ref(int contract, float *y, const float *x, const int32_t *pos,
                                 int64_t n_tokens, int64_t n_head, int64_t head_dim,
                                 int64_t n_rot, float freq_base, const int32_t *sections) {
    v8_status st = check_vision_rope(contract, y, x, pos, n_tokens, n_head, head_dim, n_rot,
                                     freq_base, sections);
    if (st != V8_OK) {
        return st;
    }
    const int64_t half = head_dim / 2;
    const float theta_scale = powf(freq_base, -2.0f / (float)half);
    const int64_t s0 = sections[0], s01 = s0 + sections[1], s012 = s01 + sections[2];
    const int64_t total = s012 + sections[3];
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t h = 0; h < n_head; ++h) {
            float th[4];
            for (int s = 0; s < 4; ++s) {
                th[s] = (float)pos[s * n_tokens + t];
            }
            const float *xr = x + (t * n_head + h) * head_dim;
            float *yr = y + (t * n_head + h) * head_dim;
            for (int64_t i = 0; i < half; ++i) {
                const int64_t sector = i % total;
                const int restart = sector == 0 ? 0 : sector == s0 ? 1 : sector == s01 ? 2
                                  : sector == s012 ? 3 : -1;
                if (restart >= 0) {
                    th[restart] = (float)pos[restart * n_tokens + t];
                }
                const int stream = sector < s0 ? 0 : sector < s01 ? 1 : sector < s012 ? 2 : 3;
                const float c = cosf(th[stream]), s = sinf(th[stream]);
                const float a = xr[i], b = xr[i + half];
                yr[i] = a * c - b * s;
                yr[i + half] = a * s + b * c;
                for (int k = 0; k < 4; ++k) {
                    th[k] = th[k] * theta_scale;
                }
            }
        }
    }
    return V8_OK;
}

v8_status v8_vision_rope_f32(int contract, float *y, const float *x, const int32_t *pos,
                             int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t n_rot,
                             float freq_base, const int32_t *sections) {
    v8_status st = check_vision_rope(contract, y, x, pos, n_tokens, n_head, head_dim, n_rot,
                                     freq_base, sections);
    if (st != V8_OK) {
        return st;
    }
    vision_rope_tokens(y, x, pos, n_tokens, n_head, head_dim, freq_base, sections, 0, n_tokens);
    return V8_OK;
}

typedef struct vision_rope_job {
    float *y;
    const float *x;
    const int32_t *pos, *sections;
    int64_t n_tokens, n_head, head_dim;
    float freq_base;
    v8_ops_chunks chunks;
} vision_rope_job;

static void vision_rope_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const vision_rope_job *j = (const vision_rope_job *)ctx;
    int64_t t0, t1;
    v8_ops_chunk_range(&j->chunks, task, &t0, &t1);
    vision_rope_tokens(j->y, j->x, j->pos, j->n_tokens, j->n_head, j->head_dim, j->freq_base,
                       j->sections, t0, t1);
}

v8_status v8_vision_rope_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                               const float *x, const int32_t *pos,
                                               int64_t n_tokens, int64_t n_head,
                                               int64_t head_dim, int64_t n_rot, float freq_base,
                                               const int32_t *sections) {
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    v8_status st = check_vision_rope(contract, y, x, pos, n_tokens, n_head, head_dim, n_rot,
                                     freq_base, sections);
    if (st != V8_OK) {
        return st;
    }
    vision_rope_job job = {y, x, pos, sections, n_tokens, n_head, head_dim, freq_base, {0, 0, 0}};
    job.chunks = v8_ops_split(n_tokens, v8_threadpool_workers(pool), 1);
    return v8_parallel_for(pool, job.chunks.n_tasks, vision_rope_task, &job);
}

/* ---- 2x2 patch merge -------------------------------------------------------------- */

static v8_status check_merge(int contract, const float *y, const float *x, int64_t n_tokens,
                             int64_t dim) {
    V8_REQUIRE(contract == V8_PATCH_MERGE_2X2_EXACT_COPY, V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && x != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(n_tokens >= 4 && n_tokens % 4 == 0 && v8_ops_product_ok(n_tokens, dim),
               V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(y + n_tokens * dim <= x || x + n_tokens * dim <= y, V8_ERR_BAD_DIMENSION);
    return V8_OK;
}

v8_status v8_patch_merge_f32_ref(int contract, float *y, const float *x, int64_t n_tokens,
                                 int64_t dim) {
    v8_status st = check_merge(contract, y, x, n_tokens, dim);
    if (st != V8_OK) {
        return st;
    }
    for (int64_t j = 0; j < n_tokens / 4; ++j) {
        for (int64_t k = 0; k < 4; ++k) {
            for (int64_t e = 0; e < dim; ++e) {
                y[j * 4 * dim + k * dim + e] = x[(4 * j + k) * dim + e];
            }
        }
    }
    return V8_OK;
}

/* Row-major [T/4][4E] is the same memory as [T][E]: each merged row is four
 * consecutive input rows, so the copy is one block per range of merged rows. */
static void merge_rows(float *y, const float *x, int64_t dim, int64_t j0, int64_t j1) {
    memcpy(y + j0 * 4 * dim, x + j0 * 4 * dim, (size_t)((j1 - j0) * 4 * dim) * sizeof(float));
}

v8_status v8_patch_merge_f32(int contract, float *y, const float *x, int64_t n_tokens,
                             int64_t dim) {
    v8_status st = check_merge(contract, y, x, n_tokens, dim);
    if (st != V8_OK) {
        return st;
    }
    merge_rows(y, x, dim, 0, n_tokens / 4);
    return V8_OK;
}

typedef struct merge_job {
    float *y;
    const float *x;
    int64_t dim;
    v8_ops_chunks chunks;
} merge_job;

static void merge_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const merge_job *job = (const merge_job *)ctx;
    int64_t j0, j1;
    v8_ops_chunk_range(&job->chunks, task, &j0, &j1);
    merge_rows(job->y, job->x, job->dim, j0, j1);
}

v8_status v8_patch_merge_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                               const float *x, int64_t n_tokens, int64_t dim) {
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    v8_status st = check_merge(contract, y, x, n_tokens, dim);
    if (st != V8_OK) {
        return st;
    }
    merge_job job = {y, x, dim, {0, 0, 0}};
    job.chunks = v8_ops_split(n_tokens / 4, v8_threadpool_workers(pool), 1);
    return v8_parallel_for(pool, job.chunks.n_tasks, merge_task, &job);
}
