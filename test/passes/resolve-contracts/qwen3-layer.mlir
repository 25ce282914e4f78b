// The example Qwen3 layer resolves every op: prefill and decode independently, to different providers.
// RUN: v8-opt --resolve-contracts='kernel-maps="%fixture_maps"' %examples/qwen3_layer.mlir | filecheck %s
// RUN: v8-opt -p 'resolve-contracts{kernel-maps="%fixture_maps"}' %examples/qwen3_layer.mlir | filecheck %s
// RUN: cat %examples/qwen3_layer.mlir | v8-opt --resolve-contracts='kernel-maps="%fixture_maps"' | filecheck %s
// The output re-parses, and resolving again changes nothing.
// RUN: v8-opt --resolve-contracts='kernel-maps="%fixture_maps"' %examples/qwen3_layer.mlir | v8-opt --resolve-contracts='kernel-maps="%fixture_maps"' | filecheck %s

// The module carries the resolution ledger, one entry per node and phase.
// CHECK: builtin.module attributes {v8.resolution_ledger = {"decode::attn" = #v8.resolved<kernel = "fixture.attention.split_kv"
// CHECK-SAME: "prefill::attn" = #v8.resolved<kernel = "fixture.attention.auto"
// CHECK-LABEL: func.func @prefill
// CHECK: v8.linear "attn_q" prefill {{.*}} resolved #v8.resolved<kernel = "fixture.q4_k.gemm", contract = "q4_k_x_q8_k_fp32_block_order", selector = "V8_FIXTURE_Q4_K_BLOCK_ORDER", emission = call, oracle = "fixture_q4_k_gemm_ref", production = "fixture_q4_k_gemm", threadpool = "fixture_q4_k_gemm_parallel_dispatch", execution = #v8.execution<isa_dispatch = runtime, isa_variants = [avx512, avx2, scalar], runtime = threadpool, partition = output_tiles, reduction_order_effect = none>, blockers = [requirement_missing{{.*}}]>
// CHECK: v8.attention "attn" prefill causal {{.*}} resolved #v8.resolved<kernel = "fixture.attention.auto", contract = "f16_flash_auto_qtile64", selector = "V8_FIXTURE_FLASH_AUTO"
// CHECK-SAME: partition = independent_heads, reduction_order_effect = none
// CHECK: v8.swiglu "ffn_act" prefill {{.*}} resolved #v8.resolved<kernel = "fixture.swiglu", contract = "swiglu_fp32_expf", selector = "V8_FIXTURE_INLINE", emission = inline, oracle = "", production = "", threadpool = ""
// CHECK-LABEL: func.func @decode
// CHECK: v8.linear "attn_q" decode {{.*}} resolved #v8.resolved<kernel = "fixture.q4_k.gemv"
// CHECK: v8.attention "attn" decode causal {{.*}} resolved #v8.resolved<kernel = "fixture.attention.split_kv", contract = "f16_online_fp32_merge", selector = "V8_FIXTURE_F16_ONLINE_FP32_MERGE"
// CHECK-SAME: partition = kv_chunks_by_workers, reduction_order_effect = contract_defined
