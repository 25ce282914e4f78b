/* Token embedding lookup from a quantized (or fp16/bf16) table, provider
 * embedding_quant: the row of each id dequantized as llama.cpp's get_rows
 * does it, by ggml's dequantize_row_* of libggml-base (plain C, each product
 * and sum rounded to fp32, no fused multiply-add).  The dequantizers of
 * q_formats.c / q0_formats.c are that arithmetic; this file picks one per
 * contract and applies it row by row.  The *_fp32_scale contracts then
 * multiply every dequantized value by one fp32 scale, each product rounded
 * (llama.cpp's ggml_scale of the gathered rows, ggml_vec_scale_f32). */
#include <string.h>

#include "quant/ql_internal.h"

typedef v8_status (*emb_deq_fn)(const void *w, float *x, int64_t rows, int64_t k);

static v8_status deq_f16(const void *w, float *x, int64_t rows, int64_t k) {
    const uint16_t *h = (const uint16_t *)w;
    for (int64_t i = 0; i < rows * k; ++i) {
        x[i] = v8_f16_to_f32(h[i]);
    }
    return V8_OK;
}

static v8_status deq_bf16(const void *w, float *x, int64_t rows, int64_t k) {
    const uint16_t *h = (const uint16_t *)w;
    for (int64_t i = 0; i < rows * k; ++i) {
        x[i] = v8_bf16_to_f32(h[i]);
    }
    return V8_OK;
}

typedef struct emb_format {
    int contract;
    int scaled_contract; /* the same rows, then times one fp32 scale */
    emb_deq_fn fn;
    int64_t block;       /* values per block */
    size_t block_bytes;  /* bytes per block */
} emb_format;

static const emb_format FORMATS[] = {
    {V8_EMBEDDING_Q8_0_GGML_DEQUANTIZE_ROW, V8_EMBEDDING_Q8_0_GGML_DEQUANTIZE_ROW_FP32_SCALE,
     v8_dequantize_q8_0, 32, 34},
    {V8_EMBEDDING_Q5_0_GGML_DEQUANTIZE_ROW, V8_EMBEDDING_Q5_0_GGML_DEQUANTIZE_ROW_FP32_SCALE,
     v8_dequantize_q5_0, 32, 22},
    {V8_EMBEDDING_Q4_0_GGML_DEQUANTIZE_ROW, V8_EMBEDDING_Q4_0_GGML_DEQUANTIZE_ROW_FP32_SCALE,
     v8_dequantize_q4_0, 32, 18},
    {V8_EMBEDDING_Q4_1_GGML_DEQUANTIZE_ROW, V8_EMBEDDING_Q4_1_GGML_DEQUANTIZE_ROW_FP32_SCALE,
     v8_dequantize_q4_1, 32, 20},
    {V8_EMBEDDING_Q5_1_GGML_DEQUANTIZE_ROW, V8_EMBEDDING_Q5_1_GGML_DEQUANTIZE_ROW_FP32_SCALE,
     v8_dequantize_q5_1, 32, 24},
    {V8_EMBEDDING_Q4_K_GGML_DEQUANTIZE_ROW, V8_EMBEDDING_Q4_K_GGML_DEQUANTIZE_ROW_FP32_SCALE,
     v8_dequantize_q4_k, 256, 144},
    {V8_EMBEDDING_Q5_K_GGML_DEQUANTIZE_ROW, V8_EMBEDDING_Q5_K_GGML_DEQUANTIZE_ROW_FP32_SCALE,
     v8_dequantize_q5_k, 256, 176},
    {V8_EMBEDDING_Q6_K_GGML_DEQUANTIZE_ROW, V8_EMBEDDING_Q6_K_GGML_DEQUANTIZE_ROW_FP32_SCALE,
     v8_dequantize_q6_k, 256, 210},
    {V8_EMBEDDING_F16_EXACT_CONVERT, V8_EMBEDDING_F16_EXACT_CONVERT_FP32_SCALE,
     deq_f16, 1, 2},
    {V8_EMBEDDING_BF16_EXACT_CONVERT, V8_EMBEDDING_BF16_EXACT_CONVERT_FP32_SCALE,
     deq_bf16, 1, 2},
};

typedef struct emb_args {
    const emb_format *fmt;
    float *y;
    const uint8_t *table;
    const int32_t *ids;
    int64_t n_tokens, dim;
    size_t row_bytes;
    int scaled;  /* multiply each dequantized value by scale */
    float scale;
} emb_args;

/* `scaled` says which selector family the entry point takes: the plain
 * functions accept only the plain contracts, the *_scaled ones only the
 * *_fp32_scale contracts, so a selector never reaches the other ABI. */
