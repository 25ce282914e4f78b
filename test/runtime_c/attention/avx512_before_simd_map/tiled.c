/* Provider attn_tiled64_f16kv: contracts f16_kv_tiled64_fp32_softmax_fp64_sum_update
 * (llama.cpp's AVX-512 build) and f16_kv_tiled64_fp32_softmax_fp64_sum_update_8_lane_vexp
 * (its AVX2 build); see v8_attention_tiled.h for the arithmetic.  The two differ only
 * in the probability exp and in the key groups of the tile sum (16 keys, tree16, and the
 * AVX-512 form of ggml_v_expf; 8 keys, tree8, and the AVX2 form), so one algorithm
 * serves both, parameterized by that group width ("lanes").
 *
 * The oracle walks one query row at a time through the 64-key tiles, exactly
 * as the contract reads.  The production kernels keep a 64-row query block in
 * SIMD lanes (lane = query row) so that every per-row quantity - the score
 * chain over d, the running max, the rescale, the 16-key sum tree and the
 * P.V chain over keys - is one vertical vector operation with no horizontal
 * step; each lane performs exactly the oracle's operation sequence, which is
 * why production and oracle agree bit for bit on every ISA. */
#include <math.h>
#include <string.h>

#include <immintrin.h>

#include "ops/ggml_vexp.h"
#include "v8_attention_tiled.h"
#include "tiled_scalar.h"

#define TQ V8_ATTN_TILE_Q
#define TKV V8_ATTN_TILE_KV

/* Keys per exp/sum group of the contract: the f32 lane count of the llama.cpp build it
 * reproduces (16: AVX-512, 8: AVX2); 0 for a selector this provider does not deliver. */
static int tiled_lanes(int contract) {
    switch (contract) {
    case V8_ATTN_F16_KV_TILED64_FP32_SOFTMAX_FP64_SUM_UPDATE:
        return 16;
    case V8_ATTN_F16_KV_TILED64_FP32_SOFTMAX_FP64_SUM_UPDATE_8_LANE_VEXP:
        return 8;
    default:
        return 0;
    }
}

static v8_status tiled_check(const v8_attn_args *a) {
    V8_REQUIRE(tiled_lanes(a->contract) != 0, V8_ERR_UNKNOWN_SELECTOR);
    return v8_attn_check_shape(a);
}

/* The contract's exp and group sum for one value / one group of `lanes` keys. */
static float tiled_exp_ref(int lanes, float x) {
    return lanes == 16 ? exp16_scalar(x) : vexp_lane_avx2(x);
}

static float tiled_tree_ref(int lanes, const float *p) {
    return lanes == 16 ? tree16(p) : tree8(p);
}

/* ---- oracle ----------------------------------------------------------------- */

/* One query row of one head: keys [kv_begin, kv_end) visible, in tiles from key 0 (as
 * ggml walks them, masked tiles included); lanes: keys per exp/sum group. */
static void tiled_row_ref(int lanes, const float *qrow, const uint16_t *kh, const uint16_t *vh,
                          int64_t D, int64_t kv_begin, int64_t kv_end, float scale,
                          float *out_row) {
    float A[V8_ATTN_MAX_HEAD_DIM];
    float s[TKV], p[TKV];
    float M = -INFINITY;
    float S = 0.0f;
    memset(A, 0, sizeof(float) * (size_t)D);

    for (int64_t t0 = 0; t0 < kv_end; t0 += TKV) {
        /* scores; keys outside the row's range are hidden (-inf) */
        for (int j = 0; j < TKV; ++j) {
            const int64_t key = t0 + j;
            if (key >= kv_begin && key < kv_end) {
                const uint16_t *kr = kh + key * D;
                float acc = 0.0f;
                for (int64_t d = 0; d < D; ++d) {
                    acc = fmaf(qrow[d], v8_f16_to_f32(kr[d]), acc);
                }
                s[j] = acc * scale;
            } else {
                s[j] = -INFINITY;
            }
        }
        float tmax = -INFINITY;
        for (int j = 0; j < TKV; ++j) {
            tmax = tmax > s[j] ? tmax : s[j];
        }
        if (tmax == -INFINITY) {
            continue; /* nothing visible in this tile: the row is untouched */
        }
        const float Mn = fmaxf(M, tmax);
        if (Mn > M) {
            const float ms = expf(M - Mn);
            for (int64_t d = 0; d < D; ++d) {
                A[d] *= ms;
            }
            S *= ms;
        }
        M = Mn;
        double tsum = 0.0;
        for (int g = 0; g < TKV / lanes; ++g) {
            for (int j = lanes * g; j < lanes * g + lanes; ++j) {
                p[j] = tiled_exp_ref(lanes, s[j] - M);
            }
            tsum += (double)tiled_tree_ref(lanes, p + lanes * g);
        }
        S = (float)((double)S + tsum);
        for (int64_t d = 0; d < D; ++d) {
            float acc = A[d];
            for (int j = 0; j < TKV; ++j) {
                const int64_t key = t0 + j;
                const float vv =
                    key >= kv_begin && key < kv_end ? v8_f16_to_f32(vh[key * D + d]) : 0.0f;
                acc = fmaf(p[j], vv, acc);
            }
            A[d] = acc;
        }
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int64_t d = 0; d < D; ++d) {
        out_row[d] = A[d] * inv;
    }
}

