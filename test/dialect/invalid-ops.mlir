// RUN: v8-opt %s --verify-diagnostics --split-input-file | filecheck %s
// RUN: not v8-opt %s 2>&1 | filecheck %s --check-prefix=CLI

func.func @f(%q: tensor<4x32x128xf32>, %k: tensor<8x4096x128xf16>) -> tensor<4x32x128xf32> {
  %o = v8.attention "attn" decode causal %q, %k, %k scale 8.838835e-02 contract #v8.attention_contract<"f16_online_fp32_merge", q_compute = fp16_rounded, k_compute = fp16_rounded, score_accumulator = isa_lane_tree, dot_order = isa_lane_tree_named_by_provider, scale_application = score_times_scale, softmax_statistics = fp32_online_fma_sum_update, exp_function = libm_expf, probability_rounding = none, value_compute = fp16_rounded, value_accumulator = fp16_rounded_each_update, partial_storage = fp16, partial_merge = fp32_ascending_skip_empty, normalization = reciprocal_then_multiply, output_rounding = none, partition = #v8.partition<kv_chunks_by_workers, effect = contract_defined, chunks = workers, extent_multiple = 256, threshold = 512>> : (tensor<4x32x128xf32>, tensor<8x4096x128xf16>, tensor<8x4096x128xf16>) -> tensor<4x32x128xf32>
  func.return %o : tensor<4x32x128xf32>
}
// CHECK: invalid-ops.mlir:5:3: error: 'v8.attention' "attn": decode attends one query token, got 4
// CLI: invalid-ops.mlir:5:3: error: 'v8.attention' "attn": decode attends one query token, got 4
// CLI-NEXT: %o = v8.attention "attn" decode causal
// CLI-NEXT: ^

// -----

func.func @f(%q: tensor<1x30x128xf32>, %k: tensor<8x4096x128xf16>) -> tensor<1x30x128xf32> {
  %o = v8.attention "attn" decode causal %q, %k, %k scale 8.838835e-02 contract #v8.attention_contract<"f16_online_fp32_merge", q_compute = fp16_rounded, k_compute = fp16_rounded, score_accumulator = isa_lane_tree, dot_order = isa_lane_tree_named_by_provider, scale_application = score_times_scale, softmax_statistics = fp32_online_fma_sum_update, exp_function = libm_expf, probability_rounding = none, value_compute = fp16_rounded, value_accumulator = fp16_rounded_each_update, partial_storage = fp16, partial_merge = fp32_ascending_skip_empty, normalization = reciprocal_then_multiply, output_rounding = none, partition = #v8.partition<kv_chunks_by_workers, effect = contract_defined, chunks = workers, extent_multiple = 256, threshold = 512>> : (tensor<1x30x128xf32>, tensor<8x4096x128xf16>, tensor<8x4096x128xf16>) -> tensor<1x30x128xf32>
  func.return %o : tensor<1x30x128xf32>
}
// CHECK: invalid-ops.mlir:[[# @LINE - 3]]:3: error: 'v8.attention' "attn": 30 query heads cannot share 8 KV heads (GQA needs H % Hkv == 0)

// -----

// K-quants come in 256-element super-blocks: K = 896 is rejected before any resolution.
func.func @f(%x: tensor<1x896xf32>, %w: tensor<4864x896x!v8.q4_k>) -> tensor<1x4864xf32> {
  %y = v8.linear "ffn_up" decode %x, %w contract #v8.linear_contract<"q4_k_x_q8_k_fp32_block_order", weight_format = q4_k, activation_format = q8_k, activation_quantizer = q8_k_reference_round_half_even, integer_accumulator = int32_per_32_group_times_6bit_scale, float_accumulator = fp32_8_lanes_fma, min_correction = bsums_fp32_4_lanes_times_neg_dmin, super_block_order = ascending, horizontal_order = x86_lane_tree_of_isa, bias = after_complete_dot, partial_accumulator = none, merge_order = none, partition = #v8.partition<independent_rows, effect = none>> : (tensor<1x896xf32>, tensor<4864x896x!v8.q4_k>) -> tensor<1x4864xf32>
  func.return %y : tensor<1x4864xf32>
}
// CHECK: invalid-ops.mlir:[[# @LINE - 3]]:3: error: 'v8.linear' "ffn_up": K = 896 is not a multiple of 256: q4_k weights come in 256-element super-blocks

// -----

func.func @f(%x: tensor<1x1024xf32>, %w: tensor<1024x1024x!v8.q4_k>) -> tensor<1x1024xf32> {
  %y = v8.linear "attn_v" decode %x, %w contract #v8.linear_contract<"q6_k_x_q8_k_fp32_block_order", weight_format = q6_k, activation_format = q8_k, activation_quantizer = q8_k_reference_round_half_even, integer_accumulator = int32_per_16_group_times_int8_scale_offset_by_bsums, float_accumulator = fp32_8_lanes_fma, min_correction = int32_32_times_scale_bsums, super_block_order = ascending, horizontal_order = x86_lane_tree_of_isa, bias = after_complete_dot, partial_accumulator = none, merge_order = none, partition = #v8.partition<independent_rows, effect = none>> : (tensor<1x1024xf32>, tensor<1024x1024x!v8.q4_k>) -> tensor<1x1024xf32>
  func.return %y : tensor<1x1024xf32>
}
// CHECK: error: 'v8.linear' "attn_v": contract 'q6_k_x_q8_k_fp32_block_order' needs q6_k weights, got q4_k

// -----

