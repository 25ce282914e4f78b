// RUN: V8_ROUNDTRIP
// RUN: V8_GENERIC_ROUNDTRIP

// The attention op prints its complete contract: precisions, accumulators, partials, merge, partition.
func.func @decode(%q: tensor<1x32x128xf32>, %k: tensor<8x4096x128xf16>, %v: tensor<8x4096x128xf16>) -> tensor<1x32x128xf32> {
  %o = v8.attention "attn" decode causal %q, %k, %v scale 8.838835e-02 contract #v8.attention_contract<"f16_online_fp32_merge", q_compute = fp16_rounded, k_compute = fp16_rounded, score_accumulator = isa_lane_tree, dot_order = isa_lane_tree_named_by_provider, scale_application = score_times_scale, softmax_statistics = fp32_online_fma_sum_update, exp_function = libm_expf, probability_rounding = none, value_compute = fp16_rounded, value_accumulator = fp16_rounded_each_update, partial_storage = fp16, partial_merge = fp32_ascending_skip_empty, normalization = reciprocal_then_multiply, output_rounding = none, partition = #v8.partition<kv_chunks_by_workers, effect = contract_defined, chunks = workers, extent_multiple = 256, threshold = 512>> : (tensor<1x32x128xf32>, tensor<8x4096x128xf16>, tensor<8x4096x128xf16>) -> tensor<1x32x128xf32>
  func.return %o : tensor<1x32x128xf32>
}
// CHECK:      v8.attention "attn" decode causal %{{.*}}, %{{.*}}, %{{.*}} scale {{[^ ]+}} contract #v8.attention_contract<"f16_online_fp32_merge",
// CHECK-SAME: q_compute = fp16_rounded, k_compute = fp16_rounded, score_accumulator = isa_lane_tree, dot_order = isa_lane_tree_named_by_provider, scale_application = score_times_scale,
// CHECK-SAME: softmax_statistics = fp32_online_fma_sum_update, exp_function = libm_expf, probability_rounding = none, value_compute = fp16_rounded,
// CHECK-SAME: value_accumulator = fp16_rounded_each_update, partial_storage = fp16, partial_merge = fp32_ascending_skip_empty,
// CHECK-SAME: normalization = reciprocal_then_multiply, output_rounding = none,
// CHECK-SAME: partition = #v8.partition<kv_chunks_by_workers, effect = contract_defined, chunks = workers, extent_multiple = 256, threshold = 512>>
// GENERIC: "v8.attention"(%{{.*}}, %{{.*}}, %{{.*}}) <{node = "attn", phase = #v8<phase decode>, mask = #v8<mask causal>, scale = {{[^,]+}}, contract = #v8.attention_contract<"f16_online_fp32_merge",

// -----

// Full (non-causal) prefill for a vision encoder with a composite contract that names both parts.
func.func @vision(%q: tensor<256x16x72xf32>, %k: tensor<16x256x72xf16>, %v: tensor<16x256x72xf16>) -> tensor<256x16x72xf32> {
  %o = v8.attention "vit_attn" prefill full %q, %k, %v scale 1.178511e-01 contract #v8.composite_contract<"f16_flash_auto_qtile64", selector = query_batch, threshold = 64, head_dim_multiple_of = 16, below = #v8.attention_contract<"f16_online_single_range", q_compute = fp16_rounded, k_compute = fp16_rounded, score_accumulator = isa_lane_tree, dot_order = isa_lane_tree_named_by_provider, scale_application = score_times_scale, softmax_statistics = fp32_online_fma_sum_update, exp_function = libm_expf, probability_rounding = none, value_compute = fp16_rounded, value_accumulator = fp16_rounded_each_update, partial_storage = none, partial_merge = none, normalization = reciprocal_then_multiply, output_rounding = none, partition = #v8.partition<single_range, effect = none>>, at_or_above = #v8.attention_contract<"f16_kv_tiled64_fp32_softmax_fp64_sum_update", q_compute = fp32, k_compute = fp16_rounded_on_tile_load, score_accumulator = fp32, dot_order = fma_chain_ascending, scale_application = score_times_scale, softmax_statistics = fp32_per_key_tile_fp64_sum_update, exp_function = ggml_avx512_vector_expf_libm_rescale, probability_rounding = none, value_compute = fp16_rounded_on_tile_load, value_accumulator = fp32, partial_storage = none, partial_merge = per_key_tile_ascending, normalization = reciprocal_then_multiply, output_rounding = none, partition = #v8.partition<query_key_tiles, effect = none, key_tile = 64, query_tile = 64>>> execution #v8.exec_requirement<runtime = threadpool, partition = independent_heads> : (tensor<256x16x72xf32>, tensor<16x256x72xf16>, tensor<16x256x72xf16>) -> tensor<256x16x72xf32>
  func.return %o : tensor<256x16x72xf32>
}
// CHECK:      v8.attention "vit_attn" prefill full
// CHECK-SAME: contract #v8.composite_contract<"f16_flash_auto_qtile64", selector = query_batch, threshold = 64, head_dim_multiple_of = 16,
// CHECK-SAME: below = #v8.attention_contract<"f16_online_single_range",
// CHECK-SAME: at_or_above = #v8.attention_contract<"f16_kv_tiled64_fp32_softmax_fp64_sum_update",
// CHECK-SAME: partition = #v8.partition<query_key_tiles, effect = none, key_tile = 64, query_tile = 64>>>
// CHECK-SAME: execution #v8.exec_requirement<runtime = threadpool, partition = independent_heads>
// GENERIC: "v8.attention"{{.*}}mask = #v8<mask full>{{.*}}execution = #v8.exec_requirement<runtime = threadpool, partition = independent_heads>
