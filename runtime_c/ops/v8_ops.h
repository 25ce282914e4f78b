/* v8 simple decoder ops: RMSNorm, QK-norm, RoPE (neox, normal, multi-section),
 * embedding lookup and fp32 linear, plus scalar references for the
 * elementwise ops the C printer writes inline (residual add, SwiGLU, GeGLU).
 *
 * Every provider has three functions with one argument list; the threadpool
 * one takes a leading v8_threadpool *:
 *
 *   *_ref                scalar contract oracle, the definition of the bits
 *   (public name)        production function, dispatches on the running CPU
 *   *_parallel_dispatch  splits the work over the pool's workers exactly as
 *                        the kernel map's partition declares
 *
 * All of them check the selector, every pointer and every size before the
 * first write: on any error the output is untouched.  Outputs may alias an
 * input exactly where a function says so, never partially.
 *
 * Arithmetic is IEEE fp32 with each operation rounded on its own: the
 * sources switch floating-point contraction off (no FMA fusion), so the
 * bits do not depend on compiler flags such as -mfma or -ffp-contract=fast. */
#ifndef V8_OPS_H
#define V8_OPS_H

#include "v8_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- contract selectors ----------------------------------------------------
 * One range per op family, disjoint from the attention (1..9) and other
 * runtime_c selectors, so a selector handed to the wrong family's kernel is
 * rejected instead of being misread.  Zero is never a selector. */
enum {
    V8_RMSNORM_FP32_FP64_SUM_ASCENDING = 0x101,
    V8_QK_NORM_FP32_FP64_SUM_ASCENDING = 0x201,
    V8_ROPE_NEOX_FP32_ITERATIVE_THETA = 0x301,
    V8_ROPE_NORMAL_FP32_ITERATIVE_THETA = 0x302,
    V8_ROPE_NEOX_FP32_GGML_FMA = 0x303,
    V8_ROPE_NORMAL_FP32_GGML_FMA = 0x304,
    V8_MROPE_FP32_ITERATIVE_THETA_SECTIONS = 0x311,
    V8_IMROPE_FP32_ITERATIVE_THETA_INTERLEAVED_SECTIONS = 0x312,
    V8_IMROPE_FP32_GGML_FMA = 0x314,
    V8_EMBEDDING_FP32_ROW_COPY = 0x401,
    V8_KV_STORE_F16_ROUND_NEAREST_EVEN = 0x801,
    V8_KV_STORE_FP32_COPY = 0x802,
    V8_LINEAR_FP32_ASCENDING_FP32_ACCUMULATE = 0x501,
    V8_LOGITS_FP32_ASCENDING_FP32_ACCUMULATE = 0x502, /* same arithmetic, logits projection */
    V8_RESIDUAL_ADD_FP32 = 0x601,
    V8_SWIGLU_FP32_EXPF = 0x701,
    V8_GEGLU_FP32_TANH = 0x702,
    V8_SIGMOID_GATE_FP32_EXPF = 0x703,
    V8_HEAD_SPLIT_EXACT_COPY = 0x901,
    V8_GATED_DELTA_RULE_FP32_TOKEN_SEQUENTIAL_STATE = 0xA01,
    V8_LAYER_NORM_FP32_FP64_SUM_ASCENDING_BIAS = 0x102,
    V8_GELU_FP32_TANH = 0x704,
    V8_VISION_ROPE_FP32_ITERATIVE_THETA_2D_SECTIONS = 0x313,
    V8_PATCH_MERGE_2X2_EXACT_COPY = 0x902,
    V8_SWIGLU_FP32_GGML_VEXP = 0x705,
    V8_GEGLU_FP32_GGML_FP16_TABLE = 0x706,
    V8_GATED_DELTA_RULE_FP32_GGML_16_LANE_CHAIN = 0xA02,
    V8_GATED_DELTA_RULE_FP32_GGML_8_LANE_CHAIN = 0xA03,
    V8_GATED_DELTA_RULE_FP32_GGML_16_LANE_CHAIN_4_LANE_TAILS = 0xA04,
    V8_SCALE_FP32_MULTIPLY = 0x707
};

