/* Software prefetch of weight streams (and of a GEMM tile's output lines),
 * shared by the quantized and fp32 linear kernels; attention uses it for the
 * KV cache rows a block of keys reads next.
 *
 * A GEMV reads every weight once, at the speed the core's own requests are
 * served from L3 / DRAM; the hardware prefetcher alone leaves a large part of
 * the bandwidth unused on short rows.  Kernels that walk two rows side by
 * side (sharing each activation load) must prefetch along that walk: the
 * next bytes they need are the same block of a later row pair.
 * Prefetching along one row instead fetches the pair's other row (already
 * being read) and never the next pair's second row, which on AMD EPYC cost a
 * third of the Q6_K GEMV's bandwidth.  Addresses are computed in integers and
 * may lie past the array: prefetches never fault. */
#ifndef V8_PREFETCH_H
#define V8_PREFETCH_H

#include <stddef.h>
#include <stdint.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

/* The level a weight line is prefetched into.  A weight is read once, so it only
 * needs to reach L2 before its load, which then hits L2 behind the core's out-of-order
 * window.  A prefetch into L1 (T0) holds one of the few L1 miss buffers for the whole
 * DRAM latency, and a compute-heavy GEMV then streams at what those buffers carry.
 * Measured on AMD EPYC (Zen 4, AVX-512), 131072x1024 streamed, 1 thread: the Q6_K
 * row-pair GEMV 7.1-7.4 GB/s with T0, 16-19 with T2, 18-22 with T1 (streaming read
 * 22-24); the whole Qwen3-0.6B-shaped decode 28-31 -> 33-39 tok/s (AVX-512 variant)
 * and 30-33 -> 37-43 (AVX2 variant).  On AMD EPYC (Zen 3) T1 and T0 were level. */
#ifndef V8_PREFETCH_HINT
#define V8_PREFETCH_HINT _MM_HINT_T2
#endif

/* The 64-byte line at `at` of a weight stream.  The builtin, not _mm_prefetch: a
 * kernel body that is always_inline under a per-variant target pragma and reaches
 * this through a small generic helper lost every prefetch with _mm_prefetch (GCC 12
 * neither inlined the helper there nor kept its call, finding it free of side
 * effects); test/runtime_c/core/test_prefetch.py compiles that shape. */
static inline void v8_prefetch_line(uintptr_t at) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_prefetch((const void *)at, (V8_PREFETCH_HINT & 4) >> 2, V8_PREFETCH_HINT & 3);
#else
    (void)at;
#endif
}

/* Every 64-byte line of [at, at + bytes). */
static inline void v8_prefetch_lines(uintptr_t at, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) {
        v8_prefetch_line(at + o);
    }
}

/* Bytes ahead of its reads a weight stream asks for: far enough to cover the
 * DRAM latency at the GEMV's streaming rate, near enough to stay in L2.
 * Measured on AMD EPYC over repacked Q4_K GEMVs of 1024..32768 rows x 1024..3072
 * (each matrix cold, as in decode): 4 KiB reached 16-18 GB/s, 8-16 KiB 19-24
 * GB/s (flat), 24 KiB slightly less; without software prefetch 5.5 GB/s. */
#ifndef V8_PREFETCH_BYTES
#define V8_PREFETCH_BYTES 12288
#endif

/* The block at `blk` of the row group at least V8_PREFETCH_BYTES on, along a
 * walk that reads `rows` rows side by side (short rows look several groups
 * on); for rows = 1 this is V8_PREFETCH_BYTES on, rounded up to whole rows. */
static inline size_t v8_prefetch_rows_offset(size_t row_bytes, size_t rows) {
    const size_t group = rows * row_bytes;
    return (V8_PREFETCH_BYTES + group - 1) / group * group;
}

static inline void v8_prefetch_rows_ahead(const void *blk, size_t row_bytes, size_t rows,
                                          size_t bytes) {
    v8_prefetch_lines((uintptr_t)blk + v8_prefetch_rows_offset(row_bytes, rows), bytes);
}

/* The byte offset v8_prefetch_next_pair prefetches at. */
static inline size_t v8_prefetch_pair_offset(size_t row_bytes) {
    return v8_prefetch_rows_offset(row_bytes, 2);
}

static inline void v8_prefetch_next_pair(const void *blk, size_t row_bytes, size_t bytes) {
    v8_prefetch_rows_ahead(blk, row_bytes, 2, bytes);
}

/* The lines of [at, at + bytes) a kernel is about to write.  A GEMM tile writes
 * each token's few outputs at a stride of a whole output row, so every store
 * starts a line fill from DRAM; issued a super-block ahead, those fills overlap
 * the tile's arithmetic instead of stalling its stores. */
static inline void v8_prefetch_for_write(const void *at, size_t bytes) {
    const uintptr_t first = (uintptr_t)at & ~(uintptr_t)63;
    for (uintptr_t p = first; p < (uintptr_t)at + bytes; p += 64) {
        __builtin_prefetch((const void *)p, 1, 3);
    }
}

#endif
