/* Test build of runtime_c/quant_repacked/qr_x16.c whose AVX-512 variants run
 * on any AVX2 host over the lane-by-lane emulation of avx512_int_emulation.h.
 * Compiled with -mavx2 -mfma -mf16c (the AVX2 variant and the 128/256-bit
 * loads stay native) and ISO C (no fp contraction). */
#include "avx512_int_emulation.h"

#include "quant_repacked/qr_x16.c"

/* The Q6_K GEMV through the emulated AVX-512 variant. */
v8_status q6x_emulated_avx512_gemv(float *y, const void *w, const float *x, const float *bias,
                                   int64_t n, int64_t k, void *scratch, size_t scratch_bytes) {
    return qx_gemv(NULL, 1, q6x_group_avx512, V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER, y, w, x, bias, n,
                   k, scratch, scratch_bytes);
}

/* The GEMV through one emulated AVX-512 variant (vnni: the dpbusd one). */
v8_status qx_emulated_avx512_gemv(int vnni, float *y, const void *w, const float *x,
                                  const float *bias, int64_t n, int64_t k, void *scratch,
                                  size_t scratch_bytes) {
    return qx_gemv(NULL, 0, vnni ? qx_group_avx512vnni : qx_group_avx512,
                   V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN, y, w, x, bias, n, k,
                   scratch, scratch_bytes);
}