/* ---- RMSNorm: provider rmsnorm_fp32 -----------------------------------------
 * Contract rmsnorm_fp32_fp64_sum_ascending, per row r of x[n_rows][n]:
 *   sum   = 0.0 (fp64);  for i ascending: sum += (double)(x[i] * x[i])   (product in fp32)
 *   mean  = (float)(sum / n)                                             (fp64 divide)
 *   scale = 1.0f / sqrtf(mean + eps)
 *   y[i]  = (x[i] * scale) * w[i]          two fp32 roundings, as ggml's rms_norm then mul
 * eps >= 0.  y may alias x exactly.  Rows are independent (partition
 * independent_rows, reduction-order effect none). */
v8_status v8_rmsnorm_f32_ref(int contract, float *y, const float *x, const float *w,
                             int64_t n_rows, int64_t n, float eps);
v8_status v8_rmsnorm_f32(int contract, float *y, const float *x, const float *w,
                         int64_t n_rows, int64_t n, float eps);
v8_status v8_rmsnorm_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                           const float *x, const float *w, int64_t n_rows,
                                           int64_t n, float eps);

/* ---- QK-norm: provider qk_norm_fp32 -----------------------------------------
 * Contract qk_norm_fp32_fp64_sum_ascending: the RMSNorm arithmetic above per
 * (token, head) row of x[n_tokens][n_head][head_dim] (token-major), with one
 * weight vector w[head_dim] shared by all heads.  y may alias x exactly. */
v8_status v8_qk_norm_f32_ref(int contract, float *y, const float *x, const float *w,
                             int64_t n_tokens, int64_t n_head, int64_t head_dim, float eps);
v8_status v8_qk_norm_f32(int contract, float *y, const float *x, const float *w,
                         int64_t n_tokens, int64_t n_head, int64_t head_dim, float eps);
v8_status v8_qk_norm_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                           const float *x, const float *w, int64_t n_tokens,
                                           int64_t n_head, int64_t head_dim, float eps);

/* ---- RoPE: provider rope_fp32 -----------------------------------------------
 * x, y: [n_tokens][n_head][head_dim] token-major; pos[n_tokens] int32.
 * The first n_rot dims of every head rotate (n_rot even, 2 <= n_rot <=
 * head_dim); the rest are copied.  ggml's arithmetic with freq_scale = 1,
 * ext_factor = 0, attn_factor = 1 and no frequency factors:
 *   theta_scale = powf(freq_base, -2.0f / (float)n_rot)
 *   theta_0 = (float)pos[t];  theta_{i+1} = theta_i * theta_scale      (fp32, iterative)
 *   c_i = cosf(theta_i), s_i = sinf(theta_i)
 *   pair i (0 <= i < n_rot/2) is (a, b) = (i, i + n_rot/2) for
 *     rope_neox_fp32_iterative_theta, (2i, 2i+1) for rope_normal_fp32_iterative_theta
 *   y[a] = x[a]*c_i - x[b]*s_i;  y[b] = x[a]*s_i + x[b]*c_i          (each product rounded)
 * rope_{neox,normal}_fp32_ggml_fma: the same angles and pairs, with the rotation
 * llama.cpp's native build computes (the products of x[a] fused, those of x[b] rounded):
 *   y[a] = fmaf(x[a], c, -(x[b]*s));  y[b] = fmaf(x[a], s, x[b]*c)
 * freq_base > 0 and finite.  y may alias x exactly.  Tokens are independent
 * (partition independent_rows over tokens, effect none). */
v8_status v8_rope_f32_ref(int contract, float *y, const float *x, const int32_t *pos,
                          int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t n_rot,
                          float freq_base);
v8_status v8_rope_f32(int contract, float *y, const float *x, const int32_t *pos,
                      int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t n_rot,
                      float freq_base);
v8_status v8_rope_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                        const float *x, const int32_t *pos, int64_t n_tokens,
                                        int64_t n_head, int64_t head_dim, int64_t n_rot,
                                        float freq_base);

