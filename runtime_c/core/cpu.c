/* CPU feature detection through CPUID/XGETBV (via GCC's builtins), so the
 * same binary picks AVX-512, AVX2 or scalar paths on the machine it runs on. */
#include "v8_runtime.h"
#include "core/expf_lanes.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static unsigned detected_features = 0;
static int detected = 0;
static unsigned restriction = ~0u;

/* The widest ISA variant a feature set allows (v8_cpu_best_isa, and the expf self-check). */
static v8_isa isa_of(unsigned f) {
    unsigned avx2 = V8_CPU_AVX2 | V8_CPU_FMA | V8_CPU_F16C;
    unsigned avx512 = avx2 | V8_CPU_AVX512F | V8_CPU_AVX512BW | V8_CPU_AVX512VL | V8_CPU_AVX512DQ;
    if ((f & avx512) == avx512) return V8_ISA_AVX512;
    if ((f & avx2) == avx2) return V8_ISA_AVX2;
    return V8_ISA_SCALAR;
}

static unsigned detect(void) {
    unsigned f = 0;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) f |= V8_CPU_AVX2;
    if (__builtin_cpu_supports("fma")) f |= V8_CPU_FMA;
    if (__builtin_cpu_supports("f16c")) f |= V8_CPU_F16C;
    if (__builtin_cpu_supports("avx512f")) f |= V8_CPU_AVX512F;
    if (__builtin_cpu_supports("avx512bw")) f |= V8_CPU_AVX512BW;
    if (__builtin_cpu_supports("avx512vl")) f |= V8_CPU_AVX512VL;
    if (__builtin_cpu_supports("avx512dq")) f |= V8_CPU_AVX512DQ;
    if (__builtin_cpu_supports("avx512vnni")) f |= V8_CPU_AVX512VNNI;
    if (__builtin_cpu_supports("avx512bf16")) f |= V8_CPU_AVX512BF16;
    if (!__builtin_cpu_is("amd")) f |= V8_CPU_LINE_PREFETCH | V8_CPU_WIDE_F16_NARROWING;
    if (v8_expf_lanes_agree(isa_of(f))) f |= V8_CPU_LIBM_EXPF_LANES;
#endif
    return f;
}

unsigned v8_cpu_features(void) {
    /* Detection is idempotent, so a benign race only repeats it. */
    if (!__atomic_load_n(&detected, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&detected_features, detect(), __ATOMIC_RELAXED);
        __atomic_store_n(&detected, 1, __ATOMIC_RELEASE);
    }
    return __atomic_load_n(&detected_features, __ATOMIC_RELAXED) &
           __atomic_load_n(&restriction, __ATOMIC_RELAXED);
}

void v8_cpu_restrict(unsigned mask) { __atomic_store_n(&restriction, mask, __ATOMIC_RELAXED); }

/* XGETBV with ECX = 1 (XINUSE) exists where CPUID leaf 0xD sub-leaf 1 sets EAX bit 2, and
 * XGETBV itself where the OS enabled XSAVE (CPUID leaf 1, ECX bit 27). */
static int xinuse_readable(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) {
        return 0;
    }
    return __get_cpuid_count(0xD, 1, &a, &b, &c, &d) && (a & (1u << 2));
#else
    return 0;
#endif
}

int v8_cpu_upper_state_dirty(void) {
    static int readable = -1; /* the probe is idempotent: a race only repeats it */
    int known = __atomic_load_n(&readable, __ATOMIC_RELAXED);
    if (known < 0) {
        known = xinuse_readable();
        __atomic_store_n(&readable, known, __ATOMIC_RELAXED);
    }
    if (!known) {
        return -1;
    }
#if defined(__x86_64__) || defined(__i386__)
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
    (void)hi;
    return (lo & ((1u << 2) | (1u << 6))) != 0; /* YMM_Hi128, ZMM_Hi256 */
#else
    return -1;
#endif
}

v8_isa v8_cpu_best_isa(void) { return isa_of(v8_cpu_features()); }
