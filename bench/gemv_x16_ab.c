/* A/B timing of the decode GEMVs in one process (not part of the runtime):
 * the plain-layout repacked Q4_K GEMV against the 16-row interleaved one, and
 * the plain Q6_K GEMV, alternating samples of each over several rounds.
 *
 *   make -C bench -f gemv_x16_ab.mk   (or see bench/gemv_x16_ab.sh)
 *   gemv_x16_ab [rounds] [threads]
 *
 * GB/s counts the plain GGUF bytes of the matrix (n * k/256 * block bytes) for
 * every variant, so the ratios are time ratios. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant/v8_quant.h"
#include "quant_repacked/v8_quant_repacked.h"
#include "quant_repacked/v8_quant_repacked_x16.h"
#include "bench_util.h"
#include "stream_read.h"

static void fill_q4k(uint8_t *w, int64_t n, int64_t k) {
    const int64_t blocks = n * (k / 256);
    for (int64_t i = 0; i < blocks; ++i) {
        v8_block_q4_k *b = (v8_block_q4_k *)(void *)(w + i * 144);
        for (int j = 0; j < 144; ++j) {
            ((uint8_t *)b)[j] = (uint8_t)bench_rnd();
        }
        b->d = bench_f16_scale();
        b->dmin = bench_f16_scale();
    }
}

static void fill_q6k(uint8_t *w, int64_t n, int64_t k) {
    const int64_t blocks = n * (k / 256);
    for (int64_t i = 0; i < blocks; ++i) {
        v8_block_q6_k *b = (v8_block_q6_k *)(void *)(w + i * 210);
        for (int j = 0; j < 210; ++j) {
            ((uint8_t *)b)[j] = (uint8_t)bench_rnd();
        }
        b->d = bench_f16_scale();
    }
}

typedef struct {
    const char *name;
    int kind; /* 0 plain q4k repacked, 1 x16 q4k, 2 q6k */
    const void *w;
    size_t scratch_bytes;
    void *scratch;
    float *y;
} variant;

#ifdef AB_B
#define NV 6
#else
#define NV 5
#endif
#define V_READ (NV - 1) /* the last variant: the streaming-read roofline over the x16 copy */

static v8_threadpool *pool;

#ifdef AB_B
/* a second build of qr_x16.c (experiment B), its symbols renamed by objcopy */
v8_status B_gemv(int contract, float *y, const void *w, const float *x, const float *bias,
                 int64_t n, int64_t k, void *scratch, size_t scratch_bytes);
v8_status B_gemv_pool(v8_threadpool *pool, int contract, float *y, const void *w, const float *x,
                      const float *bias, int64_t n, int64_t k, void *scratch, size_t scratch_bytes);
#endif

static v8_threadpool *read_pool;
static volatile int64_t read_sink;