func.func @f(%q: tensor<2x4x64xf32>, %w: tensor<64xf32>) -> tensor<2x4x64xf32> {
  %n = v8.qk_norm "q_norm" prefill %q, %w eps 1.000000e-06 contract #v8.op_contract<"rmsnorm_fp32_fp64_sum_ascending", op = rmsnorm, storage = fp32, compute = fp32, reduction_kind = sum_of_squares, reduction_accumulator = fp64, reduction_order = ascending, elementwise = scale_then_weight, transcendentals = sqrtf, rounding_points = [fp32_each_multiply, fp64_accumulate, fp32_mean, fp32_scale, fp32_scaled_value, fp32_weighted_value], partition = #v8.partition<independent_rows, effect = none>> : (tensor<2x4x64xf32>, tensor<64xf32>) -> tensor<2x4x64xf32>
  func.return %n : tensor<2x4x64xf32>
}
// CHECK: error: 'v8.qk_norm' "q_norm": contract 'rmsnorm_fp32_fp64_sum_ascending' is for op 'rmsnorm', not 'v8.qk_norm'

// -----

func.func @f(%x: tensor<3x64xf32>) -> tensor<3x65xf32> {
  %v = v8.reshape %x : tensor<3x64xf32> -> tensor<3x65xf32>
  func.return %v : tensor<3x65xf32>
}
// CHECK: error: 'v8.reshape': reshape keeps the element count (tensor<3x64xf32> vs tensor<3x65xf32>)

// -----

func.func @f(%x: tensor<3x64xf32>) -> tensor<2x64xf32> {
  %v = v8.last_token %x : tensor<3x64xf32> -> tensor<2x64xf32>
  func.return %v : tensor<2x64xf32>
}
// CHECK: error: 'v8.last_token': last_token of tensor<3x64xf32> is one row of it, tensor<1x64xf32>, not tensor<2x64xf32>

// -----

func.func @f(%x: tensor<64xf32>) -> tensor<1xf32> {
  %v = v8.last_token %x : tensor<64xf32> -> tensor<1xf32>
  func.return %v : tensor<1xf32>
}
// CHECK: error: 'v8.last_token': last_token reads a [tokens, ...] activation, got tensor<64xf32>

// -----

// Multi-section RoPE names each position stream's share of the rotary pairs.
func.func @f(%q: tensor<4x16x128xf32>, %pos: tensor<4x4xi32>) -> tensor<4x16x128xf32> {
  %r = v8.rope "mrope_q" prefill %q, %pos base 1.000000e+06 dims 128 sections [16, 24, 24] contract #v8.op_contract<"mrope_fp32_iterative_theta_sections", op = rope, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = rotate_multi_section, transcendentals = cosf_sinf_iterative_theta, rounding_points = [fp32_theta_each_step, fp32_rotation, fp32_output], partition = #v8.partition<independent_rows, effect = none>> : (tensor<4x16x128xf32>, tensor<4x4xi32>) -> tensor<4x16x128xf32>
  func.return %r : tensor<4x16x128xf32>
}
// CHECK: invalid-ops.mlir:[[# @LINE - 3]]:3: error: 'v8.rope' "mrope_q": sections [16, 24, 24] must give each of the 4 position streams a count of rotary pairs, not all zero
// -----

// A sliding window is a causal mask's (llama.cpp's standard SWA).
func.func @f(%q: tensor<1x32x128xf32>, %k: tensor<8x4096x128xf16>) -> tensor<1x32x128xf32> {
  %o = v8.attention "attn" decode full window 512 %q, %k, %k scale 8.838835e-02 contract #v8.attention_contract<"f16_online_fp32_merge", q_compute = fp16_rounded, k_compute = fp16_rounded, score_accumulator = isa_lane_tree, dot_order = isa_lane_tree_named_by_provider, scale_application = score_times_scale, softmax_statistics = fp32_online_fma_sum_update, exp_function = libm_expf, probability_rounding = none, value_compute = fp16_rounded, value_accumulator = fp16_rounded_each_update, partial_storage = fp16, partial_merge = fp32_ascending_skip_empty, normalization = reciprocal_then_multiply, output_rounding = none, partition = #v8.partition<kv_chunks_by_workers, effect = contract_defined, chunks = workers, extent_multiple = 256, threshold = 512>> : (tensor<1x32x128xf32>, tensor<8x4096x128xf16>, tensor<8x4096x128xf16>) -> tensor<1x32x128xf32>
  func.return %o : tensor<1x32x128xf32>
}
// CHECK: invalid-ops.mlir:[[# @LINE - 3]]:3: error: 'v8.attention' "attn": a sliding window needs the causal mask
// -----

// A window sees at least the query's own position.
func.func @f(%q: tensor<1x32x128xf32>, %k: tensor<8x4096x128xf16>) -> tensor<1x32x128xf32> {
  %o = v8.attention "attn" decode causal window 0 %q, %k, %k scale 8.838835e-02 contract #v8.attention_contract<"f16_online_fp32_merge", q_compute = fp16_rounded, k_compute = fp16_rounded, score_accumulator = isa_lane_tree, dot_order = isa_lane_tree_named_by_provider, scale_application = score_times_scale, softmax_statistics = fp32_online_fma_sum_update, exp_function = libm_expf, probability_rounding = none, value_compute = fp16_rounded, value_accumulator = fp16_rounded_each_update, partial_storage = fp16, partial_merge = fp32_ascending_skip_empty, normalization = reciprocal_then_multiply, output_rounding = none, partition = #v8.partition<kv_chunks_by_workers, effect = contract_defined, chunks = workers, extent_multiple = 256, threshold = 512>> : (tensor<1x32x128xf32>, tensor<8x4096x128xf16>, tensor<8x4096x128xf16>) -> tensor<1x32x128xf32>
  func.return %o : tensor<1x32x128xf32>
}
// CHECK: invalid-ops.mlir:[[# @LINE - 3]]:3: error: 'v8.attention' "attn": window 0 is outside 1..2147483647 positions
