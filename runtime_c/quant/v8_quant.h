/* Quantized linear kernels: Q4_K / Q5_K / Q6_K weights times Q8_K
 * activations (this part), and the 32-element block formats Q8_0 / Q5_0 /
 * Q4_0 x Q8_0 and Q4_1 / Q5_1 x Q8_1 (the section further below).
 *
 * Block layouts are byte-compatible with ggml (llama.cpp), so weights read
 * from GGUF files feed these kernels directly.  Every dot product follows a
 * named numerical contract (see docs/NUMERICS.md, "Quantized linear contracts"):
 *
 *   integer part   exact int32 sums per fp32 lane (any evaluation order gives
 *                  the same integers, so SIMD variants may differ here);
 *   float part     8 fp32 lanes, one FMA per lane per super-block, super-blocks
 *                  ascending; Q4_K also 4 fp32 "min" lanes (Q5_K one fp32
 *                  min sum instead, see its selector); then a fixed
 *                  horizontal tree (below).  This is the part that pins bits.
 *
 * Lane u (0..7) of a super-block holds the integer sum of the weight*activation
 * products of the elements whose index within each 32-element group is in
 * [4u, 4u+4), each group weighted by its scale.  Horizontal tree of the 8
 * lanes a[0..7]:  r_i = a[i+4] + a[i] (i < 4);  h = (r0 + r2) + (r1 + r3).
 * Q4_K min lanes m[0..3]:  hm = (m0 + m2) + (m1 + m3);  dot = h + hm.
 * This is the x86 tree ggml uses for both its AVX2 and AVX-512 builds (the
 * AVX-512 build of ggml compiles the same 256-bit K-quant dot), so the one
 * contract covers both production variants.  Bias, when given, is added
 * after the complete dot (after the split-K merge for the split-K contract).
 *
 * API discipline: the contract selector comes first; every size and pointer
 * is checked before the first write; the activation is quantized to Q8_K into
 * caller-provided scratch (size from the *_scratch_bytes functions).  The
 * scratch contents are not part of the API: a production variant may store
 * the Q8_K blocks in an arrangement of its own (the AVX-512 Q4_K kernels
 * reorder each block's 32-byte chunks and keep derived sums there). */
#ifndef V8_QUANT_H
#define V8_QUANT_H

#include "v8_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define V8_QK_K 256

/* Contract selectors (ids in the contract registry, upper-cased). */
enum {
    V8_QL_Q4_K_X_Q8_K_FP32_BLOCK_ORDER = 1,
    V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER = 2,
    V8_QL_Q4_K_X_Q8_K_FP32_SPLIT_K_ASCENDING_MERGE = 3,
    /* Q5_K: as Q4_K's scales and 8 FMA lanes, but the min correction is one
     * fp32 running sum: per super-block the exact int32 sum of min[j] times
     * the 32-element activation sums, s = fma(-x.d*fp16(dmin), float(sum), s);
     * dot = tree8(lanes) + s (the arithmetic of ggml's x86 Q5_K dot as its
     * builds compile it, the scalar update contracted to one FMA). */
    V8_QL_Q5_K_X_Q8_K_FP32_BLOCK_ORDER = 7
};

/* 144 bytes: fp16 super-block scale and min scale, eight 6-bit scales and
 * eight 6-bit mins packed in 12 bytes, 256 4-bit weights.  Within each
 * 64-weight half, byte l holds weight l (low nibble) and weight l+32 (high). */
typedef struct v8_block_q4_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qs[V8_QK_K / 2];
} v8_block_q4_k;

/* 210 bytes: low 4 bits, high 2 bits, 16 int8 scales, fp16 scale;
 * weight = d * scale * (q - 32) with q in [0, 63]. */
typedef struct v8_block_q6_k {
    uint8_t ql[V8_QK_K / 2];
    uint8_t qh[V8_QK_K / 4];
    int8_t scales[V8_QK_K / 16];
    uint16_t d;
} v8_block_q6_k;

/* 176 bytes: Q4_K's scales with 5-bit weights: the low nibbles as in Q4_K
 * and the fifth bits in qh (bit 2h of qh[l]: weight 64h + l, bit 2h+1:
 * weight 64h + 32 + l). */
typedef struct v8_block_q5_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[V8_QK_K / 8];
    uint8_t qs[V8_QK_K / 2];
} v8_block_q5_k;

/* 292 bytes: fp32 scale, 256 int8 values, 16 sums of 16 consecutive values. */
typedef struct v8_block_q8_k {
    float d;
    int8_t qs[V8_QK_K];
    int16_t bsums[V8_QK_K / 16];
} v8_block_q8_k;