static void tiled_task_ref(const v8_attn_args *a, int64_t h, int64_t r0, int64_t nr) {
    const int64_t D = a->head_dim;
    const int64_t g = h / (a->n_head / a->n_head_kv);
    const uint16_t *kh = (const uint16_t *)a->k + g * a->kv_capacity * D;
    const uint16_t *vh = (const uint16_t *)a->v + g * a->kv_capacity * D;
    for (int64_t i = r0; i < r0 + nr; ++i) {
        tiled_row_ref(tiled_lanes(a->contract), a->q + (i * a->n_head + h) * D, kh, vh, D,
                      v8_attn_row_kv_begin(a, i), v8_attn_row_kv_end(a, i), a->scale,
                      a->out + (i * a->n_head + h) * D);
    }
}

v8_status v8_attn_tiled_ref(V8_ATTN_ARGS_DECL) {
    const v8_attn_args a = V8_ATTN_PACK();
    v8_status st = tiled_check(&a);
    if (st != V8_OK) {
        return st;
    }
    /* The oracle uses no scratch, but it asks for what the size function says (as
     * production does) so the provider's size function and its checks always agree. */
    V8_REQUIRE(scratch != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(scratch_bytes >= v8_attn_tiled_scratch_bytes(n_q, n_head, head_dim, 1),
               V8_ERR_BAD_DIMENSION);
    /* Heads, then 64-row query blocks, then rows: the blocking has no
     * numerical effect (every row is independent), it mirrors the kernel. */
    for (int64_t h = 0; h < n_head; ++h) {
        for (int64_t r0 = 0; r0 < n_q; r0 += TQ) {
            tiled_task_ref(&a, h, r0, n_q - r0 < TQ ? n_q - r0 : TQ);
        }
    }
    return V8_OK;
}

/* ---- production: per-worker scratch -------------------------------------- */

/* Floats of one worker's slice: Qt [D][64], Kf [64][D], Vf [64][D],
 * P [64 keys][64 rows], At [D][64], M, S, inv [64], tsum [64] doubles. */
static size_t tiled_worker_floats(int64_t D) {
    return (size_t)(4 * D * TQ + TKV * TQ + 3 * TQ + 2 * TQ + 16);
}

size_t v8_attn_tiled_scratch_bytes(int64_t n_q, int64_t n_head, int64_t head_dim,
                                   int n_workers) {
    (void)n_q;
    (void)n_head;
    if (head_dim < 1 || n_workers < 1) {
        return 0;
    }
    return (size_t)n_workers * tiled_worker_floats(head_dim) * sizeof(float) + 64;
}

typedef struct tiled_ws {
    float *Qt, *Kf, *Vf, *P, *At, *M, *S, *inv;
    double *tsum;
} tiled_ws;

static tiled_ws tiled_slice(const v8_attn_args *a, int worker) {
    uintptr_t base = ((uintptr_t)a->scratch + 63) & ~(uintptr_t)63;
    const int64_t D = a->head_dim;
    float *f = (float *)base + (size_t)worker * tiled_worker_floats(D);
    tiled_ws w;
    w.Qt = f;
    w.Kf = w.Qt + D * TQ;
    w.Vf = w.Kf + D * TKV;
    w.P = w.Vf + D * TKV;
    w.At = w.P + TKV * TQ;
    w.M = w.At + D * TQ;
    w.S = w.M + TQ;
    w.inv = w.S + TQ;
    w.tsum = (double *)(w.inv + TQ + 16); /* 64-byte aligned: all blocks are multiples of 16 floats */
    return w;
}

/* Shared, ISA-neutral parts of a production task. */
static void task_load_q(const v8_attn_args *a, const tiled_ws *w, int64_t h, int64_t r0,
                        int64_t nr) {
    const int64_t D = a->head_dim;
    for (int64_t d = 0; d < D; ++d) {
        for (int64_t r = 0; r < TQ; ++r) {
            w->Qt[d * TQ + r] = r < nr ? a->q[((r0 + r) * a->n_head + h) * D + d] : 0.0f;
        }
    }
    memset(w->At, 0, sizeof(float) * (size_t)(D * TQ));
    for (int r = 0; r < TQ; ++r) {
        w->M[r] = -INFINITY;
        w->S[r] = 0.0f;
    }
}


/* Store for a row-major accumulator Ar[64][D]. */
static void task_store_rows(const v8_attn_args *a, const tiled_ws *w, int64_t h, int64_t r0,
                            int64_t nr) {
    const int64_t D = a->head_dim;
    for (int64_t r = 0; r < nr; ++r) {
        const float S = w->S[r];
        const float inv = S == 0.0f ? 0.0f : 1.0f / S;
        float *o = a->out + ((r0 + r) * a->n_head + h) * D;
        const float *ar = w->At + r * D;
        for (int64_t d = 0; d < D; ++d) {
            o[d] = ar[d] * inv;
        }
    }
}

/* The rescale factor uses the C library's expf per row, as the contract says. */
static float rescale_factor(float Mold, float Mnew) {
    return Mold == -INFINITY ? 0.0f : expf(Mold - Mnew);
}

/* ---- production: AVX-512 ------------------------------------------------- */

#pragma GCC push_options
#ifndef V8_SIMD_EMULATED /* the _mm512 emulation test build: README.md */
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#endif

#include "tiled_avx512.inc"

/* ops/ggml_vexp.h's vexp_lane_avx2 in 16 lanes: the AVX2 build's exp on AVX-512 registers. */
static inline __m512 vexp_avx2_form_x16(__m512 x) {
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(VEXP_LOG2E), _mm512_set1_ps(VEXP_SHIFT));
    const __m512 n = _mm512_sub_ps(z, _mm512_set1_ps(VEXP_SHIFT));
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(VEXP_LN2_LO),
                                      _mm512_fnmadd_ps(n, _mm512_set1_ps(VEXP_LN2_HI), x));
    const __m512i e = _mm512_slli_epi32(_mm512_castps_si512(z), 23);
    const __m512 k = _mm512_castsi512_ps(_mm512_add_epi32(e, _mm512_set1_epi32(0x3f800000)));
    const __m512 absn = _mm512_abs_ps(n);
    const __mmask16 wide = _mm512_cmp_ps_mask(absn, _mm512_set1_ps(126.0f), _CMP_GT_OQ);
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(VEXP_C5), b, _mm512_set1_ps(VEXP_C4)), u,
                        _mm512_fmadd_ps(_mm512_set1_ps(VEXP_C3), b, _mm512_set1_ps(VEXP_C2))),
        u, _mm512_mul_ps(_mm512_set1_ps(VEXP_C1), b));
    const __m512 plain = _mm512_fmadd_ps(k, j, k);
    if (!wide) {
        return plain;
    }
    const __mmask16 nonpos = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
    const __m512i g = _mm512_maskz_mov_epi32(nonpos, _mm512_set1_epi32((int)0x82000000u));
    const __m512 s1 = _mm512_castsi512_ps(_mm512_add_epi32(g, _mm512_set1_epi32(0x7f000000)));
    const __m512 s2 = _mm512_castsi512_ps(_mm512_sub_epi32(e, g));
    const __mmask16 huge = _mm512_cmp_ps_mask(absn, _mm512_set1_ps(192.0f), _CMP_GT_OQ);
    const __m512 split = _mm512_mul_ps(_mm512_fmadd_ps(s2, j, s2), s1);
    return _mm512_mask_blend_ps(huge, _mm512_mask_blend_ps(wide, plain, split),
                                _mm512_mul_ps(s1, s1));
}

