// No provider: the error shows the requirement and the nearest providers with the fields that differ.
// RUN: v8-opt --resolve-contracts='kernel-maps="%fixture_maps"' --verify-diagnostics %s | filecheck %s
// RUN: not v8-opt --resolve-contracts='kernel-maps="%fixture_maps"' %s 2>&1 | filecheck %s --check-prefix=CLI

func.func @decode(%q: tensor<1x32x128xf32>, %k: tensor<8x4096x128xf32>) -> tensor<1x32x128xf32> {
  %o = v8.attention "attn" decode causal %q, %k, %k scale 8.838835e-02 contract #v8.attention_contract<"fp32_online", q_compute = fp32, k_compute = fp32, score_accumulator = fp32, dot_order = fp32_8_lanes_fma_halving_tree, scale_application = score_times_scale, softmax_statistics = fp32_online_fma_sum_update, exp_function = libm_expf, probability_rounding = none, value_compute = fp32, value_accumulator = fp32, partial_storage = none, partial_merge = none, normalization = reciprocal_then_multiply, output_rounding = none, partition = #v8.partition<single_range, effect = none>> : (tensor<1x32x128xf32>, tensor<8x4096x128xf32>, tensor<8x4096x128xf32>) -> tensor<1x32x128xf32>
  func.return %o : tensor<1x32x128xf32>
}
// CHECK: unsupported.mlir:6:3: error: 'v8.attention' "attn": unsupported: no provider delivers op=attention phase=decode contract=fp32_online dtypes(q=f32, kv=f32, out=f32) layout(q=token_major, kv=head_major_strided, out=token_major); nearest: 'fixture.attention.split_kv' differs in contract: fp32_online vs f16_online_fp32_merge, dtypes.kv: f32 vs f16; 'fixture.attention.auto' differs in phase: decode vs prefill, contract: fp32_online vs f16_flash_auto_qtile64, dtypes.kv: f32 vs f16;
// CLI: unsupported.mlir:6:3: error: 'v8.attention' "attn": unsupported: no provider delivers
// CLI-NEXT: %o = v8.attention "attn" decode causal
// CLI-NEXT: ^
