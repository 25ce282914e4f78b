/* Provider attn_auto_qtile64_f16kv: contracts f16_flash_auto_qtile64,
 * f16_flash_auto_qtile64_fp32_dot and f16_flash_auto_qtile64_fp32_dot_8_lane.
 *
 * ggml decides per flash-attention call (one prefill segment) between its
 * one-chunk online path and its 64x64 tiled path: tiled when the query batch
 * is at least 64 rows AND the value head dim is a multiple of the f32 SIMD
 * width it was built for (16 on AVX-512).  The composite names that rule so a
 * segment of 64+ rows at D = 72 on the AVX-512 reference stays on the
 * single-range contract, exactly like the reference.  Each branch is a whole
 * contract delivered by its own provider; this file only chooses. */
#include "v8_attention_tiled.h"

/* f32 lanes of the reference ggml build's tiled-path condition (DV % GGML_F32_EPR). */
#define AUTO_LANES 16

int v8_attn_auto_uses_tiled(int64_t n_q, int64_t head_dim) {
    return n_q >= V8_ATTN_TILE_Q && head_dim % AUTO_LANES == 0;
}

/* f16_flash_auto_qtile64_fp32_dot and its AVX2-build twin ..._8_lane: llama.cpp's current
 * ggml takes the tiled path from 64 query rows at any head dim (its x86 builds have no lane
 * condition there), and below it the single range whose dot stays in fp32 lanes.  The
 * twins differ only in the tiled part (the exp and sum groups of the build's lane count). */
static int auto_fp32_dot(int contract) {
    return contract == V8_ATTN_F16_FLASH_AUTO_QTILE64_FP32_DOT ||
           contract == V8_ATTN_F16_FLASH_AUTO_QTILE64_FP32_DOT_8_LANE;
}

static int auto_uses_tiled(int contract, int64_t n_q, int64_t head_dim) {
    if (auto_fp32_dot(contract)) return n_q >= V8_ATTN_TILE_Q;
    return v8_attn_auto_uses_tiled(n_q, head_dim);
}

static int auto_single_range(int contract) {
    return auto_fp32_dot(contract) ? V8_ATTN_F16_ONLINE_SINGLE_RANGE_FP32_DOT
                                   : V8_ATTN_F16_ONLINE_SINGLE_RANGE;
}

static int auto_tiled(int contract) {
    return contract == V8_ATTN_F16_FLASH_AUTO_QTILE64_FP32_DOT_8_LANE
               ? V8_ATTN_F16_KV_TILED64_FP32_SOFTMAX_FP64_SUM_UPDATE_8_LANE_VEXP
               : V8_ATTN_F16_KV_TILED64_FP32_SOFTMAX_FP64_SUM_UPDATE;
}

static int auto_contract(int contract) {
    return contract == V8_ATTN_F16_FLASH_AUTO_QTILE64 || auto_fp32_dot(contract);
}

size_t v8_attn_auto_scratch_bytes(int64_t n_q, int64_t n_head, int64_t head_dim,
                                  int n_workers) {
    const size_t t = v8_attn_tiled_scratch_bytes(n_q, n_head, head_dim, n_workers);
    const size_t o = v8_attn_online_f16kv_scratch_bytes(n_q, n_head, head_dim, n_workers);
    return t > o ? t : o;
}

#define AUTO_FORWARD                                                                     \
    out, q, k, v, n_q, n_head, n_head_kv, head_dim, kv_len, kv_capacity, q_pos0, causal, \
        window, scale, scratch, scratch_bytes

/* The single-range branch needs no scratch, but the size function cannot tell the branches
 * apart at every shape (it does not see the contract), so the composite asks for what
 * v8_attn_auto_scratch_bytes says on either branch: the two always agree.  Shapes and
 * pointers are checked first, as in the providers it forwards to. */
static v8_status auto_check_scratch(V8_ATTN_ARGS_DECL, int workers) {
    const v8_attn_args a = V8_ATTN_PACK();
    v8_status st = v8_attn_check_shape(&a);
    if (st != V8_OK) return st;
    const size_t need = v8_attn_auto_scratch_bytes(n_q, n_head, head_dim, workers);
    if (need > 0) {
        V8_REQUIRE(scratch != NULL, V8_ERR_NULL_ARGUMENT);
        V8_REQUIRE(scratch_bytes >= need, V8_ERR_BAD_DIMENSION);
    }
    return V8_OK;
}

v8_status v8_attn_auto_ref(V8_ATTN_ARGS_DECL) {
    V8_REQUIRE(auto_contract(contract), V8_ERR_UNKNOWN_SELECTOR);
    if (auto_uses_tiled(contract, n_q, head_dim)) {
        return v8_attn_tiled_ref(auto_tiled(contract), AUTO_FORWARD);
    }
    v8_status st = auto_check_scratch(contract, AUTO_FORWARD, 1);
    if (st != V8_OK) return st;
    return v8_attn_online_f16kv_ref(auto_single_range(contract), AUTO_FORWARD);
}

v8_status v8_attn_auto(V8_ATTN_ARGS_DECL) {
    V8_REQUIRE(auto_contract(contract), V8_ERR_UNKNOWN_SELECTOR);
    if (auto_uses_tiled(contract, n_q, head_dim)) {
        return v8_attn_tiled(auto_tiled(contract), AUTO_FORWARD);
    }
    v8_status st = auto_check_scratch(contract, AUTO_FORWARD, 1);
    if (st != V8_OK) return st;
    return v8_attn_online_f16kv(auto_single_range(contract), AUTO_FORWARD);
}

v8_status v8_attn_auto_parallel_dispatch(v8_threadpool *pool, V8_ATTN_ARGS_DECL) {
    V8_REQUIRE(auto_contract(contract), V8_ERR_UNKNOWN_SELECTOR);
    if (auto_uses_tiled(contract, n_q, head_dim)) {
        return v8_attn_tiled_parallel_dispatch(pool, auto_tiled(contract), AUTO_FORWARD);
    }
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    v8_status st = auto_check_scratch(contract, AUTO_FORWARD, v8_threadpool_workers(pool));
    if (st != V8_OK) return st;
    return v8_attn_online_f16kv_parallel_dispatch(pool, auto_single_range(contract), AUTO_FORWARD);
}
