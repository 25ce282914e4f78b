/* Repacked Q4_K GEMV over the 16-row interleaved layout (see
 * v8_quant_repacked_x16.h for the layout and the contract).
 *
 * One row group (16 rows) is walked at a time.  Per super-block and 32-element
 * group g, each 64-byte line of codes gives, per int32 lane r, 4 low and 4
 * high nibbles of row r; maddubs against the broadcast 4 activation bytes of
 * those elements gives int16 pair sums, exact (|pair| <= 2*15*128) and still
 * exact when the group's 8 of them are added in int16 (16 products,
 * |sum| <= 30720).  madd by (sc, sc) widens to sc_g * dot_g in int32 lanes;
 * VNNI takes dpbusd for the dot (4 products per lane, int32) and one mullo
 * by sc_g per group.  The mins sum is one madd per group pair against the
 * activation's paired group sums.  Integer sums are exact, so their order is
 * free; the fp32 steps per lane are the contract's, one rounding each.
 *
 * Scratch: [nb] Q8_K blocks of the quantized activation, then [nb][4] int32
 * pairs (B_2h, B_2h+1) as int16 halves, B_g = bsum_2g + bsum_2g+1. */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "core/prefetch.h"
#include "quant_repacked/v8_quant_repacked_x16.h"

#define QX_ROWS V8_Q4_K_X16_ROWS
#define QX_GROUPS_PER_TASK 2 /* row groups per pool task */

_Static_assert(sizeof(v8_block_q4_kx16) == 2368, "v8_block_q4_kx16 is 37 cache lines");
_Static_assert(sizeof(v8_block_q6_kx16) == 3360, "v8_block_q6_kx16 is 16 plain Q6_K blocks");

typedef struct {
    float *y;
    const v8_block_q4_kx16 *w;
    const v8_block_q6_kx16 *w6;
    const float *bias;
    const v8_block_q8_k *a; /* [nb] */
    const int32_t *bp;      /* [nb][4] */
    int64_t n, nb, n_groups;
} qx_job;

/* ---- repack ---------------------------------------------------------------- */

static void qx_scales_mins(const uint8_t s[12], uint8_t sc[8], uint8_t mn[8]) {
    for (int g = 0; g < 4; ++g) {
        sc[g] = s[g] & 63;
        mn[g] = s[g + 4] & 63;
        sc[g + 4] = (uint8_t)((s[g + 8] & 15) | ((s[g] >> 6) << 4));
        mn[g + 4] = (uint8_t)((s[g + 8] >> 4) | ((s[g + 4] >> 6) << 4));
    }
}

/* Code of element e (0..255) of a plain Q4_K block. */
static inline uint8_t qx_code(const v8_block_q4_k *blk, int e) {
    const int c = e / 64, l = e % 64;
    return l < 32 ? blk->qs[32 * c + l] & 15 : blk->qs[32 * c + l - 32] >> 4;
}

typedef struct {
    uint8_t *dst;
    const uint8_t *w;
    int64_t n, nb;
    size_t row_bytes;
    int q6;
} qx_repack_job;

/* Level (0..63) of element e of a plain Q6_K block. */
static inline uint8_t q6x_level(const v8_block_q6_k *blk, int e) {
    const int h = e / 128, c = (e % 128) / 32, l = e % 32;
    const uint8_t lo = blk->ql[64 * h + 32 * (c & 1) + l];
    return (uint8_t)((c < 2 ? lo & 15 : lo >> 4) | (((blk->qh[32 * h + l] >> (2 * c)) & 3) << 4));
}

static void q6x_repack_group(const qx_repack_job *j, int64_t G) {
    for (int64_t b = 0; b < j->nb; ++b) {
        v8_block_q6_kx16 *o = (v8_block_q6_kx16 *)(void *)j->dst + G * j->nb + b;
        memset(o, 0, sizeof(*o));
        for (int r = 0; r < QX_ROWS; ++r) {
            const int64_t row = G * QX_ROWS + r;
            if (row >= j->n) {
                break;                               /* padding rows stay zero */
            }
            const v8_block_q6_k *blk = (const v8_block_q6_k *)(const void *)(j->w + (size_t)row * j->row_bytes) + b;
            o->d[r] = blk->d;
            for (int s = 0; s < 16; ++s) {
                o->sc[s / 2][r][s % 2] = blk->scales[s];
            }
            for (int u = 0; u < 32; ++u) {
                for (int i = 0; i < 4; ++i) {
                    o->ql[u][4 * r + i] = (uint8_t)((q6x_level(blk, 8 * u + i) & 15) |
                                                    ((q6x_level(blk, 8 * u + 4 + i) & 15) << 4));
                }
            }
            for (int t = 0; t < 16; ++t) {
                for (int i = 0; i < 4; ++i) {
                    uint8_t bits = 0;
                    for (int q = 0; q < 4; ++q) {
                        bits |= (uint8_t)((q6x_level(blk, 16 * t + 4 * q + i) >> 4) << (2 * q));
                    }
                    o->qh[t][4 * r + i] = bits;
                }
            }
        }
    }
}

