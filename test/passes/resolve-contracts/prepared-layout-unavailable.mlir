// A prepared layout no provider reads for the op's phase and contract is unsupported: the error
// names the layout and the nearest providers with the fields that differ.
// RUN: v8-opt --resolve-contracts --verify-diagnostics --split-input-file %s | filecheck %s

// Prefill's GEMM reads the file's rows; no prefill provider reads q4_k_x16.
func.func @prefill(%x: tensor<8x1024xf32>, %w: tensor<1024x1024x!v8.q4_k> {v8.tensor = "blk.0.attn_q.weight", v8.layout = "q4_k_x16"}) -> tensor<8x1024xf32> {
  // expected-error @+1 {{'v8.linear' "attn_q": unsupported: no provider delivers op=linear phase=prefill contract=q4_k_x_q8_k_fp32_repacked_4_row_groups dtypes(weight=q4_k, activation=f32, output=f32) layout(weight=q4_k_x16, activation=contiguous, output=contiguous); nearest: 'q4_k_x_q8_k_repacked_gemm' differs in layout.weight: q4_k_x16 vs row_blocks;}}
  %y = v8.linear "attn_q" prefill %x, %w contract #v8.linear_contract<"q4_k_x_q8_k_fp32_repacked_4_row_groups", weight_format = q4_k, activation_format = q8_k, activation_quantizer = q8_k_4_row_interleaved_round_half_even_sign_equivalent, integer_accumulator = int32_per_64_element_pair_of_groups_6bit_scale_times_32_group_dot, float_accumulator = fp32_chain_per_output_fma_64_element_int_in_4_row_groups_super_block_int_in_tail_rows, min_correction = int32_mins_bsums_own_fp32_fma_chain_rounded_dmin_times_activation_d_subtracted_at_end, super_block_order = ascending, horizontal_order = none_exact_int32_lane_sums, bias = after_complete_dot, partial_accumulator = none, merge_order = none, partition = #v8.partition<independent_rows, effect = none>> execution #v8.exec_requirement<runtime = threadpool, partition = independent_rows> : (tensor<8x1024xf32>, tensor<1024x1024x!v8.q4_k>) -> tensor<8x1024xf32>
  func.return %y : tensor<8x1024xf32>
}

// -----

// The x16 Q4_K GEMV delivers only the repacked super-block chain; the portable contract's
// provider reads the file's rows.
func.func @decode(%x: tensor<1x1024xf32>, %w: tensor<1024x1024x!v8.q4_k> {v8.tensor = "blk.0.attn_q.weight", v8.layout = "q4_k_x16"}) -> tensor<1x1024xf32> {
  // expected-error @+1 {{unsupported: no provider delivers op=linear phase=decode contract=q4_k_x_q8_k_fp32_block_order dtypes(weight=q4_k, activation=f32, output=f32) layout(weight=q4_k_x16, activation=contiguous, output=contiguous); nearest: 'q4_k_x_q8_k_gemv' differs in layout.weight: q4_k_x16 vs row_blocks; 'q4_k_x_q8_k_x16_gemv' differs in contract: q4_k_x_q8_k_fp32_block_order vs q4_k_x_q8_k_fp32_repacked_super_block_chain;}}
  %y = v8.linear "attn_q" decode %x, %w contract #v8.linear_contract<"q4_k_x_q8_k_fp32_block_order", weight_format = q4_k, activation_format = q8_k, activation_quantizer = q8_k_reference_round_half_even, integer_accumulator = int32_per_32_group_times_6bit_scale, float_accumulator = fp32_8_lanes_fma, min_correction = bsums_fp32_4_lanes_times_neg_dmin, super_block_order = ascending, horizontal_order = x86_lane_tree_of_isa, bias = after_complete_dot, partial_accumulator = none, merge_order = none, partition = #v8.partition<independent_rows, effect = none>> execution #v8.exec_requirement<runtime = threadpool, partition = independent_rows> : (tensor<1x1024xf32>, tensor<1024x1024x!v8.q4_k>) -> tensor<1x1024xf32>
  func.return %y : tensor<1x1024xf32>
}

// -----

// A layout of another weight type is rejected when the op is verified.
func.func @decode(%x: tensor<1x1024xf32>, %w: tensor<1024x1024x!v8.q4_k> {v8.tensor = "blk.0.attn_q.weight", v8.layout = "q6_k_x16"}) -> tensor<1x1024xf32> {
  // expected-error @+1 {{w declares v8.layout = "q6_k_x16", a layout of q6_k weights, but w holds q4_k}}
  %y = v8.linear "attn_q" decode %x, %w contract #v8.linear_contract<"q4_k_x_q8_k_fp32_repacked_super_block_chain", weight_format = q4_k, activation_format = q8_k, activation_quantizer = q8_k_reference_round_half_even, integer_accumulator = int32_per_super_block_6bit_scale_times_32_group_dot, float_accumulator = fp32_chain_per_output_fma_super_block_int_times_rounded_d_times_activation_d, min_correction = int32_mins_bsums_own_fp32_fma_chain_rounded_dmin_times_activation_d_subtracted_at_end, super_block_order = ascending, horizontal_order = none_exact_int32_lane_sums, bias = after_complete_dot, partial_accumulator = none, merge_order = none, partition = #v8.partition<independent_rows, effect = none>> execution #v8.exec_requirement<runtime = threadpool, partition = independent_rows> : (tensor<1x1024xf32>, tensor<1024x1024x!v8.q4_k>) -> tensor<1x1024xf32>
  func.return %y : tensor<1x1024xf32>
}
// CHECK-NOT: resolved
