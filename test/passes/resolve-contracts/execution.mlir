// A provider with several work partitions needs the op to name one; an execution requirement no
// provider offers is unsupported (with the differing field named).
// RUN: v8-opt --resolve-contracts='kernel-maps="%fixture_maps"' --verify-diagnostics --split-input-file %s | filecheck %s

func.func @prefill(%x: tensor<8x1024xf32>, %w: tensor<1024x1024x!v8.q4_k>) -> tensor<8x1024xf32> {
  %y = v8.linear "attn_q" prefill %x, %w contract #v8.linear_contract<"q4_k_x_q8_k_fp32_block_order", weight_format = q4_k, activation_format = q8_k, activation_quantizer = q8_k_reference_round_half_even, integer_accumulator = int32_per_32_group_times_6bit_scale, float_accumulator = fp32_8_lanes_fma, min_correction = bsums_fp32_4_lanes_times_neg_dmin, super_block_order = ascending, horizontal_order = x86_lane_tree_of_isa, bias = after_complete_dot, partial_accumulator = none, merge_order = none, partition = #v8.partition<independent_rows, effect = none>> : (tensor<8x1024xf32>, tensor<1024x1024x!v8.q4_k>) -> tensor<8x1024xf32>
  func.return %y : tensor<8x1024xf32>
}
// CHECK: execution.mlir:6:3: error: 'v8.linear' "attn_q": provider 'fixture.q4_k.gemm' offers several work partitions (independent_rows, output_tiles); the op must name one with `execution #v8.exec_requirement<runtime = ..., partition = ...>`

// -----

func.func @decode(%x: tensor<1x1024xf32>, %w: tensor<1024x1024x!v8.q4_k>) -> tensor<1x1024xf32> {
  %y = v8.linear "attn_q" decode %x, %w contract #v8.linear_contract<"q4_k_x_q8_k_fp32_block_order", weight_format = q4_k, activation_format = q8_k, activation_quantizer = q8_k_reference_round_half_even, integer_accumulator = int32_per_32_group_times_6bit_scale, float_accumulator = fp32_8_lanes_fma, min_correction = bsums_fp32_4_lanes_times_neg_dmin, super_block_order = ascending, horizontal_order = x86_lane_tree_of_isa, bias = after_complete_dot, partial_accumulator = none, merge_order = none, partition = #v8.partition<independent_rows, effect = none>> execution #v8.exec_requirement<runtime = threadpool, partition = independent_columns> : (tensor<1x1024xf32>, tensor<1024x1024x!v8.q4_k>) -> tensor<1x1024xf32>
  func.return %y : tensor<1x1024xf32>
}
// CHECK: error: 'v8.linear' "attn_q": unsupported: {{.*}} nearest: 'fixture.q4_k.gemv' differs in execution.partition: independent_columns vs independent_rows;

// -----

func.func @decode(%x: tensor<1x1024xf32>, %w: tensor<1024x1024x!v8.q4_k>) -> tensor<1x1024xf32> {
  %y = v8.linear "attn_q" decode %x, %w contract #v8.linear_contract<"q4_k_x_q8_k_fp32_block_order", weight_format = q4_k, activation_format = q8_k, activation_quantizer = q8_k_reference_round_half_even, integer_accumulator = int32_per_32_group_times_6bit_scale, float_accumulator = fp32_8_lanes_fma, min_correction = bsums_fp32_4_lanes_times_neg_dmin, super_block_order = ascending, horizontal_order = x86_lane_tree_of_isa, bias = after_complete_dot, partial_accumulator = none, merge_order = none, partition = #v8.partition<independent_rows, effect = none>> execution #v8.exec_requirement<runtime = threadpool, partition = independent_rows> : (tensor<1x1024xf32>, tensor<1024x1024x!v8.q4_k>) -> tensor<1x1024xf32>
  func.return %y : tensor<1x1024xf32>
}
// CHECK: resolved #v8.resolved<kernel = "fixture.q4_k.gemv", {{.*}} partition = independent_rows, reduction_order_effect = none>
