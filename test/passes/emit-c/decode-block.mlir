// The C of a call-ready module: one entry point per phase, the bound threadpool functions with the
// resolved selector constants, and the printer's own intrinsic code for the elementwise ops.
// RUN: v8-opt --resolve-contracts --lower-to-kernels --prepare-calls -t c %s | filecheck %s
// The output is deterministic.
// RUN: v8-opt --resolve-contracts --lower-to-kernels --prepare-calls -t c %s > %t.a.c
// RUN: v8-opt --resolve-contracts --lower-to-kernels --prepare-calls -t c %s > %t.b.c
// RUN: diff %t.a.c %t.b.c

func.func @decode(%x: tensor<1x1024xf32>, %norm: tensor<1024xf32>, %w: tensor<1024x1024x!v8.q4_k>, %g: tensor<1x1024xf32>) -> tensor<1x1024xf32> {
  %h = v8.rmsnorm "norm" decode %x, %norm eps 1.000000e-06 contract #v8.op_contract<"rmsnorm_fp32_fp64_sum_ascending", op = rmsnorm, storage = fp32, compute = fp32, reduction_kind = sum_of_squares, reduction_accumulator = fp64, reduction_order = ascending, elementwise = scale_then_weight, transcendentals = sqrtf, rounding_points = [fp32_each_multiply, fp64_accumulate, fp32_mean, fp32_scale, fp32_scaled_value, fp32_weighted_value], partition = #v8.partition<independent_rows, effect = none>> : (tensor<1x1024xf32>, tensor<1024xf32>) -> tensor<1x1024xf32>
  %y = v8.linear "proj" decode %h, %w contract #v8.linear_contract<"q4_k_x_q8_k_fp32_block_order", weight_format = q4_k, activation_format = q8_k, activation_quantizer = q8_k_reference_round_half_even, integer_accumulator = int32_per_32_group_times_6bit_scale, float_accumulator = fp32_8_lanes_fma, min_correction = bsums_fp32_4_lanes_times_neg_dmin, super_block_order = ascending, horizontal_order = x86_lane_tree_of_isa, bias = after_complete_dot, partial_accumulator = none, merge_order = none, partition = #v8.partition<independent_rows, effect = none>> execution #v8.exec_requirement<runtime = threadpool, partition = independent_rows> : (tensor<1x1024xf32>, tensor<1024x1024x!v8.q4_k>) -> tensor<1x1024xf32>
  %r = v8.residual_add "res" decode %y, %x contract #v8.op_contract<"residual_add_fp32", op = residual_add, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = add, transcendentals = none, rounding_points = [fp32_output], partition = #v8.partition<independent_elements, effect = none>> : (tensor<1x1024xf32>, tensor<1x1024xf32>) -> tensor<1x1024xf32>
  %s = v8.swiglu "act" decode %g, %r contract #v8.op_contract<"swiglu_fp32_expf", op = swiglu, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = silu_expf_times_up, transcendentals = expf, rounding_points = [fp32_activation, fp32_output], partition = #v8.partition<independent_elements, effect = none>> : (tensor<1x1024xf32>, tensor<1x1024xf32>) -> tensor<1x1024xf32>
  func.return %s : tensor<1x1024xf32>
}
// CHECK: #include "v8_runtime.h"
// CHECK: #include "../ops/v8_ops.h"
// CHECK: #include "../quant/v8_quant.h"
// CHECK: #pragma GCC optimize("fp-contract=off")
// CHECK-LABEL: /* ---- inline residual_add: runtime dispatch over avx512, avx2, scalar ---- */
// CHECK: static void v8_inline_residual_add_scalar(float *y, const float *a, const float *b, int64_t n) {
// CHECK: #pragma GCC target("avx512f")
// CHECK: _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
// CHECK: #pragma GCC target("avx2,fma")
// CHECK: _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
// CHECK: switch (v8_cpu_best_isa()) {
// CHECK-NEXT: case V8_ISA_AVX512:
// CHECK-NEXT: v8_inline_residual_add_avx512(y, a, b, n);
// CHECK-LABEL: /* ---- inline swiglu: runtime dispatch over avx512, avx2, scalar ---- */
// CHECK: e[j] = expf(-a[i + j]); /* the contract names glibc's expf */
// CHECK: _mm512_div_ps(_mm512_loadu_ps(a + i), _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_loadu_ps(e)))
// CHECK-LABEL: /* ---- phase decode ---- */
// CHECK: size_t decode_arena_bytes(void) { return 8192u; }
// CHECK: need = v8_max_size(need, v8_ql_gemv_scratch_bytes(1024));
// CHECK: v8_status decode(v8_threadpool *pool, int64_t n_past, void *arena, void *scratch, size_t scratch_bytes, const float *x, const float *norm, const void *w, const float *g, float *out) {
// CHECK: V8_REQUIRE(arena != NULL && x != NULL && norm != NULL && w != NULL && g != NULL && out != NULL, V8_ERR_NULL_ARGUMENT);
// CHECK: /* norm: rmsnorm_fp32 delivers rmsnorm_fp32_fp64_sum_ascending; threadpool independent_rows, order effect none */
// CHECK-NEXT: st = v8_rmsnorm_f32_parallel_dispatch(pool, V8_RMSNORM_FP32_FP64_SUM_ASCENDING, [[H:b[0-9]+]], x, norm, 1, 1024, 9.99999997e-07f);
// CHECK: st = v8_q4_k_gemv_parallel_dispatch(pool, V8_QL_Q4_K_X_Q8_K_FP32_BLOCK_ORDER, [[Y:b[0-9]+]], w, [[H]], NULL, 1024, 1024, scratch, scratch_bytes);
// CHECK: v8_inline_residual_add([[R:b[0-9]+]], [[Y]], x, 1024);
// CHECK: v8_inline_swiglu(out, g, [[R]], 1024);
// CHECK-NEXT: return V8_OK;
