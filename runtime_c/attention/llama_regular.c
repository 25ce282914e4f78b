/* Provider attn_llama_regular_f16kv: contract fp32_llama_regular (llama.cpp's
 * non-flash attention: KQ = mul_mat(K, Q), soft_max_ext(KQ, mask, scale),
 * mul_mat(V^T, P) with P converted to fp16).
 *
 * Per (head, query row), keys [kv_begin, kv_end) visible:
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
 * The oracle needs no scratch: the row is walked three times (max, sum,
 * values), recomputing the scores, so no buffer scales with kv_len.  The
 * production kernel (tile_task.c, shared with the tiled provider) does the same
 * three passes for 64 query rows held in SIMD lanes (each lane performs the
 * oracle's operation sequence) with per-worker tile buffers from the caller's
 * scratch. */
#include <math.h>
#include <string.h>

#include "ops/ggml_vexp.h"
#include "v8_attention_tiled.h"
#include "tiled_scalar.h"

#define TQ V8_ATTN_TILE_Q
#define TKV V8_ATTN_TILE_KV

#include "tile_task.inc"


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
    const int64_t begin = v8_attn_row_kv_begin(a, i), end = v8_attn_row_kv_end(a, i);
    const float *qr = a->q + (i * a->n_head + h) * D;
    float q16[V8_ATTN_MAX_HEAD_DIM], acc[V8_ATTN_MAX_HEAD_DIM];
    for (int64_t d = 0; d < D; ++d) {
        q16[d] = v8_round_f16(qr[d]);
        acc[d] = 0.0f;
    }
    float m = -INFINITY;
    for (int64_t j = begin; j < end; ++j) {
        const float w = score(q16, kh + j * D, D, a->scale);
        m = m > w ? m : w;
    }
    double sum = 0.0;
    for (int64_t j0 = 0; j0 < end; j0 += 16) { /* groups from key 0, as ggml's soft_max row */
        float p[16];
        for (int l = 0; l < 16; ++l) {
            const int64_t j = j0 + l;
            p[l] = j >= begin && j < end ? exp16_scalar(score(q16, kh + j * D, D, a->scale) - m)
                                         : 0.0f; /* masked key: exp16(-inf) = 0 */
        }
        sum += (double)tree16(p);
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t j = begin; j < end; ++j) { /* a masked key's fp16 weight is 0 */
        const float p = exp16_scalar(score(q16, kh + j * D, D, a->scale) - m);
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

#define LR_PACK() V8_ATTN_PACK()

/* Per worker: the tile task's slice (tile_task.h). */
static size_t lr_worker_floats(int64_t D) { return tile_ws_floats(D); }

size_t v8_attn_llama_regular_scratch_bytes(int64_t n_q, int64_t n_head, int64_t head_dim,
                                           int n_workers) {
    (void)n_q;
    (void)n_head;
    if (head_dim < 1 || n_workers < 1) {
        return 0;
    }
    return (size_t)n_workers * lr_worker_floats(head_dim) * sizeof(float) + 64;
}

v8_status v8_attn_llama_regular_ref(V8_ATTN_ARGS_DECL) {
    const v8_attn_args a = LR_PACK();
    v8_status st = regular_check(&a);
    if (st != V8_OK) {
        return st;
    }
    /* The oracle uses no scratch, but it asks for what the size function says (as
     * production does) so the provider's size function and its checks always agree. */
    V8_REQUIRE(scratch != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(scratch_bytes >= v8_attn_llama_regular_scratch_bytes(n_q, n_head, head_dim, 1),
               V8_ERR_BAD_DIMENSION);
    for (int64_t i = 0; i < n_q; ++i) {
        for (int64_t h = 0; h < n_head; ++h) {
            regular_row(&a, i, h);
        }
    }
    return V8_OK;
}

typedef struct lr_job {
    const v8_attn_args *a;
    int64_t n_blocks;
} lr_job;

static void lr_job_run(void *ctx, int64_t task, int worker) {
    const lr_job *job = (const lr_job *)ctx;
    const v8_attn_args *a = job->a;
    const int64_t h = task / job->n_blocks;
    const int64_t r0 = (task % job->n_blocks) * TQ;
    const int64_t nr = a->n_q - r0 < TQ ? a->n_q - r0 : TQ;
    const tile_task_fn fn = tile_task_pick();
    if (fn) {
        const v8_tile_ws w = tile_slice(a->scratch, a->head_dim,
                                                lr_worker_floats(a->head_dim), worker);
        fn(a, &w, h, r0, nr, V8_TILE_REGULAR);
    } else {
        for (int64_t i = r0; i < r0 + nr; ++i) {
            regular_row(a, i, h);
        }
    }
}

/* Production: AVX-512, AVX2 + FMA + F16C, or the scalar path, by the running CPU. */
v8_status v8_attn_llama_regular(V8_ATTN_ARGS_DECL) {
    const v8_attn_args a = LR_PACK();
    v8_status st = regular_check(&a);
    if (st != V8_OK) {
        return st;
    }
    V8_REQUIRE(scratch != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(scratch_bytes >= v8_attn_llama_regular_scratch_bytes(n_q, n_head, head_dim, 1),
               V8_ERR_BAD_DIMENSION);
    lr_job job = {&a, (n_q + TQ - 1) / TQ};
    for (int64_t t = 0; t < n_head * job.n_blocks; ++t) {
        lr_job_run(&job, t, 0);
    }
    return V8_OK;
}

/* task = (head, 64-row query block): disjoint outputs, own scratch slice per worker */
v8_status v8_attn_llama_regular_parallel_dispatch(v8_threadpool *pool, V8_ATTN_ARGS_DECL) {
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    const v8_attn_args a = LR_PACK();
    v8_status st = regular_check(&a);
    if (st != V8_OK) {
        return st;
    }
    V8_REQUIRE(scratch != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(scratch_bytes >= v8_attn_llama_regular_scratch_bytes(
                                    n_q, n_head, head_dim, v8_threadpool_workers(pool)),
               V8_ERR_BAD_DIMENSION);
    lr_job job = {&a, (n_q + TQ - 1) / TQ};
    return v8_parallel_for(pool, n_head * job.n_blocks, lr_job_run, &job);
}
