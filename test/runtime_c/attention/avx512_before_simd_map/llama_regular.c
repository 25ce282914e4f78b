/* Provider attn_llama_regular_f16kv: contract fp32_llama_regular (llama.cpp's
 * non-flash attention: KQ = mul_mat(K, Q), soft_max_ext(KQ, mask, scale),
 * mul_mat(V^T, P) with P converted to fp16).
 *
 * Per (head, query row), keys [kv_begin, kv_end) visible:
 *   q16  = r16(q)
 *   s_j  = fma chain over d ascending (from 0) of q16[d] * k_j[d]      (fp32)
 *   w_j  = s_j * scale                       hidden keys -> -inf (the mask)
 *   m    = max_j w_j
 *   p_j  = exp16(w_j - m)                    ggml's AVX-512 vector expf
 *   sum  = sum over 16-key groups from key 0, ascending, of fp64(tree16(p))
 *   p16_j = r16(p_j * fp32(1 / sum))         (reciprocal in fp64, then fp32 scale)
 *   out[d] = fma chain over keys ascending (from 0) of p16_j * v_j[d]   (fp32)
 * The softmax is ggml_compute_forward_soft_max_f32 as built for AVX-512; the
 * padding of K to 256 only adds masked keys (p = 0), which change nothing.
 * The two dot products use a sequential fma chain: this provider's declared
 * order.  ggml's mul_mat uses ggml_vec_dot_f16's lane tree (on an AVX512-FP16
 * host even fp16 accumulation), so against ggml the comparison is a stated
 * tolerance with the observed error reported.
 *
 * The oracle needs no scratch: the row is walked three times (max, sum,
 * values), recomputing the scores, so no buffer scales with kv_len.  The
 * AVX-512 and AVX2 production kernels do the same three passes for 64 query
 * rows held in SIMD lanes (each lane performs the oracle's operation sequence)
 * with per-worker tile buffers from the caller's scratch. */
#include <math.h>
#include <string.h>

#include <immintrin.h>

#include "v8_attention_tiled.h"
#include "tiled_scalar.h"

#define TQ V8_ATTN_TILE_Q
#define TKV V8_ATTN_TILE_KV


static float score(const float *q16, const uint16_t *kr, int64_t D, float scale) {
    float acc = 0.0f;
    for (int64_t d = 0; d < D; ++d) {
        acc = fmaf(q16[d], v8_f16_to_f32(kr[d]), acc);
    }
    return acc * scale;
}

static void regular_row(const v8_attn_args *a, int64_t i, int64_t h) {
    const int64_t D = a->head_dim;
    const int64_t g = h / (a->n_head / a->n_head_kv);
    const uint16_t *kh = (const uint16_t *)a->k + g * a->kv_capacity * D;
    const uint16_t *vh = (const uint16_t *)a->v + g * a->kv_capacity * D;
    const int64_t begin = v8_attn_row_kv_begin(a, i), end = v8_attn_row_kv_end(a, i);
    const float *qr = a->q + (i * a->n_head + h) * D;
    float q16[V8_ATTN_MAX_HEAD_DIM], acc[V8_ATTN_MAX_HEAD_DIM];
    for (int64_t d = 0; d < D; ++d) {
        q16[d] = v8_round_f16(qr[d]);
        acc[d] = 0.0f;
    }
    float m = -INFINITY;
    for (int64_t j = begin; j < end; ++j) {
        const float w = score(q16, kh + j * D, D, a->scale);
        m = m > w ? m : w;
    }
    double sum = 0.0;
    for (int64_t j0 = 0; j0 < end; j0 += 16) { /* groups from key 0, as ggml's soft_max row */
        float p[16];
        for (int l = 0; l < 16; ++l) {
            const int64_t j = j0 + l;
            p[l] = j >= begin && j < end ? exp16_scalar(score(q16, kh + j * D, D, a->scale) - m)
                                         : 0.0f; /* masked key: exp16(-inf) = 0 */
        }
        sum += (double)tree16(p);
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t j = begin; j < end; ++j) { /* a masked key's fp16 weight is 0 */
        const float p = exp16_scalar(score(q16, kh + j * D, D, a->scale) - m);
        const float p16 = v8_round_f16(p * inv);
        const uint16_t *vr = vh + j * D;
        for (int64_t d = 0; d < D; ++d) {
            acc[d] = fmaf(p16, v8_f16_to_f32(vr[d]), acc[d]);
        }
    }
    memcpy(a->out + (i * a->n_head + h) * D, acc, sizeof(float) * (size_t)D);
}

