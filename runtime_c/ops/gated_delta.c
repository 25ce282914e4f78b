/* Gated DeltaNet mixer (contract gated_delta_rule_fp32_token_sequential_state),
 * head split (head_split_exact_copy) and sigmoid output gate
 * (sigmoid_gate_fp32_expf); see ops/v8_ops.h for the arithmetic.
 *
 * The oracle walks tokens in the outer loop (the definition: state after
 * token t is the input of token t + 1).  The production function walks
 * value heads in the outer loop and reads the causal-convolution window
 * straight from [conv_state, inputs], which lets the threadpool function
 * give whole heads to workers; the conv state is shifted once at the end.
 * Every head owns its recurrent state and its output columns, so the split
 * changes no bit. */
#include <math.h>
#include <string.h>

#include "ops/ops_internal.h"

/* ---- gated delta rule -------------------------------------------------------- */

typedef struct gdn_args {
    float *y;
    const float *qkv, *z, *alpha, *beta;
    const float *conv_w, *ssm_a, *dt_bias, *norm_w;
    float *conv_state, *ssm_state;
    int64_t n_tokens, n_k_heads, n_v_heads, dk, dv, kernel;
    int64_t channels; /* 2 * n_k_heads * dk + n_v_heads * dv */
    float eps;
} gdn_args;

static float silu(float x) {
    return x / (1.0f + expf(-x));
}

static float sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

static float softplus(float x) {
    return (x > 20.0f) ? x : logf(1.0f + expf(x));
}

/* Input of the causal convolution of channel c at window slot m (0 <= m < K)
 * for token t: the sequence [conv_state[c][0..K-2], qkv[0][c], qkv[1][c], ...]
 * at index t + m. */
static inline float conv_input(const gdn_args *a, int64_t t, int64_t m, int64_t c) {
    const int64_t u = t + m;
    if (u < a->kernel - 1) {
        return a->conv_state[c * (a->kernel - 1) + u];
    }
    return a->qkv[(u - (a->kernel - 1)) * a->channels + c];
}

/* conv + SiLU of channels [c0, c0 + n) for token t into out[n]. */
static void conv_silu(const gdn_args *a, int64_t t, int64_t c0, int64_t n, float *out) {
    for (int64_t i = 0; i < n; ++i) {
        const int64_t c = c0 + i;
        float acc = 0.0f;
        for (int64_t m = 0; m < a->kernel; ++m) {
            const float p = conv_input(a, t, m, c) * a->conv_w[c * a->kernel + m];
            acc = acc + p;
        }
        out[i] = silu(acc);
    }
}

static void l2_normalize(float *x, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const float sq = x[i] * x[i];
        sum += (double)sq;
    }
    const float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
    for (int64_t i = 0; i < n; ++i) {
        x[i] = x[i] * scale;
    }
}

/* One token of one value head h: the delta-rule update of S [dv][dk] and the
 * gated-RMSNorm output row y[t][h*dv .. h*dv + dv). */