static void tiled_task_avx512(const v8_attn_args *a, const tiled_ws *w, int64_t h, int64_t r0,
                              int64_t nr) {
    const int64_t D = a->head_dim;
    const int64_t g = h / (a->n_head / a->n_head_kv);
    const uint16_t *kh = (const uint16_t *)a->k + g * a->kv_capacity * D;
    const uint16_t *vh = (const uint16_t *)a->v + g * a->kv_capacity * D;
    const float *Qt = w->Qt;
    float *Kf = w->Kf, *Vf = w->Vf, *P = w->P, *At = w->At, *M = w->M, *S = w->S;
    double *tsum = w->tsum;
    const int lanes = tiled_lanes(a->contract);

    task_load_q(a, w, h, r0, nr);

    /* per-lane end of the visible key range (rows past nr see nothing) */
    int32_t endv[TQ], beginv[TQ];
    for (int r = 0; r < TQ; ++r) {
        endv[r] = r < nr ? (int32_t)v8_attn_row_kv_end(a, r0 + r) : 0;
    }
    v8_attn_tile_begins(a, r0, nr, beginv);
    const int64_t kv_stop = a->causal ? a->q_pos0 + r0 + nr : a->kv_len;
    const __m512 ninf = _mm512_set1_ps(-INFINITY);

    for (int64_t t0 = v8_attn_first_tile(beginv); t0 < kv_stop; t0 += TKV) {
        const int64_t nk = kv_stop - t0 < TKV ? kv_stop - t0 : TKV; /* keys anyone sees */
        const int64_t nkc = (nk + 15) & ~(int64_t)15;               /* whole 16-key groups */
        widen_rows_avx512(kh + t0 * D, Kf, nk * D);
        widen_rows_avx512(vh + t0 * D, Vf, nk * D);
        memset(Kf + nk * D, 0, sizeof(float) * (size_t)((nkc - nk) * D));
        memset(Vf + nk * D, 0, sizeof(float) * (size_t)((nkc - nk) * D));

        score_tile_avx512(Qt, Kf, D, nkc, t0, endv, a->scale, P);
        v8_attn_tile_hide_before_window(P, t0, nkc, beginv);

        for (int rv = 0; rv < 4; ++rv) {
            /* running max, rescale, probabilities and the fp64 sum update, 16 rows per vector */
            __m512 tmax = ninf;
            for (int64_t j = 0; j < nkc; ++j) {
                tmax = _mm512_max_ps(tmax, _mm512_loadu_ps(P + j * TQ + 16 * rv));
            }
            const __m512 Mold = _mm512_loadu_ps(M + 16 * rv);
            const __mmask16 live = _mm512_cmp_ps_mask(tmax, ninf, _CMP_NEQ_OQ);
            const __m512 Mnew = _mm512_mask_blend_ps(live, Mold, _mm512_max_ps(Mold, tmax));
            const __mmask16 grow = _mm512_cmp_ps_mask(Mnew, Mold, _CMP_GT_OQ);
            if (grow) {
                float ms[16];
                float mo[16], mn[16];
                _mm512_storeu_ps(mo, Mold);
                _mm512_storeu_ps(mn, Mnew);
                for (int l = 0; l < 16; ++l) {
                    ms[l] = (grow >> l) & 1 ? rescale_factor(mo[l], mn[l]) : 1.0f;
                }
                const __m512 vms = _mm512_loadu_ps(ms);
                for (int l = 0; l < 16; ++l) {
                    if ((grow >> l) & 1) {
                        rows_scale_avx512(At + (16 * rv + l) * D, D, ms[l]);
                    }
                }
                _mm512_storeu_ps(S + 16 * rv, _mm512_mul_ps(_mm512_loadu_ps(S + 16 * rv), vms));
            }
            _mm512_storeu_ps(M + 16 * rv, Mnew);
            __m512d ts0 = _mm512_setzero_pd(), ts1 = _mm512_setzero_pd();
            for (int64_t j0 = 0; j0 < nkc; j0 += 16) {
                __m512 pv[16];
                for (int l = 0; l < 16; ++l) {
                    float *pp = P + (j0 + l) * TQ + 16 * rv;
                    const __m512 x = _mm512_sub_ps(_mm512_loadu_ps(pp), Mnew);
                    const __m512 e = lanes == 16 ? exp16_avx512(x) : vexp_avx2_form_x16(x);
                    pv[l] = _mm512_maskz_mov_ps(live, e); /* a row that sees nothing adds nothing */
                    _mm512_storeu_ps(pp, pv[l]);
                }
                /* group sums (one per lanes keys, ascending), each added to the fp64 sum */
                __m512 t[2];
                int ng = 1;
                if (lanes == 16) {
                    __m512 a8[8], b4[4];
                    for (int l = 0; l < 8; ++l) {
                        a8[l] = _mm512_add_ps(pv[l + 8], pv[l]);
                    }
                    for (int l = 0; l < 4; ++l) {
                        b4[l] = _mm512_add_ps(a8[l + 4], a8[l]);
                    }
                    t[0] = _mm512_add_ps(_mm512_add_ps(b4[0], b4[2]), _mm512_add_ps(b4[1], b4[3]));
                } else {
                    ng = 2;
                    for (int hg = 0; hg < 2; ++hg) {
                        const __m512 *pg = pv + 8 * hg;
                        __m512 a4[4];
                        for (int l = 0; l < 4; ++l) {
                            a4[l] = _mm512_add_ps(pg[l + 4], pg[l]);
                        }
                        t[hg] = _mm512_add_ps(_mm512_add_ps(a4[0], a4[2]),
                                              _mm512_add_ps(a4[1], a4[3]));
                    }
                }
                for (int gi = 0; gi < ng; ++gi) {
                    ts0 = _mm512_add_pd(ts0, _mm512_cvtps_pd(_mm512_castps512_ps256(t[gi])));
                    const __m256d hi = _mm512_extractf64x4_pd(_mm512_castps_pd(t[gi]), 1);
                    ts1 = _mm512_add_pd(ts1, _mm512_cvtps_pd(_mm256_castpd_ps(hi)));
                }
            }
            _mm512_storeu_pd(tsum + 16 * rv, ts0);
            _mm512_storeu_pd(tsum + 16 * rv + 8, ts1);
            const __m512 Sold = _mm512_loadu_ps(S + 16 * rv);
            const __m256 s_lo = _mm512_cvtpd_ps(_mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(Sold)), ts0));
            const __m256 s_hi = _mm512_cvtpd_ps(_mm512_add_pd(
                _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(Sold), 1))), ts1));
            const __m512 Snew = _mm512_castpd_ps(_mm512_insertf64x4(
                _mm512_castpd256_pd512(_mm256_castps_pd(s_lo)), _mm256_castps_pd(s_hi), 1));
            _mm512_storeu_ps(S + 16 * rv, _mm512_mask_blend_ps(live, Sold, Snew));
        }

        /* values: Ar[r][d] = fma chain over keys of P[j][r] * V[j][d], from Ar.
         * Lanes run along d here (one probability broadcast per row): a
         * subnormal probability then costs one microcode assist per 16 values
         * of d, instead of one per d when 16 rows share a vector. */
        /* rows past nr have zero probabilities and are never stored: computing
         * whole groups of four keeps the blocks branch-free */
        for (int64_t r = 0; r < nr; r += 4) {
            int64_t d = 0;
            for (; d + 64 <= D; d += 64) {
                pv_4x64_avx512(At + r * D + d, D, P + r, Vf + d, D, nkc);
            }
            for (; d + 16 <= D; d += 16) {
                pv_4x16_avx512(At + r * D + d, D, P + r, Vf + d, D, nkc, (__mmask16)0xFFFF);
            }
            if (d < D) {
                pv_4x16_avx512(At + r * D + d, D, P + r, Vf + d, D, nkc,
                               (__mmask16)((1u << (D - d)) - 1u));
            }
        }
    }
    task_store_rows(a, w, h, r0, nr);
    avx512_clean_upper();
}

