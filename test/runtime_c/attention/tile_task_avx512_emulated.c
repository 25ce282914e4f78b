/* One provider's AVX-512 64-row tile task on the intrinsic emulation of avx512_emulation.h,
 * driven as the provider's serial production entry drives it, so it runs on an AVX2 host.
 * The includer selects the provider with one of
 *   EMU_TILED    runtime_c/attention/tiled.c (tile_task_body.inc over core/simd.h)
 *   EMU_REGULAR  runtime_c/attention/llama_regular.c (the same tile task, V8_TILE_REGULAR)
 * and gets emu_avx512_attn(V8_ATTN_ARGS_DECL): the provider's checks, then every (head, 64-row
 * query block) task through the AVX-512 variant, whatever v8_cpu_best_isa() says. */
#define V8_SIMD_EMULATED 1
#include "avx512_emulation.h"
#include "v8_runtime.h"

v8_status emu_avx512_attn(int contract, float *out, const float *q, const void *k, const void *v,
                          int64_t n_q, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                          int64_t kv_len, int64_t kv_capacity, int64_t q_pos0, int causal,
                          int64_t window, float scale, void *scratch, size_t scratch_bytes);

#if defined(EMU_TILED)

#include "attention/tiled.c"
#define EMU_TASK tile_task_avx512

v8_status emu_avx512_attn(V8_ATTN_ARGS_DECL) {
    const v8_attn_args a = V8_ATTN_PACK();
    v8_status st = tiled_check(&a);
    if (st != V8_OK) {
        return st;
    }
    V8_REQUIRE(scratch != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(scratch_bytes >= v8_attn_tiled_scratch_bytes(n_q, n_head, head_dim, 1),
               V8_ERR_BAD_DIMENSION);
    /* v8_attn_tiled with tiled_pick() replaced by the AVX-512 task */
    tiled_job job = {&a, EMU_TASK, (n_q + TQ - 1) / TQ};
    for (int64_t t = 0; t < n_head * job.n_qblocks; ++t) {
        tiled_job_run(&job, t, 0);
    }
    return V8_OK;
}

#elif defined(EMU_REGULAR)

#include "attention/llama_regular.c"

v8_status emu_avx512_attn(V8_ATTN_ARGS_DECL) {
    const v8_attn_args a = LR_PACK();
    v8_status st = regular_check(&a);
    if (st != V8_OK) {
        return st;
    }
    V8_REQUIRE(scratch != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(scratch_bytes >= v8_attn_llama_regular_scratch_bytes(n_q, n_head, head_dim, 1),
               V8_ERR_BAD_DIMENSION);
    /* v8_attn_llama_regular / lr_job_run with the ISA choice replaced by the AVX-512 block */
    const int64_t n_blocks = (n_q + TQ - 1) / TQ;
    for (int64_t t = 0; t < n_head * n_blocks; ++t) {
        const int64_t h = t / n_blocks;
        const int64_t r0 = (t % n_blocks) * TQ;
        const int64_t nr = n_q - r0 < TQ ? n_q - r0 : TQ;
        const v8_tile_ws w = tile_slice(a.scratch, head_dim, lr_worker_floats(head_dim), 0);
        tile_task_avx512(&a, &w, h, r0, nr, V8_TILE_REGULAR);
    }
    return V8_OK;
}

#else
#error "define EMU_TILED or EMU_REGULAR"
#endif

/* The emulated reduction tree next to core/simd.h's AVX-512 and reference trees, for the
 * harness's own check that they agree (out: reduce_add, hsum_halves_avx512, hsum_halves_ref). */
void emu_hsum16(const float *x, float *out);
#ifdef EMU_TILED
void emu_hsum16(const float *x, float *out) {
    const __m512 v = _mm512_loadu_ps(x);
    out[0] = _mm512_reduce_add_ps(v);
    out[1] = v8_hsum_halves_avx512(v);
    out[2] = v8_hsum_halves_ref(x, 16);
}
#endif
