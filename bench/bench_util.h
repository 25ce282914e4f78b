/* Small helpers shared by the C benchmarks: a monotonic clock and a
 * deterministic generator for weight bytes and scales. */
#ifndef V8_BENCH_UTIL_H
#define V8_BENCH_UTIL_H

#include <stdint.h>
#include <time.h>

static inline double bench_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* xorshift64: the same bytes on every run */
static inline uint32_t bench_rnd(void) {
    static uint64_t state = 0x9e3779b97f4a7c15ull;
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (uint32_t)state;
}

/* a positive fp16 scale, 2^-10 .. 2^-7 with a random mantissa */
static inline uint16_t bench_f16_scale(void) {
    return (uint16_t)(((5 + bench_rnd() % 4) << 10) | (bench_rnd() & 0x3ff));
}

#endif