static v8_status prepare(int contract, int scaled, float scale, emb_args *a, float *y,
                         const void *table, const int32_t *ids, int64_t n_tokens,
                         int64_t n_vocab, int64_t dim) {
    const emb_format *fmt = NULL;
    for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; ++i) {
        if ((scaled ? FORMATS[i].scaled_contract : FORMATS[i].contract) == contract) {
            fmt = &FORMATS[i];
        }
    }
    V8_REQUIRE(fmt != NULL, V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && table != NULL && ids != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(n_tokens >= 0 && n_vocab > 0 && dim > 0, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(dim % fmt->block == 0, V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(n_tokens <= INT64_MAX / dim && n_vocab <= INT64_MAX / dim, V8_ERR_BAD_DIMENSION);
    /* every id before the first write, so a bad id leaves y untouched */
    for (int64_t t = 0; t < n_tokens; ++t) {
        V8_REQUIRE(ids[t] >= 0 && (int64_t)ids[t] < n_vocab, V8_ERR_BAD_DIMENSION);
    }
    a->fmt = fmt;
    a->y = y;
    a->table = (const uint8_t *)table;
    a->ids = ids;
    a->n_tokens = n_tokens;
    a->dim = dim;
    a->row_bytes = (size_t)(dim / fmt->block) * fmt->block_bytes;
    a->scaled = scaled;
    a->scale = scale;
    return V8_OK;
}

static v8_status rows(const emb_args *a, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
        v8_status st = a->fmt->fn(a->table + (size_t)a->ids[t] * a->row_bytes,
                                  a->y + t * a->dim, 1, a->dim);
        if (st != V8_OK) {
            return st;
        }
        if (a->scaled) {
            /* ggml_scale: one fp32 multiply per element, nothing fused (the
             * dequantized value is already stored, so no contraction) */
            float *row = a->y + t * a->dim;
            for (int64_t i = 0; i < a->dim; ++i) {
                row[i] = row[i] * a->scale;
            }
        }
    }
    return V8_OK;
}

static v8_status emb_serial(int contract, int scaled, float scale, float *y, const void *table,
                            const int32_t *ids, int64_t n_tokens, int64_t n_vocab, int64_t dim) {
    emb_args a;
    v8_status st = prepare(contract, scaled, scale, &a, y, table, ids, n_tokens, n_vocab, dim);
    return st != V8_OK ? st : rows(&a, 0, n_tokens);
}

v8_status v8_embedding_quant_ref(int contract, float *y, const void *table, const int32_t *ids,
                                 int64_t n_tokens, int64_t n_vocab, int64_t dim) {
    return emb_serial(contract, 0, 1.0f, y, table, ids, n_tokens, n_vocab, dim);
}

/* The production path is the oracle's scalar arithmetic: ggml's dequantizers
 * are plain C, and a vectorized form would have to keep every rounding. */
v8_status v8_embedding_quant(int contract, float *y, const void *table, const int32_t *ids,
                             int64_t n_tokens, int64_t n_vocab, int64_t dim) {
    return v8_embedding_quant_ref(contract, y, table, ids, n_tokens, n_vocab, dim);
}

v8_status v8_embedding_quant_scaled_ref(int contract, float *y, const void *table,
                                        const int32_t *ids, int64_t n_tokens, int64_t n_vocab,
                                        int64_t dim, float scale) {
    return emb_serial(contract, 1, scale, y, table, ids, n_tokens, n_vocab, dim);
}

/* As above: the multiply is one rounding per element in any ISA, so the
 * scalar loop is the production arithmetic. */
v8_status v8_embedding_quant_scaled(int contract, float *y, const void *table,
                                    const int32_t *ids, int64_t n_tokens, int64_t n_vocab,
                                    int64_t dim, float scale) {
    return v8_embedding_quant_scaled_ref(contract, y, table, ids, n_tokens, n_vocab, dim, scale);
}

typedef struct emb_job {
    emb_args args;
    int64_t per_task;
} emb_job;

static void emb_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const emb_job *job = (const emb_job *)ctx;
    const int64_t t0 = task * job->per_task;
    const int64_t t1 = t0 + job->per_task < job->args.n_tokens ? t0 + job->per_task
                                                                : job->args.n_tokens;
    (void)rows(&job->args, t0, t1); /* arguments were checked; a row cannot fail */
}

static v8_status emb_parallel(v8_threadpool *pool, int contract, int scaled, float scale,
                              float *y, const void *table, const int32_t *ids,
                              int64_t n_tokens, int64_t n_vocab, int64_t dim) {
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    emb_job job;
    v8_status st = prepare(contract, scaled, scale, &job.args, y, table, ids, n_tokens, n_vocab,
                           dim);
    if (st != V8_OK || n_tokens == 0) {
        return st;
    }
    const int64_t workers = v8_threadpool_workers(pool);
    job.per_task = (n_tokens + workers - 1) / workers;
    return v8_parallel_for(pool, (n_tokens + job.per_task - 1) / job.per_task, emb_task, &job);
}

v8_status v8_embedding_quant_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                               const void *table, const int32_t *ids,
                                               int64_t n_tokens, int64_t n_vocab, int64_t dim) {
    return emb_parallel(pool, contract, 0, 1.0f, y, table, ids, n_tokens, n_vocab, dim);
}

v8_status v8_embedding_quant_scaled_parallel_dispatch(v8_threadpool *pool, int contract,
                                                      float *y, const void *table,
                                                      const int32_t *ids, int64_t n_tokens,
                                                      int64_t n_vocab, int64_t dim,
                                                      float scale) {
    return emb_parallel(pool, contract, 1, scale, y, table, ids, n_tokens, n_vocab, dim);
}
