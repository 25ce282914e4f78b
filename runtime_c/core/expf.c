/* expf over arrays, bit for bit the C library's.
 *
 * The attention contracts' softmax recurrence takes one expf per key and head, the C library's
 * (as ggml calls it); at long context those calls are a large share of a decode step.  glibc
 * (2.27 on) computes expf in double precision, with N = 2^EXPF_TABLE_BITS = 32:
 *   k = x N/ln2 rounded to an integer (by adding and subtracting 1.5 * 2^52), r = x N/ln2 - k,
 *   2^(k/N) = T[k mod N] with k's upper bits added into the exponent field
 *     (T[i] = the bits of 2^(i/N) rounded to double, minus i << 47),
 *   2^(r/N) ~= (C0 r + C1) r^2 + (C2 r + 1),
 * the product rounded once to float.  Its x86-64 build runs a variant compiled with FMA on CPUs
 * with FMA and AVX2, which fuses each multiply-add above and x N/ln2 into both the rounding add
 * and r.  expf_lanes.inc runs those steps lane by lane in that variant's order, so a lane's
 * double is the library's.  Two guards keep every float the library's whichever build it runs:
 *   - per value: inputs outside (-87, 88) (underflow to subnormals or zero, overflow, the
 *     library's special cases) or NaN, and doubles within EXPF_TIE_BAND units in their last
 *     place of a tie between two floats (where an unfused build's double could round the other
 *     way: over every 7th float in (-87, 88) it lay at most 47 units from the fused one), are
 *     handed to the library's expf;
 *   - per process: when the CPU features are first read, the lanes are compared with the
 *     library on 49,152 inputs spread over (-88, 88); V8_CPU_LIBM_EXPF_LANES is set only
 *     if every bit agrees.  A library with another algorithm differs on a share of inputs far
 *     above one in 50,000 (its doubles are not within a few units of these), so it fails.
 * The figures N/ln2, 1.5 * 2^52 and T are exact roundings; C0..C2 are the published
 * coefficients of that algorithm (glibc's e_expf.c and exp2f_data.c, ARM's optimized-routines),
 * the figures, not the code, carried over. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/expf_lanes.h"
#include "v8_runtime.h"

#define EXPF_TABLE_BITS 5
#define EXPF_N (1 << EXPF_TABLE_BITS)
#define EXPF_N_OVER_LN2 0x1.71547652b82fep+5
#define EXPF_SHIFT 0x1.8p+52
#define EXPF_C0 0x1.c6af84b912394p-20
#define EXPF_C1 0x1.ebfce50fac4f3p-13
#define EXPF_C2 0x1.62e42ff0c52d6p-6
/* a double's 29 bits below a float's last place, the value there of a tie, and the band */
#define EXPF_BELOW_FLOAT_MASK ((1ll << 29) - 1)
#define EXPF_TIE (1ll << 28)
#define EXPF_TIE_BAND (1ll << 12)
#define EXPF_MAIN_LO (-87.0f) /* expf(-87) > FLT_MIN: no subnormal result inside */
#define EXPF_MAIN_HI 88.0f    /* the library's main path ends at |x| = 88 */

/* the bits of 2^(i/32) rounded to double, minus i << 47 */
static const uint64_t v8_expf_table[EXPF_N] = {
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull,
};

#define V8_SIMD_AVX2
#include "core/simd.h"
#include "core/expf_lanes.inc"
#include "core/simd_end.h"

#define V8_SIMD_AVX512
#include "core/simd.h"
#include "core/expf_lanes.inc"
#include "core/simd_end.h"

typedef void (*expf_lanes_fn)(const float *x, float *y, int64_t n);

/* The self-check's inputs, chunk `c`: EXPF_CHECK_SPREAD chunks of float bit patterns evenly
 * spread over [0, 88) (every exponent), the same chunks again negated, then the rest over the
 * softmax's usual (-32, 0] (a fixed odd-multiplier walk over 2^24 steps). */
enum { EXPF_CHECK_CHUNK = 1024, EXPF_CHECK_SPREAD = 17, EXPF_CHECK_CHUNKS = 48 };

static void check_inputs(int c, float *x) {
    const uint64_t spread = (uint64_t)EXPF_CHECK_SPREAD * EXPF_CHECK_CHUNK;
    for (int i = 0; i < EXPF_CHECK_CHUNK; i++) {
        const uint32_t n = (uint32_t)(c * EXPF_CHECK_CHUNK + i);
        if (c >= 2 * EXPF_CHECK_SPREAD) {
            x[i] = -32.0f * (float)((n * 2654435761u) >> 8) / 16777216.0f;
            continue;
        }
        uint32_t bits = (uint32_t)((n % spread) * 0x42B00000u / spread); /* 0x42B00000 = 88.0f */
        if (c >= EXPF_CHECK_SPREAD) bits |= 0x80000000u;
        memcpy(&x[i], &bits, sizeof bits);
    }
}

static int lanes_agree(expf_lanes_fn lanes) {
    float x[EXPF_CHECK_CHUNK], got[EXPF_CHECK_CHUNK];
    for (int c = 0; c < EXPF_CHECK_CHUNKS; c++) {
        check_inputs(c, x);
        lanes(x, got, EXPF_CHECK_CHUNK);
        for (int i = 0; i < EXPF_CHECK_CHUNK; i++) {
            const float want = expf(x[i]);
            if (memcmp(&want, &got[i], sizeof want) != 0) return 0;
        }
    }
    return 1;
}

int v8_expf_lanes_agree(v8_isa isa) {
    if (isa == V8_ISA_SCALAR || !lanes_agree(expf_lanes_avx2)) return 0;
    return isa != V8_ISA_AVX512 || lanes_agree(expf_lanes_avx512);
}

v8_status v8_expf_array(const float *x, float *y, int64_t n) {
    V8_REQUIRE(x != NULL && y != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(n >= 0, V8_ERR_BAD_DIMENSION);
    const v8_isa isa = v8_cpu_best_isa();
    if ((v8_cpu_features() & V8_CPU_LIBM_EXPF_LANES) && isa != V8_ISA_SCALAR) {
        (isa == V8_ISA_AVX512 ? expf_lanes_avx512 : expf_lanes_avx2)(x, y, n);
        return V8_OK;
    }
    for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]);
    return V8_OK;
}
