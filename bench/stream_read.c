/* The streaming-read roofline the model benchmark reports GB/s against: the
 * sum of a buffer's 64-byte lines, split into contiguous slices over the
 * pool's workers, with the widest loads the CPU has (not part of the runtime). */
#include <immintrin.h>
#include <stdint.h>

#include "stream_read.h"

typedef struct {
    const uint8_t *p;
    int64_t slice;
    int64_t bytes;
    int64_t sums[V8_MAX_WORKERS * 8];
} stream_job;

__attribute__((target("avx512f"))) static int64_t sum_avx512(const uint8_t *p, int64_t n) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i + 256 <= n; i += 256) {
        a0 = _mm512_add_epi64(a0, _mm512_load_si512((const void *)(p + i)));
        a1 = _mm512_add_epi64(a1, _mm512_load_si512((const void *)(p + i + 64)));
        a2 = _mm512_add_epi64(a2, _mm512_load_si512((const void *)(p + i + 128)));
        a3 = _mm512_add_epi64(a3, _mm512_load_si512((const void *)(p + i + 192)));
    }
    return _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
}

__attribute__((target("avx2"))) static int64_t sum_avx2(const uint8_t *p, int64_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(const void *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(const void *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(const void *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(const void *)(p + i + 96)));
    }
    int64_t out[4];
    _mm256_storeu_si256((__m256i *)(void *)out,
                        _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    return out[0] + out[1] + out[2] + out[3];
}

static void stream_task(void *ctx, int64_t task, int worker) {
    stream_job *j = (stream_job *)ctx;
    const int64_t begin = task * j->slice;
    const int64_t n = begin + j->slice < j->bytes ? j->slice : j->bytes - begin;
    const int64_t s = v8_cpu_best_isa() == V8_ISA_AVX512 ? sum_avx512(j->p + begin, n)
                                                         : sum_avx2(j->p + begin, n);
    j->sums[worker * 8] += s;
}

int64_t v8_bench_stream_read(v8_threadpool *pool, const void *buf, int64_t bytes) {
    stream_job j = {(const uint8_t *)buf, 0, bytes, {0}};
    const int workers = v8_threadpool_workers(pool);
    j.slice = (bytes / workers + 255) / 256 * 256;
    (void)v8_parallel_for(pool, (bytes + j.slice - 1) / j.slice, stream_task, &j);
    int64_t total = 0;
    for (int w = 0; w < workers; ++w) {
        total += j.sums[w * 8];
    }
    return total;
}
