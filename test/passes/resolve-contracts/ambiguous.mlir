// Two providers for one requirement: ambiguous, listing every match. Nothing ranks them.
// RUN: v8-opt --resolve-contracts='kernel-maps="%fixture_maps,%S/../../Inputs/ambiguous"' --verify-diagnostics %s | filecheck %s
// RUN: not v8-opt --resolve-contracts='kernel-maps="%fixture_maps,%S/../../Inputs/ambiguous"' %s

func.func @decode(%q: tensor<1x32x128xf32>, %k: tensor<8x4096x128xf16>) -> tensor<1x32x128xf32> {
  %o = v8.attention "attn" decode causal %q, %k, %k scale 8.838835e-02 contract #v8.attention_contract<"f16_online_fp32_merge", q_compute = fp16_rounded, k_compute = fp16_rounded, score_accumulator = isa_lane_tree, dot_order = isa_lane_tree_named_by_provider, scale_application = score_times_scale, softmax_statistics = fp32_online_fma_sum_update, exp_function = libm_expf, probability_rounding = none, value_compute = fp16_rounded, value_accumulator = fp16_rounded_each_update, partial_storage = fp16, partial_merge = fp32_ascending_skip_empty, normalization = reciprocal_then_multiply, output_rounding = none, partition = #v8.partition<kv_chunks_by_workers, effect = contract_defined, chunks = workers, extent_multiple = 256, threshold = 512>> : (tensor<1x32x128xf32>, tensor<8x4096x128xf16>, tensor<8x4096x128xf16>) -> tensor<1x32x128xf32>
  func.return %o : tensor<1x32x128xf32>
}
// CHECK: ambiguous.mlir:6:3: error: 'v8.attention' "attn": ambiguous: 2 providers deliver op=attention phase=decode contract=f16_online_fp32_merge {{.*}}: 'fixture.attention.split_kv' ({{.*}}attention_split_kv.kmap.json); 'fixture.attention.split_kv_twin' ({{.*}}attention_split_kv_twin.kmap.json)
