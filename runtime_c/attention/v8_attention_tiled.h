/* v8 attention: tiled prefill, the auto composite and the llama.cpp regular
 * (non-flash) path.  All functions use the common attention ABI of
 * v8_attention.h (K/V: fp16 bits, head-major [n_head_kv][kv_capacity][D]).
 *
 * Provider attn_tiled64_f16kv - contract f16_kv_tiled64_fp32_softmax_fp64_sum_update
 *   Per (head, query row), keys in tiles of 64 starting at key 0:
 *     s_j  = fma chain over d ascending (from 0) of q[d] * k_j[d], then s_j * scale
 *            (q fp32 as given, k widened from fp16); hidden/padded keys -> -inf;
 *            a tile in which the row sees nothing leaves the row untouched
 *     Mn   = max(M, max_j s_j); if Mn > M: A *= expf(M - Mn), S *= expf(M - Mn)
 *            (expf: the C library's)
 *     p_j  = exp16(s_j - Mn), exp16 = ggml's AVX-512 vector expf (Cody-Waite
 *            reduction, degree-5 polynomial including the 1, exact scaling by 2^n)
 *     S    = fp32(fp64(S) + sum over the 4 groups of 16 keys, ascending, of
 *            fp64(tree16(p))), tree16 = _mm512_reduce_add_ps's tree:
 *            a_i = p_{i+8} + p_i, b_i = a_{i+4} + a_i, (b_0 + b_2) + (b_1 + b_3)
 *     A[d] = fma chain over the tile's 64 keys ascending of p_j * v_j[d], from A[d]
 *   out = A * (1 / S)  (0 when S == 0).
 *   This is ggml_compute_forward_flash_attn_ext_tiled as built for AVX-512
 *   (ggml 0.15, ggml-python 0.0.45); per row it does not depend on the query
 *   tiling, on padding of K beyond the mask, or on the thread count.
 *   Partition: independent (head, 64-query block) tasks, effect none.
 *
 * Provider attn_tiled64_f16kv - contract f16_kv_tiled64_fp32_softmax_fp64_sum_update_8_lane_vexp
 *   The same tile recurrence as llama.cpp's AVX2 build computes it (ggml_vec_soft_max_f32's
 *   __m256 step): scores, running max, libm rescale and the P.V fma chains as above, but
 *     p_j  = vexp8(s_j - Mn), vexp8 = ggml's AVX2 vector expf (ops/ggml_vexp.h
 *            vexp_lane_avx2: polynomial without the 1, 2^n from the exponent bits,
 *            k + k*j, the scale split in two factors when |n| > 126)
 *     S    = fp32(fp64(S) + sum over the 8 groups of 8 keys, ascending, of
 *            fp64(tree8(p))), tree8: a_i = p_{i+4} + p_i, (a_0 + a_2) + (a_1 + a_3)
 *
 * Provider attn_auto_qtile64_f16kv - contract f16_flash_auto_qtile64
 *   The choice ggml makes per prefill segment (per call): the tiled contract
 *   when n_q >= 64 and head_dim is a multiple of 16 (the f32 lane count of the
 *   AVX-512 build; ggml falls back to the one-chunk path otherwise), else
 *   f16_online_single_range (provided by v8_attn_online_f16kv*).
 *   f16_flash_auto_qtile64_fp32_dot (AVX-512 build) and
 *   f16_flash_auto_qtile64_fp32_dot_8_lane (AVX2 build): n_q >= 64 at any head_dim runs
 *   the build's tiled contract (..._sum_update resp. ..._sum_update_8_lane_vexp), below
 *   f16_online_single_range_fp32_dot.
 *
 * Provider attn_llama_regular_f16kv - contract fp32_llama_regular
 *   s_j = fma chain over d (from 0) of r16(q)[d] * k_j[d]; w_j = s_j * scale,
 *   hidden keys -inf; p_j = exp16(w_j - max w); sum = fp64 sum of tree16 over
 *   16-key groups; p16_j = r16(p_j * fp32(1/sum)); out[d] = fma chain over keys
 *   of p16_j * v_j[d].  The dot orders (sequential chains) are this provider's
 *   declared order; see llama_regular.c.  Partition: (head, query block). */
#ifndef V8_ATTENTION_TILED_H
#define V8_ATTENTION_TILED_H

#include "v8_attention.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The selectors these providers deliver (constants of v8_attention.h). */
#define V8_ATTN_TILED_CONTRACT V8_ATTN_F16_KV_TILED64_FP32_SOFTMAX_FP64_SUM_UPDATE
#define V8_ATTN_TILED_8_LANE_CONTRACT \
    V8_ATTN_F16_KV_TILED64_FP32_SOFTMAX_FP64_SUM_UPDATE_8_LANE_VEXP
#define V8_ATTN_AUTO_CONTRACT V8_ATTN_F16_FLASH_AUTO_QTILE64
#define V8_ATTN_AUTO_FP32_DOT_CONTRACT V8_ATTN_F16_FLASH_AUTO_QTILE64_FP32_DOT
#define V8_ATTN_AUTO_FP32_DOT_8_LANE_CONTRACT V8_ATTN_F16_FLASH_AUTO_QTILE64_FP32_DOT_8_LANE
#define V8_ATTN_LLAMA_REGULAR_CONTRACT V8_ATTN_FP32_LLAMA_REGULAR

#define V8_ATTN_TILE_Q 64
#define V8_ATTN_TILE_KV 64

/* ---- provider attn_tiled64_f16kv ---------------------------------------------- */
size_t v8_attn_tiled_scratch_bytes(int64_t n_q, int64_t n_head, int64_t head_dim,
                                   int n_workers);
v8_status v8_attn_tiled_ref(V8_ATTN_ARGS_DECL);
v8_status v8_attn_tiled(V8_ATTN_ARGS_DECL);
v8_status v8_attn_tiled_parallel_dispatch(v8_threadpool *pool, V8_ATTN_ARGS_DECL);

/* ---- provider attn_auto_qtile64_f16kv ----------------------------------------- */
/* 1 when the auto contract runs the tiled contract for this segment. */
int v8_attn_auto_uses_tiled(int64_t n_q, int64_t head_dim);
size_t v8_attn_auto_scratch_bytes(int64_t n_q, int64_t n_head, int64_t head_dim,
                                  int n_workers);
v8_status v8_attn_auto_ref(V8_ATTN_ARGS_DECL);
v8_status v8_attn_auto(V8_ATTN_ARGS_DECL);
v8_status v8_attn_auto_parallel_dispatch(v8_threadpool *pool, V8_ATTN_ARGS_DECL);

/* ---- provider attn_llama_regular_f16kv ---------------------------------------- */
size_t v8_attn_llama_regular_scratch_bytes(int64_t n_q, int64_t n_head, int64_t head_dim,
                                           int n_workers);
v8_status v8_attn_llama_regular_ref(V8_ATTN_ARGS_DECL);
v8_status v8_attn_llama_regular(V8_ATTN_ARGS_DECL);
v8_status v8_attn_llama_regular_parallel_dispatch(v8_threadpool *pool, V8_ATTN_ARGS_DECL);

#ifdef __cplusplus
}
#endif

#endif /* V8_ATTENTION_TILED_H */
