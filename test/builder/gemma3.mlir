// Gemma3: five sliding-window layers per global one (local RoPE base 10000, global 1e6), post-norms,
// GeGLU, the sqrt(hidden) embedding scale on the table argument and always-tied logits.  The KV
// cache is full-size (the default capacity is not capped at the window): the local layers'
// attention carries the window, the global layers' does not.
// RUN: %python %S/../Inputs/circuits/tiny_gguf.py gemma3 %t.gguf
// RUN: v8-build %t.gguf --circuit gemma3 --expand-layers | v8-opt --resolve-contracts | filecheck %s
// Without --expand-layers each distinct layer is one function: five sliding-window layers
// share @prefill_layer0, the global layer 5 has @prefill_layer1 (its own RoPE base, no window).
// RUN: v8-build %t.gguf --circuit gemma3 | v8-opt --resolve-contracts | filecheck %s --check-prefix=LAYERS

// CHECK: kv_capacity = 4096 : i64
// CHECK-LABEL: func.func @prefill(%tokens: tensor<16xi32> {v8.token_axis = 0 : i64}, %token_embd.weight: tensor<512x256xf32> {v8.tensor = "token_embd.weight", v8.weight_scale = 1.600000e+01 : f32}
// CHECK: v8.rope "blk.0.rope_q" prefill {{.*}} base 1.000000e+04
// CHECK: v8.scale "blk.0.q_scale" prefill %q_rot by 1.250000e-01
// CHECK: v8.attention "blk.0.attn" prefill causal window 512 %q_scaled, {{.*}} scale 1.000000e+00
// CHECK: v8.rmsnorm "blk.0.post_attention_norm" prefill
// CHECK: v8.geglu "blk.0.ffn_act" prefill {{.*}} #v8.op_contract<"geglu_fp32_ggml_fp16_table"
// CHECK: v8.rmsnorm "blk.0.post_ffw_norm" prefill
// CHECK: v8.rope "blk.5.rope_q" prefill {{.*}} base 1.000000e+06
// CHECK: v8.attention "blk.5.attn" prefill causal %q_scaled_5,
// CHECK: v8.logits "output" prefill %final, %token_embd.weight_1 contract

// The ledger keys a layer function's nodes by the function: one resolution for all its layers.
// LAYERS: v8.resolution_ledger = {
// LAYERS-SAME: "decode_layer0::attn" = #v8.resolved<kernel = "attn_online_split_f16kv"
// LAYERS-SAME: "prefill::output" = #v8.resolved
// LAYERS-SAME: "prefill_layer1::attn" = #v8.resolved<kernel = "attn_auto_qtile64_f16kv"
// LAYERS-LABEL: func.func private @prefill_layer0(%hidden: tensor<16x256xf32>, %attn_norm.weight: tensor<256xf32>
// LAYERS-SAME: attributes {v8.max_tokens = 16 : i64, v8.layers = [0 : i64, 1 : i64, 2 : i64, 3 : i64, 4 : i64]}
// LAYERS: v8.rope "rope_q" prefill {{.*}} base 1.000000e+04
// LAYERS: v8.attention "attn" prefill causal window 512
// LAYERS-LABEL: func.func private @prefill_layer1(
// LAYERS-SAME: attributes {v8.max_tokens = 16 : i64, v8.layers = [5 : i64]}
// LAYERS: v8.rope "rope_q" prefill {{.*}} base 1.000000e+06
// LAYERS: v8.attention "attn" prefill causal %q_scaled
// LAYERS-LABEL: func.func @prefill(
// LAYERS: %hidden_1 = func.call @prefill_layer0(%hidden, %blk.0.attn_norm.weight, %blk.0.attn_q.weight
// LAYERS: %hidden_5 = func.call @prefill_layer0(%hidden_4, %blk.4.attn_norm.weight
// LAYERS: %hidden_6 = func.call @prefill_layer1(%hidden_5, %blk.5.attn_norm.weight
// LAYERS: v8.logits "output" prefill %final