static v8_status regular_check(const v8_attn_args *a) {
    V8_REQUIRE(a->contract == V8_ATTN_FP32_LLAMA_REGULAR, V8_ERR_UNKNOWN_SELECTOR);
    return v8_attn_check_shape(a);
}

#define LR_PACK() V8_ATTN_PACK()

/* Per worker: Qt [D][64], Kf [64][D], Vf [64][D], P [64][64], Ar [64][D]. */
static size_t lr_worker_floats(int64_t D) {
    return (size_t)(4 * D * TQ + TKV * TQ + 16);
}

size_t v8_attn_llama_regular_scratch_bytes(int64_t n_q, int64_t n_head, int64_t head_dim,
                                           int n_workers) {
    (void)n_q;
    (void)n_head;
    if (head_dim < 1 || n_workers < 1) {
        return 0;
    }
    return (size_t)n_workers * lr_worker_floats(head_dim) * sizeof(float) + 64;
}

v8_status v8_attn_llama_regular_ref(V8_ATTN_ARGS_DECL) {
    const v8_attn_args a = LR_PACK();
    v8_status st = regular_check(&a);
    if (st != V8_OK) {
        return st;
    }
    /* The oracle uses no scratch, but it asks for what the size function says (as
     * production does) so the provider's size function and its checks always agree. */
    V8_REQUIRE(scratch != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(scratch_bytes >= v8_attn_llama_regular_scratch_bytes(n_q, n_head, head_dim, 1),
               V8_ERR_BAD_DIMENSION);
    for (int64_t i = 0; i < n_q; ++i) {
        for (int64_t h = 0; h < n_head; ++h) {
            regular_row(&a, i, h);
        }
    }
    return V8_OK;
}

#pragma GCC push_options
#ifndef V8_SIMD_EMULATED /* the _mm512 emulation test build: README.md */
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#endif

#include "tiled_avx512.inc"

/* One head x up-to-64 query rows; w = this worker's scratch slice. */
static void lr_block_avx512(const v8_attn_args *a, float *w, int64_t h, int64_t r0, int64_t nr) {
    const int64_t D = a->head_dim;
    const int64_t g = h / (a->n_head / a->n_head_kv);
    const uint16_t *kh = (const uint16_t *)a->k + g * a->kv_capacity * D;
    const uint16_t *vh = (const uint16_t *)a->v + g * a->kv_capacity * D;
    float *Qt = w, *Kf = Qt + D * TQ, *Vf = Kf + D * TKV, *P = Vf + D * TKV, *Ar = P + TKV * TQ;
    int32_t endv[TQ], beginv[TQ];
    float inv[TQ];
    double tsum[TQ];
    for (int64_t d = 0; d < D; ++d) {
        for (int64_t r = 0; r < TQ; ++r) {
            Qt[d * TQ + r] = r < nr ? v8_round_f16(a->q[((r0 + r) * a->n_head + h) * D + d]) : 0.0f;
        }
    }
    for (int r = 0; r < TQ; ++r) {
        endv[r] = r < nr ? (int32_t)v8_attn_row_kv_end(a, r0 + r) : 0;
        tsum[r] = 0.0;
    }
    memset(Ar, 0, sizeof(float) * (size_t)(TQ * D));
    v8_attn_tile_begins(a, r0, nr, beginv);
    const int64_t kv_stop = a->causal ? a->q_pos0 + r0 + nr : a->kv_len;
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 m[4] = {ninf, ninf, ninf, ninf};

    for (int pass = 0; pass < 3; ++pass) {
        for (int64_t t0 = v8_attn_first_tile(beginv); t0 < kv_stop; t0 += TKV) {
            const int64_t nk = kv_stop - t0 < TKV ? kv_stop - t0 : TKV;
            const int64_t nkc = (nk + 15) & ~(int64_t)15;
            widen_rows_avx512(kh + t0 * D, Kf, nk * D);
            memset(Kf + nk * D, 0, sizeof(float) * (size_t)((nkc - nk) * D));
            score_tile_avx512(Qt, Kf, D, nkc, t0, endv, a->scale, P);
            v8_attn_tile_hide_before_window(P, t0, nkc, beginv);
            if (pass == 0) { /* row max */
                for (int64_t j = 0; j < nkc; ++j) {
                    for (int rv = 0; rv < 4; ++rv) {
                        m[rv] = _mm512_max_ps(m[rv], _mm512_loadu_ps(P + j * TQ + 16 * rv));
                    }
                }
                continue;
            }
            for (int rv = 0; rv < 4; ++rv) {
                const __mmask16 live = _mm512_cmp_ps_mask(m[rv], ninf, _CMP_NEQ_OQ);
                const __m512 vinv = _mm512_loadu_ps(inv + 16 * rv);
                __m512d s0 = _mm512_loadu_pd(tsum + 16 * rv), s1 = _mm512_loadu_pd(tsum + 16 * rv + 8);
                for (int64_t j0 = 0; j0 < nkc; j0 += 16) {
                    __m512 pv[16];
                    for (int l = 0; l < 16; ++l) {
                        float *pp = P + (j0 + l) * TQ + 16 * rv;
                        pv[l] = _mm512_maskz_mov_ps(live, exp16_avx512(_mm512_sub_ps(_mm512_loadu_ps(pp), m[rv])));
                        if (pass == 2) { /* fp16 probabilities for P.V */
                            const __m512 sc = _mm512_mul_ps(pv[l], vinv);
                            _mm512_storeu_ps(pp, _mm512_cvtph_ps(_mm512_cvtps_ph(sc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
                        }
                    }
                    if (pass == 1) { /* 16-key tree, fp64 accumulation across groups */
                        __m512 a8[8], b4[4];
                        for (int l = 0; l < 8; ++l) {
                            a8[l] = _mm512_add_ps(pv[l + 8], pv[l]);
                        }
                        for (int l = 0; l < 4; ++l) {
                            b4[l] = _mm512_add_ps(a8[l + 4], a8[l]);
                        }
                        const __m512 t = _mm512_add_ps(_mm512_add_ps(b4[0], b4[2]), _mm512_add_ps(b4[1], b4[3]));
                        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(t)));
                        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t), 1))));
                    }
                }
                if (pass == 1) {
                    _mm512_storeu_pd(tsum + 16 * rv, s0);
                    _mm512_storeu_pd(tsum + 16 * rv + 8, s1);
                }
            }
            if (pass == 2) {
                widen_rows_avx512(vh + t0 * D, Vf, nk * D);
                memset(Vf + nk * D, 0, sizeof(float) * (size_t)((nkc - nk) * D));
                for (int64_t r = 0; r < nr; r += 4) {
                    int64_t d = 0;
                    for (; d + 64 <= D; d += 64) {
                        pv_4x64_avx512(Ar + r * D + d, D, P + r, Vf + d, D, nkc);
                    }
                    for (; d + 16 <= D; d += 16) {
                        pv_4x16_avx512(Ar + r * D + d, D, P + r, Vf + d, D, nkc, (__mmask16)0xFFFF);
                    }
                    if (d < D) {
                        pv_4x16_avx512(Ar + r * D + d, D, P + r, Vf + d, D, nkc,
                                       (__mmask16)((1u << (D - d)) - 1u));
                    }
                }
            }
        }
        if (pass == 1) {
            for (int r = 0; r < TQ; ++r) {
                inv[r] = r < nr ? (float)(1.0 / tsum[r]) : 0.0f;
            }
        }
    }
    for (int64_t r = 0; r < nr; ++r) {
        memcpy(a->out + ((r0 + r) * a->n_head + h) * D, Ar + r * D, sizeof(float) * (size_t)D);
    }
    avx512_clean_upper();
}

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "tiled_avx2.inc"