#pragma GCC pop_options

/* ---- production: AVX2 + FMA + F16C --------------------------------------- */

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "tiled_avx2.inc"

/* ops/ggml_vexp.h's vexp_lane_avx2 in 8 lanes (the AVX2 build's own register width). */
static inline __m256 vexp_avx2_form_x8(__m256 x) {
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(VEXP_LOG2E), _mm256_set1_ps(VEXP_SHIFT));
    const __m256 n = _mm256_sub_ps(z, _mm256_set1_ps(VEXP_SHIFT));
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(VEXP_LN2_LO),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(VEXP_LN2_HI), x));
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_set1_epi32(0x3f800000)));
    const __m256 absn = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 wide = _mm256_cmp_ps(absn, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(VEXP_C5), b, _mm256_set1_ps(VEXP_C4)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(VEXP_C3), b, _mm256_set1_ps(VEXP_C2))),
        u, _mm256_mul_ps(_mm256_set1_ps(VEXP_C1), b));
    const __m256 plain = _mm256_fmadd_ps(k, j, k);
    if (!_mm256_movemask_ps(wide)) {
        return plain;
    }
    const __m256i g = _mm256_and_si256(
        _mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
        _mm256_set1_epi32((int)0x82000000u));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    const __m256 huge = _mm256_cmp_ps(absn, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    const __m256 split = _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1);
    return _mm256_blendv_ps(_mm256_blendv_ps(plain, split, wide), _mm256_mul_ps(s1, s1), huge);
}

