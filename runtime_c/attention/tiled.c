/* Provider attn_tiled64_f16kv: contracts f16_kv_tiled64_fp32_softmax_fp64_sum_update
 * (llama.cpp's AVX-512 build) and f16_kv_tiled64_fp32_softmax_fp64_sum_update_8_lane_vexp
 * (its AVX2 build); see v8_attention_tiled.h for the arithmetic.  The two differ only
 * in the probability exp and in the key groups of the tile sum (16 keys, tree16, and the
 * AVX-512 form of ggml_v_expf; 8 keys, tree8, and the AVX2 form), so one algorithm
 * serves both, parameterized by that group width ("lanes").
 *
 * The oracle walks one query row at a time through the 64-key tiles, exactly
 * as the contract reads.  The production kernels keep a 64-row query block in
 * SIMD lanes (lane = query row) so that every per-row quantity - the score
 * chain over d, the running max, the rescale, the 16-key sum tree and the
 * P.V chain over keys - is one vertical vector operation with no horizontal
 * step; each lane performs exactly the oracle's operation sequence, which is
 * why production and oracle agree bit for bit on every ISA. */
#include <math.h>
#include <string.h>

#include "ops/ggml_vexp.h"
#include "v8_attention_tiled.h"
#include "tiled_scalar.h"

#define TQ V8_ATTN_TILE_Q
#define TKV V8_ATTN_TILE_KV

#include "tile_task.inc"

/* Keys per exp/sum group of the contract: the f32 lane count of the llama.cpp build it
 * reproduces (16: AVX-512, 8: AVX2); 0 for a selector this provider does not deliver. */
static int tiled_lanes(int contract) {
    switch (contract) {
    case V8_ATTN_F16_KV_TILED64_FP32_SOFTMAX_FP64_SUM_UPDATE:
        return 16;
    case V8_ATTN_F16_KV_TILED64_FP32_SOFTMAX_FP64_SUM_UPDATE_8_LANE_VEXP:
        return 8;
    default:
        return 0;
    }
}

static v8_status tiled_check(const v8_attn_args *a) {
    V8_REQUIRE(tiled_lanes(a->contract) != 0, V8_ERR_UNKNOWN_SELECTOR);
    return v8_attn_check_shape(a);
}

/* The contract's exp and group sum for one value / one group of `lanes` keys. */
static float tiled_exp_ref(int lanes, float x) {
    return lanes == 16 ? exp16_scalar(x) : vexp_lane_avx2(x);
}

static float tiled_tree_ref(int lanes, const float *p) {
    return lanes == 16 ? tree16(p) : tree8(p);
}

/* ---- oracle ----------------------------------------------------------------- */

/* One query row of one head: keys [kv_begin, kv_end) visible, in tiles from key 0 (as
 * ggml walks them, masked tiles included); lanes: keys per exp/sum group. */
static void tiled_row_ref(int lanes, const float *qrow, const uint16_t *kh, const uint16_t *vh,
                          int64_t D, int64_t kv_begin, int64_t kv_end, float scale,
                          float *out_row) {
    float A[V8_ATTN_MAX_HEAD_DIM];
    float s[TKV], p[TKV];
    float M = -INFINITY;
    float S = 0.0f;
    memset(A, 0, sizeof(float) * (size_t)D);

    for (int64_t t0 = 0; t0 < kv_end; t0 += TKV) {
        /* scores; keys outside the row's range are hidden (-inf) */
        for (int j = 0; j < TKV; ++j) {
            const int64_t key = t0 + j;
            if (key >= kv_begin && key < kv_end) {
                const uint16_t *kr = kh + key * D;
                float acc = 0.0f;
                for (int64_t d = 0; d < D; ++d) {
                    acc = fmaf(qrow[d], v8_f16_to_f32(kr[d]), acc);
                }
                s[j] = acc * scale;
            } else {
                s[j] = -INFINITY;
            }
        }
        float tmax = -INFINITY;
        for (int j = 0; j < TKV; ++j) {
            tmax = tmax > s[j] ? tmax : s[j];
        }
        if (tmax == -INFINITY) {
            continue; /* nothing visible in this tile: the row is untouched */
        }
        const float Mn = fmaxf(M, tmax);
        if (Mn > M) {
            const float ms = expf(M - Mn);
            for (int64_t d = 0; d < D; ++d) {
                A[d] *= ms;
            }
            S *= ms;
        }
        M = Mn;
        double tsum = 0.0;
        for (int g = 0; g < TKV / lanes; ++g) {
            for (int j = lanes * g; j < lanes * g + lanes; ++j) {
                p[j] = tiled_exp_ref(lanes, s[j] - M);
            }
            tsum += (double)tiled_tree_ref(lanes, p + lanes * g);
        }
        S = (float)((double)S + tsum);
        for (int64_t d = 0; d < D; ++d) {
            float acc = A[d];
            for (int j = 0; j < TKV; ++j) {
                const int64_t key = t0 + j;
                const float vv =
                    key >= kv_begin && key < kv_end ? v8_f16_to_f32(vh[key * D + d]) : 0.0f;
                acc = fmaf(p[j], vv, acc);
            }
            A[d] = acc;
        }
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int64_t d = 0; d < D; ++d) {
        out_row[d] = A[d] * inv;
    }
}