/* The AVX-512 block's three passes with 8-row vectors. */
static void lr_block_avx2(const v8_attn_args *a, float *w, int64_t h, int64_t r0, int64_t nr) {
    const int64_t D = a->head_dim;
    const int64_t g = h / (a->n_head / a->n_head_kv);
    const uint16_t *kh = (const uint16_t *)a->k + g * a->kv_capacity * D;
    const uint16_t *vh = (const uint16_t *)a->v + g * a->kv_capacity * D;
    float *Qt = w, *Kf = Qt + D * TQ, *Vf = Kf + D * TKV, *P = Vf + D * TKV, *Ar = P + TKV * TQ;
    int32_t endv[TQ], beginv[TQ];
    float inv[TQ], mrow[TQ];
    double tsum[TQ];
    for (int64_t d = 0; d < D; ++d) {
        for (int64_t r = 0; r < TQ; ++r) {
            Qt[d * TQ + r] = r < nr ? v8_round_f16(a->q[((r0 + r) * a->n_head + h) * D + d]) : 0.0f;
        }
    }
    for (int r = 0; r < TQ; ++r) {
        endv[r] = r < nr ? (int32_t)v8_attn_row_kv_end(a, r0 + r) : 0;
        tsum[r] = 0.0;
        mrow[r] = -INFINITY;
    }
    memset(Ar, 0, sizeof(float) * (size_t)(TQ * D));
    const int nrv = (int)((nr + 7) / 8);
    v8_attn_tile_begins(a, r0, nr, beginv);
    const int64_t kv_stop = a->causal ? a->q_pos0 + r0 + nr : a->kv_len;
    const __m256 ninf = _mm256_set1_ps(-INFINITY);

    for (int pass = 0; pass < 3; ++pass) {
        for (int64_t t0 = v8_attn_first_tile(beginv); t0 < kv_stop; t0 += TKV) {
            const int64_t nk = kv_stop - t0 < TKV ? kv_stop - t0 : TKV;
            const int64_t nkc = (nk + 15) & ~(int64_t)15;
            widen_rows_avx2(kh + t0 * D, Kf, nk * D);
            memset(Kf + nk * D, 0, sizeof(float) * (size_t)((nkc - nk) * D));
            score_tile_avx2(Qt, Kf, D, nkc, t0, endv, a->scale, P, nrv);
            v8_attn_tile_hide_before_window(P, t0, nkc, beginv);
            for (int rv = 0; rv < 8; ++rv) {
                __m256 m = _mm256_loadu_ps(mrow + 8 * rv);
                if (pass == 0) { /* row max */
                    for (int64_t j = 0; j < nkc; ++j) {
                        m = _mm256_max_ps(m, _mm256_loadu_ps(P + j * TQ + 8 * rv));
                    }
                    _mm256_storeu_ps(mrow + 8 * rv, m);
                    continue;
                }
                const __m256 live = _mm256_cmp_ps(m, ninf, _CMP_NEQ_OQ);
                const __m256 vinv = _mm256_loadu_ps(inv + 8 * rv);
                __m256d s0 = _mm256_loadu_pd(tsum + 8 * rv), s1 = _mm256_loadu_pd(tsum + 8 * rv + 4);
                for (int64_t j0 = 0; j0 < nkc; j0 += 16) {
                    __m256 pv[16];
                    for (int l = 0; l < 16; ++l) {
                        float *pp = P + (j0 + l) * TQ + 8 * rv;
                        pv[l] = _mm256_and_ps(exp16_avx2(_mm256_sub_ps(_mm256_loadu_ps(pp), m)), live);
                        if (pass == 2) { /* fp16 probabilities for P.V */
                            const __m256 sc = _mm256_mul_ps(pv[l], vinv);
                            _mm256_storeu_ps(pp, _mm256_cvtph_ps(_mm256_cvtps_ph(sc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
                        }
                    }
                    if (pass == 1) {
                        __m256 a8[8], b4[4];
                        for (int l = 0; l < 8; ++l) {
                            a8[l] = _mm256_add_ps(pv[l + 8], pv[l]);
                        }
                        for (int l = 0; l < 4; ++l) {
                            b4[l] = _mm256_add_ps(a8[l + 4], a8[l]);
                        }
                        const __m256 t = _mm256_add_ps(_mm256_add_ps(b4[0], b4[2]), _mm256_add_ps(b4[1], b4[3]));
                        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(t)));
                        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(t, 1)));
                    }
                }
                if (pass == 1) {
                    _mm256_storeu_pd(tsum + 8 * rv, s0);
                    _mm256_storeu_pd(tsum + 8 * rv + 4, s1);
                }
            }
            if (pass == 2) {
                widen_rows_avx2(vh + t0 * D, Vf, nk * D);
                memset(Vf + nk * D, 0, sizeof(float) * (size_t)((nkc - nk) * D));
                for (int64_t r = 0; r < nr; r += 4) {
                    int64_t d = 0;
                    for (; d + 16 <= D; d += 16) {
                        pv_4x16_avx2(Ar + r * D + d, D, P + r, Vf + d, D, nkc);
                    }
                    if (d < D) {
                        pv_4x8_avx2(Ar + r * D + d, D, P + r, Vf + d, D, nkc);
                    }
                }
            }
        }
        if (pass == 1) {
            for (int r = 0; r < TQ; ++r) {
                inv[r] = r < nr ? (float)(1.0 / tsum[r]) : 0.0f;
            }
        }
    }
    for (int64_t r = 0; r < nr; ++r) {
        memcpy(a->out + ((r0 + r) * a->n_head + h) * D, Ar + r * D, sizeof(float) * (size_t)D);
    }
}