static void tiled_task_avx2(const v8_attn_args *a, const tiled_ws *w, int64_t h, int64_t r0,
                            int64_t nr) {
    const int64_t D = a->head_dim;
    const int64_t g = h / (a->n_head / a->n_head_kv);
    const uint16_t *kh = (const uint16_t *)a->k + g * a->kv_capacity * D;
    const uint16_t *vh = (const uint16_t *)a->v + g * a->kv_capacity * D;
    const float *Qt = w->Qt;
    float *Kf = w->Kf, *Vf = w->Vf, *P = w->P, *At = w->At, *M = w->M, *S = w->S;
    double *tsum = w->tsum;
    const int lanes = tiled_lanes(a->contract);

    task_load_q(a, w, h, r0, nr);
    int32_t endv[TQ], beginv[TQ];
    for (int r = 0; r < TQ; ++r) {
        endv[r] = r < nr ? (int32_t)v8_attn_row_kv_end(a, r0 + r) : 0;
    }
    v8_attn_tile_begins(a, r0, nr, beginv);
    /* row vectors that hold real rows (8 lanes each) */
    const int nrv = (int)((nr + 7) / 8);
    const int64_t kv_stop = a->causal ? a->q_pos0 + r0 + nr : a->kv_len;
    const __m256 ninf = _mm256_set1_ps(-INFINITY);

    for (int64_t t0 = v8_attn_first_tile(beginv); t0 < kv_stop; t0 += TKV) {
        const int64_t nk = kv_stop - t0 < TKV ? kv_stop - t0 : TKV;
        const int64_t nkc = (nk + 15) & ~(int64_t)15;
        widen_rows_avx2(kh + t0 * D, Kf, nk * D);
        widen_rows_avx2(vh + t0 * D, Vf, nk * D);
        memset(Kf + nk * D, 0, sizeof(float) * (size_t)((nkc - nk) * D));
        memset(Vf + nk * D, 0, sizeof(float) * (size_t)((nkc - nk) * D));

        score_tile_avx2(Qt, Kf, D, nkc, t0, endv, a->scale, P, nrv);
        v8_attn_tile_hide_before_window(P, t0, nkc, beginv);

        for (int rv = 0; rv < 8; ++rv) {
            __m256 tmax = ninf;
            for (int64_t j = 0; j < nkc; ++j) {
                tmax = _mm256_max_ps(tmax, _mm256_loadu_ps(P + j * TQ + 8 * rv));
            }
            const __m256 Mold = _mm256_loadu_ps(M + 8 * rv);
            const __m256 live = _mm256_cmp_ps(tmax, ninf, _CMP_NEQ_OQ);
            const __m256 Mnew = _mm256_blendv_ps(Mold, _mm256_max_ps(Mold, tmax), live);
            const int grow = _mm256_movemask_ps(_mm256_cmp_ps(Mnew, Mold, _CMP_GT_OQ));
            if (grow) {
                float ms[8], mo[8], mn[8];
                _mm256_storeu_ps(mo, Mold);
                _mm256_storeu_ps(mn, Mnew);
                for (int l = 0; l < 8; ++l) {
                    ms[l] = (grow >> l) & 1 ? rescale_factor(mo[l], mn[l]) : 1.0f;
                }
                const __m256 vms = _mm256_loadu_ps(ms);
                for (int l = 0; l < 8; ++l) {
                    if ((grow >> l) & 1) {
                        float *ar = At + (8 * rv + l) * D;
                        const __m256 m1 = _mm256_set1_ps(ms[l]);
                        for (int64_t d = 0; d < D; d += 8) {
                            _mm256_storeu_ps(ar + d, _mm256_mul_ps(_mm256_loadu_ps(ar + d), m1));
                        }
                    }
                }
                _mm256_storeu_ps(S + 8 * rv, _mm256_mul_ps(_mm256_loadu_ps(S + 8 * rv), vms));
            }
            _mm256_storeu_ps(M + 8 * rv, Mnew);
            if (!_mm256_movemask_ps(live)) {
                /* no row of this vector sees the tile: zero probabilities, state untouched */
                for (int64_t j = 0; j < nkc; ++j) {
                    _mm256_storeu_ps(P + j * TQ + 8 * rv, _mm256_setzero_ps());
                }
                continue;
            }
            __m256d ts0 = _mm256_setzero_pd(), ts1 = _mm256_setzero_pd();
            for (int64_t j0 = 0; j0 < nkc; j0 += 16) {
                __m256 pv[16];
                for (int l = 0; l < 16; ++l) {
                    float *pp = P + (j0 + l) * TQ + 8 * rv;
                    const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(pp), Mnew);
                    const __m256 e = lanes == 16 ? exp16_avx2(x) : vexp_avx2_form_x8(x);
                    pv[l] = _mm256_and_ps(e, live);
                    _mm256_storeu_ps(pp, pv[l]);
                }
                /* group sums (one per lanes keys, ascending), each added to the fp64 sum */
                __m256 t[2];
                int ng = 1;
                if (lanes == 16) {
                    __m256 a8[8], b4[4];
                    for (int l = 0; l < 8; ++l) {
                        a8[l] = _mm256_add_ps(pv[l + 8], pv[l]);
                    }
                    for (int l = 0; l < 4; ++l) {
                        b4[l] = _mm256_add_ps(a8[l + 4], a8[l]);
                    }
                    t[0] = _mm256_add_ps(_mm256_add_ps(b4[0], b4[2]), _mm256_add_ps(b4[1], b4[3]));
                } else {
                    ng = 2;
                    for (int hg = 0; hg < 2; ++hg) {
                        const __m256 *pg = pv + 8 * hg;
                        __m256 a4[4];
                        for (int l = 0; l < 4; ++l) {
                            a4[l] = _mm256_add_ps(pg[l + 4], pg[l]);
                        }
                        t[hg] = _mm256_add_ps(_mm256_add_ps(a4[0], a4[2]),
                                              _mm256_add_ps(a4[1], a4[3]));
                    }
                }
                for (int gi = 0; gi < ng; ++gi) {
                    ts0 = _mm256_add_pd(ts0, _mm256_cvtps_pd(_mm256_castps256_ps128(t[gi])));
                    ts1 = _mm256_add_pd(ts1, _mm256_cvtps_pd(_mm256_extractf128_ps(t[gi], 1)));
                }
            }
            _mm256_storeu_pd(tsum + 8 * rv, ts0);
            _mm256_storeu_pd(tsum + 8 * rv + 4, ts1);
            const __m256 Sold = _mm256_loadu_ps(S + 8 * rv);
            const __m128 s_lo = _mm256_cvtpd_ps(_mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(Sold)), ts0));
            const __m128 s_hi = _mm256_cvtpd_ps(_mm256_add_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(Sold, 1)), ts1));
            const __m256 Snew = _mm256_insertf128_ps(_mm256_castps128_ps256(s_lo), s_hi, 1);
            _mm256_storeu_ps(S + 8 * rv, _mm256_blendv_ps(Sold, Snew, live));
        }

        /* values: Ar[r][d] = fma chain over keys of P[j][r] * V[j][d], lanes along d
         * (see the AVX-512 kernel for why); rows past nr are zero and never stored */
        for (int64_t r = 0; r < nr; r += 4) {
            int64_t d = 0;
            for (; d + 16 <= D; d += 16) {
                pv_4x16_avx2(At + r * D + d, D, P + r, Vf + d, D, nkc);
            }
            if (d < D) {
                pv_4x8_avx2(At + r * D + d, D, P + r, Vf + d, D, nkc);
            }
        }
    }
    task_store_rows(a, w, h, r0, nr);
}

