/* Provider attn_llama_regular_f16kv: contract fp32_llama_regular (llama.cpp's
 * non-flash attention: KQ = mul_mat(K, Q), soft_max_ext(KQ, mask, scale),
 * mul_mat(V^T, P) with P converted to fp16).
 *
 * Per (head, query row), keys [0, kv_end) visible:
 *   q16  = r16(q)
 *   s_j  = fma chain over d ascending (from 0) of q16[d] * k_j[d]      (fp32)
 *   w_j  = s_j * scale                       hidden keys -> -inf (the mask)
 *   m    = max_j w_j
 *   p_j  = exp16(w_j - m)                    ggml's AVX-512 vector expf
 *   sum  = sum over 16-key groups from key 0, ascending, of fp64(tree16(p))
 *   p16_j = r16(p_j * fp32(1 / sum))         (reciprocal in fp64, then fp32 scale)
 *   out[d] = fma chain over keys ascending (from 0) of p16_j * v_j[d]   (fp32)
 * The softmax is ggml_compute_forward_soft_max_f32 as built for AVX-512; the
 * padding of K to 256 only adds masked keys (p = 0), which change nothing.
 * The two dot products use a sequential fma chain: this provider's declared
 * order.  ggml's mul_mat uses ggml_vec_dot_f16's lane tree (on an AVX512-FP16
 * host even fp16 accumulation), so against ggml the comparison is a stated
 * tolerance with the observed error reported.
 *
 * The kernel needs no scratch: the row is walked three times (max, sum,
 * values), recomputing the scores, so no buffer scales with kv_len. */
#include <math.h>
#include <string.h>

#include "v8_attention_tiled.h"

static float exp16_scalar_lr(float x) {
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
    return (float)((double)j * ldexp(1.0, (int)n));
}

static float tree16_lr(const float *p) {
    float a[8], b[4];
    for (int i = 0; i < 8; ++i) {
        a[i] = p[i + 8] + p[i];
    }
    for (int i = 0; i < 4; ++i) {
        b[i] = a[i + 4] + a[i];
    }
    return (b[0] + b[2]) + (b[1] + b[3]);
}

static float score(const float *q16, const uint16_t *kr, int64_t D, float scale) {
    float acc = 0.0f;
    for (int64_t d = 0; d < D; ++d) {
        acc = fmaf(q16[d], v8_f16_to_f32(kr[d]), acc);
    }
    return acc * scale;
}

static void regular_row(const v8_attn_args *a, int64_t i, int64_t h) {
    const int64_t D = a->head_dim;
    const int64_t g = h / (a->n_head / a->n_head_kv);
    const uint16_t *kh = (const uint16_t *)a->k + g * a->kv_capacity * D;
    const uint16_t *vh = (const uint16_t *)a->v + g * a->kv_capacity * D;
    const int64_t end = v8_attn_row_kv_end(a, i);
    const float *qr = a->q + (i * a->n_head + h) * D;
    float q16[V8_ATTN_MAX_HEAD_DIM], acc[V8_ATTN_MAX_HEAD_DIM];
    for (int64_t d = 0; d < D; ++d) {
        q16[d] = v8_round_f16(qr[d]);
        acc[d] = 0.0f;
    }
    float m = -INFINITY;
    for (int64_t j = 0; j < end; ++j) {
        const float w = score(q16, kh + j * D, D, a->scale);
        m = m > w ? m : w;
    }
    double sum = 0.0;
    for (int64_t j0 = 0; j0 < end; j0 += 16) {
        float p[16];
        for (int l = 0; l < 16; ++l) {
            p[l] = j0 + l < end ? exp16_scalar_lr(score(q16, kh + (j0 + l) * D, D, a->scale) - m)
                                : 0.0f; /* masked key: exp16(-inf) = 0 */
        }
        sum += (double)tree16_lr(p);
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t j = 0; j < end; ++j) {
        const float p = exp16_scalar_lr(score(q16, kh + j * D, D, a->scale) - m);
        const float p16 = v8_round_f16(p * inv);
        const uint16_t *vr = vh + j * D;
        for (int64_t d = 0; d < D; ++d) {
            acc[d] = fmaf(p16, v8_f16_to_f32(vr[d]), acc[d]);
        }
    }
    memcpy(a->out + (i * a->n_head + h) * D, acc, sizeof(float) * (size_t)D);
}

static v8_status regular_check(const v8_attn_args *a) {
    V8_REQUIRE(a->contract == V8_ATTN_FP32_LLAMA_REGULAR, V8_ERR_UNKNOWN_SELECTOR);
    return v8_attn_check_shape(a);
}

#define LR_PACK()                                                                           \
    {contract, out, q, k, v, n_q, n_head, n_head_kv, head_dim, kv_len, kv_capacity, q_pos0, \
     causal, scale, scratch, scratch_bytes}

size_t v8_attn_llama_regular_scratch_bytes(int64_t n_q, int64_t n_head, int64_t head_dim,
                                           int n_workers) {
    (void)n_q;
    (void)n_head;
    (void)head_dim;
    (void)n_workers;
    return 0;
}

v8_status v8_attn_llama_regular_ref(V8_ATTN_ARGS_DECL) {
    const v8_attn_args a = LR_PACK();
    v8_status st = regular_check(&a);
    if (st != V8_OK) {
        return st;
    }
    for (int64_t i = 0; i < n_q; ++i) {
        for (int64_t h = 0; h < n_head; ++h) {
            regular_row(&a, i, h);
        }
    }
    return V8_OK;
}

/* Production is the scalar path (isa_dispatch "scalar" in the map): the SIMD
 * variants of this contract are not written yet. */
v8_status v8_attn_llama_regular(V8_ATTN_ARGS_DECL) {
    return v8_attn_llama_regular_ref(contract, out, q, k, v, n_q, n_head, n_head_kv, head_dim,
                                     kv_len, kv_capacity, q_pos0, causal, scale, scratch,
                                     scratch_bytes);
}

static void regular_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const v8_attn_args *a = (const v8_attn_args *)ctx;
    regular_row(a, task / a->n_head, task % a->n_head);
}

/* task = (query row, head): disjoint outputs, no shared accumulator */
v8_status v8_attn_llama_regular_parallel_dispatch(v8_threadpool *pool, V8_ATTN_ARGS_DECL) {
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    const v8_attn_args a = LR_PACK();
    v8_status st = regular_check(&a);
    if (st != V8_OK) {
        return st;
    }
    return v8_parallel_for(pool, n_q * n_head, regular_task, (void *)&a);
}
