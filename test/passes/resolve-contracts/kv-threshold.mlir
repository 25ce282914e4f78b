// Decode attention whose arithmetic changes between KV 511 and 512: the change is declared by the
// contract itself (threshold 512 on an extent rounded up to 256, chunks = workers), so it shows in
// the resolved IR and its order effect is 'contract_defined' rather than hidden in a kernel.
// RUN: v8-opt --resolve-contracts='kernel-maps="%fixture_maps"' %s | filecheck %s

func.func @decode(%q: tensor<1x32x128xf32>, %k: tensor<8x4096x128xf16>) -> tensor<1x32x128xf32> {
  %o = v8.attention "attn" decode causal %q, %k, %k scale 8.838835e-02 contract #v8.attention_contract<"f16_online_fp32_merge", q_compute = fp16_rounded, k_compute = fp16_rounded, score_accumulator = isa_lane_tree, dot_order = isa_lane_tree_named_by_provider, scale_application = score_times_scale, softmax_statistics = fp32_online_fma_sum_update, exp_function = libm_expf, probability_rounding = none, value_compute = fp16_rounded, value_accumulator = fp16_rounded_each_update, partial_storage = fp16, partial_merge = fp32_ascending_skip_empty, normalization = reciprocal_then_multiply, output_rounding = none, partition = #v8.partition<kv_chunks_by_workers, effect = contract_defined, chunks = workers, extent_multiple = 256, threshold = 512>> : (tensor<1x32x128xf32>, tensor<8x4096x128xf16>, tensor<8x4096x128xf16>) -> tensor<1x32x128xf32>
  func.return %o : tensor<1x32x128xf32>
}
// CHECK: partial_storage = fp16, partial_merge = fp32_ascending_skip_empty
// CHECK-SAME: partition = #v8.partition<kv_chunks_by_workers, effect = contract_defined, chunks = workers, extent_multiple = 256, threshold = 512>
// CHECK-SAME: resolved #v8.resolved<kernel = "fixture.attention.split_kv"
// CHECK-SAME: execution = #v8.execution<isa_dispatch = runtime, isa_variants = [avx512, avx2, scalar], runtime = threadpool, partition = kv_chunks_by_workers, reduction_order_effect = contract_defined>