/* ---- multi-section RoPE (Qwen2-VL): provider mrope_fp32 ---------------------
 * Contract mrope_fp32_iterative_theta_sections, ggml's rope_multi in
 * GGML_ROPE_TYPE_MROPE mode (neox pairs, sections not restarted):
 * pos[4][n_tokens] holds the streams t, h, w, e; sections[4] >= 0, their sum
 * S > 0 with one of the first three positive.  Four thetas start at
 * (float)pos[s][t] and are all multiplied by theta_scale after every pair;
 * pair i uses the stream of sector i % S: [0, s0) t, [s0, s0+s1) h,
 * [s0+s1, s0+s1+s2) w, the rest e.  Rotation and copying as neox above. */
v8_status v8_mrope_f32_ref(int contract, float *y, const float *x, const int32_t *pos,
                           int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t n_rot,
                           float freq_base, const int32_t *sections);
v8_status v8_mrope_f32(int contract, float *y, const float *x, const int32_t *pos,
                       int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t n_rot,
                       float freq_base, const int32_t *sections);
v8_status v8_mrope_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const float *x, const int32_t *pos, int64_t n_tokens,
                                         int64_t n_head, int64_t head_dim, int64_t n_rot,
                                         float freq_base, const int32_t *sections);

/* ---- interleaved multi-section RoPE (Qwen3-VL, Qwen3.5): provider imrope_fp32 --
 * Contract imrope_fp32_iterative_theta_interleaved_sections, ggml's rope_multi
 * in GGML_ROPE_TYPE_IMROPE mode: everything as mrope above (neox pairs, four
 * iterative fp32 thetas multiplied by theta_scale after every pair, sections
 * never restarted) except the stream of pair i.  With sector = i % S:
 *   h if sector % 3 == 1 and sector < 3*sections[1];
 *   else w if sector % 3 == 2 and sector < 3*sections[2];
 *   else t if sector % 3 == 0 and sector < 3*sections[0];
 *   else e                                   (tested in exactly this order).
 * imrope_fp32_ggml_fma: the same streams with the fused neox rotation above.
 * Each provider accepts only its own selectors. */
v8_status v8_imrope_f32_ref(int contract, float *y, const float *x, const int32_t *pos,
                            int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t n_rot,
                            float freq_base, const int32_t *sections);
v8_status v8_imrope_f32(int contract, float *y, const float *x, const int32_t *pos,
                        int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t n_rot,
                        float freq_base, const int32_t *sections);
v8_status v8_imrope_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                          const float *x, const int32_t *pos, int64_t n_tokens,
                                          int64_t n_head, int64_t head_dim, int64_t n_rot,
                                          float freq_base, const int32_t *sections);

/* ---- embedding: provider embedding_fp32 -------------------------------------
 * Contract embedding_fp32_row_copy: y[t][:] = table[ids[t]][:] (exact copy).
 * Every id is checked against [0, n_vocab) before anything is written; an
 * out-of-range id returns V8_ERR_BAD_DIMENSION with y untouched. */
v8_status v8_embedding_f32_ref(int contract, float *y, const float *table, const int32_t *ids,
                               int64_t n_tokens, int64_t n_vocab, int64_t dim);
v8_status v8_embedding_f32(int contract, float *y, const float *table, const int32_t *ids,
                           int64_t n_tokens, int64_t n_vocab, int64_t dim);
v8_status v8_embedding_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                             const float *table, const int32_t *ids,
                                             int64_t n_tokens, int64_t n_vocab, int64_t dim);

/* ---- fp32 linear: provider linear_fp32 --------------------------------------
 * Contracts linear_fp32_ascending_fp32_accumulate and
 * logits_fp32_ascending_fp32_accumulate (the same arithmetic for the
 * vocabulary projection): y[m][n] = x[m][k] . w[n][k]
 * (weight rows are output features, as ggml stores them), per output:
 *   acc = 0.0f;  for j ascending: acc = acc + w[n][j] * x[m][j]    (product and sum
 *                                                               rounded separately)
 *   y = acc + bias[n]       (bias after the complete dot; bias may be NULL = none)
 * m = 1 is the GEMV.  y must not alias w, x or bias.  Output rows n are
 * independent (partition independent_rows, effect none). */
v8_status v8_linear_f32_ref(int contract, float *y, const float *w, const float *x,
                            const float *bias, int64_t m, int64_t n, int64_t k);
v8_status v8_linear_f32(int contract, float *y, const float *w, const float *x,
                        const float *bias, int64_t m, int64_t n, int64_t k);
