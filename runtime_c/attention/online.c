/* Online-softmax attention: single range (decode and prefill row by row)
 * and split-KV decode.  Contracts (docs/NUMERICS.md):
 *
 *   fp32_online                      fp32 Q/K/V, fp32 value accumulator
 *   f16_kv_fp32_online               fp32 Q, K/V fp16 (stored), fp32 accumulator
 *   f16_online_single_range(_noscale) Q r16, fp16 K/V, fp16 accumulator
 *                                    rounded after every update (ggml's
 *                                    flash_attn_ext one-chunk path)
 *   f16_online_fp32_merge            the above per KV chunk, chunks = workers
 *                                    when the extent (valid KV rounded up to
 *                                    256) is >= 512; fp16 partials merged in
 *                                    fp32, ascending, empty chunks skipped
 *                                    (ggml's split-KV decode + reduce)
 *
 * Per row the recurrence is
 *     s = dot(q, k_j) * scale
 *     s > M:  ms = expf(M - s), M = s, A = A*ms, vs = 1     (expf(-inf) = 0)
 *     else:   ms = 1, vs = expf(s - M)
 *     A = A + v_j*vs;  S = fmaf(S, ms, vs)
 *     out = A * (S == 0 ? 0 : 1/S)
 * with exp the C library's expf, as ggml calls it.  The fp16-accumulator
 * contracts take the dot product and the value update from the lane tree
 * the header names (V8_ATTN_TREE_*); the fp32 contracts use one tree on
 * every ISA: 8 fp32 lanes, lane l accumulates elements d = l (mod 8) by FMA
 * ascending, then u_i = l_i + l_(i+4), (u0+u2) + (u1+u3); the value update
 * is A = fmaf(v, vs, A) and A = A*ms.
 *
 * The scalar oracles (*_ref) implement each rounding literally; products
 * and sums that the trees keep exact are formed in double, each declared
 * rounding is an explicit, correctly rounded conversion, and an fp16 FMA is
 * rounded once from the exact value.  The production kernels compute the
 * same operations with intrinsics; a query row never depends on how rows,
 * heads or key blocks are scheduled, so scores may be computed a block of
 * keys ahead of the (strictly sequential) softmax update. */
#include "attention/v8_attention.h"

#include <immintrin.h>
#include <math.h>

#include "core/prefetch.h"

/* ====================================================================== */
/* scalar rounding helpers                                                */
/* ====================================================================== */

/* Round a double to fp16 (round to nearest even), returned as a double.
 * x / ulp and r * ulp are exact (powers of two), and nearbyint rounds to
 * even in the default rounding mode. */
static double round_f16_d(double x) {
    if (x == 0.0 || isnan(x) || isinf(x)) return x;
    double ax = fabs(x);
    if (ax >= 65520.0) return copysign(INFINITY, x); /* past the 65504/65536 midpoint */
    int e;
    (void)frexp(ax, &e);
    int lead = e - 1;            /* exponent of the leading bit */
    if (lead < -14) lead = -14;  /* fp16 subnormal spacing is 2^-24 */
    double ulp = ldexp(1.0, lead - 10);
    return copysign(nearbyint(ax / ulp) * ulp, x);
}

static double round_f32_d(double x) { return (double)(float)x; }

/* Round the exact value s + e, where s = fl64(s + e): only when s sits on a
 * rounding midpoint of the target format can e decide, and then the double
 * next to s on e's side rounds correctly. */
static double round_exact(double s, double e, double (*rnd)(double)) {
    if (e == 0.0) return rnd(s);
    double up = rnd(nextafter(s, INFINITY));
    double dn = rnd(nextafter(s, -INFINITY));
    if (up == dn) return rnd(s);
    return rnd(nextafter(s, e > 0 ? INFINITY : -INFINITY));
}

/* fp16 fused multiply-add, a*b exact in double (a, b fp16). */
static double fma16_d(double a, double b, double c) {
    double p = a * b;
    double s = p + c;
    double bb = s - p;
    double e = (p - (s - bb)) + (c - bb);
    return round_exact(s, e, round_f16_d);
}

static inline float h2f(uint16_t h) { return v8_f16_to_f32(h); }
static inline uint16_t f2h(float f) { return v8_f32_to_f16(f); }

/* ====================================================================== */
/* tree selection                                                         */
/* ====================================================================== */

static int allow_fp16_lanes = 1;

void v8_attn_online_allow_avx512fp16(int allow) {
    __atomic_store_n(&allow_fp16_lanes, allow ? 1 : 0, __ATOMIC_RELAXED);
}