static void gdn_token_head(const gdn_args *a, int64_t t, int64_t h) {
    float q[V8_GDN_MAX_HEAD_DIM], k[V8_GDN_MAX_HEAD_DIM];
    float v[V8_GDN_MAX_HEAD_DIM], o[V8_GDN_MAX_HEAD_DIM];
    const int64_t dk = a->dk, dv = a->dv;
    const int64_t kh = h % a->n_k_heads;
    const int64_t key_width = a->n_k_heads * dk;
    conv_silu(a, t, kh * dk, dk, q);
    conv_silu(a, t, key_width + kh * dk, dk, k);
    conv_silu(a, t, 2 * key_width + h * dv, dv, v);
    l2_normalize(q, dk, a->eps);
    l2_normalize(k, dk, a->eps);

    const float b = sigmoid(a->beta[t * a->n_v_heads + h]);
    const float pre = a->alpha[t * a->n_v_heads + h] + a->dt_bias[h];
    const float g = softplus(pre) * a->ssm_a[h];
    const float decay = expf(g);
    const float scale = 1.0f / sqrtf((float)dk);

    float *S = a->ssm_state + h * dv * dk;
    for (int64_t e = 0; e < dv * dk; ++e) {
        S[e] = S[e] * decay;
    }
    for (int64_t j = 0; j < dv; ++j) {
        float *row = S + j * dk;
        float dot = 0.0f;
        for (int64_t i = 0; i < dk; ++i) {
            const float p = row[i] * k[i];
            dot = dot + p;
        }
        const float delta = (v[j] - dot) * b;
        for (int64_t i = 0; i < dk; ++i) {
            const float p = k[i] * delta;
            row[i] = row[i] + p;
        }
    }
    for (int64_t j = 0; j < dv; ++j) {
        const float *row = S + j * dk;
        float dot = 0.0f;
        for (int64_t i = 0; i < dk; ++i) {
            const float p = row[i] * q[i];
            dot = dot + p;
        }
        o[j] = dot * scale;
    }

    double sum = 0.0;
    for (int64_t j = 0; j < dv; ++j) {
        const float sq = o[j] * o[j];
        sum += (double)sq;
    }
    const float mean = (float)(sum / (double)dv);
    const float rs = 1.0f / sqrtf(mean + a->eps);
    const float *zr = a->z + t * a->n_v_heads * dv + h * dv;
    float *yr = a->y + t * a->n_v_heads * dv + h * dv;
    for (int64_t j = 0; j < dv; ++j) {
        const float normed = (o[j] * rs) * a->norm_w[j];
        yr[j] = normed * silu(zr[j]);
    }
}

/* conv_state[c] <- the last K-1 entries of [conv_state[c], qkv[0..T-1][c]]. */
static void shift_conv_state(const gdn_args *a) {
    const int64_t keep = a->kernel - 1;
    for (int64_t c = 0; c < a->channels; ++c) {
        float *st = a->conv_state + c * keep;
        for (int64_t m = 0; m < keep; ++m) {
            st[m] = conv_input(a, a->n_tokens, m, c);  /* reads only entries not yet written */
        }
    }
}