static void tiled_task_ref(const v8_attn_args *a, int64_t h, int64_t r0, int64_t nr) {
    const int64_t D = a->head_dim;
    const int64_t g = h / (a->n_head / a->n_head_kv);
    const uint16_t *kh = (const uint16_t *)a->k + g * a->kv_capacity * D;
    const uint16_t *vh = (const uint16_t *)a->v + g * a->kv_capacity * D;
    for (int64_t i = r0; i < r0 + nr; ++i) {
        tiled_row_ref(tiled_lanes(a->contract), a->q + (i * a->n_head + h) * D, kh, vh, D,
                      v8_attn_row_kv_begin(a, i), v8_attn_row_kv_end(a, i), a->scale,
                      a->out + (i * a->n_head + h) * D);
    }
}

v8_status v8_attn_tiled_ref(V8_ATTN_ARGS_DECL) {
    const v8_attn_args a = V8_ATTN_PACK();
    v8_status st = tiled_check(&a);
    if (st != V8_OK) {
        return st;
    }
    /* The oracle uses no scratch, but it asks for what the size function says (as
     * production does) so the provider's size function and its checks always agree. */
    V8_REQUIRE(scratch != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(scratch_bytes >= v8_attn_tiled_scratch_bytes(n_q, n_head, head_dim, 1),
               V8_ERR_BAD_DIMENSION);
    /* Heads, then 64-row query blocks, then rows: the blocking has no
     * numerical effect (every row is independent), it mirrors the kernel. */
    for (int64_t h = 0; h < n_head; ++h) {
        for (int64_t r0 = 0; r0 < n_q; r0 += TQ) {
            tiled_task_ref(&a, h, r0, n_q - r0 < TQ ? n_q - r0 : TQ);
        }
    }
    return V8_OK;
}

/* ---- production: per-worker scratch -------------------------------------- */

/* Floats of one worker's slice: the tile task's (tile_task.h), and room the scratch size
 * has always stated for per-row state (now on the task's stack). */
static size_t tiled_worker_floats(int64_t D) {
    return tile_ws_floats(D) + 3 * TQ + 2 * TQ;
}

size_t v8_attn_tiled_scratch_bytes(int64_t n_q, int64_t n_head, int64_t head_dim,
                                   int n_workers) {
    (void)n_q;
    (void)n_head;
    if (head_dim < 1 || n_workers < 1) {
        return 0;
    }
    return (size_t)n_workers * tiled_worker_floats(head_dim) * sizeof(float) + 64;
}

/* ---- production entry points --------------------------------------------- */

/* The scalar variant runs the oracle (it is the contract's arithmetic). */
static void tiled_task_scalar(const v8_attn_args *a, const v8_tile_ws *w, int64_t h, int64_t r0,
                              int64_t nr, int kind) {
    (void)w;
    (void)kind;
    tiled_task_ref(a, h, r0, nr);
}

static tile_task_fn tiled_pick(void) {
    tile_task_fn fn = tile_task_pick();
    return fn ? fn : tiled_task_scalar;
}

typedef struct tiled_job {
    const v8_attn_args *a;
    tile_task_fn fn;
    int64_t n_qblocks;
} tiled_job;

/* task = (head, 64-row query block); disjoint outputs, own scratch slice per worker */
static void tiled_job_run(void *ctx, int64_t task, int worker) {
    const tiled_job *job = (const tiled_job *)ctx;
    const int64_t h = task / job->n_qblocks;
    const int64_t r0 = (task % job->n_qblocks) * TQ;
    const int64_t nr = job->a->n_q - r0 < TQ ? job->a->n_q - r0 : TQ;
    const v8_tile_ws w = tile_slice(job->a->scratch, job->a->head_dim,
                                            tiled_worker_floats(job->a->head_dim), worker);
    job->fn(job->a, &w, h, r0, nr, tiled_lanes(job->a->contract) == 16 ? V8_TILE_ONLINE16
                                                                         : V8_TILE_ONLINE8);
}

v8_status v8_attn_tiled(V8_ATTN_ARGS_DECL) {
    const v8_attn_args a = V8_ATTN_PACK();
    v8_status st = tiled_check(&a);
    if (st != V8_OK) {
        return st;
    }
    V8_REQUIRE(scratch != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(scratch_bytes >= v8_attn_tiled_scratch_bytes(n_q, n_head, head_dim, 1),
               V8_ERR_BAD_DIMENSION);
    tiled_job job = {&a, tiled_pick(), (n_q + TQ - 1) / TQ};
    for (int64_t t = 0; t < n_head * job.n_qblocks; ++t) {
        tiled_job_run(&job, t, 0);
    }
    return V8_OK;
}

v8_status v8_attn_tiled_parallel_dispatch(v8_threadpool *pool, V8_ATTN_ARGS_DECL) {
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    const v8_attn_args a = V8_ATTN_PACK();
    v8_status st = tiled_check(&a);
    if (st != V8_OK) {
        return st;
    }
    const int workers = v8_threadpool_workers(pool);
    V8_REQUIRE(scratch != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(scratch_bytes >= v8_attn_tiled_scratch_bytes(n_q, n_head, head_dim, workers),
               V8_ERR_BAD_DIMENSION);
    tiled_job job = {&a, tiled_pick(), (n_q + TQ - 1) / TQ};
    return v8_parallel_for(pool, n_head * job.n_qblocks, tiled_job_run, &job);
}
