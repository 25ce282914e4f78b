/* Test build of runtime_c/quant_tiled/qt_linear.c whose AVX-512 tile
 * variants (plain and VNNI) run on any AVX2 host over the lane-by-lane
 * emulation of avx512_int_emulation.h.  Compiled with -mavx2 -mfma -mf16c
 * (the AVX2 variant and the 128/256-bit intrinsics stay native) and ISO C
 * (no fp contraction). */
#include "avx512_int_emulation.h"

#include "quant_tiled/qt_linear.c"

/* The GEMM of format fmt (0 Q4_K, 1 Q5_K, 2 Q6_K, as qt_format) through one
 * emulated AVX-512 tile variant (vnni: the dpbusd one); the production
 * driver's checks, activation quantization and tiling. */
v8_status qt_emulated_avx512_gemm(int vnni, int fmt, float *y, const void *w, const float *x,
                                  const float *bias, int64_t m, int64_t n, int64_t k,
                                  void *scratch, size_t scratch_bytes) {
    if (fmt < QT_Q4K || fmt > QT_Q6K) {
        return V8_ERR_UNKNOWN_SELECTOR;
    }
    return qt_linear(NULL, 0, vnni ? qt_tile_avx512vnni : qt_tile_avx512, (qt_format)fmt,
                     qt_selector((qt_format)fmt), y, w, x, bias, m, n, k, scratch, scratch_bytes);
}
