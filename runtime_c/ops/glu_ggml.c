/* Gated activations with llama.cpp's CPU arithmetic (providers swiglu_fp32_ggml and
 * geglu_fp32_ggml); see ops/v8_ops.h for the contracts.
 *
 * SwiGLU: each row is cut into blocks of the ISA's vector width, starting at the row's
 * first element.  Full blocks take a polynomial exp whose exact operation sequence
 * differs between the AVX-512 and the AVX2 form (the AVX-512 form adds 1 inside the
 * polynomial and scales by 2^n with one rounding; the AVX2 form builds 2^n from bits and
 * finishes with k + k*j); the leftover elements take libm's expf.  So the lane width is
 * part of the arithmetic: the scalar oracle runs the lane function of the ISA the
 * production function would use on this CPU (AVX2's when there is no vector ISA).
 *
 * GeGLU: gelu(g) looked up in a table of 65536 fp16 values indexed by g rounded to
 * fp16, with g <= -10 giving 0 and g >= 10 giving g itself; then times u in fp32. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "ops/ops_internal.h"
#include "ops/ggml_vexp.h"
#include "v8_runtime.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define V8_GLU_X86 1
#endif

/* ---- the exp polynomial, one lane at a time (ops/ggml_vexp.h) ----------------- */

static float silu_tail(float x) {
    return x / (1.0f + expf(-x));
}

/* Vector width of the blocks the production function uses on this CPU. */
static int swiglu_block_width(void) {
    return v8_cpu_best_isa() == V8_ISA_AVX512 ? 16 : 8;
}

static void swiglu_rows_lanes(float *y, const float *g, const float *u, int64_t r0, int64_t r1,
                              int64_t n, int width) {
    float (*lane)(float) = width == 16 ? vexp_lane_avx512 : vexp_lane_avx2;
    const int64_t full = n - n % width;
    for (int64_t r = r0; r < r1; ++r) {
        const float *gr = g + r * n, *ur = u + r * n;
        float *yr = y + r * n;
        for (int64_t i = 0; i < full; ++i) {
            const float x = gr[i];
            yr[i] = (x / (1.0f + lane(0.0f - x))) * ur[i];
        }
        for (int64_t i = full; i < n; ++i) {
            yr[i] = silu_tail(gr[i]) * ur[i];
        }
    }
}

/* ---- production: the same lanes in vector registers ---------------------------- */

#ifdef V8_GLU_X86
__attribute__((target("avx512f,avx512dq"))) static __m512 vexp16(__m512 x) {
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(VEXP_LOG2E), _mm512_set1_ps(VEXP_SHIFT));
    const __m512 n = _mm512_sub_ps(z, _mm512_set1_ps(VEXP_SHIFT));
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(VEXP_LN2_LO),
                                      _mm512_fnmadd_ps(n, _mm512_set1_ps(VEXP_LN2_HI), x));
    const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192.0f), _CMP_GT_OQ);
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 hi = _mm512_fmadd_ps(_mm512_set1_ps(VEXP_C5), b, _mm512_set1_ps(VEXP_C4));
    const __m512 mid = _mm512_fmadd_ps(_mm512_set1_ps(VEXP_C3), b, _mm512_set1_ps(VEXP_C2));
    const __m512 lo = _mm512_fmadd_ps(_mm512_set1_ps(VEXP_C1), b, _mm512_set1_ps(1.0f));
    const __m512 j = _mm512_fmadd_ps(_mm512_fmadd_ps(hi, u, mid), u, lo);
    const __m512 scaled = _mm512_scalef_ps(j, n);
    if (!big) {
        return scaled;
    }
    const __mmask16 nonpositive = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
    const __m512 saturated = _mm512_mask_blend_ps(nonpositive, _mm512_set1_ps(INFINITY),
                                                  _mm512_setzero_ps());
    return _mm512_mask_blend_ps(big, scaled, saturated);
}

__attribute__((target("avx512f,avx512dq"))) static void swiglu_rows_avx512(
    float *y, const float *g, const float *u, int64_t r0, int64_t r1, int64_t n) {
    const int64_t full = n - n % 16;
    for (int64_t r = r0; r < r1; ++r) {
        const float *gr = g + r * n, *ur = u + r * n;
        float *yr = y + r * n;
        for (int64_t i = 0; i < full; i += 16) {
            const __m512 x = _mm512_loadu_ps(gr + i);
            const __m512 e = vexp16(_mm512_sub_ps(_mm512_setzero_ps(), x));
            const __m512 silu = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
            _mm512_storeu_ps(yr + i, _mm512_mul_ps(silu, _mm512_loadu_ps(ur + i)));
        }
        for (int64_t i = full; i < n; ++i) {
            yr[i] = silu_tail(gr[i]) * ur[i];
        }
    }
}