/* ---- quantizers (reference; used for activations and to build models) -- */

/* Q8_K activation quantizer: per block, the signed value of largest
 * magnitude (first one on ties) sets iscale = -127/max, q = round-half-even
 * (iscale*x) capped at 127, d = 1/iscale; an all-zero block is all zeros. */
v8_status v8_quantize_q8_k(const float *x, void *y, int64_t rows, int64_t k);
/* Weight quantizers, byte-identical to ggml's reference K-quant quantizers
 * (no importance matrix). */
v8_status v8_quantize_q4_k_ref(const float *x, void *y, int64_t rows, int64_t k);
v8_status v8_quantize_q6_k_ref(const float *x, void *y, int64_t rows, int64_t k);
v8_status v8_quantize_q5_k_ref(const float *x, void *y, int64_t rows, int64_t k);
/* Dequantizers (fp32 products d*scale*q - dmin*min as ggml writes them). */
v8_status v8_dequantize_q4_k(const void *w, float *x, int64_t rows, int64_t k);
v8_status v8_dequantize_q6_k(const void *w, float *x, int64_t rows, int64_t k);
v8_status v8_dequantize_q5_k(const void *w, float *x, int64_t rows, int64_t k);
v8_status v8_dequantize_q8_k(const void *a, float *x, int64_t rows, int64_t k);

/* ---- scratch sizes (0 for an invalid k) ------------------------------ */

size_t v8_ql_gemv_scratch_bytes(int64_t k);
size_t v8_ql_gemm_scratch_bytes(int64_t m, int64_t k);
size_t v8_ql_split_k_scratch_bytes(int64_t n, int64_t k, int64_t parts);

/* ---- GEMV: y[n] = W[n,k] . x[k] (+ bias[n]) -------------------------- */
/* w: n rows of k/256 blocks; bias may be NULL. */

v8_status v8_q4_k_gemv_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes);
v8_status v8_q4_k_gemv(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes);
/* Partition: independent_rows (each worker owns whole outputs). */
v8_status v8_q4_k_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x, const float *bias,
                                         int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes);

v8_status v8_q6_k_gemv_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes);
v8_status v8_q6_k_gemv(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes);
v8_status v8_q6_k_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x, const float *bias,
                                         int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes);

v8_status v8_q5_k_gemv_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes);
v8_status v8_q5_k_gemv(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes);
v8_status v8_q5_k_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x, const float *bias,
                                         int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes);

/* ---- GEMM: Y[m,n] = X[m,k] . W[n,k]^T (+ bias[n]), token-major ------- */

v8_status v8_q4_k_gemm_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t m, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes);
v8_status v8_q4_k_gemm(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t m, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes);
/* Partition: output_tiles (blocks of weight rows x blocks of tokens); a tile
 * one token-block tall is the independent_columns partition. */
v8_status v8_q4_k_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x, const float *bias,
                                         int64_t m, int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes);

v8_status v8_q6_k_gemm_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t m, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes);
v8_status v8_q6_k_gemm(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t m, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes);
v8_status v8_q6_k_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x, const float *bias,
                                         int64_t m, int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes);

v8_status v8_q5_k_gemm_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t m, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes);
v8_status v8_q5_k_gemm(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t m, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes);
v8_status v8_q5_k_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x, const float *bias,
                                         int64_t m, int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes);

/* ---- split-K GEMV (contract q4_k_x_q8_k_fp32_split_k_ascending_merge) --
 * nb = k/256 super-blocks split into `parts` contiguous chunks of
 * ceil(nb/parts) super-blocks (the last may be shorter or empty); each
 * chunk's dot uses the block-order lane tree and yields an fp32 partial;
 * partials are added in fp32 in ascending chunk order starting from the
 * first; bias after the merge.  The resolver passes parts = worker count. */

v8_status v8_q4_k_gemv_split_k_ref(int contract, float *y, const void *w, const float *x,
                                   const float *bias, int64_t n, int64_t k, int64_t parts,
                                   void *scratch, size_t scratch_bytes);
v8_status v8_q4_k_gemv_split_k(int contract, float *y, const void *w, const float *x,
                               const float *bias, int64_t n, int64_t k, int64_t parts,
                               void *scratch, size_t scratch_bytes);
/* Partition: split_k (task = rows block x chunk, partials indexed by chunk). */
v8_status v8_q4_k_gemv_split_k_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                                 const void *w, const float *x,
                                                 const float *bias, int64_t n, int64_t k,
                                                 int64_t parts,
                                                 void *scratch, size_t scratch_bytes);

