// A tiny Qwen3 GGUF (2 layers, Q4_K/Q6_K projections) built into GraphIR: prefill and decode,
// node names per layer, contracts chosen by tensor type and KV-cache dtype, requirements and
// locations pointing at the op's entry in circuits/qwen3.json.  The ggml build is pinned so the
// checked contracts do not depend on the host's vector width.
// RUN: %python %S/../Inputs/circuits/tiny_gguf.py qwen3 %t.gguf
// RUN: v8-build %t.gguf --circuit qwen3 --set ggml_build=avx512 --expand-layers -o %t.mlir
// RUN: filecheck %s --input-file %t.mlir
// By default both layers (same tensor types) share one layer function per phase, called per layer
// with that layer's weights and KV cache; the result is the same arithmetic.
// RUN: v8-build %t.gguf --circuit qwen3 --set ggml_build=avx512 | filecheck %s --check-prefix=LAYERS
// The output parses and verifies, and every op resolves against the packaged kernel maps.
// RUN: v8-opt --resolve-contracts %t.mlir | filecheck %s --check-prefix=RESOLVED

// CHECK: builtin.module attributes {v8.circuit = "circuits/qwen3.json", v8.manifest = {source = "{{.*}}.gguf", architecture = "qwen3", kv_capacity = 4096 : i64, block_count = 2 : i64
// CHECK-SAME: kv_cache_dtype = "f16"
// CHECK-LABEL: func.func @prefill(%tokens: tensor<16xi32> {v8.token_axis = 0 : i64} loc("circuits/qwen3.json":76:5), %token_embd.weight: tensor<512x256xf32> {v8.tensor = "token_embd.weight"} loc("circuits/qwen3.json":76:5)
// CHECK-SAME: attributes {v8.max_tokens = 16 : i64}
// CHECK: v8.embedding "token_embd" prefill %tokens, %token_embd.weight contract #v8.op_contract<"embedding_fp32_row_copy"
// CHECK: v8.linear "blk.0.attn_q" prefill %h, %blk.0.attn_q.weight contract #v8.linear_contract<"q4_k_x_q8_k_fp32_repacked_4_row_groups"
// CHECK-SAME: execution #v8.exec_requirement<runtime = threadpool, partition = independent_rows> requirement #v8.requirement<"circuits/qwen3.json", status = {{[a-z]+}}> : (tensor<16x256xf32>, tensor<256x256x!v8.q4_k>) -> tensor<16x256xf32> loc("circuits/qwen3.json":80:5)
// CHECK: v8.linear "blk.0.attn_v" prefill %h, %blk.0.attn_v.weight contract #v8.linear_composite_contract<"q6_k_x_q8_k_llamacpp_auto_rows8"
// CHECK: v8.reshape %q : tensor<16x256xf32> -> tensor<16x4x64xf32>
// CHECK: v8.qk_norm "blk.0.attn_q_norm" prefill
// CHECK: v8.rope "blk.0.rope_q" prefill %q_normed, %positions base 1.000000e+06 dims 64 contract #v8.op_contract<"rope_neox_fp32_ggml_fma"
// CHECK: v8.kv_store "blk.0.attn_k_store" prefill %k_rot, %blk.0.k_cache contract #v8.op_contract<"kv_store_f16_round_nearest_even"
// CHECK: v8.attention "blk.0.attn" prefill causal %q_rot, %k_cache, %v_cache scale 1.250000e-01 contract #v8.composite_contract<"f16_flash_auto_qtile64_fp32_dot"
// CHECK-SAME: loc("circuits/qwen3.json":90:5)
// CHECK: v8.swiglu "blk.1.ffn_act" prefill
// CHECK: v8.logits "output" prefill %final, %output.weight contract #v8.linear_composite_contract<"q6_k_x_q8_k_llamacpp_auto_rows8"
// CHECK: func.return %logits : tensor<16x512xf32>
// CHECK-LABEL: func.func @decode(%tokens: tensor<1xi32>
// CHECK: v8.linear "blk.0.attn_q" decode {{.*}} execution #v8.exec_requirement<runtime = threadpool, partition = independent_rows>
// CHECK: v8.attention "blk.0.attn" decode causal %q_rot, %k_cache, %v_cache scale 1.250000e-01 contract #v8.attention_contract<"f16_online_fp32_merge_fp32_dot"
// CHECK-SAME: (tensor<1x4x64xf32>, tensor<2x4096x64xf16>, tensor<2x4096x64xf16>) -> tensor<1x4x64xf32> loc("circuits/qwen3.json":90:5)
// CHECK: func.return %logits : tensor<1x512xf32>

// RESOLVED: v8.resolution_ledger = {
// RESOLVED-SAME: "decode::blk.0.attn" = #v8.resolved<kernel = "attn_online_split_f16kv"
// RESOLVED-SAME: "prefill::blk.0.attn" = #v8.resolved<kernel = "attn_auto_qtile64_f16kv"
// RESOLVED-SAME: "prefill::blk.0.attn_q" = #v8.resolved<kernel = "q4_k_x_q8_k_repacked_gemm"
// RESOLVED-SAME: "prefill::output" = #v8.resolved<kernel = "q6_k_x_q8_k_auto_rows8_gemm"

// LAYERS-LABEL: func.func private @prefill_layer0(%hidden: tensor<16x256xf32> loc("circuits/qwen3.json":79:5), %attn_norm.weight: tensor<256xf32> loc("circuits/qwen3.json":79:5)
// LAYERS-SAME: attributes {v8.max_tokens = 16 : i64, v8.layers = [0 : i64, 1 : i64]}
// LAYERS: v8.linear "attn_q" prefill %h, %attn_q.weight contract #v8.linear_contract<"q4_k_x_q8_k_fp32_repacked_4_row_groups"
// LAYERS: v8.kv_store "attn_k_store" prefill %k_rot, %k_cache contract
// LAYERS: func.return %hidden_2 : tensor<16x256xf32>
// LAYERS-LABEL: func.func @prefill(
// LAYERS: %hidden_1 = func.call @prefill_layer0(%hidden, %blk.0.attn_norm.weight, {{.*}}, %positions, %blk.0.k_cache, %blk.0.v_cache,
// LAYERS-SAME: loc("circuits/qwen3.json":79:5)
// LAYERS-NEXT: %hidden_2 = func.call @prefill_layer0(%hidden_1, %blk.1.attn_norm.weight,
// LAYERS-LABEL: func.func private @decode_layer0(
// LAYERS-SAME: attributes {v8.layers = [0 : i64, 1 : i64]}
// LAYERS-LABEL: func.func @decode(