#pragma GCC pop_options

/* ---- production entry points --------------------------------------------- */

typedef void (*tiled_task_fn)(const v8_attn_args *a, const tiled_ws *w, int64_t h, int64_t r0,
                              int64_t nr);

static void tiled_task_scalar(const v8_attn_args *a, const tiled_ws *w, int64_t h, int64_t r0,
                              int64_t nr) {
    (void)w;
    tiled_task_ref(a, h, r0, nr);
}

static tiled_task_fn tiled_pick(void) {
    switch (v8_cpu_best_isa()) {
    case V8_ISA_AVX512:
        return tiled_task_avx512;
    case V8_ISA_AVX2:
        return tiled_task_avx2;
    default:
        return tiled_task_scalar;
    }
}

typedef struct tiled_job {
    const v8_attn_args *a;
    tiled_task_fn fn;
    int64_t n_qblocks;
} tiled_job;

/* task = (head, 64-row query block); disjoint outputs, own scratch slice per worker */
static void tiled_job_run(void *ctx, int64_t task, int worker) {
    const tiled_job *job = (const tiled_job *)ctx;
    const int64_t h = task / job->n_qblocks;
    const int64_t r0 = (task % job->n_qblocks) * TQ;
    const int64_t nr = job->a->n_q - r0 < TQ ? job->a->n_q - r0 : TQ;
    const tiled_ws w = tiled_slice(job->a, worker);
    job->fn(job->a, &w, h, r0, nr);
}