/* ---- 32-element block formats: Q8_0 / Q5_0 / Q4_0 weights x Q8_0 activations
 * (Q4_1 / Q5_1 x Q8_1 below)
 *
 * Byte-compatible with ggml's block_q8_0 / block_q5_0 / block_q4_0.  The
 * contract (q8_0 / q5_0 / q4_0 _x_q8_0_fp32_block_order) per 32-element
 * block: weights decoded to int8 levels, an exact int32 dot with the Q8_0
 * activation levels kept in 8 lanes (lane u sums elements [4u, 4u+4)), the
 * block factor fp16(w.d)*fp16(x.d) as one fp32 product, one FMA per lane
 * into 8 fp32 lanes, blocks ascending, then the same horizontal tree as the
 * K-quant contracts; bias after the complete dot.  ggml's AVX2 and AVX-512
 * builds run the same 256-bit dot, so one contract covers both variants.
 * K must be a multiple of 32; other widths are refused (ggml refuses them). */

#define V8_QK8_0 32

enum {
    V8_QL_Q8_0_X_Q8_0_FP32_BLOCK_ORDER = 4,
    V8_QL_Q5_0_X_Q8_0_FP32_BLOCK_ORDER = 5,
    V8_QL_Q4_0_X_Q8_0_FP32_BLOCK_ORDER = 6,
    /* Q4_1 / Q5_1 x Q8_1: the same lanes over the unsigned levels, plus the
     * block's m * s (fp16 weight min times the activation's fp16 d*sum(q))
     * folded into one fp32 sum by FMA per block, added after the tree. */
    V8_QL_Q4_1_X_Q8_1_FP32_BLOCK_ORDER = 8,
    V8_QL_Q5_1_X_Q8_1_FP32_BLOCK_ORDER = 9
};

/* 34 bytes: fp16 scale, 32 int8 levels; value = d * q. */
typedef struct v8_block_q8_0 {
    uint16_t d;
    int8_t qs[V8_QK8_0];
} v8_block_q8_0;

/* 22 bytes: fp16 scale, the 32 fifth bits (bit j of the little-endian word
 * belongs to element j), 16 bytes of nibbles (byte j: element j low, element
 * j+16 high); value = d * ((nibble | bit << 4) - 16). */
typedef struct v8_block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[V8_QK8_0 / 2];
} v8_block_q5_0;

/* 18 bytes: fp16 scale, 16 bytes of nibbles laid out as in Q5_0;
 * value = d * (nibble - 8). */
typedef struct v8_block_q4_0 {
    uint16_t d;
    uint8_t qs[V8_QK8_0 / 2];
} v8_block_q4_0;

/* 20 bytes: fp16 scale and min, 16 bytes of nibbles as Q4_0;
 * value = d * nibble + m. */
typedef struct v8_block_q4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[V8_QK8_0 / 2];
} v8_block_q4_1;

/* 24 bytes: fp16 scale and min, fifth bits and nibbles as Q5_0;
 * value = d * (nibble | bit << 4) + m. */
typedef struct v8_block_q5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[V8_QK8_0 / 2];
} v8_block_q5_1;

/* 36 bytes: the Q8_1 activation block: fp16 d, fp16 s = d * sum(qs), 32 int8. */
typedef struct v8_block_q8_1 {
    uint16_t d;
    uint16_t s;
    int8_t qs[V8_QK8_0];
} v8_block_q8_1;

/* Q8_0 activation quantizer, the x86 SIMD arithmetic ggml's CPU backend
 * runs on the activation of every Q8_0/Q5_0/Q4_0 mul_mat: per block amax =
 * max |x|, d = amax / 127 (fp32 divide) stored as fp16 (round to nearest
 * even), id = 127 / amax (0 when amax is 0), q = round-half-even(x * id)
 * saturated to int8.  (ggml's portable reference quantizer differs: it
 * rounds half away from zero and uses id = 1 / d.) */
v8_status v8_quantize_q8_0(const float *x, void *y, int64_t rows, int64_t k);
/* Q8_1 activation quantizer (ggml's x86 quantize_row_q8_1): the Q8_0 levels
 * and d, and s = fp16(d32 * sum of the int32 levels) with d32 the fp32
 * amax / 127 (before its fp16 rounding). */
v8_status v8_quantize_q8_1(const float *x, void *y, int64_t rows, int64_t k);
/* Weight quantizers, byte-identical to ggml's reference ones (what
 * ggml_quantize_chunk writes without an importance matrix). */