static void qx_repack_group(const qx_repack_job *j, int64_t G) {
    if (j->q6) {
        q6x_repack_group(j, G);
        return;
    }
    for (int64_t b = 0; b < j->nb; ++b) {
        v8_block_q4_kx16 *o = (v8_block_q4_kx16 *)(void *)j->dst + G * j->nb + b;
        memset(o, 0, sizeof(*o));
        for (int r = 0; r < QX_ROWS; ++r) {
            const int64_t row = G * QX_ROWS + r;
            if (row >= j->n) {
                break;                               /* padding rows stay zero */
            }
            const v8_block_q4_k *blk = (const v8_block_q4_k *)(const void *)(j->w + (size_t)row * j->row_bytes) + b;
            uint8_t sc[8], mn[8];
            qx_scales_mins(blk->scales, sc, mn);
            o->d[r] = blk->d;
            o->dmin[r] = blk->dmin;
            for (int g = 0; g < 8; ++g) {
                o->sc[g][r] = sc[g];
                o->mn[g / 2][r][g % 2] = mn[g];
            }
            for (int u = 0; u < 32; ++u) {
                for (int i = 0; i < 4; ++i) {
                    o->qs[u][4 * r + i] =
                        (uint8_t)(qx_code(blk, 8 * u + i) | (qx_code(blk, 8 * u + 4 + i) << 4));
                }
            }
        }
    }
}

static void qx_repack_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    qx_repack_group((const qx_repack_job *)ctx, task);
}

static size_t qx_repack_bytes(int64_t n, int64_t k, size_t block_bytes) {
    if (n <= 0 || k <= 0 || k % V8_QK_K != 0 || n > ((int64_t)1 << 40) || k > ((int64_t)1 << 32)) {
        return 0;
    }
    const uint64_t groups = (uint64_t)(n + QX_ROWS - 1) / QX_ROWS;
    const uint64_t nb = (uint64_t)(k / V8_QK_K);
    const uint64_t blocks = groups * nb;
    if (blocks / nb != groups || blocks > (uint64_t)SIZE_MAX / block_bytes) {
        return 0;
    }
    return (size_t)(blocks * block_bytes);
}

size_t v8_q4_k_x16_repack_bytes(int64_t n, int64_t k) {
    return qx_repack_bytes(n, k, sizeof(v8_block_q4_kx16));
}

size_t v8_q6_k_x16_repack_bytes(int64_t n, int64_t k) {
    return qx_repack_bytes(n, k, sizeof(v8_block_q6_kx16));
}

static v8_status qx_repack(v8_threadpool *pool, int q6, void *dst, size_t dst_bytes, const void *w,
                           int64_t n, int64_t k) {
    V8_REQUIRE(dst != NULL && w != NULL, V8_ERR_NULL_ARGUMENT);
    const size_t need = q6 ? v8_q6_k_x16_repack_bytes(n, k) : v8_q4_k_x16_repack_bytes(n, k);
    V8_REQUIRE(need > 0 && dst_bytes >= need, V8_ERR_BAD_DIMENSION);
    const size_t row_bytes =
        (size_t)(k / V8_QK_K) * (q6 ? sizeof(v8_block_q6_k) : sizeof(v8_block_q4_k));
    const uintptr_t d0 = (uintptr_t)dst, w0 = (uintptr_t)w;
    V8_REQUIRE((uint64_t)n <= (uint64_t)SIZE_MAX / row_bytes, V8_ERR_BAD_DIMENSION);
    const size_t w_bytes = (size_t)n * row_bytes;
    V8_REQUIRE(d0 + need <= w0 || w0 + w_bytes <= d0, V8_ERR_BAD_DIMENSION); /* no overlap */
    qx_repack_job j = {(uint8_t *)dst, (const uint8_t *)w, n, k / V8_QK_K, row_bytes, q6};
    const int64_t groups = (n + QX_ROWS - 1) / QX_ROWS;
    if (pool == NULL) {
        for (int64_t G = 0; G < groups; ++G) {
            qx_repack_group(&j, G);
        }
        return V8_OK;
    }
    return v8_parallel_for(pool, groups, qx_repack_task, &j);
}

v8_status v8_q4_k_x16_repack(void *dst, size_t dst_bytes, const void *w, int64_t n, int64_t k) {
    return qx_repack(NULL, 0, dst, dst_bytes, w, n, k);
}

v8_status v8_q6_k_x16_repack(void *dst, size_t dst_bytes, const void *w, int64_t n, int64_t k) {
    return qx_repack(NULL, 1, dst, dst_bytes, w, n, k);
}

v8_status v8_q4_k_x16_repack_parallel_dispatch(v8_threadpool *pool, void *dst, size_t dst_bytes,
                                               const void *w, int64_t n, int64_t k) {
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    return qx_repack(pool, 0, dst, dst_bytes, w, n, k);
}

v8_status v8_q6_k_x16_repack_parallel_dispatch(v8_threadpool *pool, void *dst, size_t dst_bytes,
                                               const void *w, int64_t n, int64_t k) {
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    return qx_repack(pool, 1, dst, dst_bytes, w, n, k);
}

/* ---- output ------------------------------------------------------------------ */

/* Lanes [0, 16) of a finished row group: acc - accm (rounded by the caller's
 * subtraction), then the bias; padding rows are not written. */
static inline void qx_store(const qx_job *j, int64_t G, const float out[QX_ROWS]) {
    const int64_t r0 = G * QX_ROWS;
    const int64_t r1 = r0 + QX_ROWS < j->n ? r0 + QX_ROWS : j->n;
    for (int64_t r = r0; r < r1; ++r) {
        j->y[r] = j->bias != NULL ? out[r - r0] + j->bias[r] : out[r - r0];
    }
}

/* Software prefetch V8_PREFETCH_BYTES ahead along the matrix, which the GEMV
 * reads as one sequential stream: the block's 5 header lines when it starts,
 * then one line per 64-byte unit of codes as it is read.  Measured on AMD
 * EPYC (Zen 3), 1 thread, AVX2, alternating runs: all 37 lines at block start
 * stalled on the prefetches (in cache 1.1x the time of no prefetch); none
 * left 131072x1024 streamed at 1.1-1.4x the time; one per unit is 0.84-0.91x
 * the time of all-at-start in cache and 0.78-0.87x streamed. */
