/* v8 attention: contract selectors, the common argument ABI and the online
 * (single-range and split-KV) providers.
 *
 * Every attention provider in runtime_c/attention has three functions with
 * one argument list (the threadpool one with a leading v8_threadpool *):
 *
 *   v8_status fn(int contract, float *out, const float *q, const void *k, const void *v,
 *                int64_t n_q, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
 *                int64_t kv_len, int64_t kv_capacity, int64_t q_pos0, int causal,
 *                int64_t window, float scale, void *scratch, size_t scratch_bytes);
 *
 *   q    fp32 [n_q][n_head][D]      token-major (like ggml)
 *   out  fp32 [n_q][n_head][D]
 *   k, v [n_head_kv][kv_capacity][D] head-major cache, valid length kv_len <= kv_capacity;
 *        the element type (fp16 bits as uint16_t, or fp32) is the kernel map's dtypes.kv
 *   GQA  query head h reads KV head h / (n_head / n_head_kv)
 *   causal: query row i (absolute position q_pos0 + i) sees keys [0, q_pos0 + i];
 *        non-causal rows see [0, kv_len).  Decode is n_q = 1 at q_pos0 = kv_len - 1.
 *   window: 0, or (causal only) a sliding window of that many positions: the row at
 *        position p sees keys [max(0, p - window + 1), p], llama.cpp's standard SWA mask
 *        (a key at p0 is masked when p - p0 >= window).  Keys outside a row's range are
 *        masked exactly as ggml's -INFINITY mask entries are: skipped by the online
 *        recurrences, zero weights inside a tile or a softmax row.
 *
 * Selector constants name contracts of the registry; a function returns
 * V8_ERR_UNKNOWN_SELECTOR for a contract it does not deliver and writes
 * nothing.  Sizes and pointers are checked before the first write. */
#ifndef V8_ATTENTION_H
#define V8_ATTENTION_H

#include "v8_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- contract selectors (all attention contracts of the registry) ------ */

enum {
    V8_ATTN_FP32_ONLINE = 1,
    V8_ATTN_F16_KV_FP32_ONLINE = 2,
    V8_ATTN_FP32_LLAMA_REGULAR = 3,
    V8_ATTN_F16_ONLINE_SINGLE_RANGE = 4,
    V8_ATTN_F16_ONLINE_SINGLE_RANGE_NOSCALE = 5,
    V8_ATTN_F16_ONLINE_FP32_MERGE = 6,
    V8_ATTN_F16_KV_TILED64_FP32_SOFTMAX_FP64_SUM_UPDATE = 7,
    V8_ATTN_F16_FLASH_AUTO_QTILE64 = 8,
    V8_ATTN_BF16_PYTORCH_SDPA = 9,
    V8_ATTN_F16_ONLINE_SINGLE_RANGE_FP32_DOT = 10,
    V8_ATTN_F16_ONLINE_FP32_MERGE_FP32_DOT = 11,
    V8_ATTN_F16_FLASH_AUTO_QTILE64_FP32_DOT = 12,
    /* llama.cpp's AVX2 build (8 fp32 lanes): the tiled prefill and the composite using it */
    V8_ATTN_F16_KV_TILED64_FP32_SOFTMAX_FP64_SUM_UPDATE_8_LANE_VEXP = 13,
    V8_ATTN_F16_FLASH_AUTO_QTILE64_FP32_DOT_8_LANE = 14
};

/* The contracts whose q.k dot stays in fp32 lanes on every x86 CPU (llama.cpp's current
 * ggml: GGML_F16_DOT accumulates in fp32 even where AVX512-FP16 exists). */
static inline int v8_attn_fp32_dot_contract(int contract) {
    return contract == V8_ATTN_F16_ONLINE_SINGLE_RANGE_FP32_DOT ||
           contract == V8_ATTN_F16_ONLINE_FP32_MERGE_FP32_DOT ||
           contract == V8_ATTN_F16_FLASH_AUTO_QTILE64_FP32_DOT ||
           contract == V8_ATTN_F16_FLASH_AUTO_QTILE64_FP32_DOT_8_LANE;
}

/* Largest head dimension any provider accepts (per-row state lives on the
 * stack at this size, so hot paths need no allocation). */
#define V8_ATTN_MAX_HEAD_DIM 256

/* ---- the common argument bundle ---------------------------------------- */

typedef struct v8_attn_args {
    int contract;
    float *out;
    const float *q;
    const void *k;
    const void *v;
    int64_t n_q, n_head, n_head_kv, head_dim;
    int64_t kv_len, kv_capacity, q_pos0;
    int causal;
    int64_t window;
    float scale;
    void *scratch;
    size_t scratch_bytes;
} v8_attn_args;