v8_status v8_quantize_q8_0_ref(const float *x, void *y, int64_t rows, int64_t k);
v8_status v8_quantize_q5_0_ref(const float *x, void *y, int64_t rows, int64_t k);
v8_status v8_quantize_q4_0_ref(const float *x, void *y, int64_t rows, int64_t k);
v8_status v8_quantize_q4_1_ref(const float *x, void *y, int64_t rows, int64_t k);
v8_status v8_quantize_q5_1_ref(const float *x, void *y, int64_t rows, int64_t k);
/* Dequantizers (fp32 level * fp32(d), as ggml's dequantize_row_*). */
v8_status v8_dequantize_q8_0(const void *w, float *x, int64_t rows, int64_t k);
v8_status v8_dequantize_q5_0(const void *w, float *x, int64_t rows, int64_t k);
v8_status v8_dequantize_q4_0(const void *w, float *x, int64_t rows, int64_t k);
v8_status v8_dequantize_q4_1(const void *w, float *x, int64_t rows, int64_t k);
v8_status v8_dequantize_q5_1(const void *w, float *x, int64_t rows, int64_t k);

/* Scratch for the Q8_0 activation blocks (0 for an invalid m or k). */
size_t v8_ql0_gemv_scratch_bytes(int64_t k);
size_t v8_ql0_gemm_scratch_bytes(int64_t m, int64_t k);
/* ... and for the Q8_1 activation blocks of Q4_1 / Q5_1 */
size_t v8_ql1_gemv_scratch_bytes(int64_t k);
size_t v8_ql1_gemm_scratch_bytes(int64_t m, int64_t k);

/* GEMV y[n] = W[n,k] . x[k] (+ bias); GEMM Y[m,n] = X[m,k] . W[n,k]^T (+ bias).
 * Partitions as for the K-quants: independent_rows (GEMV), output_tiles (GEMM). */
v8_status v8_q8_0_gemv_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes);
v8_status v8_q8_0_gemv(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes);
v8_status v8_q8_0_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x,
                                         const float *bias, int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes);
v8_status v8_q8_0_gemm_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t m, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes);
v8_status v8_q8_0_gemm(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t m, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes);
v8_status v8_q8_0_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x,
                                         const float *bias, int64_t m, int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes);

v8_status v8_q5_0_gemv_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes);
v8_status v8_q5_0_gemv(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes);
v8_status v8_q5_0_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x,
                                         const float *bias, int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes);
v8_status v8_q5_0_gemm_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t m, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes);
v8_status v8_q5_0_gemm(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t m, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes);
v8_status v8_q5_0_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x,
                                         const float *bias, int64_t m, int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes);

v8_status v8_q4_0_gemv_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes);
v8_status v8_q4_0_gemv(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes);
v8_status v8_q4_0_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x,
                                         const float *bias, int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes);
v8_status v8_q4_0_gemm_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t m, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes);
v8_status v8_q4_0_gemm(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t m, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes);
v8_status v8_q4_0_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x,
                                         const float *bias, int64_t m, int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes);

v8_status v8_q4_1_gemv_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes);
v8_status v8_q4_1_gemv(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes);
v8_status v8_q4_1_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x,
                                         const float *bias, int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes);
v8_status v8_q4_1_gemm_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t m, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes);
v8_status v8_q4_1_gemm(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t m, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes);
v8_status v8_q4_1_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x,
                                         const float *bias, int64_t m, int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes);

v8_status v8_q5_1_gemv_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes);
v8_status v8_q5_1_gemv(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes);
v8_status v8_q5_1_gemv_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x,
                                         const float *bias, int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes);
v8_status v8_q5_1_gemm_ref(int contract, float *y, const void *w, const float *x,
                           const float *bias, int64_t m, int64_t n, int64_t k,
                           void *scratch, size_t scratch_bytes);
v8_status v8_q5_1_gemm(int contract, float *y, const void *w, const float *x,
                       const float *bias, int64_t m, int64_t n, int64_t k,
                       void *scratch, size_t scratch_bytes);
v8_status v8_q5_1_gemm_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                         const void *w, const float *x,
                                         const float *bias, int64_t m, int64_t n, int64_t k,
                                         void *scratch, size_t scratch_bytes);

/* ---- token embedding from a quantized table: provider embedding_quant ---
 * Contracts embedding_<fmt>_ggml_dequantize_row (fmt q8_0, q5_0, q4_0, q4_1,
 * q5_1, q4_k, q5_k, q6_k) and embedding_{f16,bf16}_exact_convert: row
 * ids[t] of table (ggml's raw row bytes, n_vocab rows of dim values) written
 * to y[t][:] in fp32 exactly as llama.cpp's get_rows does, i.e. by ggml's
 * dequantize_row_<fmt> in plain C (no fused multiply-add):
 *   q8_0, q5_0, q4_0   y = fp32(level) * fp32(d)
 *   q4_1, q5_1         y = fp32(level) * fp32(d) + fp32(m)
 *   q4_k, q5_k         y = (fp32(d) * sc) * level - fp32(dmin) * mn
 *   q6_k               y = (fp32(d) * sc) * (level - 32)
 *   f16, bf16          exact conversion
 * each product and sum rounded to fp32.  dim must be a multiple of the
 * format's block (32 or 256); every id is checked against [0, n_vocab)
 * before the first write.  Rows are independent (independent_rows). */