static inline void qx_prefetch_unit(const uint8_t *line, size_t ahead) {
    v8_prefetch_line((uintptr_t)line + ahead);
}

static inline void qx_prefetch_block(const v8_block_q4_kx16 *blk, size_t ahead) {
    v8_prefetch_lines((uintptr_t)blk + ahead, offsetof(v8_block_q4_kx16, qs));
}

/* How far ahead the AVX2 Q4_K walk asks: half the shared distance.  AMD EPYC (Zen 4)
 * under the AVX2 mask, the Qwen3-0.6B-shaped decode step's x16 GEMVs (1.2-1.8 MB each),
 * both distances alternating in one process, per-GEMV medians: at 2 threads 7-12% less
 * time with 6 KiB than 12 KiB in two runs (4 and 8 KiB in between), at 1 thread 2-12%
 * less.  The AVX-512 walks' effect was within this host's drift, so they keep 12 KiB. */
#define QX_AVX2_PREFETCH_BYTES (V8_PREFETCH_BYTES / 2)

/* 4 activation bytes as one int32 (for broadcasts) */
static inline int32_t qx_a32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* (bsum_2u, bsum_2u+1) of a Q8_K block as one int32 of two int16 halves */
static inline int32_t q6x_bsum_pair(const v8_block_q8_k *ab, int u) {
    int32_t v;
    memcpy(&v, ab->bsums + 2 * u, 4);
    return v;
}

/* pshufb selectors: in every int32 lane of (sc_2g, sc_2g+1) int16 pairs, the
 * pair (sc_2g, sc_2g) [0] or (sc_2g+1, sc_2g+1) [1]; indices are per 128-bit lane */
#define Q6X_PICK4(o) (o) + 0, (o) + 1, (o) + 0, (o) + 1
#define Q6X_PICK16(o) Q6X_PICK4(o), Q6X_PICK4(o + 4), Q6X_PICK4(o + 8), Q6X_PICK4(o + 12)
static const uint8_t q6x_pick[2][64] = {
    {Q6X_PICK16(0), Q6X_PICK16(0), Q6X_PICK16(0), Q6X_PICK16(0)},
    {Q6X_PICK16(2), Q6X_PICK16(2), Q6X_PICK16(2), Q6X_PICK16(2)},
};
#undef Q6X_PICK16
#undef Q6X_PICK4

/* The Q6_K block's header lines (d, scales); its code lines are prefetched
 * as they are read, like the Q4_K walk's. */
static inline void q6x_prefetch_block(const v8_block_q6_kx16 *blk) {
    v8_prefetch_lines((uintptr_t)blk + V8_PREFETCH_BYTES, offsetof(v8_block_q6_kx16, ql));
}

/* ---- scalar walk of the layout ------------------------------------------------ */

static void qx_group_scalar(const qx_job *j, int64_t G) {
    float out[QX_ROWS];
    for (int r = 0; r < QX_ROWS; ++r) {
        float acc = 0.0f, accm = 0.0f;
        for (int64_t b = 0; b < j->nb; ++b) {
            const v8_block_q4_kx16 *w = j->w + G * j->nb + b;
            const v8_block_q8_k *ab = j->a + b;
            int32_t s1 = 0, s2 = 0;
            for (int g = 0; g < 8; ++g) {
                int32_t dot = 0;
                for (int u = 4 * g; u < 4 * g + 4; ++u) {
                    for (int i = 0; i < 4; ++i) {
                        const uint8_t q = w->qs[u][4 * r + i];
                        dot += (int32_t)(q & 15) * ab->qs[8 * u + i];
                        dot += (int32_t)(q >> 4) * ab->qs[8 * u + 4 + i];
                    }
                }
                s1 += (int32_t)w->sc[g][r] * dot;
                s2 += (int32_t)w->mn[g / 2][r][g % 2] *
                      ((int32_t)ab->bsums[2 * g] + (int32_t)ab->bsums[2 * g + 1]);
            }
            const float ds = v8_f16_to_f32(w->d[r]) * ab->d;     /* one rounding each */
            const float dm = v8_f16_to_f32(w->dmin[r]) * ab->d;
            acc = fmaf((float)s1, ds, acc);
            accm = fmaf((float)s2, dm, accm);
        }
        out[r] = acc - accm;
    }
    qx_store(j, G, out);
}

/* ---- Q6_K: the 8 fp32 lanes per row ------------------------------------------ */

/* Unit j = 4g + c of a Q6_K super-block (g = 32-element group, c = 0..3) holds
 * elements 32g + 8c + i (low nibbles, lane 2c of the contract) and
 * 32g + 8c + 4 + i (high nibbles, lane 2c + 1), i = 0..3, all of sub-block
 * 2g + c/2; their top bits are in qh line t = 2g + c/2 at bits 4s and 4s + 2,
 * s = c % 2.  Lane u's -32 offset is the contract's integer correction
 * 32 * (bsum_2u * sc_2u + bsum_2u+1 * sc_2u+1). */

static float q6x_tree8(const float a[8]) {
    float r[4];
    for (int i = 0; i < 4; ++i) {
        r[i] = a[i + 4] + a[i];
    }
    return (r[0] + r[2]) + (r[1] + r[3]);
}