static int cpu_has_avx512fp16(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512fp16");
#else
    return 0;
#endif
}

int v8_attn_online_dot_tree(void) {
    switch (v8_cpu_best_isa()) {
    case V8_ISA_AVX512:
        if (__atomic_load_n(&allow_fp16_lanes, __ATOMIC_RELAXED) && cpu_has_avx512fp16())
            return V8_ATTN_TREE_AVX512FP16_F16X32X4;
        return V8_ATTN_TREE_AVX512_F32X16X4;
    case V8_ISA_AVX2:
        return V8_ATTN_TREE_AVX2_F32X8X4;
    default:
        return V8_ATTN_TREE_AVX2_F32X8X4; /* the scalar variant runs the oracle */
    }
}

int v8_attn_online_fp32_dot_tree(void) {
    switch (v8_cpu_best_isa()) {
    case V8_ISA_AVX512:
        if (__atomic_load_n(&allow_fp16_lanes, __ATOMIC_RELAXED) && cpu_has_avx512fp16())
            return V8_ATTN_TREE_AVX512FP16_VALUES_F32X16X4_DOT;
        return V8_ATTN_TREE_AVX512_F32X16X4;
    default:
        return V8_ATTN_TREE_AVX2_F32X8X4;
    }
}

/* The tree a contract names on the running CPU. */
static int tree_of_contract(int contract) {
    return v8_attn_fp32_dot_contract(contract) ? v8_attn_online_fp32_dot_tree()
                                               : v8_attn_online_dot_tree();
}

static int tree_valid(int tree) {
    return tree == V8_ATTN_TREE_AVX2_F32X8X4 || tree == V8_ATTN_TREE_AVX512_F32X16X4 ||
           tree == V8_ATTN_TREE_AVX512FP16_F16X32X4 ||
           tree == V8_ATTN_TREE_AVX512FP16_VALUES_F32X16X4_DOT;
}

/* The lanes the scores use, and whether values update in fp16 lanes. */
static int score_tree(int tree) {
    return tree == V8_ATTN_TREE_AVX512FP16_VALUES_F32X16X4_DOT ? V8_ATTN_TREE_AVX512_F32X16X4 : tree;
}

static int fp16_values(int tree) {
    return tree == V8_ATTN_TREE_AVX512FP16_F16X32X4 ||
           tree == V8_ATTN_TREE_AVX512FP16_VALUES_F32X16X4_DOT;
}

/* ====================================================================== */
/* oracle pieces: dot products and value updates                          */
/* ====================================================================== */

/* ggml_vec_dot_f16 for `tree` (x = k, y = q; both fp16). */
static float dot_f16_ref(int values_tree, const uint16_t *k, const uint16_t *q, int64_t d) {
    const int tree = score_tree(values_tree);
    int64_t step = tree == V8_ATTN_TREE_AVX512FP16_F16X32X4 ? 128
                 : tree == V8_ATTN_TREE_AVX512_F32X16X4     ? 64
                                                            : 32;
    int lanes = (int)(step / 4);
    int64_t np = d - d % step;
    double total = 0.0;
    if (np > 0) {
        double acc[4][32];
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < lanes; l++) acc[j][l] = 0.0;
        int fp16 = tree == V8_ATTN_TREE_AVX512FP16_F16X32X4;
        for (int64_t i = 0; i < np; i += step) {
            for (int j = 0; j < 4; j++) {
                for (int l = 0; l < lanes; l++) {
                    int64_t idx = i + j * lanes + l;
                    double kv = h2f(k[idx]), qv = h2f(q[idx]);
                    acc[j][l] = fp16 ? fma16_d(kv, qv, acc[j][l])
                                     : (double)fmaf((float)kv, (float)qv, (float)acc[j][l]);
                }
            }
        }
        double (*rnd)(double) = fp16 ? round_f16_d : round_f32_d;
        double a[32];
        for (int l = 0; l < lanes; l++) {
            double a02 = rnd(acc[0][l] + acc[2][l]);
            double a13 = rnd(acc[1][l] + acc[3][l]);
            a[l] = rnd(a02 + a13);
        }
        if (fp16) {
            double t[16], u[8], w[8];
            for (int l = 0; l < 16; l++) t[l] = rnd(a[l] + a[l + 16]);
            for (int l = 0; l < 8; l++) u[l] = rnd(t[l] + t[l + 8]);
            for (int l = 0; l < 8; l++) w[l] = rnd(u[l] + u[(l + 4) % 8]);
            total = rnd(rnd(w[0] + w[2]) + rnd(w[1] + w[3]));
        } else if (tree == V8_ATTN_TREE_AVX512_F32X16X4) {
            double t[8], u[4];
            for (int l = 0; l < 8; l++) t[l] = rnd(a[l] + a[l + 8]);
            for (int l = 0; l < 4; l++) u[l] = rnd(t[l] + t[l + 4]);
            total = rnd(rnd(u[0] + u[2]) + rnd(u[1] + u[3]));
        } else {
            double u[4];
            for (int l = 0; l < 4; l++) u[l] = rnd(a[l] + a[l + 4]);
            total = rnd(rnd(u[0] + u[1]) + rnd(u[2] + u[3]));
        }
    }
    /* leftovers: exact fp32 products into the double running sum */
    for (int64_t i = np; i < d; i++) total += (double)(h2f(k[i]) * h2f(q[i]));
    return (float)total;
}

