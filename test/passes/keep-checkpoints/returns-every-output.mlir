// A checkpoint build returns every contract-bearing op's output after the phase's own results,
// names them in v8.checkpoints, and changes no op: resolution and lowering see the same graph.
// RUN: v8-opt --keep-checkpoints %s | filecheck %s
// RUN: v8-opt --keep-checkpoints --resolve-contracts --lower-to-kernels --prepare-calls -t c %s | filecheck %s --check-prefix=C
// RUN: v8-opt --resolve-contracts --lower-to-kernels %s | not v8-opt --keep-checkpoints 2>&1 | filecheck %s --check-prefix=LOWERED

func.func @decode(%x: tensor<1x1024xf32>, %norm: tensor<1024xf32>, %w: tensor<1024x1024x!v8.q4_k>, %g: tensor<1x1024xf32>) -> tensor<1x1024xf32> {
  %h = v8.rmsnorm "norm" decode %x, %norm eps 1.000000e-06 contract #v8.op_contract<"rmsnorm_fp32_fp64_sum_ascending", op = rmsnorm, storage = fp32, compute = fp32, reduction_kind = sum_of_squares, reduction_accumulator = fp64, reduction_order = ascending, elementwise = scale_then_weight, transcendentals = sqrtf, rounding_points = [fp32_each_multiply, fp64_accumulate, fp32_mean, fp32_scale, fp32_scaled_value, fp32_weighted_value], partition = #v8.partition<independent_rows, effect = none>> : (tensor<1x1024xf32>, tensor<1024xf32>) -> tensor<1x1024xf32>
  %y = v8.linear "proj" decode %h, %w contract #v8.linear_contract<"q4_k_x_q8_k_fp32_block_order", weight_format = q4_k, activation_format = q8_k, activation_quantizer = q8_k_reference_round_half_even, integer_accumulator = int32_per_32_group_times_6bit_scale, float_accumulator = fp32_8_lanes_fma, min_correction = bsums_fp32_4_lanes_times_neg_dmin, super_block_order = ascending, horizontal_order = x86_lane_tree_of_isa, bias = after_complete_dot, partial_accumulator = none, merge_order = none, partition = #v8.partition<independent_rows, effect = none>> execution #v8.exec_requirement<runtime = threadpool, partition = independent_rows> : (tensor<1x1024xf32>, tensor<1024x1024x!v8.q4_k>) -> tensor<1x1024xf32>
  %r = v8.residual_add "res" decode %y, %x contract #v8.op_contract<"residual_add_fp32", op = residual_add, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = add, transcendentals = none, rounding_points = [fp32_output], partition = #v8.partition<independent_elements, effect = none>> : (tensor<1x1024xf32>, tensor<1x1024xf32>) -> tensor<1x1024xf32>
  %s = v8.swiglu "act" decode %g, %r contract #v8.op_contract<"swiglu_fp32_expf", op = swiglu, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = silu_expf_times_up, transcendentals = expf, rounding_points = [fp32_activation, fp32_output], partition = #v8.partition<independent_elements, effect = none>> : (tensor<1x1024xf32>, tensor<1x1024xf32>) -> tensor<1x1024xf32>
  func.return %s : tensor<1x1024xf32>
}
// CHECK:      func.func @decode(%x: tensor<1x1024xf32>, %norm: tensor<1024xf32>, %w: tensor<1024x1024x!v8.q4_k>, %g: tensor<1x1024xf32>) -> (tensor<1x1024xf32>, tensor<1x1024xf32>, tensor<1x1024xf32>, tensor<1x1024xf32>) attributes {v8.checkpoints = ["norm", "proj", "res"]}
// CHECK:        func.return %s, %h, %y, %r : tensor<1x1024xf32>, tensor<1x1024xf32>, tensor<1x1024xf32>, tensor<1x1024xf32>

// Each kept output is a trailing output argument the producing kernel writes.
// C:      v8_status decode(
// C-SAME: const float *g, float *out, float *out_, float *out__, float *out___)

// LOWERED: error: 'v8.kernel' "norm": keep-checkpoints: runs on GraphIR, before lower-to-kernels