v8_status v8_linear_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                          const float *w, const float *x, const float *bias,
                                          int64_t m, int64_t n, int64_t k);

/* ---- references for the printer's inline elementwise ops ---------------------
 * The C printer emits these inline (AVX-512 / AVX2 / scalar); these scalar
 * functions define the bits its code must reproduce.  y may alias an input.
 *   residual_add_fp32: y = a + b
 *   swiglu_fp32_expf:  y = (g / (1.0f + expf(-g))) * u
 *   geglu_fp32_tanh:   y = ((0.5f*g) * (1.0f + tanhf((C*g) * (1.0f + (A*g)*g)))) * u
 *                      with C = 0.7978845608f (sqrt(2/pi) in fp32), A = 0.044715f,
 *                      evaluated in exactly this order (ggml's ggml_gelu_f32 form of
 *                      0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))), not its fp16 table). */
#define V8_GELU_SQRT_2_OVER_PI 0.79788456080286535587989211986876f
#define V8_GELU_COEF_A 0.044715f
v8_status v8_residual_add_f32_ref(int contract, float *y, const float *a, const float *b,
                                  int64_t n);
v8_status v8_swiglu_f32_ref(int contract, float *y, const float *g, const float *u, int64_t n);
v8_status v8_geglu_f32_ref(int contract, float *y, const float *g, const float *u, int64_t n);

/* ---- gated activations as llama.cpp computes them: providers swiglu_fp32_ggml, geglu_fp32_ggml
 * gate = lhs, up = rhs, [n_rows][n]; y may not alias an input.
 *   swiglu_fp32_ggml_vexp: per row, blocks of W = 16 (AVX-512) or 8 (AVX2, and the scalar
 *     variant) elements from the row's start take ggml's polynomial exp of that ISA,
 *     silu = x / (1 + vexp(0 - x)); the last n % W elements take x / (1 + expf(-x));
 *     y = silu * u.  W is the width of the ISA v8_cpu_best_isa() reports.
 *   geglu_fp32_ggml_fp16_table: g <= -10 -> 0; g >= 10 -> g * u; else
 *     y = f16_to_f32(T[f32_to_f16(g)]) * u, T[h] = f32_to_f16(gelu(f16_to_f32(h))) with
 *     gelu(x) = (0.5f*x) * (1 + tanhf((C*x) * fmaf(A*x, x, 1))). */
v8_status v8_swiglu_ggml_f32_ref(int contract, float *y, const float *lhs, const float *rhs,
                                 int64_t n_rows, int64_t n);
v8_status v8_swiglu_ggml_f32(int contract, float *y, const float *lhs, const float *rhs,
                             int64_t n_rows, int64_t n);
v8_status v8_swiglu_ggml_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                               const float *lhs, const float *rhs, int64_t n_rows,
                                               int64_t n);
v8_status v8_geglu_ggml_f32_ref(int contract, float *y, const float *lhs, const float *rhs,
                                int64_t n_rows, int64_t n);
v8_status v8_geglu_ggml_f32(int contract, float *y, const float *lhs, const float *rhs,
                            int64_t n_rows, int64_t n);
v8_status v8_geglu_ggml_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                              const float *lhs, const float *rhs, int64_t n_rows,
                                              int64_t n);
const uint16_t *v8_geglu_ggml_table(void);

/* ---- KV cache store: kv_store_f16_round_nearest_even ---------------------
 * rows: fp32 [n_tokens][n_head_kv][head_dim]; cache: fp16 bits
 * [n_head_kv][capacity][head_dim]; writes positions [pos0, pos0 + n_tokens).
 * Rounding is to nearest, ties to even; the F16C path gives the same bits. */
v8_status v8_kv_store_f16_ref(int contract, const float *rows, uint16_t *cache, int64_t n_tokens,
                              int64_t n_head_kv, int64_t head_dim, int64_t capacity, int64_t pos0);
v8_status v8_kv_store_f16(int contract, const float *rows, uint16_t *cache, int64_t n_tokens,
                          int64_t n_head_kv, int64_t head_dim, int64_t capacity, int64_t pos0);