static void q6x_group_scalar(const qx_job *j, int64_t G) {
    float out[QX_ROWS];
    for (int r = 0; r < QX_ROWS; ++r) {
        float acc[8] = {0};
        for (int64_t b = 0; b < j->nb; ++b) {
            const v8_block_q6_kx16 *w = j->w6 + G * j->nb + b;
            const v8_block_q8_k *ab = j->a + b;
            int32_t lane[8] = {0};
            for (int u = 0; u < 32; ++u) {
                const int g = u / 4, c = u % 4, s = c % 2;
                int32_t dlo = 0, dhi = 0;
                for (int i = 0; i < 4; ++i) {
                    const uint8_t q = w->ql[u][4 * r + i], h = w->qh[u / 2][4 * r + i];
                    dlo += ((q & 15) | (((h >> (4 * s)) & 3) << 4)) * ab->qs[8 * u + i];
                    dhi += ((q >> 4) | (((h >> (4 * s + 2)) & 3) << 4)) * ab->qs[8 * u + 4 + i];
                }
                const int32_t sc = w->sc[g][r][c / 2];
                lane[2 * c] += sc * dlo;
                lane[2 * c + 1] += sc * dhi;
            }
            const float d = ab->d * v8_f16_to_f32(w->d[r]);
            for (int u = 0; u < 8; ++u) {
                lane[u] -= 32 * (ab->bsums[2 * u] * w->sc[u][r][0] + ab->bsums[2 * u + 1] * w->sc[u][r][1]);
                acc[u] = fmaf(d, (float)lane[u], acc[u]);
            }
        }
        out[r] = q6x_tree8(acc);
    }
    qx_store(j, G, out);
}

/* ---- AVX-512 ------------------------------------------------------------------- */

/* Each variant is a core/simd.h selection.  A test build
 * (test/runtime_c/quant_repacked) defines V8_SIMD_EMULATED and maps the
 * _mm512 intrinsics to portable emulations, so the AVX-512 variants are
 * checked bit for bit on hosts without AVX-512; core/simd.h then opens no
 * AVX-512 target, which would let the compiler emit AVX-512 code there. */
#define V8_SIMD_AVX512
#include "core/simd.h"

/* (sc, sc) int16 pairs of group g's scales, one pair per row lane */
static inline __m512i V8_SIMD_FN(qx_scale16)(const v8_block_q4_kx16 *w, int g) {
    const __m512i s = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)w->sc[g]));
    return _mm512_or_si512(s, _mm512_slli_epi32(s, 16));
}

/* Per row lane: S2 = sum_g mn_g * B_g. */
static inline __m512i V8_SIMD_FN(qx_mins)(const v8_block_q4_kx16 *w, const int32_t bp[4]) {
    __m512i m = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h) {
        const __m512i mn = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)w->mn[h]));
        m = _mm512_add_epi32(m, _mm512_madd_epi16(mn, _mm512_set1_epi32(bp[h])));
    }
    return m;
}

/* The fp32 steps of one super-block in all 16 lanes. */
static inline void V8_SIMD_FN(qx_step)(const v8_block_q4_kx16 *w, const v8_block_q8_k *ab, __m512i s1,
                                       __m512i s2, __m512 *acc, __m512 *accm) {
    const __m512 ad = _mm512_set1_ps(ab->d);
    const __m512 ds = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)w->d)), ad);
    const __m512 dm = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)w->dmin)), ad);
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), ds, *acc);
    *accm = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s2), dm, *accm);
}

/* The AVX-512 Q4_K walks prefetch each code line as they read it (as the AVX2
 * walk does) where the CPU has V8_CPU_LINE_PREFETCH, and otherwise a block's
 * header lines only.  The two hosts measured disagree.  AMD EPYC (Zen 4): the
 * 140 Q4_K GEMVs and 56 Q6_K GEMVs of a 28-layer 1024-wide decode step (huge
 * pages, 1 thread, alternating builds in one run) took 16.4-17.6 GB/s with the
 * per-line prefetches, 18.3-20.1 without (the AVX2 walk on the same host went
 * the other way, 21.5-23.4 with, 17.6-20.3 without).  Intel Xeon (Emerald
 * Rapids): a 4096x1024 x16 GEMV streamed from DRAM took 9.8-10.4 GB/s
 * (median) without, 11.2-13.5 with, and the whole decode step at n_past 128
 * 20.1-24.9 tok/s without, 23.4-29.9 with.  The Q6_K walk keeps its per-line
 * prefetches everywhere: with no prefetch in either walk the Zen 4 step fell
 * to 14.0-15.9 GB/s.  The prefetches are hints, so no bit depends on them. */
static inline __attribute__((always_inline)) void V8_SIMD_FN(qx_walk)(const qx_job *j, int64_t G,
                                                                   const int lines) {
    const __m512i m4 = _mm512_set1_epi8(15);
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    for (int64_t b = 0; b < j->nb; ++b) {
        const v8_block_q4_kx16 *w = j->w + G * j->nb + b;
        const v8_block_q8_k *ab = j->a + b;
        qx_prefetch_block(w, V8_PREFETCH_BYTES);
        __m512i s1 = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int g = 0; g < 8; ++g) {
            __m512i p = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int u = 4 * g; u < 4 * g + 4; ++u) {
                if (lines) {
                    qx_prefetch_unit(w->qs[u], V8_PREFETCH_BYTES);
                }
                const __m512i v = _mm512_loadu_si512((const void *)w->qs[u]);
                const __m512i lo = _mm512_and_si512(v, m4);
                const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                p = _mm512_add_epi16(p, _mm512_maddubs_epi16(lo, _mm512_set1_epi32(qx_a32(ab->qs + 8 * u))));
                p = _mm512_add_epi16(p, _mm512_maddubs_epi16(hi, _mm512_set1_epi32(qx_a32(ab->qs + 8 * u + 4))));
            }
            s1 = _mm512_add_epi32(s1, _mm512_madd_epi16(p, V8_SIMD_FN(qx_scale16)(w, g)));
        }
        V8_SIMD_FN(qx_step)(w, ab, s1, V8_SIMD_FN(qx_mins)(w, j->bp + 4 * b), &acc, &accm);
    }
    float out[QX_ROWS];
    _mm512_storeu_ps(out, _mm512_sub_ps(acc, accm));
    qx_store(j, G, out);
}

