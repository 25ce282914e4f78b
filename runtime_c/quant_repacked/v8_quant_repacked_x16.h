/* Repacked Q4_K GEMV over a 16-row interleaved weight layout, made once at
 * load time from the plain GGUF rows by v8_q4_k_x16_repack.
 *
 * The arithmetic is the contract q4_k_x_q8_k_fp32_repacked_super_block_chain
 * of v8_quant_repacked.h (selector
 * V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN), bit for bit: only the
 * order of the exact int32 sums differs, so the outputs equal
 * v8_q4_k_repacked_gemv_ref on the plain rows.
 *
 * Layout: rows are taken 16 at a time (row group G = rows 16G .. 16G+15; the
 * last group is padded with zero rows), and each row group stores its k/256
 * super-blocks in order, one v8_block_q4_kx16 each, groups in order:
 *
 *   d[r], dmin[r]     the fp16 scales of row r's super-block
 *   sc[g][r], mn[g/2][r][g%2]   row r's 6-bit scale and min of 32-element group g
 *   qs[j][4r + i]     codes of row r: low nibble element 8j + i, high nibble
 *                     element 8j + 4 + i (j = 0..31, i = 0..3)
 *
 * so one 64-byte line of qs holds 8 elements of 16 rows, each row's 4 bytes
 * one int32 lane: the per-row sums land in lanes, with no horizontal step. */
#ifndef V8_QUANT_REPACKED_X16_H
#define V8_QUANT_REPACKED_X16_H

#include "quant/v8_quant.h"
#include "quant_repacked/v8_quant_repacked.h"

#ifdef __cplusplus
extern "C" {
#endif

#define V8_Q4_K_X16_ROWS 16

/* 2368 bytes: one super-block of 16 rows. */
typedef struct v8_block_q4_kx16 {
    uint16_t d[16];
    uint16_t dmin[16];
    uint8_t sc[8][16];
    uint8_t mn[4][16][2];
    uint8_t qs[32][64];
} v8_block_q4_kx16;

/* Bytes of the interleaved copy of an n x k Q4_K matrix (0 for invalid n, k). */
size_t v8_q4_k_x16_repack_bytes(int64_t n, int64_t k);

/* dst[v8_q4_k_x16_repack_bytes(n, k)] = the interleaved layout of the plain
 * Q4_K rows w[n][k/256 blocks].  dst must not overlap w. */
v8_status v8_q4_k_x16_repack(void *dst, size_t dst_bytes, const void *w, int64_t n, int64_t k);
/* The same, row groups split over the pool. */
v8_status v8_q4_k_x16_repack_parallel_dispatch(v8_threadpool *pool, void *dst, size_t dst_bytes,
                                               const void *w, int64_t n, int64_t k);

/* Scratch bytes of the GEMV (0 for an invalid k). */
size_t v8_q4_k_x16_gemv_scratch_bytes(int64_t k);

/* y[n] = W[n,k] . x[k] (+ bias[n]), w the interleaved copy; contract:
 * V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN.  *_ref is the scalar
 * walk of the interleaved layout; the production function dispatches on
 * v8_cpu_best_isa / v8_cpu_features (AVX-512 with or without VNNI, AVX2,
 * scalar); *_parallel_dispatch splits the row groups over the pool. */
v8_status v8_q4_k_x16_gemv_ref(int contract, float *y, const void *w, const float *x,
                               const float *bias, int64_t n, int64_t k, void *scratch,
                               size_t scratch_bytes);
v8_status v8_q4_k_x16_gemv(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t n, int64_t k, void *scratch,
                           size_t scratch_bytes);
v8_status v8_q4_k_x16_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                             const void *w, const float *x, const float *bias,
                                             int64_t n, int64_t k, void *scratch,
                                             size_t scratch_bytes);

/* ---- Q6_K, the same way ------------------------------------------------------
 *
 * Contract V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER of quant/v8_quant.h (the plain
 * v8_q6_k_gemv's: 8 fp32 lanes per row, one FMA per lane per super-block, the
 * fixed horizontal tree), bit for bit; the integer lane sums are exact, so
 * only their order differs.  Layout: row groups of 16 (zero-padded), each
 * storing its k/256 super-blocks in order, one v8_block_q6_kx16 each:
 *
 *   d[r]              fp16 scale of row r
 *   sc[p][r][e]       row r's int8 scale of 16-element sub-block 2p + e
 *   ql[j][4r + i]     low 4 bits of row r's levels: low nibble element 8j + i,
 *                     high nibble element 8j + 4 + i (j = 0..31, i = 0..3)
 *   qh[t][4r + i]     top 2 bits of row r's levels of elements 16t + 4s + i in
 *                     bits 2s, 2s+1 (s = 0..3)
 *
 * 3360 bytes per 16 rows, the plain blocks' size. */
typedef struct v8_block_q6_kx16 {
    uint16_t d[16];
    int8_t sc[8][16][2];
    uint8_t ql[32][64];
    uint8_t qh[16][64];
} v8_block_q6_kx16;

size_t v8_q6_k_x16_repack_bytes(int64_t n, int64_t k);
v8_status v8_q6_k_x16_repack(void *dst, size_t dst_bytes, const void *w, int64_t n, int64_t k);
v8_status v8_q6_k_x16_repack_parallel_dispatch(v8_threadpool *pool, void *dst, size_t dst_bytes,
                                               const void *w, int64_t n, int64_t k);
size_t v8_q6_k_x16_gemv_scratch_bytes(int64_t k);
/* y[n] = W[n,k] . x[k] (+ bias[n]); contract: V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER. */
v8_status v8_q6_k_x16_gemv_ref(int contract, float *y, const void *w, const float *x,
                               const float *bias, int64_t n, int64_t k, void *scratch,
                               size_t scratch_bytes);
v8_status v8_q6_k_x16_gemv(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t n, int64_t k, void *scratch,
                           size_t scratch_bytes);
v8_status v8_q6_k_x16_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                             const void *w, const float *x, const float *bias,
                                             int64_t n, int64_t k, void *scratch,
                                             size_t scratch_bytes);

#ifdef __cplusplus
}
#endif

#endif /* V8_QUANT_REPACKED_X16_H */