/* kv_store_fp32_copy: the same placement into an fp32 cache, copied exactly. */
v8_status v8_kv_store_f32_ref(int contract, const float *rows, float *cache, int64_t n_tokens,
                              int64_t n_head_kv, int64_t head_dim, int64_t capacity, int64_t pos0);
v8_status v8_kv_store_f32(int contract, const float *rows, float *cache, int64_t n_tokens,
                          int64_t n_head_kv, int64_t head_dim, int64_t capacity, int64_t pos0);

/* ---- head split: provider head_split_fp32 -----------------------------------
 * Contract head_split_exact_copy: x [n_tokens][n_head][parts * head_dim],
 * y [n_tokens][n_head][head_dim] = x[t][h][part * head_dim + d] (exact copy;
 * e.g. the query and gate halves of a gated-attention projection).  y must not
 * alias x.  Rows (t, h) are independent. */
v8_status v8_head_split_f32_ref(int contract, float *y, const float *x, int64_t n_tokens,
                                int64_t n_head, int64_t head_dim, int64_t part, int64_t parts);
v8_status v8_head_split_f32(int contract, float *y, const float *x, int64_t n_tokens,
                            int64_t n_head, int64_t head_dim, int64_t part, int64_t parts);
v8_status v8_head_split_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                              const float *x, int64_t n_tokens, int64_t n_head,
                                              int64_t head_dim, int64_t part, int64_t parts);

/* ---- sigmoid output gate: provider sigmoid_gate_fp32 -------------------------
 * Contract sigmoid_gate_fp32_expf: y = lhs * (1.0f / (1.0f + expf(-rhs))),
 * each operation rounded to fp32 (ggml's ggml_vec_sigmoid_f32 then mul).
 * y may alias lhs or rhs exactly.  Elements are independent. */
v8_status v8_sigmoid_gate_f32_ref(int contract, float *y, const float *lhs, const float *rhs,
                                  int64_t n);
v8_status v8_sigmoid_gate_f32(int contract, float *y, const float *lhs, const float *rhs,
                              int64_t n);
v8_status v8_sigmoid_gate_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                                const float *lhs, const float *rhs, int64_t n);

/* ---- gated DeltaNet mixer: provider gated_delta_net_fp32 ----------------------
 * Contract gated_delta_rule_fp32_token_sequential_state.  Hk key heads of dim
 * Dk, Hv value heads of dim Dv (Hv % Hk == 0; value head h reads key head
 * h % Hk, the GGUF/ggml head order), C = 2*Hk*Dk + Hv*Dv channels, K the
 * convolution width.
 *   qkv [T][C] (q | k | v), z [T][Hv*Dv], alpha, beta [T][Hv]   activations
 *   conv_w [C][K], ssm_a [Hv] (A = -exp(A_log)), dt_bias [Hv], norm_w [Dv]
 *   conv_state [C][K-1] (the K-1 previous inputs per channel, oldest first)
 *   ssm_state [Hv][Dv][Dk] (S transposed: row j holds S[:, j])
 *   y [T][Hv*Dv]
 * Tokens in ascending order; per token t and value head h, each step rounded
 * to fp32 unless it says fp64:
 *   conv:   c = 0; for m = 0..K-1: c = c + in[t+m][ch] * conv_w[ch][m]
 *           (in = [conv_state, qkv] per channel);  x = c / (1 + expf(-c))  (SiLU)
 *   l2norm of q and k (per key head): s = sum_i (double)(x_i*x_i) ascending;
 *           r = 1 / fmaxf(sqrtf((float)s), eps);  x_i = x_i * r
 *   b = 1 / (1 + expf(-beta));  g = sp(alpha + dt_bias) * ssm_a with
 *           sp(u) = u > 20 ? u : logf(1 + expf(u));  decay = expf(g)
 *   state:  S = S * decay (every element);  for j ascending:
 *             d = sum_i S[j][i]*k_i (fp32, i ascending);  delta = (v_j - d) * b;
 *             S[j][i] = S[j][i] + k_i * delta
 *   out:    o_j = (sum_i S[j][i]*q_i, fp32 ascending) * (1 / sqrtf((float)Dk))
 *   gated RMSNorm over Dv: s = sum_j (double)(o_j*o_j); mean = (float)(s / Dv);
 *           r = 1 / sqrtf(mean + eps);  y_j = ((o_j * r) * norm_w[j]) * SiLU(z_j)
 * conv_state ends as the last K-1 inputs, ssm_state as S after the last token,
 * both updated in place.  The same arithmetic runs for one token (decode) and
 * many (prefill), so a prefill's last row equals the decode step after a
 * prefill of the others.  Dk, Dv <= V8_GDN_MAX_HEAD_DIM, 2 <= K <= 64. */
