// Call-ready IR: arena offsets (dead buffers reused), the phase result as an output argument, and
// each call bound to its map's ABI with the resolved selector and the threadpool dispatch.
// RUN: v8-opt --resolve-contracts --lower-to-kernels --prepare-calls %s | filecheck %s
// RUN: v8-opt --resolve-contracts --lower-to-kernels --prepare-calls %s | v8-opt | filecheck %s
// Verifying before and after every pass (--verify-each) changes nothing but the cost.
// RUN: v8-opt --verify-each --resolve-contracts --lower-to-kernels --prepare-calls %s | filecheck %s

func.func @decode(%x: tensor<1x1024xf32>, %norm: tensor<1024xf32>, %w: tensor<1024x1024x!v8.q4_k>, %g: tensor<1x1024xf32>) -> tensor<1x1024xf32> {
  %h = v8.rmsnorm "norm" decode %x, %norm eps 1.000000e-06 contract #v8.op_contract<"rmsnorm_fp32_fp64_sum_ascending", op = rmsnorm, storage = fp32, compute = fp32, reduction_kind = sum_of_squares, reduction_accumulator = fp64, reduction_order = ascending, elementwise = scale_then_weight, transcendentals = sqrtf, rounding_points = [fp32_each_multiply, fp64_accumulate, fp32_mean, fp32_scale, fp32_scaled_value, fp32_weighted_value], partition = #v8.partition<independent_rows, effect = none>> : (tensor<1x1024xf32>, tensor<1024xf32>) -> tensor<1x1024xf32>
  %y = v8.linear "proj" decode %h, %w contract #v8.linear_contract<"q4_k_x_q8_k_fp32_block_order", weight_format = q4_k, activation_format = q8_k, activation_quantizer = q8_k_reference_round_half_even, integer_accumulator = int32_per_32_group_times_6bit_scale, float_accumulator = fp32_8_lanes_fma, min_correction = bsums_fp32_4_lanes_times_neg_dmin, super_block_order = ascending, horizontal_order = x86_lane_tree_of_isa, bias = after_complete_dot, partial_accumulator = none, merge_order = none, partition = #v8.partition<independent_rows, effect = none>> execution #v8.exec_requirement<runtime = threadpool, partition = independent_rows> : (tensor<1x1024xf32>, tensor<1024x1024x!v8.q4_k>) -> tensor<1x1024xf32>
  %r = v8.residual_add "res" decode %y, %x contract #v8.op_contract<"residual_add_fp32", op = residual_add, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = add, transcendentals = none, rounding_points = [fp32_output], partition = #v8.partition<independent_elements, effect = none>> : (tensor<1x1024xf32>, tensor<1x1024xf32>) -> tensor<1x1024xf32>
  %s = v8.swiglu "act" decode %g, %r contract #v8.op_contract<"swiglu_fp32_expf", op = swiglu, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = silu_expf_times_up, transcendentals = expf, rounding_points = [fp32_activation, fp32_output], partition = #v8.partition<independent_elements, effect = none>> : (tensor<1x1024xf32>, tensor<1x1024xf32>) -> tensor<1x1024xf32>
  func.return %s : tensor<1x1024xf32>
}
// Each bound function is declared once, with its kernel map's ABI as the signature.
// CHECK: v8.kernel_decl @v8_q4_k_gemv_parallel_dispatch (!v8.threadpool, i32, !v8.ptr<f32>, !v8.ptr<const none>, !v8.ptr<const f32>, !v8.ptr<const f32>, i64, i64, !v8.ptr<none>, index) -> !v8.status names ["pool", "contract", "y", "w", "x", "bias", "n", "k", "scratch", "scratch_bytes"] kernel "q4_k_x_q8_k_gemv" header "quant/v8_quant.h"
// CHECK-NEXT: v8.kernel_decl @v8_rmsnorm_f32_parallel_dispatch (!v8.threadpool, i32, !v8.ptr<f32>, !v8.ptr<const f32>, !v8.ptr<const f32>, i64, i64, f32) -> !v8.status names ["pool", "contract", "y", "x", "w", "n_rows", "n", "eps"] kernel "rmsnorm_fp32" header "ops/v8_ops.h"
// CHECK: func.func @decode(%x: memref<1x1024xf32>, %norm: memref<1024xf32>, %w: memref<1024x1024x!v8.q4_k>, %g: memref<1x1024xf32>, %out: memref<1x1024xf32>) attributes {v8.arena_bytes = 8192 : index, v8.outputs = 1 : index, v8.written_args = []} {
// The entry point's values the calls use are SSA values; the scratch the GEMV needs is a call of its
// map's scratch function.
// CHECK-NEXT:   %[[POOL:.*]] = v8.entry_value pool : !v8.threadpool
// CHECK-NEXT:   %[[SCRATCH:.*]] = v8.entry_value scratch : !v8.ptr<none>
// CHECK-NEXT:   %[[BYTES:.*]] = v8.entry_value scratch_bytes : index
// CHECK-NEXT:   v8.scratch_need "v8_ql_gemv_scratch_bytes"() args [1024 : i64]
// CHECK-NEXT:   %[[H:.*]] = v8.arena_slice 0 : memref<1x1024xf32>
// CHECK-NEXT:   v8.call "v8_rmsnorm_f32_parallel_dispatch" "norm" decode(%[[POOL]], %[[H]], %x, %norm) args [0 : index, #v8.selector<"V8_RMSNORM_FP32_FP64_SUM_ASCENDING">, 1 : index, 2 : index, 3 : index, 1 : i64, 1024 : i64, {{.*}} : f32]
// CHECK-NEXT:   %[[Y:.*]] = v8.arena_slice 4096 : memref<1x1024xf32>
// CHECK-NEXT:   v8.call "v8_q4_k_gemv_parallel_dispatch" "proj" decode(%[[POOL]], %[[Y]], %w, %[[H]], %[[SCRATCH]], %[[BYTES]]) args [0 : index, #v8.selector<"V8_QL_Q4_K_X_Q8_K_FP32_BLOCK_ORDER">, 1 : index, 2 : index, 3 : index, #v8.null, 1024 : i64, 1024 : i64, 4 : index, 5 : index] resolved #v8.resolved<kernel = "q4_k_x_q8_k_gemv"
// The normed activation is dead after the projection: its bytes hold the residual sum.
// CHECK-NEXT:   %[[R:.*]] = v8.arena_slice 0 : memref<1x1024xf32>
// CHECK-NEXT:   v8.inline "residual_add" "res" decode(%[[Y]], %x, %[[R]]) resolved #v8.resolved<kernel = "residual_add_fp32_inline"
// CHECK-NEXT:   v8.inline "swiglu" "act" decode(%g, %[[R]], %out) resolved #v8.resolved<kernel = "swiglu_fp32_inline"
// CHECK-NEXT:   func.return