enum {
    V8_EMBEDDING_Q8_0_GGML_DEQUANTIZE_ROW = 0x411,
    V8_EMBEDDING_Q5_0_GGML_DEQUANTIZE_ROW = 0x412,
    V8_EMBEDDING_Q4_0_GGML_DEQUANTIZE_ROW = 0x413,
    V8_EMBEDDING_Q4_1_GGML_DEQUANTIZE_ROW = 0x414,
    V8_EMBEDDING_Q5_1_GGML_DEQUANTIZE_ROW = 0x415,
    V8_EMBEDDING_Q4_K_GGML_DEQUANTIZE_ROW = 0x416,
    V8_EMBEDDING_Q5_K_GGML_DEQUANTIZE_ROW = 0x417,
    V8_EMBEDDING_Q6_K_GGML_DEQUANTIZE_ROW = 0x418,
    V8_EMBEDDING_F16_EXACT_CONVERT = 0x419,
    V8_EMBEDDING_BF16_EXACT_CONVERT = 0x41A
};

/* Provider embedding_quant_scaled: the same rows, then every value times one
 * fp32 scale, each product rounded to fp32 (llama.cpp's ggml_scale after
 * get_rows: Gemma's sqrt(hidden) embedding scale).  Contracts
 * embedding_<fmt>_ggml_dequantize_row_fp32_scale and
 * embedding_{f16,bf16}_exact_convert_fp32_scale; the plain functions above
 * refuse these selectors and these functions refuse the plain ones. */
enum {
    V8_EMBEDDING_Q8_0_GGML_DEQUANTIZE_ROW_FP32_SCALE = 0x41B,
    V8_EMBEDDING_Q5_0_GGML_DEQUANTIZE_ROW_FP32_SCALE = 0x41C,
    V8_EMBEDDING_Q4_0_GGML_DEQUANTIZE_ROW_FP32_SCALE = 0x41D,
    V8_EMBEDDING_Q4_1_GGML_DEQUANTIZE_ROW_FP32_SCALE = 0x41E,
    V8_EMBEDDING_Q5_1_GGML_DEQUANTIZE_ROW_FP32_SCALE = 0x41F,
    V8_EMBEDDING_Q4_K_GGML_DEQUANTIZE_ROW_FP32_SCALE = 0x420,
    V8_EMBEDDING_Q5_K_GGML_DEQUANTIZE_ROW_FP32_SCALE = 0x421,
    V8_EMBEDDING_Q6_K_GGML_DEQUANTIZE_ROW_FP32_SCALE = 0x422,
    V8_EMBEDDING_F16_EXACT_CONVERT_FP32_SCALE = 0x423,
    V8_EMBEDDING_BF16_EXACT_CONVERT_FP32_SCALE = 0x424
};

v8_status v8_embedding_quant_ref(int contract, float *y, const void *table, const int32_t *ids,
                                 int64_t n_tokens, int64_t n_vocab, int64_t dim);
v8_status v8_embedding_quant(int contract, float *y, const void *table, const int32_t *ids,
                             int64_t n_tokens, int64_t n_vocab, int64_t dim);
v8_status v8_embedding_quant_parallel_dispatch(v8_threadpool *pool, int contract, float *y,
                                               const void *table, const int32_t *ids,
                                               int64_t n_tokens, int64_t n_vocab, int64_t dim);
v8_status v8_embedding_quant_scaled_ref(int contract, float *y, const void *table,
                                        const int32_t *ids, int64_t n_tokens, int64_t n_vocab,
                                        int64_t dim, float scale);
v8_status v8_embedding_quant_scaled(int contract, float *y, const void *table,
                                    const int32_t *ids, int64_t n_tokens, int64_t n_vocab,
                                    int64_t dim, float scale);
v8_status v8_embedding_quant_scaled_parallel_dispatch(v8_threadpool *pool, int contract,
                                                      float *y, const void *table,
                                                      const int32_t *ids, int64_t n_tokens,
                                                      int64_t n_vocab, int64_t dim,
                                                      float scale);

#ifdef __cplusplus
}
#endif

#endif /* V8_QUANT_H */
