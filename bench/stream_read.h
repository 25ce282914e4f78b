/* The benchmark's streaming-read roofline (bench/stream_read.c). */
#ifndef V8_BENCH_STREAM_READ_H
#define V8_BENCH_STREAM_READ_H

#include "v8_runtime.h"

/* Reads `bytes` (a multiple of 256, 64-byte aligned) once over the pool's
 * workers; returns a checksum. */
int64_t v8_bench_stream_read(v8_threadpool *pool, const void *buf, int64_t bytes);

#endif
