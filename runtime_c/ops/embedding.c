/* Embedding lookup, contract embedding_fp32_row_copy: rows gathered by
 * token id, copied bit for bit. */
#include "ops/ops_internal.h"

typedef struct emb_args {
    float *y;
    const float *table;
    const int32_t *ids;
    int64_t n_tokens, n_vocab, dim;
} emb_args;

static v8_status prepare(int contract, emb_args *a, float *y, const float *table,
                         const int32_t *ids, int64_t n_tokens, int64_t n_vocab, int64_t dim) {
    V8_REQUIRE(contract == V8_EMBEDDING_FP32_ROW_COPY, V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(y != NULL && table != NULL && ids != NULL, V8_ERR_NULL_ARGUMENT);
    V8_REQUIRE(v8_ops_product_ok(n_tokens, dim), V8_ERR_BAD_DIMENSION);
    V8_REQUIRE(v8_ops_product_ok(n_vocab, dim), V8_ERR_BAD_DIMENSION);
    /* every id before the first write, so a bad id leaves y untouched */
    for (int64_t t = 0; t < n_tokens; ++t) {
        V8_REQUIRE(ids[t] >= 0 && (int64_t)ids[t] < n_vocab, V8_ERR_BAD_DIMENSION);
    }
    a->y = y;
    a->table = table;
    a->ids = ids;
    a->n_tokens = n_tokens;
    a->n_vocab = n_vocab;
    a->dim = dim;
    return V8_OK;
}

static void copy_rows(const emb_args *a, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
        memcpy(a->y + t * a->dim, a->table + (int64_t)a->ids[t] * a->dim,
               (size_t)a->dim * sizeof(float));
    }
}

v8_status v8_embedding_f32_ref(int contract, float *y, const float *table, const int32_t *ids,
                               int64_t n_tokens, int64_t n_vocab, int64_t dim) {
    emb_args a;
    v8_status st = prepare(contract, &a, y, table, ids, n_tokens, n_vocab, dim);
    if (st != V8_OK) {
        return st;
    }
    /* the oracle copies element by element: a copy is exact by definition */
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float *src = table + (int64_t)ids[t] * dim;
        for (int64_t i = 0; i < dim; ++i) {
            y[t * dim + i] = src[i];
        }
    }
    return V8_OK;
}

v8_status v8_embedding_f32(int contract, float *y, const float *table, const int32_t *ids,
                           int64_t n_tokens, int64_t n_vocab, int64_t dim) {
    emb_args a;
    v8_status st = prepare(contract, &a, y, table, ids, n_tokens, n_vocab, dim);
    if (st != V8_OK) {
        return st;
    }
    copy_rows(&a, 0, n_tokens);
    return V8_OK;
}

typedef struct emb_job {
    emb_args args;
    v8_ops_chunks chunks;
} emb_job;

static void emb_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const emb_job *job = (const emb_job *)ctx;
    int64_t t0, t1;
    v8_ops_chunk_range(&job->chunks, task, &t0, &t1);
    copy_rows(&job->args, t0, t1);
}

v8_status v8_embedding_f32_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                             const float *table, const int32_t *ids,
                                             int64_t n_tokens, int64_t n_vocab, int64_t dim) {
    V8_REQUIRE(pool != NULL, V8_ERR_NULL_ARGUMENT);
    emb_job job;
    v8_status st = prepare(contract, &job.args, y, table, ids, n_tokens, n_vocab, dim);
    if (st != V8_OK) {
        return st;
    }
    job.chunks = v8_ops_split(n_tokens, v8_threadpool_workers(pool), (int64_t)16384 / dim);
    return v8_parallel_for(pool, job.chunks.n_tasks, emb_task, &job);
}
