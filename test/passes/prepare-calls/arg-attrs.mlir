// A phase whose arguments carry attributes keeps its output arguments when the call-ready IR is
// printed: the arguments prepare-calls appends get (empty) attribute entries too, so the printed
// module parses back to the same signature and prints the same C.
// RUN: v8-opt --resolve-contracts --lower-to-kernels --prepare-calls %s | filecheck %s
// RUN: v8-opt --resolve-contracts --lower-to-kernels --prepare-calls %s | v8-opt -t c > %t.reparsed.c
// RUN: v8-opt --resolve-contracts --lower-to-kernels --prepare-calls -t c %s > %t.direct.c
// RUN: diff %t.direct.c %t.reparsed.c

func.func @decode(%x: tensor<1x1024xf32> {v8.tensor = "x"}, %norm: tensor<1024xf32>, %w: tensor<1024x1024x!v8.q4_k>, %g: tensor<1x1024xf32>) -> tensor<1x1024xf32> {
  %h = v8.rmsnorm "norm" decode %x, %norm eps 1.000000e-06 contract #v8.op_contract<"rmsnorm_fp32_fp64_sum_ascending", op = rmsnorm, storage = fp32, compute = fp32, reduction_kind = sum_of_squares, reduction_accumulator = fp64, reduction_order = ascending, elementwise = scale_then_weight, transcendentals = sqrtf, rounding_points = [fp32_each_multiply, fp64_accumulate, fp32_mean, fp32_scale, fp32_scaled_value, fp32_weighted_value], partition = #v8.partition<independent_rows, effect = none>> : (tensor<1x1024xf32>, tensor<1024xf32>) -> tensor<1x1024xf32>
  %y = v8.linear "proj" decode %h, %w contract #v8.linear_contract<"q4_k_x_q8_k_fp32_block_order", weight_format = q4_k, activation_format = q8_k, activation_quantizer = q8_k_reference_round_half_even, integer_accumulator = int32_per_32_group_times_6bit_scale, float_accumulator = fp32_8_lanes_fma, min_correction = bsums_fp32_4_lanes_times_neg_dmin, super_block_order = ascending, horizontal_order = x86_lane_tree_of_isa, bias = after_complete_dot, partial_accumulator = none, merge_order = none, partition = #v8.partition<independent_rows, effect = none>> execution #v8.exec_requirement<runtime = threadpool, partition = independent_rows> : (tensor<1x1024xf32>, tensor<1024x1024x!v8.q4_k>) -> tensor<1x1024xf32>
  %r = v8.residual_add "res" decode %y, %x contract #v8.op_contract<"residual_add_fp32", op = residual_add, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = add, transcendentals = none, rounding_points = [fp32_output], partition = #v8.partition<independent_elements, effect = none>> : (tensor<1x1024xf32>, tensor<1x1024xf32>) -> tensor<1x1024xf32>
  %s = v8.swiglu "act" decode %g, %r contract #v8.op_contract<"swiglu_fp32_expf", op = swiglu, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = silu_expf_times_up, transcendentals = expf, rounding_points = [fp32_activation, fp32_output], partition = #v8.partition<independent_elements, effect = none>> : (tensor<1x1024xf32>, tensor<1x1024xf32>) -> tensor<1x1024xf32>
  func.return %s : tensor<1x1024xf32>
}
// CHECK: func.func @decode(%x: memref<1x1024xf32> {v8.tensor = "x"}, %norm: memref<1024xf32>, %w: memref<1024x1024x!v8.q4_k>, %g: memref<1x1024xf32>, %out: memref<1x1024xf32>)