/* The walk without and with per-line prefetches (see above). */
static void V8_SIMD_FN(qx_group)(const qx_job *j, int64_t G) {
    V8_SIMD_FN(qx_walk)(j, G, 0);
}

static void V8_SIMD_FN(qx_group_lines)(const qx_job *j, int64_t G) {
    V8_SIMD_FN(qx_walk)(j, G, 1);
}


/* Q6_K: the 8 int32 lanes (2c, 2c+1 for c = 0..3) of all 16 rows at once, the
 * block's lines in memory order: per group g, its two qh lines and its four ql
 * units c = 0..3, and its scales widened once for both of its sub-blocks.
 * (Walking c outer and g inner visited every fourth line of a block four
 * times over and widened each group's scales four times.) */
static void V8_SIMD_FN(q6x_group)(const qx_job *j, int64_t G) {
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    const __m512i pick0 = _mm512_loadu_si512((const void *)q6x_pick[0]);
    const __m512i pick1 = _mm512_loadu_si512((const void *)q6x_pick[1]);
    __m512 facc[8];
    for (int u = 0; u < 8; ++u) {
        facc[u] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < j->nb; ++b) {
        const v8_block_q6_kx16 *w = j->w6 + G * j->nb + b;
        const v8_block_q8_k *ab = j->a + b;
        q6x_prefetch_block(w);
        const __m512 d = _mm512_mul_ps(_mm512_set1_ps(ab->d),
                                       _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)w->d)));
        __m512i lane[8];
        for (int u = 0; u < 8; ++u) {
            lane[u] = _mm512_setzero_si512();
        }
#pragma GCC unroll 2
        for (int g = 0; g < 8; ++g) {
            const __m512i sw = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)w->sc[g]));
            const __m512i sc[2] = {_mm512_shuffle_epi8(sw, pick0), _mm512_shuffle_epi8(sw, pick1)};
            qx_prefetch_unit(w->qh[2 * g], V8_PREFETCH_BYTES);
            qx_prefetch_unit(w->qh[2 * g + 1], V8_PREFETCH_BYTES);
#pragma GCC unroll 4
            for (int c = 0; c < 4; ++c) {
                const int u = 4 * g + c;
                qx_prefetch_unit(w->ql[u], V8_PREFETCH_BYTES);
                const __m512i v = _mm512_loadu_si512((const void *)w->ql[u]);
                const __m512i h = _mm512_loadu_si512((const void *)w->qh[u / 2]);
                const __m512i hlo = c % 2 == 0 ? _mm512_and_si512(_mm512_slli_epi16(h, 4), m30) : _mm512_and_si512(h, m30);
                const __m512i hhi = c % 2 == 0 ? _mm512_and_si512(_mm512_slli_epi16(h, 2), m30)
                                               : _mm512_and_si512(_mm512_srli_epi16(h, 2), m30);
                const __m512i llo = _mm512_or_si512(_mm512_and_si512(v, m4), hlo);
                const __m512i lhi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), hhi);
                lane[2 * c] = _mm512_add_epi32(lane[2 * c], _mm512_madd_epi16(_mm512_maddubs_epi16(llo, _mm512_set1_epi32(qx_a32(ab->qs + 8 * u))), sc[c / 2]));
                lane[2 * c + 1] = _mm512_add_epi32(lane[2 * c + 1], _mm512_madd_epi16(_mm512_maddubs_epi16(lhi, _mm512_set1_epi32(qx_a32(ab->qs + 8 * u + 4))), sc[c / 2]));
            }
        }
#pragma GCC unroll 8
        for (int u = 0; u < 8; ++u) {
            const __m512i corr = _mm512_madd_epi16(
                _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)w->sc[u])),
                _mm512_set1_epi32(q6x_bsum_pair(ab, u)));
            lane[u] = _mm512_sub_epi32(lane[u], _mm512_slli_epi32(corr, 5));
            facc[u] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(lane[u]), facc[u]);
        }
    }
    const __m512 r0 = _mm512_add_ps(facc[4], facc[0]), r1 = _mm512_add_ps(facc[5], facc[1]);
    const __m512 r2 = _mm512_add_ps(facc[6], facc[2]), r3 = _mm512_add_ps(facc[7], facc[3]);
    float out[QX_ROWS];
    _mm512_storeu_ps(out, _mm512_add_ps(_mm512_add_ps(r0, r2), _mm512_add_ps(r1, r3)));
    qx_store(j, G, out);
}

#include "core/simd_end.h"

/* AVX-512 VNNI: dpbusd sums each lane's 4 code x activation products into
 * int32 (exact), and group g's dot is scaled with one mullo. */
#define V8_SIMD_AVX512
#define V8_SIMD_VNNI
#include "core/simd.h"