static void call(const variant *v, const float *x, int64_t n, int64_t k) {
    v8_status st = V8_OK;
    switch (v->kind) {
    case 5:
        st = pool ? v8_q6_k_x16_gemv_parallel_dispatch(pool, V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER, v->y, v->w, x, NULL, n, k, v->scratch, v->scratch_bytes)
                  : v8_q6_k_x16_gemv(V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER, v->y, v->w, x, NULL, n, k, v->scratch, v->scratch_bytes);
        break;
    case 4:
        read_sink = v8_bench_stream_read(pool ? pool : read_pool, v->w, (int64_t)v->scratch_bytes);
        return;
    case 0:
        st = pool ? v8_q4_k_repacked_gemv_parallel_dispatch(pool, V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN, v->y, v->w, x, NULL, n, k, v->scratch, v->scratch_bytes)
                  : v8_q4_k_repacked_gemv(V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN, v->y, v->w, x, NULL, n, k, v->scratch, v->scratch_bytes);
        break;
    case 1:
        st = pool ? v8_q4_k_x16_gemv_parallel_dispatch(pool, V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN, v->y, v->w, x, NULL, n, k, v->scratch, v->scratch_bytes)
                  : v8_q4_k_x16_gemv(V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN, v->y, v->w, x, NULL, n, k, v->scratch, v->scratch_bytes);
        break;
#ifdef AB_B
    case 3:
        st = pool ? B_gemv_pool(pool, V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN, v->y, v->w, x, NULL, n, k, v->scratch, v->scratch_bytes)
                  : B_gemv(V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN, v->y, v->w, x, NULL, n, k, v->scratch, v->scratch_bytes);
        break;
#endif
    default:
        st = pool ? v8_q6_k_gemv_parallel_dispatch(pool, V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER, v->y, v->w, x, NULL, n, k, v->scratch, v->scratch_bytes)
                  : v8_q6_k_gemv(V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER, v->y, v->w, x, NULL, n, k, v->scratch, v->scratch_bytes);
        break;
    }
    if (st != V8_OK) {
        fprintf(stderr, "%s failed: %d\n", v->name, (int)st);
        exit(1);
    }
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void run_shape(const char *isa, int64_t n, int64_t k, int rounds) {
    const int64_t nb = k / 256;
    const size_t q4_bytes = (size_t)(n * nb * 144), q6_bytes = (size_t)(n * nb * 210);
    uint8_t *w4 = aligned_alloc(64, (q4_bytes + 63) / 64 * 64);
    uint8_t *w6 = aligned_alloc(64, (q6_bytes + 63) / 64 * 64);
    const size_t xb = v8_q4_k_x16_repack_bytes(n, k);
    uint8_t *wx = aligned_alloc(64, (xb + 63) / 64 * 64);
    float *x = malloc((size_t)k * sizeof(float));
    fill_q4k(w4, n, k);
    fill_q6k(w6, n, k);
    for (int64_t i = 0; i < k; ++i) {
        x[i] = (float)((int)(bench_rnd() % 2001) - 1000) * 1e-3f;
    }
    const size_t xb6 = v8_q6_k_x16_repack_bytes(n, k);
    uint8_t *wx6 = aligned_alloc(64, (xb6 + 63) / 64 * 64);
    if (v8_q6_k_x16_repack(wx6, xb6, w6, n, k) != V8_OK) {
        fprintf(stderr, "q6 repack failed\n");
        exit(1);
    }
    if (v8_q4_k_x16_repack(wx, xb, w4, n, k) != V8_OK) {
        fprintf(stderr, "repack failed\n");
        exit(1);
    }
    variant v[NV] = {{"q4k plain", 0, w4, v8_qlr_gemv_scratch_bytes(k), NULL, NULL},
                    {"q4k x16", 1, wx, v8_q4_k_x16_gemv_scratch_bytes(k), NULL, NULL},
                    {"q6k plain", 2, w6, v8_ql_gemv_scratch_bytes(k), NULL, NULL},
                    {"q6k x16", 5, wx6, v8_q6_k_x16_gemv_scratch_bytes(k), NULL, NULL},
#ifdef AB_B
                    {"q4k x16 B", 3, wx, v8_q4_k_x16_gemv_scratch_bytes(k), NULL, NULL},
#endif
                    {"read x16", 4, wx, xb / 256 * 256, NULL, NULL},
    };
    for (int i = 0; i < NV; ++i) {
        v[i].scratch = aligned_alloc(64, (v[i].scratch_bytes + 63) / 64 * 64);
        v[i].y = malloc((size_t)n * sizeof(float));
    }
    /* bits: old and new Q4_K must agree */
    call(&v[0], x, n, k);
    call(&v[1], x, n, k);
    int same = memcmp(v[0].y, v[1].y, (size_t)n * sizeof(float)) == 0;
#ifdef AB_B
    call(&v[4], x, n, k);
    same = same && memcmp(v[0].y, v[4].y, (size_t)n * sizeof(float)) == 0;
#endif
    call(&v[2], x, n, k);
    call(&v[3], x, n, k);
    const int same6 = memcmp(v[2].y, v[3].y, (size_t)n * sizeof(float)) == 0;
    const double est = (double)q4_bytes / 10e9;                   /* ~seconds per call */
    int iters = (int)(0.02 / est);
    iters = iters < 1 ? 1 : iters;
    double t[NV][64];
    rounds = rounds > 64 ? 64 : rounds;
    for (int r = 0; r < rounds; ++r) {
        for (int i = 0; i < NV; ++i) {
            const int vi = (r % 2) ? NV - 1 - i : i;             /* alternate the order */
            call(&v[vi], x, n, k);                                 /* warm */
            const double t0 = bench_now();
            for (int it = 0; it < iters; ++it) {
                call(&v[vi], x, n, k);
            }
            t[vi][r] = (bench_now() - t0) / iters;
        }
    }
    double med[NV], mn[NV];
    for (int i = 0; i < NV; ++i) {
        qsort(t[i], (size_t)rounds, sizeof(double), cmp_d);
        med[i] = t[i][rounds / 2];
        mn[i] = t[i][0];
    }
    double bytes[NV];
    for (int i = 0; i < NV; ++i) {
        bytes[i] = v[i].kind == 2 || v[i].kind == 5 ? (double)q6_bytes : v[i].kind == 4 ? (double)(xb / 256 * 256) : (double)q4_bytes;
    }
    printf("%-6s %6lldx%-5lld bits q4k %s q6k %s | ", isa, (long long)n, (long long)k,
           same ? "equal" : "DIFFER", same6 ? "equal" : "DIFFER");
    for (int i = 0; i < NV; ++i) {
        printf("%s %7.1f us %5.1f GB/s (min %7.1f us %5.1f GB/s) | ", v[i].name, med[i] * 1e6,
               bytes[i] / med[i] * 1e-9, mn[i] * 1e6, bytes[i] / mn[i] * 1e-9);
    }
    printf("q6k x16/plain time: med %.3f min %.3f | ", med[3] / med[2], mn[3] / mn[2]);
    printf("x16/plain time: med %.3f min %.3f | x16 GB/s of its own bytes / read: %.2f",
           med[1] / med[0], mn[1] / mn[0], (double)xb / med[1] / ((double)(xb / 256 * 256) / med[V_READ]));
#ifdef AB_B
    printf(" | B/x16 time: med %.3f min %.3f", med[4] / med[1], mn[4] / mn[1]);
#endif
    printf("\n");
    fflush(stdout);
    for (int i = 0; i < NV; ++i) {
        free(v[i].scratch);
        free(v[i].y);
    }
    free(w4);
    free(w6);
    free(wx);
    free(wx6);
    free(x);
}

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 9;
    const int threads = argc > 2 ? atoi(argv[2]) : 1;
    const int only_stream = argc > 3 ? atoi(argv[3]) : -1; /* 0: cache shapes, 1: streamed */
    read_pool = v8_threadpool_create(1);
    if (threads > 1 && (pool = v8_threadpool_create(threads)) == NULL) {
        fprintf(stderr, "pool failed\n");
        return 1;
    }
    const unsigned masks[2] = {~0u, V8_CPU_AVX2 | V8_CPU_FMA | V8_CPU_F16C};
    const char *names[2] = {(v8_cpu_features() & V8_CPU_AVX512VNNI) ? "avx512vnni" : "avx512", "avx2"};
    const int64_t shapes[3][2] = {{1024, 1024}, {3072, 1024}, {131072, 1024}};
    for (int m = 0; m < 2; ++m) {
        v8_cpu_restrict(masks[m]);
        if (m == 0 && v8_cpu_best_isa() != V8_ISA_AVX512) {
            printf("(no AVX-512 on this CPU: AVX2 only)\n");
            continue;
        }
        for (int s = 0; s < 3; ++s) {
            if (only_stream >= 0 && (s == 2) != (only_stream == 1)) {
                continue;
            }
            run_shape(names[m], shapes[s][0], shapes[s][1], rounds);
        }
    }
    return 0;
}