#define V8_GDN_MAX_HEAD_DIM 512
v8_status v8_gated_delta_net_f32_ref(int contract, float *y, const float *qkv, const float *z,
                                     const float *alpha, const float *beta, const float *conv_w,
                                     const float *ssm_a, const float *dt_bias,
                                     const float *norm_w, float *conv_state, float *ssm_state,
                                     int64_t n_tokens, int64_t n_k_heads, int64_t n_v_heads,
                                     int64_t head_k_dim, int64_t head_v_dim,
                                     int64_t conv_kernel, float eps);
v8_status v8_gated_delta_net_f32(int contract, float *y, const float *qkv, const float *z,
                                 const float *alpha, const float *beta, const float *conv_w,
                                 const float *ssm_a, const float *dt_bias, const float *norm_w,
                                 float *conv_state, float *ssm_state, int64_t n_tokens,
                                 int64_t n_k_heads, int64_t n_v_heads, int64_t head_k_dim,
                                 int64_t head_v_dim, int64_t conv_kernel, float eps);
v8_status v8_gated_delta_net_f32_parallel_dispatch(
    v8_threadpool *pool, int contract, float *y, const float *qkv, const float *z,
    const float *alpha, const float *beta, const float *conv_w, const float *ssm_a,
    const float *dt_bias, const float *norm_w, float *conv_state, float *ssm_state,
    int64_t n_tokens, int64_t n_k_heads, int64_t n_v_heads, int64_t head_k_dim,
    int64_t head_v_dim, int64_t conv_kernel, float eps);