/* ggml_vec_scale_f16: A = r16(A * ms). */
static void scale_f16_ref(int tree, uint16_t *a, float ms, int64_t d) {
    int64_t np = fp16_values(tree) ? d - d % 128 : 0;
    double ms16 = round_f16_d(ms);
    for (int64_t i = 0; i < d; i++) {
        if (i < np)
            a[i] = f2h((float)round_f16_d(h2f(a[i]) * ms16)); /* exact product, one rounding */
        else
            a[i] = f2h(h2f(a[i]) * ms);                       /* fp32 product, then fp16 */
    }
}

/* ggml_vec_mad_f16: A = r16(A + v * vs). */
static void mad_f16_ref(int tree, uint16_t *a, const uint16_t *v, float vs, int64_t d) {
    int64_t np = fp16_values(tree) ? d - d % 128 : 0;
    double vs16 = round_f16_d(vs);
    for (int64_t i = 0; i < d; i++) {
        if (i < np)
            a[i] = f2h((float)fma16_d(h2f(v[i]), vs16, h2f(a[i])));
        else
            a[i] = f2h(fmaf(h2f(v[i]), vs, h2f(a[i])));
    }
}

/* The fp32 contracts' dot: 8 lanes, lane l takes d = l (mod 8). */
static float dot_f32x8_ref(const float *q, const float *k, int64_t d) {
    float l8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < d; i += 8)
        for (int l = 0; l < 8; l++) l8[l] = fmaf(q[i + l], k[i + l], l8[l]);
    float u[4];
    for (int l = 0; l < 4; l++) u[l] = l8[l] + l8[l + 4];
    return (u[0] + u[2]) + (u[1] + u[3]);
}

/* ====================================================================== */
/* argument checks                                                        */
/* ====================================================================== */

#define PACK() V8_ATTN_PACK()

static v8_status check_f16kv(const v8_attn_args *a) {
    V8_REQUIRE(a->contract == V8_ATTN_F16_KV_FP32_ONLINE ||
                   a->contract == V8_ATTN_F16_ONLINE_SINGLE_RANGE ||
                   a->contract == V8_ATTN_F16_ONLINE_SINGLE_RANGE_NOSCALE ||
                   a->contract == V8_ATTN_F16_ONLINE_SINGLE_RANGE_FP32_DOT,
               V8_ERR_UNKNOWN_SELECTOR);
    return v8_attn_check_shape(a);
}

static v8_status check_f32kv(const v8_attn_args *a) {
    V8_REQUIRE(a->contract == V8_ATTN_FP32_ONLINE, V8_ERR_UNKNOWN_SELECTOR);
    return v8_attn_check_shape(a);
}

/* The single-range contract a split-KV contract is below its threshold. */
static int single_range_of(int split_contract) {
    return split_contract == V8_ATTN_F16_ONLINE_FP32_MERGE_FP32_DOT
               ? V8_ATTN_F16_ONLINE_SINGLE_RANGE_FP32_DOT
               : V8_ATTN_F16_ONLINE_SINGLE_RANGE;
}

static size_t split_partial_bytes(int64_t d) { return 2 * sizeof(float) + (size_t)d * 2; }

static int64_t split_extent(int64_t kv_len) { return (kv_len + 255) / 256 * 256; }

static int split_chunks(int64_t kv_len, int workers) {
    return split_extent(kv_len) >= 512 ? workers : 1;
}