v8_status v8_attn_tiled(V8_ATTN_ARGS_DECL) {
    const v8_attn_args a = V8_ATTN_PACK();
    v8_status st = tiled_check(&a);
    if (st != V8_OK) {
        return st;
    }
    V8_REQUIRE(scratch != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(scratch_bytes >= v8_attn_tiled_scratch_bytes(n_q, n_head, head_dim, 1),
               V8_ERR_BAD_DIMENSION);
    tiled_job job = {&a, tiled_pick(), (n_q + TQ - 1) / TQ};
    for (int64_t t = 0; t < n_head * job.n_qblocks; ++t) {
        tiled_job_run(&job, t, 0);
    }
    return V8_OK;
}

v8_status v8_attn_tiled_parallel_dispatch(v8_threadpool *pool, V8_ATTN_ARGS_DECL) {
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    const v8_attn_args a = V8_ATTN_PACK();
    v8_status st = tiled_check(&a);
    if (st != V8_OK) {
        return st;
    }
    const int workers = v8_threadpool_workers(pool);
    V8_REQUIRE(scratch != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(scratch_bytes >= v8_attn_tiled_scratch_bytes(n_q, n_head, head_dim, workers),
               V8_ERR_BAD_DIMENSION);
    tiled_job job = {&a, tiled_pick(), (n_q + TQ - 1) / TQ};
    return v8_parallel_for(pool, n_head * job.n_qblocks, tiled_job_run, &job);
}
