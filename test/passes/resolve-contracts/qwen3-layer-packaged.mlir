// With the packaged kernel maps, plain resolution binds every op of the example layer.
// RUN: v8-opt --resolve-contracts %examples/qwen3_layer.mlir | filecheck %s
// RUN: v8-opt --resolve-contracts %examples/qwen3_layer.mlir | grep -c 'resolved #v8.resolved' | filecheck %s --check-prefix=COUNT

// CHECK-LABEL: func.func @prefill
// CHECK: v8.rmsnorm "attn_norm" prefill {{.*}} resolved #v8.resolved<kernel = "rmsnorm_fp32"
// CHECK: v8.linear "attn_q" prefill {{.*}} resolved #v8.resolved<kernel = "q4_k_x_q8_k_gemm"
// CHECK: v8.linear "attn_v" prefill {{.*}} resolved #v8.resolved<kernel = "q6_k_x_q8_k_gemm"
// CHECK: v8.qk_norm "attn_q_norm" prefill {{.*}} resolved #v8.resolved<kernel = "qk_norm_fp32"
// CHECK: v8.rope "rope_q" prefill {{.*}} resolved #v8.resolved<kernel = "rope_fp32"
// CHECK: v8.attention "attn" prefill causal {{.*}} resolved #v8.resolved<kernel = "attn_auto_qtile64_f16kv", contract = "f16_flash_auto_qtile64"
// CHECK: v8.swiglu "ffn_act" prefill {{.*}} resolved #v8.resolved<kernel = "swiglu_fp32_inline"
// CHECK-LABEL: func.func @decode
// CHECK: v8.linear "attn_q" decode {{.*}} resolved #v8.resolved<kernel = "q4_k_x_q8_k_gemv"
// CHECK: v8.attention "attn" decode causal {{.*}} resolved #v8.resolved<kernel = "attn_online_split_f16kv", contract = "f16_online_fp32_merge"
// CHECK-SAME: partition = kv_chunks_by_workers, reduction_order_effect = contract_defined
// 2 phases x 19 contract-bearing ops
// COUNT: 38
