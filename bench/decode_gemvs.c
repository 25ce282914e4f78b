/* The weight GEMVs of one decode step against a plain read of the same bytes
 * (not part of the runtime or the tests).
 *
 * A decode step streams every projection once: per layer of a Qwen3-0.6B-shaped
 * model the x16 Q4_K q (2048x1024), k (1024x1024), o (1024x2048), gate and up
 * (3072x1024) and the x16 Q6_K v (1024x1024) and down (1024x3072), each 1-3 MB.
 * Streaming 200 such matrices one after another is slower than one long read
 * (each start costs a ramp), so the fair roofline for these kernels is a read
 * of the very same matrices in the same order.  This program times both, the
 * two alternating round by round in one process, over weights in one
 * anonymous huge-page arena as the model session allocates them, and prints
 * their GB/s (median and best round) and the GEMVs' share of the read.
 *
 *   sh bench/decode_gemvs.sh [threads] [rounds] [native|avx2|avx512]
 *
 * avx512 forces the AVX-512 variants without VNNI; avx2 the AVX2 ones. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "quant/v8_quant.h"
#include "quant_repacked/v8_quant_repacked_x16.h"
#include "bench_util.h"
#include "stream_read.h"

enum { LAYERS = 28, PER_LAYER = 7, STEPS = 10, MAX_ROUNDS = 64 };

typedef struct {
    int q6;
    int64_t n, k;
    void *w;
    size_t bytes;
} matrix;

static const int64_t layer_shapes[PER_LAYER][3] = {
    {0, 2048, 1024}, {0, 1024, 1024}, {1, 1024, 1024}, {0, 1024, 2048},
    {0, 3072, 1024}, {0, 3072, 1024}, {1, 1024, 3072},
};

static uint8_t *arena_take(size_t bytes) {
    static uint8_t *arena = NULL;
    static size_t used = 0, size = 0;
    if (arena == NULL) {
        size = (size_t)1 << 30;
        arena = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (arena == MAP_FAILED) {
            perror("mmap");
            exit(1);
        }
        (void)madvise(arena, size, MADV_HUGEPAGE);
    }
    bytes = (bytes + 4095) / 4096 * 4096;
    if (used + bytes > size) {
        fprintf(stderr, "arena full\n");
        exit(1);
    }
    used += bytes;
    return arena + used - bytes;
}

/* Random plain blocks with sane scales, repacked into the arena. */
static void make_matrix(matrix *m, int q6, int64_t n, int64_t k) {
    const size_t block = q6 ? sizeof(v8_block_q6_k) : sizeof(v8_block_q4_k);
    const int64_t blocks = n * (k / V8_QK_K);
    uint8_t *plain = malloc((size_t)blocks * block);
    for (size_t i = 0; i < (size_t)blocks * block; ++i) {
        plain[i] = (uint8_t)bench_rnd();
    }
    for (int64_t i = 0; i < blocks; ++i) {
        if (q6) {
            ((v8_block_q6_k *)(void *)(plain + i * block))->d = bench_f16_scale();
        } else {
            v8_block_q4_k *b = (v8_block_q4_k *)(void *)(plain + i * block);
            b->d = bench_f16_scale();
            b->dmin = bench_f16_scale();
        }
    }
    m->q6 = q6;
    m->n = n;
    m->k = k;
    m->bytes = q6 ? v8_q6_k_x16_repack_bytes(n, k) : v8_q4_k_x16_repack_bytes(n, k);
    m->w = arena_take(m->bytes);
    const v8_status st = q6 ? v8_q6_k_x16_repack(m->w, m->bytes, plain, n, k)
                            : v8_q4_k_x16_repack(m->w, m->bytes, plain, n, k);
    free(plain);
    if (st != V8_OK) {
        fprintf(stderr, "repack failed: %d\n", (int)st);
        exit(1);
    }
}

static volatile int64_t read_sink;