/* Shape and pointer checks shared by all providers (the selector and the
 * scratch size are each provider's own business).  Head dims must be a
 * positive multiple of 8 up to V8_ATTN_MAX_HEAD_DIM; n_head a multiple of
 * n_head_kv; a causal batch must end inside the valid KV
 * (q_pos0 + n_q <= kv_len); a non-causal one ignores q_pos0 (>= 0). */
static inline v8_status v8_attn_check_shape(const v8_attn_args *a) {
    V8_REQUIRE(a->out != NULL && a->q != NULL && a->k != NULL && a->v != NULL,
               V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(a->n_q >= 1 && a->n_head >= 1 && a->n_head_kv >= 1, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(a->n_head % a->n_head_kv == 0, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(a->head_dim >= 8 && a->head_dim % 8 == 0 && a->head_dim <= V8_ATTN_MAX_HEAD_DIM,
               V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(a->kv_len >= 1 && a->kv_capacity >= a->kv_len, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(a->causal == 0 || a->causal == 1, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(a->window >= 0 && (a->window == 0 || a->causal == 1), V8_ERR_BAD_DIMENSION);
    if (a->causal) {
        V8_REQUIRE(a->q_pos0 >= 0 && a->q_pos0 + a->n_q <= a->kv_len, V8_ERR_BAD_DIMENSION);
    } else {
        V8_REQUIRE(a->q_pos0 >= 0, V8_ERR_BAD_DIMENSION); /* not used without a mask */
    }
    V8_REQUIRE(a->scratch != NULL || a->scratch_bytes == 0, V8_ERR_NULL_ARGUMENT);
    return V8_OK;
}

/* Query row i sees keys [v8_attn_row_kv_begin, v8_attn_row_kv_end): causal rows end at
 * their own position q_pos0 + i, windowed rows begin window - 1 positions before it. */
static inline int64_t v8_attn_row_kv_end(const v8_attn_args *a, int64_t i) {
    return a->causal ? a->q_pos0 + i + 1 : a->kv_len;
}

static inline int64_t v8_attn_row_kv_begin(const v8_attn_args *a, int64_t i) {
    const int64_t begin = a->q_pos0 + i + 1 - a->window;
    return a->window > 0 && begin > 0 ? begin : 0;
}

#define V8_ATTN_ARGS_DECL                                                                 \
    int contract, float *out, const float *q, const void *k, const void *v,             \
        int64_t n_q, int64_t n_head, int64_t n_head_kv, int64_t head_dim,               \
        int64_t kv_len, int64_t kv_capacity, int64_t q_pos0, int causal, int64_t window, \
        float scale, void *scratch, size_t scratch_bytes

/* The same arguments as names, to forward them or to pack them (V8_ATTN_PACK). */
#define V8_ATTN_ARGS_FWD                                                                  \
    contract, out, q, k, v, n_q, n_head, n_head_kv, head_dim, kv_len, kv_capacity, q_pos0, \
        causal, window, scale, scratch, scratch_bytes

#define V8_ATTN_PACK() ((v8_attn_args){V8_ATTN_ARGS_FWD})

/* ---- dot-product lane trees ----------------------------------------------
 * Where bit-exactness with ggml depends on the order inside the f16 dot
 * product and on the fp16 value update, the provider variant names it.  Each
 * tree is ggml_vec_dot_f16 / ggml_vec_mad_f16 / ggml_vec_scale_f16 as ggml
 * compiles them for one ISA:
 *   AVX2_F32X8X4        4 accumulators x 8 fp32 lanes (FMA), step 32; tree
 *                       a0+a2, a1+a3, then +; 128-bit halves; hadd; hadd.
 *                       Value update: r16(fmaf(v, vs, A)), r16(A * ms).
 *   AVX512_F32X16X4     4 x 16 fp32 lanes, step 64; a0+a2, a1+a3, +; then
 *                       256-bit halves, 128-bit halves, (w0+w2)+(w1+w3).
 *                       Value update as AVX2.
 *   AVX512FP16_F16X32X4 4 x 32 fp16 lanes (fp16 FMA, fp16 adds), step 128;
 *                       a0+a2, a1+a3, +; halves 512->256->128; lane i +
 *                       lane (i+4)%8; (t0+t2)+(t1+t3).  For the first
 *                       D - D%128 elements the value update runs in fp16:
 *                       A = fma16(v, r16(vs), A), A = r16(A * r16(ms)).
 * In every tree the elements past the last full step are added as exact
 * fp32 products into a double running sum, ascending, and the double is
 * rounded to fp32 at the end.  The AVX-512 variant uses AVX512FP16_F16X32X4
 * on CPUs with AVX512-FP16 (that is what a native ggml build uses there)
 * and AVX512_F32X16X4 otherwise; the scalar variant uses AVX2_F32X8X4. */
enum {
    V8_ATTN_TREE_AVX2_F32X8X4 = 1,
    V8_ATTN_TREE_AVX512_F32X16X4 = 2,
    V8_ATTN_TREE_AVX512FP16_F16X32X4 = 3,
    /* AVX512_F32X16X4 scores with the AVX512FP16 value updates (fp16 FMA over the first
     * D - D % 128 elements): the *_fp32_dot contracts on CPUs with AVX512-FP16 */
    V8_ATTN_TREE_AVX512FP16_VALUES_F32X16X4_DOT = 4
};

/* The tree the production and threadpool functions use now (depends on the
 * running CPU and on v8_cpu_restrict). */
int v8_attn_online_dot_tree(void);
/* The tree of the *_fp32_dot contracts on the running CPU. */
int v8_attn_online_fp32_dot_tree(void);
/* Test knob in the spirit of v8_cpu_restrict: 0 keeps the AVX-512 variant
 * off the fp16 lanes (so AVX512_F32X16X4 can be exercised on an FP16 host),
 * 1 (the default) allows them. */
void v8_attn_online_allow_avx512fp16(int allow);

/* ---- provider online_f32kv: fp32 K/V cache -------------------------------
 * Contract: fp32_online.  Single range per (query row, head); fp32 value
 * accumulator; partition independent_heads x query rows (effect none). */
size_t v8_attn_online_f32kv_scratch_bytes(int64_t n_q, int64_t n_head, int64_t head_dim,
                                          int n_workers);
v8_status v8_attn_online_f32kv_ref(V8_ATTN_ARGS_DECL);
v8_status v8_attn_online_f32kv(V8_ATTN_ARGS_DECL);
v8_status v8_attn_online_f32kv_parallel_dispatch(v8_threadpool *pool, V8_ATTN_ARGS_DECL);

/* ---- provider online_f16kv: fp16 K/V cache, single range -----------------
 * Contracts: f16_kv_fp32_online, f16_online_single_range,
 * f16_online_single_range_noscale, f16_online_single_range_fp32_dot.  Partition independent heads x query
 * rows (effect none). */
size_t v8_attn_online_f16kv_scratch_bytes(int64_t n_q, int64_t n_head, int64_t head_dim,
                                          int n_workers);
v8_status v8_attn_online_f16kv_ref(V8_ATTN_ARGS_DECL);
/* The oracle for one named tree; _ref uses v8_attn_online_dot_tree(). */
v8_status v8_attn_online_f16kv_ref_tree(int tree, V8_ATTN_ARGS_DECL);
v8_status v8_attn_online_f16kv(V8_ATTN_ARGS_DECL);
v8_status v8_attn_online_f16kv_parallel_dispatch(v8_threadpool *pool, V8_ATTN_ARGS_DECL);

/* ---- provider online_split_kv: fp16 K/V cache, split-KV decode ------------
 * Contracts: f16_online_fp32_merge, f16_online_fp32_merge_fp32_dot (decode, n_q = 1).  Chunk count is the
 * contract's: 1 for the serial functions (oracle and production, i.e. one
 * worker), the pool's worker count for the threadpool dispatch.  Scratch
 * holds one fp16 partial (M, S, A[D]) per (head, chunk). */
size_t v8_attn_online_split_scratch_bytes(int64_t n_q, int64_t n_head, int64_t head_dim,
                                          int n_workers);
v8_status v8_attn_online_split_ref(V8_ATTN_ARGS_DECL);
v8_status v8_attn_online_split(V8_ATTN_ARGS_DECL);
v8_status v8_attn_online_split_parallel_dispatch(v8_threadpool *pool, V8_ATTN_ARGS_DECL);
/* The oracle for an explicit worker (= chunk) count, so the threadpool run
 * at W workers is compared with the oracle at W chunks. */
v8_status v8_attn_online_split_ref_workers(int n_workers, V8_ATTN_ARGS_DECL);
v8_status v8_attn_online_split_ref_tree(int tree, int n_workers, V8_ATTN_ARGS_DECL);

#ifdef __cplusplus
}
#endif

#endif /* V8_ATTENTION_H */