__attribute__((target("avx2,fma"))) static void swiglu_rows_avx2(
    float *y, const float *g, const float *u, int64_t r0, int64_t r1, int64_t n) {
    const int64_t full = n - n % 8;
    for (int64_t r = r0; r < r1; ++r) {
        const float *gr = g + r * n, *ur = u + r * n;
        float *yr = y + r * n;
        for (int64_t i = 0; i < full; i += 8) {
            const __m256 silu = vsilu8(_mm256_loadu_ps(gr + i), 0);
            _mm256_storeu_ps(yr + i, _mm256_mul_ps(silu, _mm256_loadu_ps(ur + i)));
        }
        for (int64_t i = full; i < n; ++i) {
            yr[i] = silu_tail(gr[i]) * ur[i];
        }
    }
}
#endif

static void swiglu_rows(float *y, const float *g, const float *u, int64_t r0, int64_t r1, int64_t n) {
#ifdef V8_GLU_X86
    switch (v8_cpu_best_isa()) {
    case V8_ISA_AVX512:
        swiglu_rows_avx512(y, g, u, r0, r1, n);
        return;
    case V8_ISA_AVX2:
        swiglu_rows_avx2(y, g, u, r0, r1, n);
        return;
    default:
        break;
    }
#endif
    swiglu_rows_lanes(y, g, u, r0, r1, n, 8);
}

/* ---- GeGLU through the fp16 table ----------------------------------------------- */

/* one entry of padding: the AVX2 rows gather 32 bits at entry i, i = 65535 included */
static uint16_t gelu_table[(1 << 16) + 1];
static pthread_once_t gelu_table_once = PTHREAD_ONCE_INIT;

/* Every fp16 bit pattern's gelu, computed in fp32 as ggml builds its table (the inner
 * 1 + (A x) x fused into one FMA, as its native build compiles it) and rounded to fp16. */
static void gelu_table_build(void) {
    for (uint32_t i = 0; i < (1u << 16); ++i) {
        const float x = v8_f16_to_f32((uint16_t)i);
        const float inner = fmaf(V8_GELU_COEF_A * x, x, 1.0f);
        const float t = tanhf((V8_GELU_SQRT_2_OVER_PI * x) * inner);
        gelu_table[i] = v8_f32_to_f16((0.5f * x) * (1.0f + t));
    }
}

static float geglu_one(float g, float u) {
    if (g <= -10.0f) {
        return 0.0f;
    }
    if (g >= 10.0f) {
        return g * u;
    }
    return v8_f16_to_f32(gelu_table[v8_f32_to_f16(g)]) * u;
}

static void geglu_span(float *y, const float *g, const float *u, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
        y[i] = geglu_one(g[i], u[i]);
    }
}

#ifdef V8_GLU_X86
/* geglu_one eight lanes at a time: F16C's conversions round and widen as v8_f32_to_f16 and
 * v8_f16_to_f32 do (NaN kept quiet with its top payload bits), a gather reads the table,
 * and the clamps are the same compares. */
__attribute__((target("avx2,f16c"))) static void geglu_span_avx2(float *y, const float *g,
                                                                 const float *u, int64_t i0,
                                                                 int64_t i1) {
    const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
    const __m256i low16 = _mm256_set1_epi32(0xffff);
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i), up = _mm256_loadu_ps(u + i);
        const __m256i idx = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
        const __m256i raw = _mm256_and_si256(
            _mm256_i32gather_epi32((const int *)(const void *)gelu_table, idx, 2), low16);
        const __m128i bits = _mm_packus_epi32(_mm256_castsi256_si128(raw),
                                              _mm256_extracti128_si256(raw, 1));
        const __m256 tabled = _mm256_mul_ps(_mm256_cvtph_ps(bits), up);
        const __m256 out = _mm256_blendv_ps(tabled, _mm256_mul_ps(x, up),
                                            _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
        _mm256_storeu_ps(y + i, _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LE_OQ), out));
    }
    _mm256_zeroupper(); /* geglu_span is baseline code */
    geglu_span(y, g, u, i, i1);
}
#endif

static void geglu_rows(float *y, const float *g, const float *u, int64_t r0, int64_t r1, int64_t n) {
#ifdef V8_GLU_X86
    if (v8_cpu_best_isa() != V8_ISA_SCALAR) {
        geglu_span_avx2(y, g, u, r0 * n, r1 * n);
        return;
    }
#endif
    geglu_span(y, g, u, r0 * n, r1 * n);
}

/* ---- public functions ---------------------------------------------------------- */