/* ---- gated DeltaNet mixer, llama.cpp's arithmetic: provider gated_delta_net_fp32_ggml ----
 * Contract gated_delta_rule_fp32_ggml_16_lane_chain: the ggml op chain of llama.cpp's
 * Qwen3.5 recurrent layer as its AVX-512 CPU build computes it.  Same arguments, layouts
 * and state semantics as v8_gated_delta_net_f32 above, with Dk == Dv (= D) and K == 4.
 * fma(a, b, c) is one rounding; everything else each step rounded to fp32 unless fp64:
 *   vexp(x): ggml_v_expf's 16-lane polynomial (n = RN(x log2e + 1.5*2^23) - 1.5*2^23,
 *           b = x - n ln2 in two fmas, degree-5 polynomial in fmas with the 1 inside,
 *           times 2^n once; |n| > 192 gives 0 or +inf)
 *   silu_row(x_i of a row of n) = x / (1 + vexp(0 - x)) for i < n - n % 16,
 *           x / (1 + expf(-x)) for the last n % 16 elements
 *   dot(x, y, n) (ggml_vec_dot_f32): 64 lanes acc_l = fma(x, y, acc_l) over the first
 *           n & ~63 elements; v_l = (acc_l + acc_{l+32}) + (acc_{l+16} + acc_{l+48});
 *           v_l = v_{l+w} + v_l for w = 8, 4, 2, 1; s = v_0; then the remaining elements in
 *           order: whole blocks of 16, then one block of 8 if 8 remain, s = s + x*y (product
 *           rounded); the last < 8: s = fma(x, y, s)
 *   conv:   c = in[t][ch] * w[ch][0];  c = fma(in[t+m][ch], w[ch][m], c) for m = 1..3;
 *           x = silu_row over the C channels of token t (position ch)
 *   l2norm of q and k per key head (RMS_NORM with eps / D then SCALE): s = sum_i (double)
 *           (x_i*x_i); r = 1 / sqrtf((float)(s / D) + eps / (float)D); x_i = (x_i * r) *
 *           (1 / sqrtf((float)D))
 *   b = 1 / (1 + expf(-beta));  g = sp(alpha + dt_bias) * ssm_a, sp(u) = u > 20 ? u :
 *           logf(1 + expf(u));  decay = expf(g)
 *   state:  S = S * decay;  for j: delta = (v_j - dot(S[j], k, D)) * b;
 *           S[j][i] = fma(k_i, delta, S[j][i])
 *   out:    o_j = dot(S[j], q, D) * (1 / sqrtf((float)D))
 *   gated RMSNorm: r = 1 / sqrtf((float)(sum_j (double)(o_j*o_j) / D) + eps);
 *           y_j = ((o_j * r) * norm_w[j]) * silu_row(z_j of the head's D values, position j)
 * Contract gated_delta_rule_fp32_ggml_8_lane_chain: the same chain as llama.cpp's AVX2 build
 * (-mavx2 -mfma, no AVX-512) computes it; everything above holds except
 *   vexp(x): ggml_v_expf's 8-lane polynomial (same n and b, polynomial without the 1,
 *           k = 2^n from the exponent bits, result fma(k, p, k); |n| > 126 scales by two
 *           factors s2 = 2^n / s1, fma(s2, p, s2) * s1; |n| > 192 gives s1 * s1)
 *   silu_row: the vector form for i < n - n % 8, x / (1 + expf(-x)) for the last n % 8
 *   dot(x, y, n): 32 lanes acc_l = fma(x, y, acc_l) over the first n & ~31 elements;
 *           v_l = (acc_l + acc_{l+16}) + (acc_{l+8} + acc_{l+24}) for l < 8;
 *           t_l = v_l + v_{l+4} for l < 4; s = (t_0 + t_1) + (t_2 + t_3); then the remaining
 *           elements in order: whole blocks of 8, then one block of 4 if 4 remain,
 *           s = s + x*y (product rounded); the last < 4: s = fma(x, y, s)
 *   conv:   c = (((0 + in[t][ch] * w[ch][0]) + in[t+1][ch] * w[ch][1]) + ...) + in[t+3][ch] *
 *           w[ch][3], each product rounded, added in order from +0
 * Value heads are independent (threadpool partition independent_heads, effect none). */
v8_status v8_gated_delta_net_ggml_f32_ref(int contract, float *y, const float *qkv,
                                          const float *z, const float *alpha, const float *beta,
                                          const float *conv_w, const float *ssm_a,
                                          const float *dt_bias, const float *norm_w,
                                          float *conv_state, float *ssm_state, int64_t n_tokens,
                                          int64_t n_k_heads, int64_t n_v_heads,
                                          int64_t head_k_dim, int64_t head_v_dim,
                                          int64_t conv_kernel, float eps);
v8_status v8_gated_delta_net_ggml_f32(int contract, float *y, const float *qkv, const float *z,
                                      const float *alpha, const float *beta, const float *conv_w,
                                      const float *ssm_a, const float *dt_bias,
                                      const float *norm_w, float *conv_state, float *ssm_state,
                                      int64_t n_tokens, int64_t n_k_heads, int64_t n_v_heads,
                                      int64_t head_k_dim, int64_t head_v_dim,
                                      int64_t conv_kernel, float eps);
v8_status v8_gated_delta_net_ggml_f32_parallel_dispatch(
    v8_threadpool *pool, int contract, float *y, const float *qkv, const float *z,
    const float *alpha, const float *beta, const float *conv_w, const float *ssm_a,
    const float *dt_bias, const float *norm_w, float *conv_state, float *ssm_state,
    int64_t n_tokens, int64_t n_k_heads, int64_t n_v_heads, int64_t head_k_dim,
    int64_t head_v_dim, int64_t conv_kernel, float eps);

/* ---- vision encoder (ops/vision.c) -------------------------------------------
 * layer_norm_fp32, contract layer_norm_fp32_fp64_sum_ascending_bias, per row r
 * of x[n_rows][n], ggml's norm then mul and add:
 *   s = sum of (double)x[i] ascending;  mean = (float)s / (float)n
 *   q = sum of (double)((x[i]-mean)*(x[i]-mean)) ascending (square in fp32)
 *   var = (float)(q / n) (fp64 divide);  scale = 1.0f / sqrtf(var + eps)
 *   y[i] = (((x[i] - mean) * scale) * w[i]) + b[i]          (each step fp32)
 * y may alias x exactly.  Rows are independent. */