/* Seconds per decode step: every matrix once, by GEMV or by plain read. */
static double step_seconds(v8_threadpool *pool, matrix *ms, int count, int read, const float *x,
                           float *y, void *scratch, size_t scratch_bytes) {
    const double t0 = bench_now();
    for (int s = 0; s < STEPS; ++s) {
        for (int i = 0; i < count; ++i) {
            const matrix *m = &ms[i];
            if (read) {
                read_sink = v8_bench_stream_read(pool, m->w, (int64_t)(m->bytes / 256 * 256));
                continue;
            }
            const v8_status st =
                m->q6 ? v8_q6_k_x16_gemv_parallel_dispatch(pool, V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER, y, m->w, x,
                                                          NULL, m->n, m->k, scratch, scratch_bytes)
                      : v8_q4_k_x16_gemv_parallel_dispatch(pool, V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN,
                                                          y, m->w, x, NULL, m->n, m->k, scratch, scratch_bytes);
            if (st != V8_OK) {
                fprintf(stderr, "gemv failed: %d\n", (int)st);
                exit(1);
            }
        }
    }
    return (bench_now() - t0) / STEPS;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void cpu_name(char *out, size_t size) {
    snprintf(out, size, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':') != NULL) {
            snprintf(out, size, "%s", strchr(line, ':') + 2);
            out[strcspn(out, "\n")] = 0;
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    int rounds = argc > 2 ? atoi(argv[2]) : 12;
    const char *variant = argc > 3 ? argv[3] : "native";
    rounds = rounds < 1 ? 1 : rounds > MAX_ROUNDS ? MAX_ROUNDS : rounds;
    if (strcmp(variant, "avx2") == 0) {
        v8_cpu_restrict(V8_CPU_AVX2 | V8_CPU_FMA | V8_CPU_F16C);
    } else if (strcmp(variant, "avx512") == 0) {
        v8_cpu_restrict(~(unsigned)V8_CPU_AVX512VNNI);
    } else if (strcmp(variant, "native") != 0) {
        fprintf(stderr, "variant must be native, avx2 or avx512\n");
        return 1;
    }
    v8_threadpool *pool = v8_threadpool_create(threads);
    if (pool == NULL) {
        fprintf(stderr, "threads must be 1..%d\n", V8_MAX_WORKERS);
        return 1;
    }
    static matrix ms[LAYERS * PER_LAYER];
    double total = 0;
    for (int l = 0; l < LAYERS; ++l) {
        for (int i = 0; i < PER_LAYER; ++i) {
            matrix *m = &ms[l * PER_LAYER + i];
            make_matrix(m, (int)layer_shapes[i][0], layer_shapes[i][1], layer_shapes[i][2]);
            total += (double)m->bytes;
        }
    }
    float *x = malloc(3072 * sizeof(float)), *y = malloc(3072 * sizeof(float));
    for (int i = 0; i < 3072; ++i) {
        x[i] = (float)((int)(bench_rnd() % 2001) - 1000) * 1e-3f;
    }
    const size_t scratch_bytes = v8_q4_k_x16_gemv_scratch_bytes(3072);
    void *scratch = aligned_alloc(64, (scratch_bytes + 63) / 64 * 64);
    double t[2][MAX_ROUNDS];
    for (int r = 0; r < rounds; ++r) {
        for (int i = 0; i < 2; ++i) {
            const int read = (r % 2) ? 1 - i : i; /* which goes first alternates */
            t[read][r] = step_seconds(pool, ms, LAYERS * PER_LAYER, read, x, y, scratch, scratch_bytes);
        }
    }
    char cpu[256];
    cpu_name(cpu, sizeof cpu);
    const int isa = v8_cpu_best_isa();
    printf("CPU: %s; variant %s%s; %d thread(s); %d x16 matrices, %.0f MB per step\n", cpu,
           isa == V8_ISA_AVX512 ? "avx512" : isa == V8_ISA_AVX2 ? "avx2" : "scalar",
           isa == V8_ISA_AVX512 && (v8_cpu_features() & V8_CPU_AVX512VNNI) ? "+vnni" : "", threads,
           LAYERS * PER_LAYER, total * 1e-6);
    double med[2], best[2];
    for (int read = 0; read < 2; ++read) {
        qsort(t[read], (size_t)rounds, sizeof(double), cmp_double);
        med[read] = t[read][rounds / 2];
        best[read] = t[read][0];
        printf("%-5s %7.3f ms %5.1f GB/s (best %7.3f ms %5.1f GB/s)\n", read ? "read" : "gemv",
               med[read] * 1e3, total / med[read] * 1e-9, best[read] * 1e3, total / best[read] * 1e-9);
    }
    printf("gemv / read: %.2f of the read's GB/s (median), %.2f (best)\n", med[1] / med[0], best[1] / best[0]);
    v8_threadpool_destroy(pool);
    free(scratch);
    free(x);
    free(y);
    return 0;
}