static v8_status check_glu(int contract, int expected, float *y, const float *g, const float *u,
                           int64_t n_rows, int64_t n) {
    V8_REQUIRE(contract == expected, V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && g != NULL && u != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(v8_ops_product_ok(n_rows, n), V8_ERR_BAD_DIMENSION);
    return V8_OK;
}

typedef void (*glu_rows_fn)(float *, const float *, const float *, int64_t, int64_t, int64_t);

typedef struct glu_job {
    glu_rows_fn rows;
    float *y;
    const float *g, *u;
    int64_t n;
    v8_ops_chunks chunks;
} glu_job;

static void glu_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const glu_job *job = (const glu_job *)ctx;
    int64_t r0, r1;
    v8_ops_chunk_range(&job->chunks, task, &r0, &r1);
    job->rows(job->y, job->g, job->u, r0, r1, job->n);
}

static v8_status glu_dispatch(v8_threadpool *pool, glu_rows_fn rows, float *y, const float *g,
                              const float *u, int64_t n_rows, int64_t n) {
    glu_job job = {rows, y, g, u, n, {0, 0, 0}};
    /* whole rows per task: a row's blocks start at its first element */
    job.chunks = v8_ops_split(n_rows, v8_threadpool_workers(pool), (4096 + n - 1) / n);
    return v8_parallel_for(pool, job.chunks.n_tasks, glu_task, &job);
}

v8_status v8_swiglu_ggml_f32_ref(int contract, float *y, const float *lhs, const float *rhs,
                                 int64_t n_rows, int64_t n) {
    v8_status st = check_glu(contract, V8_SWIGLU_FP32_GGML_VEXP, y, lhs, rhs, n_rows, n);
    if (st == V8_OK) {
        swiglu_rows_lanes(y, lhs, rhs, 0, n_rows, n, swiglu_block_width());
    }
    return st;
}

v8_status v8_swiglu_ggml_f32(int contract, float *y, const float *lhs, const float *rhs,
                             int64_t n_rows, int64_t n) {
    v8_status st = check_glu(contract, V8_SWIGLU_FP32_GGML_VEXP, y, lhs, rhs, n_rows, n);
    if (st == V8_OK) {
        swiglu_rows(y, lhs, rhs, 0, n_rows, n);
    }
    return st;
}

v8_status v8_swiglu_ggml_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                               const float *lhs, const float *rhs, int64_t n_rows,
                                               int64_t n) {
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    v8_status st = check_glu(contract, V8_SWIGLU_FP32_GGML_VEXP, y, lhs, rhs, n_rows, n);
    if (st != V8_OK) {
        return st;
    }
    return glu_dispatch(pool, swiglu_rows, y, lhs, rhs, n_rows, n);
}

v8_status v8_geglu_ggml_f32_ref(int contract, float *y, const float *lhs, const float *rhs,
                                int64_t n_rows, int64_t n) {
    v8_status st = check_glu(contract, V8_GEGLU_FP32_GGML_FP16_TABLE, y, lhs, rhs, n_rows, n);
    if (st != V8_OK) {
        return st;
    }
    /* the definition: gelu of the fp16-rounded gate, computed here, not looked up */
    for (int64_t i = 0; i < n_rows * n; ++i) {
        const float g = lhs[i];
        float v;
        if (g <= -10.0f) {
            v = 0.0f;
        } else if (g >= 10.0f) {
            v = g * rhs[i];
        } else {
            const float x = v8_f16_to_f32(v8_f32_to_f16(g));
            const float t = tanhf((V8_GELU_SQRT_2_OVER_PI * x) * fmaf(V8_GELU_COEF_A * x, x, 1.0f));
            v = v8_f16_to_f32(v8_f32_to_f16((0.5f * x) * (1.0f + t))) * rhs[i];
        }
        y[i] = v;
    }
    return V8_OK;
}

v8_status v8_geglu_ggml_f32(int contract, float *y, const float *lhs, const float *rhs,
                            int64_t n_rows, int64_t n) {
    v8_status st = check_glu(contract, V8_GEGLU_FP32_GGML_FP16_TABLE, y, lhs, rhs, n_rows, n);
    if (st == V8_OK) {
        pthread_once(&gelu_table_once, gelu_table_build);
        geglu_rows(y, lhs, rhs, 0, n_rows, n);
    }
    return st;
}

v8_status v8_geglu_ggml_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                              const float *lhs, const float *rhs, int64_t n_rows,
                                              int64_t n) {
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    v8_status st = check_glu(contract, V8_GEGLU_FP32_GGML_FP16_TABLE, y, lhs, rhs, n_rows, n);
    if (st != V8_OK) {
        return st;
    }
    pthread_once(&gelu_table_once, gelu_table_build);
    return glu_dispatch(pool, geglu_rows, y, lhs, rhs, n_rows, n);
}

/* The table the production functions read (fp16 bits), for comparison with ggml's. */
const uint16_t *v8_geglu_ggml_table(void) {
    pthread_once(&gelu_table_once, gelu_table_build);
    return gelu_table;
}