v8_status v8_layer_norm_f32_ref(int contract, float *y, const float *x, const float *w,
                                const float *bias, int64_t n_rows, int64_t n, float eps);
v8_status v8_layer_norm_f32(int contract, float *y, const float *x, const float *w,
                            const float *bias, int64_t n_rows, int64_t n, float eps);
v8_status v8_layer_norm_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                              const float *x, const float *w, const float *bias,
                                              int64_t n_rows, int64_t n, float eps);

/* gelu_fp32, contract gelu_fp32_tanh: y = (0.5f*x) * (1.0f + tanhf((C*x) *
 * (1.0f + (A*x)*x))) with the GeGLU constants above, in this order.  y may
 * alias x exactly.  Elements are independent. */
v8_status v8_gelu_f32_ref(int contract, float *y, const float *x, int64_t n);
v8_status v8_gelu_f32(int contract, float *y, const float *x, int64_t n);
v8_status v8_gelu_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                        const float *x, int64_t n);

/* scale_fp32, contract scale_fp32_multiply: y[i] = x[i] * factor in fp32 (ggml_scale, no
 * bias); factor finite and nonzero.  y may alias x exactly.  Elements are independent. */
v8_status v8_scale_f32_ref(int contract, float *y, const float *x, int64_t n, float factor);
v8_status v8_scale_f32(int contract, float *y, const float *x, int64_t n, float factor);
v8_status v8_scale_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const float *x, int64_t n, float factor);

/* vision_rope_fp32, contract vision_rope_fp32_iterative_theta_2d_sections:
 * ggml's rope_multi in GGML_ROPE_TYPE_VISION mode.  Every dim rotates
 * (n_rot == head_dim; ggml's n_dims is head_dim/2); pair i < head_dim/2 is
 * (i, i + head_dim/2); theta_scale = powf(freq_base, -2.0f/(float)(head_dim/2)).
 * pos[4][n_tokens] holds streams t, h, w, e; sections[4] >= 0 with sum S,
 * 0 < S <= head_dim.  sector = i % S; before pair i, theta_t restarts at
 * (float)pos_t if sector == 0, else theta_h if sector == s0, else theta_w if
 * sector == s0+s1, else theta_e if sector == s0+s1+s2; the pair uses t below
 * s0, h below s0+s1, w below s0+s1+s2, else e; after it all four thetas are
 * multiplied by theta_scale.  Rotation as neox (each product rounded).
 * y must not alias x partially.  Tokens are independent. */
#define V8_VISION_ROPE_MAX_HEAD_DIM 1024
v8_status v8_vision_rope_f32_ref(int contract, float *y, const float *x, const int32_t *pos,
                                 int64_t n_tokens, int64_t n_head, int64_t head_dim,
                                 int64_t n_rot, float freq_base, const int32_t *sections);
v8_status v8_vision_rope_f32(int contract, float *y, const float *x, const int32_t *pos,
                             int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t n_rot,
                             float freq_base, const int32_t *sections);
v8_status v8_vision_rope_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                               const float *x, const int32_t *pos,
                                               int64_t n_tokens, int64_t n_head,
                                               int64_t head_dim, int64_t n_rot, float freq_base,
                                               const int32_t *sections);

/* patch_merge_fp32, contract patch_merge_2x2_exact_copy: x [n_tokens][dim]
 * (n_tokens a multiple of 4, the four patches of each 2x2 window
 * consecutive) -> y [n_tokens/4][4*dim], y[j][k*dim + e] = x[4j + k][e].
 * y must not overlap x.  Merged rows are independent. */
v8_status v8_patch_merge_f32_ref(int contract, float *y, const float *x, int64_t n_tokens,
                                 int64_t dim);
v8_status v8_patch_merge_f32(int contract, float *y, const float *x, int64_t n_tokens,
                             int64_t dim);
v8_status v8_patch_merge_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                               const float *x, int64_t n_tokens, int64_t dim);

#ifdef __cplusplus
}
#endif

#endif /* V8_OPS_H */