static v8_status check_split(const v8_attn_args *a, int workers) {
    V8_REQUIRE(a->contract == V8_ATTN_F16_ONLINE_FP32_MERGE ||
                   a->contract == V8_ATTN_F16_ONLINE_FP32_MERGE_FP32_DOT,
               V8_ERR_UNKNOWN_SELECTOR);
    v8_status st = v8_attn_check_shape(a);
    if (st != V8_OK) return st;
    /* decode only: one query row at the last valid position */
    V8_REQUIRE(a->n_q == 1 && a->causal == 1 && a->q_pos0 == a->kv_len - 1, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(workers >= 1 && workers <= V8_MAX_WORKERS, V8_ERR_BAD_THREADING);
    /* The size function cannot see kv_len, so the check asks for what it says even when a
     * short cache runs as one chunk: the two always agree. */
    const size_t need = v8_attn_online_split_scratch_bytes(a->n_q, a->n_head, a->head_dim, workers);
    if (need > 0) {
        V8_REQUIRE(a->scratch != NULL, V8_ERR_NULL_ARGUMENT);
        V8_REQUIRE(a->scratch_bytes >= need, V8_ERR_BAD_DIMENSION);
    }
    return V8_OK;
}

size_t v8_attn_online_f32kv_scratch_bytes(int64_t n_q, int64_t n_head, int64_t head_dim,
                                          int n_workers) {
    (void)n_q; (void)n_head; (void)head_dim; (void)n_workers;
    return 0; /* per-row state lives on the stack (head_dim <= V8_ATTN_MAX_HEAD_DIM) */
}

size_t v8_attn_online_f16kv_scratch_bytes(int64_t n_q, int64_t n_head, int64_t head_dim,
                                          int n_workers) {
    (void)n_q; (void)n_head; (void)head_dim; (void)n_workers;
    return 0;
}

size_t v8_attn_online_split_scratch_bytes(int64_t n_q, int64_t n_head, int64_t head_dim,
                                          int n_workers) {
    (void)n_q;
    if (n_head < 1 || head_dim < 1 || n_workers < 1) return 0;
    return (size_t)n_head * (size_t)n_workers * split_partial_bytes(head_dim);
}

/* ====================================================================== */
/* oracles                                                                */
/* ====================================================================== */

/* Running state of one row: fp16 accumulator (f16 contracts) or fp32. */
typedef struct row_state {
    float m, s;
} row_state;

/* f16-accumulator recurrence over keys [lo, hi) that are < end. */
static row_state f16_range_ref(int tree, const uint16_t *q16, const uint16_t *kh,
                               const uint16_t *vh, int64_t d, int64_t lo, int64_t hi,
                               int64_t end, float scale, uint16_t *acc) {
    row_state st = {-INFINITY, 0.0f};
    for (int64_t i = 0; i < d; i++) acc[i] = 0;
    for (int64_t j = lo; j < hi && j < end; j++) {
        float s = dot_f16_ref(tree, kh + j * d, q16, d) * scale;
        float ms = 1.0f, vs = 1.0f;
        if (s > st.m) {
            ms = expf(st.m - s); /* 0 on the first key */
            st.m = s;
            scale_f16_ref(tree, acc, ms, d);
        } else {
            vs = expf(s - st.m);
        }
        mad_f16_ref(tree, acc, vh + j * d, vs, d);
        st.s = fmaf(st.s, ms, vs);
    }
    return st;
}

/* fp32-accumulator recurrence (both fp32 contracts); k/v rows as fp32. */
typedef void (*load_row_fn)(const void *base, int64_t row, int64_t d, float *dst);

static void load_f32(const void *base, int64_t row, int64_t d, float *dst) {
    memcpy(dst, (const float *)base + row * d, (size_t)d * sizeof(float));
}

static void load_f16(const void *base, int64_t row, int64_t d, float *dst) {
    const uint16_t *src = (const uint16_t *)base + row * d;
    for (int64_t i = 0; i < d; i++) dst[i] = h2f(src[i]);
}

static void f32_row_ref(load_row_fn load, const float *qrow, const void *kh, const void *vh,
                        int64_t d, int64_t begin, int64_t end, float scale, float *out) {
    float acc[V8_ATTN_MAX_HEAD_DIM], kr[V8_ATTN_MAX_HEAD_DIM], vr[V8_ATTN_MAX_HEAD_DIM];
    float m = -INFINITY, sum = 0.0f;
    for (int64_t i = 0; i < d; i++) acc[i] = 0.0f;
    for (int64_t j = begin; j < end; j++) {
        load(kh, j, d, kr);
        load(vh, j, d, vr);
        float s = dot_f32x8_ref(qrow, kr, d) * scale;
        float ms = 1.0f, vs = 1.0f;
        if (s > m) {
            ms = expf(m - s);
            m = s;
            for (int64_t i = 0; i < d; i++) acc[i] *= ms;
        } else {
            vs = expf(s - m);
        }
        for (int64_t i = 0; i < d; i++) acc[i] = fmaf(vr[i], vs, acc[i]);
        sum = fmaf(sum, ms, vs);
    }
    float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
    for (int64_t i = 0; i < d; i++) out[i] = acc[i] * inv;
}

static float contract_scale(int contract, float scale) {
    return contract == V8_ATTN_F16_ONLINE_SINGLE_RANGE_NOSCALE ? 1.0f : scale;
}

/* One (query row, head) of a single-range contract, oracle arithmetic. */
static void single_row_ref(int tree, const v8_attn_args *a, int64_t i, int64_t h) {
    int64_t d = a->head_dim;
    int64_t hk = h / (a->n_head / a->n_head_kv);
    int64_t begin = v8_attn_row_kv_begin(a, i), end = v8_attn_row_kv_end(a, i);
    const float *qrow = a->q + (i * a->n_head + h) * d;
    float *orow = a->out + (i * a->n_head + h) * d;
    float scale = contract_scale(a->contract, a->scale);
    if (a->contract == V8_ATTN_FP32_ONLINE) {
        const float *kh = (const float *)a->k + hk * a->kv_capacity * d;
        const float *vh = (const float *)a->v + hk * a->kv_capacity * d;
        f32_row_ref(load_f32, qrow, kh, vh, d, begin, end, scale, orow);
        return;
    }
    const uint16_t *kh = (const uint16_t *)a->k + hk * a->kv_capacity * d;
    const uint16_t *vh = (const uint16_t *)a->v + hk * a->kv_capacity * d;
    if (a->contract == V8_ATTN_F16_KV_FP32_ONLINE) {
        f32_row_ref(load_f16, qrow, kh, vh, d, begin, end, scale, orow);
        return;
    }
    uint16_t q16[V8_ATTN_MAX_HEAD_DIM] = {0}, acc[V8_ATTN_MAX_HEAD_DIM];
    for (int64_t x = 0; x < d; x++) q16[x] = f2h(qrow[x]);
    row_state st = f16_range_ref(tree, q16, kh, vh, d, begin, end, end, scale, acc);
    float inv = st.s == 0.0f ? 0.0f : 1.0f / st.s;
    for (int64_t x = 0; x < d; x++) orow[x] = h2f(acc[x]) * inv;
}

v8_status v8_attn_online_f32kv_ref(V8_ATTN_ARGS_DECL) {
    v8_attn_args a = PACK();
    v8_status st = check_f32kv(&a);
    if (st != V8_OK) return st;
    for (int64_t i = 0; i < n_q; i++)
        for (int64_t h = 0; h < n_head; h++) single_row_ref(0, &a, i, h);
    return V8_OK;
}

v8_status v8_attn_online_f16kv_ref_tree(int tree, V8_ATTN_ARGS_DECL) {
    v8_attn_args a = PACK();
    v8_status st = check_f16kv(&a);
    if (st != V8_OK) return st;
    V8_REQUIRE(tree_valid(tree), V8_ERR_UNKNOWN_SELECTOR);
    for (int64_t i = 0; i < n_q; i++)
        for (int64_t h = 0; h < n_head; h++) single_row_ref(tree, &a, i, h);
    return V8_OK;
}

v8_status v8_attn_online_f16kv_ref(V8_ATTN_ARGS_DECL) {
    return v8_attn_online_f16kv_ref_tree(tree_of_contract(contract), V8_ATTN_ARGS_FWD);
}

/* Split-KV partial of one (head, chunk): M, S, then A as fp16. */
static float *partial_at(const v8_attn_args *a, int chunks, int64_t h, int c) {
    char *base = (char *)a->scratch;
    return (float *)(base + ((size_t)h * (size_t)chunks + (size_t)c) *
                                split_partial_bytes(a->head_dim));
}

/* Merge of one head's chunk partials, fp32, ascending chunk order, chunks
 * that saw no key (S == 0) skipped; shared by oracle and production (it is
 * scalar fp32 arithmetic with explicit fmaf, so both compute the same). */
static void split_merge_head(const v8_attn_args *a, int chunks, int64_t h) {
    int64_t d = a->head_dim;
    float o[V8_ATTN_MAX_HEAD_DIM];
    float m = -INFINITY, s = 0.0f;
    for (int64_t x = 0; x < d; x++) o[x] = 0.0f;
    int64_t extent = split_extent(a->kv_len);
    int64_t size = (extent + chunks - 1) / chunks;
    for (int c = 0; c < chunks; c++) {
        if ((int64_t)c * size >= extent) continue;
        const float *p = partial_at(a, chunks, h, c);
        float mc = p[0], sc = p[1];
        const uint16_t *ac = (const uint16_t *)(p + 2);
        if (sc == 0.0f) continue;
        float mn = fmaxf(m, mc);
        float sa = expf(m - mn), sb = expf(mc - mn);
        for (int64_t x = 0; x < d; x++) o[x] = fmaf(o[x], sa, h2f(ac[x]) * sb);
        s = fmaf(s, sa, sc * sb);
        m = mn;
    }
    float *orow = a->out + h * d;
    if (s != 0.0f) {
        float inv = 1.0f / s;
        for (int64_t x = 0; x < d; x++) orow[x] = o[x] * inv;
    } else {
        for (int64_t x = 0; x < d; x++) orow[x] = o[x];
    }
}

/* Chunk c's keys [lo, hi): its share of the extent, less what the window masks (a chunk
 * entirely before the window is empty, as a chunk of masked cells is in ggml). */
static void split_chunk_range(const v8_attn_args *a, int chunks, int c, int64_t *lo, int64_t *hi) {
    int64_t extent = split_extent(a->kv_len);
    int64_t size = (extent + chunks - 1) / chunks;
    int64_t begin = v8_attn_row_kv_begin(a, 0);
    *lo = (int64_t)c * size;
    *hi = *lo + size < extent ? *lo + size : extent;
    if (*lo < begin) *lo = begin < *hi ? begin : *hi;
}

static void split_chunk_ref(int tree, const v8_attn_args *a, int chunks, int64_t h, int c) {
    int64_t d = a->head_dim, lo, hi;
    split_chunk_range(a, chunks, c, &lo, &hi);
    float *p = partial_at(a, chunks, h, c);
    if (lo >= hi) {
        p[0] = -INFINITY;
        p[1] = 0.0f;
        return;
    }
    int64_t hk = h / (a->n_head / a->n_head_kv);
    const uint16_t *kh = (const uint16_t *)a->k + hk * a->kv_capacity * d;
    const uint16_t *vh = (const uint16_t *)a->v + hk * a->kv_capacity * d;
    uint16_t q16[V8_ATTN_MAX_HEAD_DIM] = {0};
    for (int64_t x = 0; x < d; x++) q16[x] = f2h(a->q[h * d + x]);
    row_state st = f16_range_ref(tree, q16, kh, vh, d, lo, hi, a->kv_len, a->scale,
                                 (uint16_t *)(p + 2));
    p[0] = st.m;
    p[1] = st.s;
}

v8_status v8_attn_online_split_ref_tree(int tree, int n_workers, V8_ATTN_ARGS_DECL) {
    v8_attn_args a = PACK();
    v8_status st = check_split(&a, n_workers);
    if (st != V8_OK) return st;
    V8_REQUIRE(tree_valid(tree), V8_ERR_UNKNOWN_SELECTOR);
    int chunks = split_chunks(kv_len, n_workers);
    if (chunks == 1) {
        /* below the threshold the contract is the single range */
        a.contract = single_range_of(contract);
        for (int64_t h = 0; h < n_head; h++) single_row_ref(tree, &a, 0, h);
        return V8_OK;
    }
    for (int64_t h = 0; h < n_head; h++)
        for (int c = 0; c < chunks; c++) split_chunk_ref(tree, &a, chunks, h, c);
    for (int64_t h = 0; h < n_head; h++) split_merge_head(&a, chunks, h);
    return V8_OK;
}

v8_status v8_attn_online_split_ref_workers(int n_workers, V8_ATTN_ARGS_DECL) {
    return v8_attn_online_split_ref_tree(tree_of_contract(contract), n_workers, V8_ATTN_ARGS_FWD);
}

v8_status v8_attn_online_split_ref(V8_ATTN_ARGS_DECL) {
    return v8_attn_online_split_ref_workers(1, V8_ATTN_ARGS_FWD);
}

#include "attention/online_simd.inc"