static inline __attribute__((always_inline)) void V8_SIMD_FN(qx_walk)(const qx_job *j, int64_t G,
                                                                   const int lines) {
    const __m512i m4 = _mm512_set1_epi8(15);
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    for (int64_t b = 0; b < j->nb; ++b) {
        const v8_block_q4_kx16 *w = j->w + G * j->nb + b;
        const v8_block_q8_k *ab = j->a + b;
        qx_prefetch_block(w, V8_PREFETCH_BYTES);
        __m512i s1 = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int g = 0; g < 8; ++g) {
            /* two int32 chains (low and high nibbles) of four dpbusd each, not one
             * of eight: the sums are exact, so their order is free, and the
             * shorter chains take half the dpbusd latency off the critical path */
            __m512i dlo = _mm512_setzero_si512(), dhi = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int u = 4 * g; u < 4 * g + 4; ++u) {
                if (lines) {
                    qx_prefetch_unit(w->qs[u], V8_PREFETCH_BYTES);
                }
                const __m512i v = _mm512_loadu_si512((const void *)w->qs[u]);
                const __m512i lo = _mm512_and_si512(v, m4);
                const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                dlo = _mm512_dpbusd_epi32(dlo, lo, _mm512_set1_epi32(qx_a32(ab->qs + 8 * u)));
                dhi = _mm512_dpbusd_epi32(dhi, hi, _mm512_set1_epi32(qx_a32(ab->qs + 8 * u + 4)));
            }
            const __m512i dot = _mm512_add_epi32(dlo, dhi);
            const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)w->sc[g]));
            s1 = _mm512_add_epi32(s1, _mm512_mullo_epi32(dot, sc));
        }
        qx_step_avx512(w, ab, s1, qx_mins_avx512(w, j->bp + 4 * b), &acc, &accm);
    }
    float out[QX_ROWS];
    _mm512_storeu_ps(out, _mm512_sub_ps(acc, accm));
    qx_store(j, G, out);
}

/* The walk without and with per-line prefetches (see above). */
static void V8_SIMD_FN(qx_group)(const qx_job *j, int64_t G) {
    V8_SIMD_FN(qx_walk)(j, G, 0);
}

static void V8_SIMD_FN(qx_group_lines)(const qx_job *j, int64_t G) {
    V8_SIMD_FN(qx_walk)(j, G, 1);
}

#include "core/simd_end.h"

/* ---- AVX2: the 16 lanes as two 8-lane halves sharing each activation load ---- */

#define V8_SIMD_AVX2
#include "core/simd.h"

static inline __m256i V8_SIMD_FN(qx_scale16)(const uint8_t *sc8) {
    const __m256i s = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)sc8));
    return _mm256_or_si256(s, _mm256_slli_epi32(s, 16));
}

static void V8_SIMD_FN(qx_group)(const qx_job *j, int64_t G) {
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, accm0 = acc0, accm1 = acc0;
    for (int64_t b = 0; b < j->nb; ++b) {
        const v8_block_q4_kx16 *w = j->w + G * j->nb + b;
        const v8_block_q8_k *ab = j->a + b;
        qx_prefetch_block(w, QX_AVX2_PREFETCH_BYTES);
        __m256i s0 = _mm256_setzero_si256(), s1 = s0;
        for (int g = 0; g < 8; ++g) {
            __m256i p0 = _mm256_setzero_si256(), p1 = p0;
#pragma GCC unroll 4
            for (int u = 4 * g; u < 4 * g + 4; ++u) {
                qx_prefetch_unit(w->qs[u], QX_AVX2_PREFETCH_BYTES);
                const __m256i v0 = _mm256_loadu_si256((const __m256i *)(const void *)w->qs[u]);
                const __m256i v1 = _mm256_loadu_si256((const __m256i *)(const void *)(w->qs[u] + 32));
                const __m256i alo = _mm256_set1_epi32(qx_a32(ab->qs + 8 * u));
                const __m256i ahi = _mm256_set1_epi32(qx_a32(ab->qs + 8 * u + 4));
                p0 = _mm256_add_epi16(p0, _mm256_maddubs_epi16(_mm256_and_si256(v0, m4), alo));
                p1 = _mm256_add_epi16(p1, _mm256_maddubs_epi16(_mm256_and_si256(v1, m4), alo));
                p0 = _mm256_add_epi16(p0, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v0, 4), m4), ahi));
                p1 = _mm256_add_epi16(p1, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v1, 4), m4), ahi));
            }
            s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(p0, V8_SIMD_FN(qx_scale16)(w->sc[g])));
            s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(p1, V8_SIMD_FN(qx_scale16)(w->sc[g] + 8)));
        }
        __m256i m0 = _mm256_setzero_si256(), m1 = m0;
        const int32_t *bp = j->bp + 4 * b;
        for (int h = 0; h < 4; ++h) {
            const __m256i bb = _mm256_set1_epi32(bp[h]);
            const __m256i mn0 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)w->mn[h][0]));
            const __m256i mn1 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)w->mn[h][8]));
            m0 = _mm256_add_epi32(m0, _mm256_madd_epi16(mn0, bb));
            m1 = _mm256_add_epi32(m1, _mm256_madd_epi16(mn1, bb));
        }
        const __m256 ad = _mm256_set1_ps(ab->d);
        const __m256 ds0 = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)w->d)), ad);
        const __m256 ds1 = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(w->d + 8))), ad);
        const __m256 dm0 = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)w->dmin)), ad);
        const __m256 dm1 = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(w->dmin + 8))), ad);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), ds0, acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), ds1, acc1);
        accm0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m0), dm0, accm0);
        accm1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m1), dm1, accm1);
    }
    float out[QX_ROWS];
    _mm256_storeu_ps(out, _mm256_sub_ps(acc0, accm0));
    _mm256_storeu_ps(out + 8, _mm256_sub_ps(acc1, accm1));
    qx_store(j, G, out);
}