#pragma GCC pop_options

typedef struct lr_job {
    const v8_attn_args *a;
    int64_t n_blocks;
} lr_job;

static void lr_job_run(void *ctx, int64_t task, int worker) {
    const lr_job *job = (const lr_job *)ctx;
    const v8_attn_args *a = job->a;
    const int64_t h = task / job->n_blocks;
    const int64_t r0 = (task % job->n_blocks) * TQ;
    const int64_t nr = a->n_q - r0 < TQ ? a->n_q - r0 : TQ;
    const v8_isa isa = v8_cpu_best_isa();
    if (isa != V8_ISA_SCALAR) {
        uintptr_t base = ((uintptr_t)a->scratch + 63) & ~(uintptr_t)63;
        float *w = (float *)base + (size_t)worker * lr_worker_floats(a->head_dim);
        if (isa == V8_ISA_AVX512) {
            lr_block_avx512(a, w, h, r0, nr);
        } else {
            lr_block_avx2(a, w, h, r0, nr);
        }
    } else {
        for (int64_t i = r0; i < r0 + nr; ++i) {
            regular_row(a, i, h);
        }
    }
}

/* Production: AVX-512, AVX2 + FMA + F16C, or the scalar path, by the running CPU. */
v8_status v8_attn_llama_regular(V8_ATTN_ARGS_DECL) {
    const v8_attn_args a = LR_PACK();
    v8_status st = regular_check(&a);
    if (st != V8_OK) {
        return st;
    }
    V8_REQUIRE(scratch != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(scratch_bytes >= v8_attn_llama_regular_scratch_bytes(n_q, n_head, head_dim, 1),
               V8_ERR_BAD_DIMENSION);
    lr_job job = {&a, (n_q + TQ - 1) / TQ};
    for (int64_t t = 0; t < n_head * job.n_blocks; ++t) {
        lr_job_run(&job, t, 0);
    }
    return V8_OK;
}

/* task = (head, 64-row query block): disjoint outputs, own scratch slice per worker */
v8_status v8_attn_llama_regular_parallel_dispatch(v8_threadpool *pool, V8_ATTN_ARGS_DECL) {
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    const v8_attn_args a = LR_PACK();
    v8_status st = regular_check(&a);
    if (st != V8_OK) {
        return st;
    }
    V8_REQUIRE(scratch != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(scratch_bytes >= v8_attn_llama_regular_scratch_bytes(
                                    n_q, n_head, head_dim, v8_threadpool_workers(pool)),
               V8_ERR_BAD_DIMENSION);
    lr_job job = {&a, (n_q + TQ - 1) / TQ};
    return v8_parallel_for(pool, n_head * job.n_blocks, lr_job_run, &job);
}