static v8_status prepare_gdn(int contract, gdn_args *a, float *y, const float *qkv,
                             const float *z, const float *alpha, const float *beta,
                             const float *conv_w, const float *ssm_a, const float *dt_bias,
                             const float *norm_w, float *conv_state, float *ssm_state,
                             int64_t n_tokens, int64_t n_k_heads, int64_t n_v_heads,
                             int64_t head_k_dim, int64_t head_v_dim, int64_t conv_kernel,
                             float eps) {
    V8_REQUIRE(contract == V8_GATED_DELTA_RULE_FP32_TOKEN_SEQUENTIAL_STATE,
               V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && qkv != NULL && z != NULL && alpha != NULL && beta != NULL &&
                   conv_w != NULL && ssm_a != NULL && dt_bias != NULL && norm_w != NULL &&
                   conv_state != NULL && ssm_state != NULL,
               V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(n_tokens >= 1 && n_k_heads >= 1 && n_v_heads >= 1, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(n_v_heads % n_k_heads == 0, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(head_k_dim >= 1 && head_k_dim <= V8_GDN_MAX_HEAD_DIM, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(head_v_dim >= 1 && head_v_dim <= V8_GDN_MAX_HEAD_DIM, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(conv_kernel >= 2 && conv_kernel <= 64, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(eps >= 0.0f && eps <= FLT_MAX, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(n_v_heads <= (int64_t)1 << 20 && n_k_heads <= (int64_t)1 << 20,
               V8_ERR_BAD_DIMENSION);
    const int64_t channels = 2 * n_k_heads * head_k_dim + n_v_heads * head_v_dim;
    V8_REQUIRE(v8_ops_product_ok(n_tokens, channels), V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(v8_ops_product_ok(n_v_heads * head_v_dim, head_k_dim), V8_ERR_BAD_DIMENSION);
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

#define GDN_PARAMS                                                                          \
    int contract, float *y, const float *qkv, const float *z, const float *alpha,           \
        const float *beta, const float *conv_w, const float *ssm_a, const float *dt_bias,   \
        const float *norm_w, float *conv_state, float *ssm_state, int64_t n_tokens,         \
        int64_t n_k_heads, int64_t n_v_heads, int64_t head_k_dim, int64_t head_v_dim,      \
        int64_t conv_kernel, float eps
#define GDN_ARGS                                                                            \
    contract, &a, y, qkv, z, alpha, beta, conv_w, ssm_a, dt_bias, norm_w, conv_state,       \
        ssm_state, n_tokens, n_k_heads, n_v_heads, head_k_dim, head_v_dim, conv_kernel, eps

/* Token t's conv inputs are read from conv_state only while t + m < K - 1, so
 * the oracle keeps the original state until every token is done. */
v8_status v8_gated_delta_net_f32_ref(GDN_PARAMS) {
    gdn_args a;
    v8_status st = prepare_gdn(GDN_ARGS);
    if (st != V8_OK) {
        return st;
    }
    for (int64_t t = 0; t < a.n_tokens; ++t) {
        for (int64_t h = 0; h < a.n_v_heads; ++h) {
            gdn_token_head(&a, t, h);
        }
    }
    shift_conv_state(&a);
    return V8_OK;
}

static void gdn_heads(const gdn_args *a, int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) {
        for (int64_t t = 0; t < a->n_tokens; ++t) {
            gdn_token_head(a, t, h);
        }
    }
}

v8_status v8_gated_delta_net_f32(GDN_PARAMS) {
    gdn_args a;
    v8_status st = prepare_gdn(GDN_ARGS);
    if (st != V8_OK) {
        return st;
    }
    gdn_heads(&a, 0, a.n_v_heads);
    shift_conv_state(&a);
    return V8_OK;
}

typedef struct gdn_job {
    gdn_args args;
    v8_ops_chunks chunks;
} gdn_job;

static void gdn_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const gdn_job *job = (const gdn_job *)ctx;
    int64_t h0, h1;
    v8_ops_chunk_range(&job->chunks, task, &h0, &h1);
    gdn_heads(&job->args, h0, h1);
}

v8_status v8_gated_delta_net_f32_parallel_dispatch(v8_threadpool *pool, GDN_PARAMS) {
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    gdn_job job;
    gdn_args a;
    v8_status st = prepare_gdn(GDN_ARGS);
    if (st != V8_OK) {
        return st;
    }
    job.args = a;
    job.chunks = v8_ops_split(a.n_v_heads, v8_threadpool_workers(pool), 1);
    st = v8_parallel_for(pool, job.chunks.n_tasks, gdn_task, &job);
    if (st != V8_OK) {
        return st;
    }
    shift_conv_state(&a);
    return V8_OK;
}

/* ---- head split ------------------------------------------------------------- */

static v8_status check_split(int contract, const float *y, const float *x, int64_t n_tokens,
                             int64_t n_head, int64_t head_dim, int64_t part, int64_t parts) {
    V8_REQUIRE(contract == V8_HEAD_SPLIT_EXACT_COPY, V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && x != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(parts >= 1 && parts <= 64 && part >= 0 && part < parts, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(v8_ops_product_ok(n_tokens, n_head), V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(v8_ops_product_ok(n_tokens * n_head, head_dim * parts), V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(y != x, V8_ERR_BAD_DIMENSION);  /* a part is narrower than its source row */
    return V8_OK;
}

static void split_rows(float *y, const float *x, int64_t r0, int64_t r1, int64_t head_dim,
                       int64_t part, int64_t parts) {
    for (int64_t r = r0; r < r1; ++r) {
        memcpy(y + r * head_dim, x + (r * parts + part) * head_dim,
               (size_t)head_dim * sizeof(float));
    }
}

v8_status v8_head_split_f32_ref(int contract, float *y, const float *x, int64_t n_tokens,
                                int64_t n_head, int64_t head_dim, int64_t part, int64_t parts) {
    v8_status st = check_split(contract, y, x, n_tokens, n_head, head_dim, part, parts);
    if (st != V8_OK) {
        return st;
    }
    for (int64_t r = 0; r < n_tokens * n_head; ++r) {
        for (int64_t d = 0; d < head_dim; ++d) {
            y[r * head_dim + d] = x[(r * parts + part) * head_dim + d];
        }
    }
    return V8_OK;
}

v8_status v8_head_split_f32(int contract, float *y, const float *x, int64_t n_tokens,
                            int64_t n_head, int64_t head_dim, int64_t part, int64_t parts) {
    v8_status st = check_split(contract, y, x, n_tokens, n_head, head_dim, part, parts);
    if (st != V8_OK) {
        return st;
    }
    split_rows(y, x, 0, n_tokens * n_head, head_dim, part, parts);
    return V8_OK;
}

typedef struct split_job {
    float *y;
    const float *x;
    int64_t head_dim, part, parts;
    v8_ops_chunks chunks;
} split_job;

static void split_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const split_job *job = (const split_job *)ctx;
    int64_t r0, r1;
    v8_ops_chunk_range(&job->chunks, task, &r0, &r1);
    split_rows(job->y, job->x, r0, r1, job->head_dim, job->part, job->parts);
}

v8_status v8_head_split_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                              const float *x, int64_t n_tokens, int64_t n_head,
                                              int64_t head_dim, int64_t part, int64_t parts) {
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    v8_status st = check_split(contract, y, x, n_tokens, n_head, head_dim, part, parts);
    if (st != V8_OK) {
        return st;
    }
    split_job job = {y, x, head_dim, part, parts, {0, 0, 0}};
    job.chunks = v8_ops_split(n_tokens * n_head, v8_threadpool_workers(pool), 8192 / head_dim);
    return v8_parallel_for(pool, job.chunks.n_tasks, split_task, &job);
}

/* ---- sigmoid gate ----------------------------------------------------------- */

static v8_status check_gate(int contract, const float *y, const float *lhs, const float *rhs,
                            int64_t n) {
    V8_REQUIRE(contract == V8_SIGMOID_GATE_FP32_EXPF, V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && lhs != NULL && rhs != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(n >= 1 && n <= V8_OPS_MAX_ELEMENTS, V8_ERR_BAD_DIMENSION);
    return V8_OK;
}

static void gate_range(float *y, const float *lhs, const float *rhs, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
        y[i] = lhs[i] * sigmoid(rhs[i]);
    }
}

v8_status v8_sigmoid_gate_f32_ref(int contract, float *y, const float *lhs, const float *rhs,
                                  int64_t n) {
    v8_status st = check_gate(contract, y, lhs, rhs, n);
    if (st != V8_OK) {
        return st;
    }
    for (int64_t i = 0; i < n; ++i) {
        const float e = expf(-rhs[i]);
        const float s = 1.0f / (1.0f + e);
        y[i] = lhs[i] * s;
    }
    return V8_OK;
}

v8_status v8_sigmoid_gate_f32(int contract, float *y, const float *lhs, const float *rhs,
                              int64_t n) {
    v8_status st = check_gate(contract, y, lhs, rhs, n);
    if (st != V8_OK) {
        return st;
    }
    gate_range(y, lhs, rhs, 0, n);
    return V8_OK;
}

typedef struct gate_job {
    float *y;
    const float *lhs, *rhs;
    v8_ops_chunks chunks;
} gate_job;

static void gate_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const gate_job *job = (const gate_job *)ctx;
    int64_t i0, i1;
    v8_ops_chunk_range(&job->chunks, task, &i0, &i1);
    gate_range(job->y, job->lhs, job->rhs, i0, i1);
}

v8_status v8_sigmoid_gate_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                                const float *lhs, const float *rhs, int64_t n) {
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    v8_status st = check_gate(contract, y, lhs, rhs, n);
    if (st != V8_OK) {
        return st;
    }
    gate_job job = {y, lhs, rhs, {0, 0, 0}};
    job.chunks = v8_ops_split(n, v8_threadpool_workers(pool), 4096);
    return v8_parallel_for(pool, job.chunks.n_tasks, gate_task, &job);
}