static void V8_SIMD_FN(q6x_group)(const qx_job *j, int64_t G) {
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    __m256 facc[2][8];
    for (int u = 0; u < 8; ++u) {
        facc[0][u] = _mm256_setzero_ps();
        facc[1][u] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < j->nb; ++b) {
        const v8_block_q6_kx16 *w = j->w6 + G * j->nb + b;
        const v8_block_q8_k *ab = j->a + b;
        q6x_prefetch_block(w);
        const __m256 ad = _mm256_set1_ps(ab->d);
        const __m256 d0 = _mm256_mul_ps(ad, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)w->d)));
        const __m256 d1 = _mm256_mul_ps(ad, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(w->d + 8))));
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
            const __m256i pick = _mm256_loadu_si256((const __m256i *)(const void *)q6x_pick[c / 2]);
            __m256i lo0 = _mm256_setzero_si256(), hi0 = lo0, lo1 = lo0, hi1 = lo0;
            for (int g = 0; g < 8; ++g) {
                const int u = 4 * g + c;
                qx_prefetch_unit(w->ql[u], V8_PREFETCH_BYTES);
                if (c == 0) {
                    qx_prefetch_unit(w->qh[2 * g], V8_PREFETCH_BYTES);
                    qx_prefetch_unit(w->qh[2 * g + 1], V8_PREFETCH_BYTES);
                }
                const __m256i alo = _mm256_set1_epi32(qx_a32(ab->qs + 8 * u));
                const __m256i ahi = _mm256_set1_epi32(qx_a32(ab->qs + 8 * u + 4));
#pragma GCC unroll 2
                for (int half = 0; half < 2; ++half) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(w->ql[u] + 32 * half));
                    const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(w->qh[u / 2] + 32 * half));
                    const __m256i hlo = c % 2 == 0 ? _mm256_and_si256(_mm256_slli_epi16(h, 4), m30) : _mm256_and_si256(h, m30);
                    const __m256i hhi = c % 2 == 0 ? _mm256_and_si256(_mm256_slli_epi16(h, 2), m30)
                                                   : _mm256_and_si256(_mm256_srli_epi16(h, 2), m30);
                    const __m256i llo = _mm256_or_si256(_mm256_and_si256(v, m4), hlo);
                    const __m256i lhi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), hhi);
                    const __m256i sc = _mm256_shuffle_epi8(
                        _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)w->sc[g][8 * half])), pick);
                    const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(llo, alo), sc);
                    const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(lhi, ahi), sc);
                    if (half == 0) {
                        lo0 = _mm256_add_epi32(lo0, plo);
                        hi0 = _mm256_add_epi32(hi0, phi);
                    } else {
                        lo1 = _mm256_add_epi32(lo1, plo);
                        hi1 = _mm256_add_epi32(hi1, phi);
                    }
                }
            }
            const __m256i blo = _mm256_set1_epi32(q6x_bsum_pair(ab, 2 * c));
            const __m256i bhi = _mm256_set1_epi32(q6x_bsum_pair(ab, 2 * c + 1));
#define Q6X_CORR(acc, u, half, bb) \
    _mm256_sub_epi32(acc, _mm256_slli_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128( \
        (const __m128i *)(const void *)w->sc[u][8 * (half)])), bb), 5))
            lo0 = Q6X_CORR(lo0, 2 * c, 0, blo);
            lo1 = Q6X_CORR(lo1, 2 * c, 1, blo);
            hi0 = Q6X_CORR(hi0, 2 * c + 1, 0, bhi);
            hi1 = Q6X_CORR(hi1, 2 * c + 1, 1, bhi);
#undef Q6X_CORR
            facc[0][2 * c] = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(lo0), facc[0][2 * c]);
            facc[1][2 * c] = _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(lo1), facc[1][2 * c]);
            facc[0][2 * c + 1] = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(hi0), facc[0][2 * c + 1]);
            facc[1][2 * c + 1] = _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(hi1), facc[1][2 * c + 1]);
        }
    }
    float out[QX_ROWS];
    for (int half = 0; half < 2; ++half) {
        const __m256 *a = facc[half];
        const __m256 r0 = _mm256_add_ps(a[4], a[0]), r1 = _mm256_add_ps(a[5], a[1]);
        const __m256 r2 = _mm256_add_ps(a[6], a[2]), r3 = _mm256_add_ps(a[7], a[3]);
        _mm256_storeu_ps(out + 8 * half, _mm256_add_ps(_mm256_add_ps(r0, r2), _mm256_add_ps(r1, r3)));
    }
    qx_store(j, G, out);
}

#include "core/simd_end.h"

/* ---- driver ---------------------------------------------------------------------- */

typedef void (*qx_group_fn)(const qx_job *j, int64_t G);

static qx_group_fn q6x_variant_for(int use_ref) {
    if (use_ref) {
        return q6x_group_scalar;
    }
    switch (v8_cpu_best_isa()) {
    case V8_ISA_AVX512:
        return q6x_group_avx512;
    case V8_ISA_AVX2:
        return q6x_group_avx2;
    default:
        return q6x_group_scalar;
    }
}

static qx_group_fn qx_variant_for(int use_ref) {
    if (use_ref) {
        return qx_group_scalar;
    }
    const unsigned features = v8_cpu_features();
    const int lines = (features & V8_CPU_LINE_PREFETCH) != 0;
    switch (v8_cpu_best_isa()) {
    case V8_ISA_AVX512:
        if ((features & V8_CPU_AVX512VNNI) != 0) {
            return lines ? qx_group_lines_avx512vnni : qx_group_avx512vnni;
        }
        return lines ? qx_group_lines_avx512 : qx_group_avx512;
    case V8_ISA_AVX2:
        return qx_group_avx2;
    default:
        return qx_group_scalar;
    }
}

