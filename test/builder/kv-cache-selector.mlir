// Selectors on manifest values: an fp32 KV cache chooses fp32_online for both phases (with the
// execution partition the circuit names), and the caches are fp32.
// RUN: %python %S/../Inputs/circuits/tiny_gguf.py qwen3 %t.gguf
// RUN: v8-build %t.gguf --circuit qwen3 --set kv_cache_dtype=f32 --kv-capacity 600 --prefill-tokens 7 --expand-layers \
// RUN:   | v8-opt --resolve-contracts | filecheck %s

// CHECK: "decode::blk.1.attn" = #v8.resolved<kernel = "attn_online_f32kv", contract = "fp32_online"
// CHECK-SAME: "prefill::blk.1.attn" = #v8.resolved<kernel = "attn_online_f32kv", contract = "fp32_online"
// CHECK-LABEL: func.func @prefill
// CHECK: v8.attention "blk.0.attn" prefill causal {{.*}} contract #v8.attention_contract<"fp32_online", {{.*}} execution #v8.exec_requirement<runtime = threadpool, partition = independent_heads> {{.*}} : (tensor<7x4x64xf32>, tensor<2x600x64xf32>, tensor<2x600x64xf32>) -> tensor<7x4x64xf32>
