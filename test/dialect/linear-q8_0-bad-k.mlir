// A K that is not a multiple of 32 is refused before resolution (ggml refuses it too).
// RUN: not v8-opt %s 2>&1 | filecheck %s

func.func @f(%x: tensor<1x900xf32>, %w: tensor<64x900x!v8.q8_0>) -> tensor<1x64xf32> {
  %y = v8.linear "ffn_up" decode %x, %w contract #v8.linear_contract<"q8_0_x_q8_0_fp32_block_order", weight_format = q8_0, activation_format = q8_0, activation_quantizer = q8_0_x86_simd_round_half_even, integer_accumulator = int32_4_element_lanes_per_32_block, float_accumulator = fp32_8_lanes_fma_block_factor_fp16_product, min_correction = none, super_block_order = ascending, horizontal_order = x86_lane_tree_of_isa, bias = after_complete_dot, partial_accumulator = none, merge_order = none, partition = #v8.partition<independent_rows, effect = none>> : (tensor<1x900xf32>, tensor<64x900x!v8.q8_0>) -> tensor<1x64xf32>
  func.return %y : tensor<1x64xf32>
}
// CHECK: linear-q8_0-bad-k.mlir:[[# @LINE - 3]]:3: error: 'v8.linear' "ffn_up": K = 900 is not a multiple of 32: q8_0 weights come in 32-element blocks
