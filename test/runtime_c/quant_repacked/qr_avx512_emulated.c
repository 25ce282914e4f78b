/* Test build of runtime_c/quant_repacked/qr_linear.c whose AVX-512 variants
 * (plain and VNNI) run on any AVX2 host over the lane-by-lane emulation of
 * avx512_int_emulation.h.  Compiled with -mavx2 -mfma -mf16c (the AVX2
 * variant and the 128/256-bit intrinsics stay native) and ISO C (no fp
 * contraction). */
#include "avx512_int_emulation.h"

#include "quant_repacked/qr_linear.c"

/* The repacked Q4_K GEMM through one emulated AVX-512 variant (vnni: dpbusd
 * in the token-lane tile, dpwssd in the super-block tile): tokens below
 * 4*floor(m/4) take the token-lane tile, the rest the super-block one. */
v8_status qr_emulated_avx512_gemm(int vnni, float *y, const void *w, const float *x,
                                  const float *bias, int64_t m, int64_t n, int64_t k,
                                  void *scratch, size_t scratch_bytes) {
    const qr_variant v = {vnni ? qrt_tile_avx512vnni : qrt_tile_avx512,
                          vnni ? qr_tile_avx512vnni : qr_tile_avx512};
    return qr_linear(NULL, 0, &v, QR_GEMM, QR_GEMM, y, w, x, bias, m, n, k, scratch,
                     scratch_bytes);
}