size_t v8_q4_k_x16_gemv_scratch_bytes(int64_t k) {
    if (k <= 0 || k % V8_QK_K != 0 || k > ((int64_t)1 << 32)) {
        return 0;
    }
    const size_t nb = (size_t)(k / V8_QK_K);
    return nb * (sizeof(v8_block_q8_k) + 4 * sizeof(int32_t));
}

size_t v8_q6_k_x16_gemv_scratch_bytes(int64_t k) {
    if (k <= 0 || k % V8_QK_K != 0 || k > ((int64_t)1 << 32)) {
        return 0;
    }
    return (size_t)(k / V8_QK_K) * sizeof(v8_block_q8_k);
}

typedef struct {
    const qx_job *j;
    qx_group_fn fn;
} qx_task_ctx;

static void qx_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const qx_task_ctx *c = (const qx_task_ctx *)ctx;
    const int64_t G0 = task * QX_GROUPS_PER_TASK;
    const int64_t G1 = G0 + QX_GROUPS_PER_TASK < c->j->n_groups ? G0 + QX_GROUPS_PER_TASK : c->j->n_groups;
    for (int64_t G = G0; G < G1; ++G) {
        c->fn(c->j, G);
    }
}

/* q6: the Q6_K layout and contract, else the Q4_K ones */
static v8_status qx_gemv(v8_threadpool *pool, int q6, qx_group_fn fn, int contract, float *y,
                         const void *w, const float *x, const float *bias, int64_t n, int64_t k,
                         void *scratch, size_t scratch_bytes) {
    V8_REQUIRE(contract == (q6 ? V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER
                               : V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN),
               V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && w != NULL && x != NULL && scratch != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(n > 0 && k > 0 && k % V8_QK_K == 0 &&
               (q6 ? v8_q6_k_x16_repack_bytes(n, k) : v8_q4_k_x16_repack_bytes(n, k)) > 0,
               V8_ERR_BAD_DIMENSION);
    const size_t need = q6 ? v8_q6_k_x16_gemv_scratch_bytes(k) : v8_q4_k_x16_gemv_scratch_bytes(k);
    V8_REQUIRE(need > 0 && scratch_bytes >= need, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(((uintptr_t)scratch & 3u) == 0, V8_ERR_BAD_DIMENSION);
    const int64_t nb = k / V8_QK_K;
    v8_block_q8_k *a = (v8_block_q8_k *)scratch;
    int32_t *bp = q6 ? NULL : (int32_t *)(void *)(a + nb);
    V8_REQUIRE(v8_quantize_q8_k(x, a, 1, k) == V8_OK, V8_ERR_BAD_DIMENSION);
    for (int64_t b = 0; bp != NULL && b < nb; ++b) {
        for (int h = 0; h < 4; ++h) {
            const int32_t lo = (int32_t)a[b].bsums[4 * h] + a[b].bsums[4 * h + 1];     /* B_2h */
            const int32_t hi = (int32_t)a[b].bsums[4 * h + 2] + a[b].bsums[4 * h + 3]; /* B_2h+1 */
            bp[4 * b + h] = (int32_t)(((uint32_t)hi << 16) | ((uint32_t)lo & 0xffffu));
        }
    }
    qx_job j = {y, (const v8_block_q4_kx16 *)w, (const v8_block_q6_kx16 *)w, bias, a, bp, n, nb,
                (n + QX_ROWS - 1) / QX_ROWS};
    qx_task_ctx c = {&j, fn};
    const int64_t tasks = (j.n_groups + QX_GROUPS_PER_TASK - 1) / QX_GROUPS_PER_TASK;
    if (pool == NULL) {
        for (int64_t t = 0; t < tasks; ++t) {
            qx_task(&c, t, 0);
        }
        return V8_OK;
    }
    return v8_parallel_for(pool, tasks, qx_task, &c);
}

v8_status v8_q4_k_x16_gemv_ref(int contract, float *y, const void *w, const float *x,
                               const float *bias, int64_t n, int64_t k, void *scratch,
                               size_t scratch_bytes) {
    return qx_gemv(NULL, 0, qx_variant_for(1), contract, y, w, x, bias, n, k, scratch, scratch_bytes);
}

v8_status v8_q4_k_x16_gemv(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t n, int64_t k, void *scratch,
                           size_t scratch_bytes) {
    return qx_gemv(NULL, 0, qx_variant_for(0), contract, y, w, x, bias, n, k, scratch, scratch_bytes);
}

v8_status v8_q4_k_x16_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                             const void *w, const float *x, const float *bias,
                                             int64_t n, int64_t k, void *scratch,
                                             size_t scratch_bytes) {
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    return qx_gemv(pool, 0, qx_variant_for(0), contract, y, w, x, bias, n, k, scratch, scratch_bytes);
}

v8_status v8_q6_k_x16_gemv_ref(int contract, float *y, const void *w, const float *x,
                               const float *bias, int64_t n, int64_t k, void *scratch,
                               size_t scratch_bytes) {
    return qx_gemv(NULL, 1, q6x_variant_for(1), contract, y, w, x, bias, n, k, scratch, scratch_bytes);
}

v8_status v8_q6_k_x16_gemv(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t n, int64_t k, void *scratch,
                           size_t scratch_bytes) {
    return qx_gemv(NULL, 1, q6x_variant_for(0), contract, y, w, x, bias, n, k, scratch, scratch_bytes);
}

v8_status v8_q6_k_x16_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                             const void *w, const float *x, const float *bias,
                                             int64_t n, int64_t k, void *scratch,
                                             size_t scratch_bytes) {
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    return qx_gemv(pool, 1, q6x_variant_for(0), contract, y, w, x, bias, n, k, scratch, scratch_bytes);
}
